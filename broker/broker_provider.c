/* broker_provider.c: the broker's side of providers (broker_provider.h):
 * their requests answered, their devices added to the run's cluster, their
 * programs' checkpoint parts asked of them. */
#define _GNU_SOURCE
#include "broker_provider.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "../runtime/checkpoint_store.h"
#include "../runtime/comm/seal.h"
#include "broker_checkpoint.h"
#include "broker_start.h"
#include "invite.h"
#include "cluster_edit.h"

#define PROVIDER_NAME_MAX 100 /* its region is "provider-NAME": cluster.xsd's 127 */
#define ASK_AGAIN_S       10  /* a part asked and not uploaded is asked again     */

static provider *find_provider(broker *b, const char *name)
{
    for (int i = 0; i < b->n_prov; i++)
        if (strcmp(b->prov[i].name, name) == 0)
            return &b->prov[i];
    return NULL;
}

/* The device member agent runs in this epoch (its program not ended), or NULL. */
static member *device_of(broker *b, const char *agent)
{
    for (int i = 0; i < b->n; i++) {
        member *m = &b->mem[i];
        if (strcmp(m->agent, agent) == 0 && strcmp(m->m.role, "device") == 0 && !m->ended && !m->lost)
            return m;
    }
    return NULL;
}

/* ---- the invite ---------------------------------------------------------- */

int broker_provider_invite(broker *b)
{
    invite v = { .id = 1 };
    char path[FU_PATH_BYTES + 104], err[FU_PATH_BYTES + 204] = "";
    const char *port = strrchr(b->url, ':');
    if (b->address)
        snprintf(v.url, sizeof v.url, "tcp://%s%s", b->address, port ? port : "");
    else
        snprintf(v.url, sizeof v.url, "%s", b->url);
    invite_token(b->secret, v.id, v.token);
    snprintf(path, sizeof path, "%s/invite.key", b->out);
    if (broker_db_invite(b->db, 1) < 0 || broker_db_set(b->db, "invite_url", v.url) ||
        invite_write(path, &v, err, sizeof err)) {
        broker_say(b, "failed", NULL, "cannot write the providers' invite %s: %s", path, err[0] ? err : "broker.db");
        return -1;
    }
    return 0;
}

/* ---- offer --------------------------------------------------------------- */

/* Whether the run's bundles are for this kind of device: one of its
 * cluster file's devices (or standbys) is of the kind and arch (a CPU's
 * arch unstated: this machine's).  The kinds it has into kinds. */
static int kind_has_bundles(broker *b, const char *kind, const char *arch, const char *machine, char *kinds, size_t n)
{
    int found = 0;
    size_t at = 0;
    kinds[0] = '\0';
    for (int i = 0; i < b->c.n_devices + b->c.n_standbys; i++) {
        const cluster_device *d = i < b->c.n_devices ? &b->c.devices[i] : &b->c.standbys[i - b->c.n_devices];
        if (find_provider(b, d->name)) /* the kinds of the run's own cluster */
            continue;
        const char *k = d->kind == DEVICE_CUDA ? "cuda" : "cpu", *a = d->arch[0] ? d->arch : machine;
        char one[112];
        snprintf(one, sizeof one, "%s %s", k, a);
        if (!strstr(kinds, one) && at + strlen(one) + 3 < n)
            at += (size_t)snprintf(kinds + at, n - at, "%s%s", at ? ", " : "", one);
        found |= strcmp(k, kind) == 0 && strcmp(a, arch) == 0;
    }
    return found;
}

/* Whether a TCP connection to address:port opens within INBOUND_WAIT_MS:
 * the provider listens there while it offers (tools/provide.c,
 * open_door), so a refusal or silence means that the run's devices could
 * not connect to it either (NAT, a firewall). */
#define INBOUND_WAIT_MS 1500
static int reachable(const char *address, const char *port)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res = NULL;
    if (!port[0] || getaddrinfo(address, port, &hints, &res) != 0 || !res)
        return 0;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK, 0), ok = 0;
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0 && errno == EINPROGRESS) {
        struct pollfd p = { fd, POLLOUT, 0 };
        int err = 0;
        socklen_t len = sizeof err;
        ok = poll(&p, 1, INBOUND_WAIT_MS) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    } else if (fd >= 0) {
        ok = 1; /* connected at once (this machine) */
    }
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
    return ok;
}

/* "offer NAME k=v ...": 0 with "ok NAME" in out, or -1 with the refusal. */
static int offer(broker *b, uint32_t id, char *args, FILE *out)
{
    static const char *const device_keys[] = { "kind",      "arch",   "peak-fp32",        "peak-tf32", "peak-bf16",
                                               "peak-fp16", "memory", "memory-bandwidth", "threads" };
    char name[128] = "", machine[64] = "", address[256] = "", link_bw[64] = "", link_lat[64] = "", kind[16] = "",
         arch[32] = "", kinds[512], door[16] = "";
    provider_attr attrs[16];
    int n_attrs = 0;
    char *save = NULL;
    for (char *w = strtok_r(args, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(w, '=');
        if (!name[0]) {
            snprintf(name, sizeof name, "%s", w);
            continue;
        }
        if (!eq || strspn(eq + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:/-[]%") !=
                       strlen(eq + 1)) {
            fprintf(out, "refused: '%s' is not KEY=VALUE of the figures a provider states", w);
            return -1;
        }
        *eq = '\0';
        const char *v = eq + 1;
        int known = 1;
        if (strcmp(w, "machine") == 0)
            snprintf(machine, sizeof machine, "%s", v);
        else if (strcmp(w, "address") == 0)
            snprintf(address, sizeof address, "%s", v);
        else if (strcmp(w, "link-bandwidth") == 0)
            snprintf(link_bw, sizeof link_bw, "%s", v);
        else if (strcmp(w, "link-latency") == 0)
            snprintf(link_lat, sizeof link_lat, "%s", v);
        else if (strcmp(w, "inbound-port") == 0)
            snprintf(door, sizeof door, "%s", v);
        else
            known = 0;
        for (size_t k = 0; !known && k < sizeof device_keys / sizeof *device_keys; k++)
            if (strcmp(w, device_keys[k]) == 0 && n_attrs < 16) {
                attrs[n_attrs++] = (provider_attr){ device_keys[k], v };
                known = 1;
                if (k == 0)
                    snprintf(kind, sizeof kind, "%s", v);
                if (k == 1)
                    snprintf(arch, sizeof arch, "%s", v);
            }
        if (!known) {
            fprintf(out, "refused: '%s' is no figure a provider states", w);
            return -1;
        }
    }
    struct utsname u;
    uname(&u);
    if (!cluster_name_valid(name, PROVIDER_NAME_MAX)) { /* (short enough for "provider-NAME") */
        fprintf(out, "refused: '%s' is not a device name ([A-Za-z_][A-Za-z0-9_.-]*, at most %d characters)", name,
                PROVIDER_NAME_MAX);
        return -1;
    }
    if (!kind[0] || !machine[0] || !address[0] || !link_bw[0] || !link_lat[0]) {
        fprintf(out, "refused: an offer states kind, machine, address, link-bandwidth and link-latency");
        return -1;
    }
    if (strcmp(machine, u.machine) != 0) {
        fprintf(out, "refused: this run's programs are built for %s machines, and %s is %s: no bundle for it",
                u.machine, name, machine);
        return -1;
    }
    if (!arch[0])
        snprintf(arch, sizeof arch, "%s", machine);
    if (!kind_has_bundles(b, kind, arch, u.machine, kinds, sizeof kinds)) {
        fprintf(out, "refused: %s offers a %s %s device, and this run has bundles for %s only: no bundle of its kind",
                name, kind, arch, kinds);
        return -1;
    }
    provider *p = find_provider(b, name);
    if (!p && (cluster_find_device(&b->c, name) >= 0 || cluster_find_host(&b->c, name) >= 0 ||
               cluster_find_region(&b->c, name) >= 0)) {
        fprintf(out, "refused: the name %s is taken in this run's cluster: give fusionc provide --name", name);
        return -1;
    }
    if (p && !p->gone && broker_now() - p->heard < b->peer_timeout) {
        fprintf(out, "refused: provider %s is in the run already: give fusionc provide --name", name);
        return -1;
    }
    if (b->finished) {
        fprintf(out, "refused: the run is over");
        return -1;
    }
    int inbound = reachable(address, door);
    if (!p) { /* new: its device into the run's cluster */
        if (b->n_prov == MAX_PROVIDERS || b->n == MAX_MEMBERS) {
            fprintf(out, "refused: the run takes no more providers (%d)", MAX_PROVIDERS);
            return -1;
        }
        char to[FU_PATH_BYTES + 304], err[FU_PATH_BYTES + 504];
        snprintf(to, sizeof to, "%s/providers", b->out);
        mkdir(to, 0755);
        snprintf(to, sizeof to, "%s/providers/cluster.xml", b->out);
        cluster c;
        if (cluster_add_provider(b->cluster_path, to, name, address, inbound, link_bw, link_lat, attrs, n_attrs, &c,
                                 err, sizeof err)) {
            fprintf(out, "refused: %s", err);
            return -1;
        }
        broker_use_cluster(b, &c, to);
        p = &b->prov[b->n_prov++];
        memset(p, 0, sizeof *p);
        snprintf(p->name, sizeof p->name, "%s", name);
    }
    snprintf(p->kind, sizeof p->kind, "%s", kind);
    snprintf(p->arch, sizeof p->arch, "%s", arch);
    snprintf(p->address, sizeof p->address, "%s", address);
    p->invite = id, p->heard = broker_now(), p->gone = p->told = 0;
    member *m = broker_find_member(b, name);
    if (m && strcmp(m->m.role, "standby") != 0 && !m->ended) {
        fprintf(out, "refused: %s runs in the run already", name);
        return -1;
    }
    if (!m && b->n == MAX_MEMBERS) {
        fprintf(out, "refused: the run has %d members, its most", MAX_MEMBERS);
        return -1;
    }
    if (!m)
        m = &b->mem[b->n++];
    memset(m, 0, sizeof *m);
    snprintf(m->m.device, sizeof m->m.device, "%s", name);
    snprintf(m->m.role, sizeof m->m.role, "standby");
    snprintf(m->m.status, sizeof m->m.status, "standby");
    snprintf(m->m.address, sizeof m->m.address, "%s", address);
    snprintf(m->m.host, sizeof m->m.host, "%s", name);
    snprintf(m->agent, sizeof m->agent, "%s", name);
    m->heard = broker_now();
    m->joining = 1;
    broker_save_member(b, m);
    char figures[512] = "";
    size_t at = 0;
    for (int i = 2; i < n_attrs; i++) /* (after kind and arch) */
        at += (size_t)snprintf(figures + at, sizeof figures - at > at ? sizeof figures - at : 0, "%s %s%s",
                               attrs[i].name, attrs[i].value, i + 1 < n_attrs ? ", " : "");
    broker_say(b, "joined", name,
               "provider %s joined with invite %u: a %s %s device at %s (%s); its link to the broker measured "
               "%s, %s; %s; weighed at the next complete checkpoint",
               name, id, kind, arch, address, figures, link_bw, link_lat,
               inbound ? "it accepts connections"
                       : "it accepts no connection (a connection to it did not open: behind NAT or a firewall), so "
                         "its links are opened from it and it is linked with no other such device");
    fprintf(out, "ok %s%s", name, inbound ? " inbound" : "");
    return 0;
}

/* ---- what its program needs ---------------------------------------------- */

/* "file PREFIX/REL SIZE XXH3" for every regular file under dir (depth <= 3). */
static int list_files(FILE *out, const char *dir, const char *prefix, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[FU_PATH_BYTES], rel[FU_PATH_BYTES], why[FU_PATH_BYTES + 104];
        struct stat st;
        snprintf(path, sizeof path, "%.3800s/%.250s", dir, e->d_name);
        snprintf(rel, sizeof rel, "%.3800s/%.250s", prefix, e->d_name);
        if (stat(path, &st) != 0)
            continue;
        int64_t size;
        uint64_t hash;
        if (S_ISDIR(st.st_mode) && depth < 3)
            rc = list_files(out, path, rel, depth + 1);
        else if (S_ISREG(st.st_mode) && ckpt_measure(path, &size, &hash, why, sizeof why) == 0)
            fprintf(out, "file %s %lld %016" PRIx64 "\n", rel, (long long)size, hash);
    }
    closedir(d);
    return rc;
}

/* REL ("bundle/..." or "resume/...") of device d's files, as a path here;
 * -1 for anything else (a path that climbs out). */
static int resolve(broker *b, const member *d, const char *rel, char *path, size_t n)
{
    if (strstr(rel, "..") || strchr(rel, '\\'))
        return -1;
    size_t len = n;
    if (strncmp(rel, "bundle/", 7) == 0)
        len = (size_t)snprintf(path, n, "%s/%s/%s", b->bundles, d->m.bundle_device, rel + 7);
    else if (strncmp(rel, "resume/", 7) == 0 && d->resume[0])
        len = (size_t)snprintf(path, n, "%s/%s", d->resume, rel + 7);
    return len < n ? 0 : -1;
}

static void plan_reply(broker *b, member *d, FILE *out)
{
    static device_args a;
    char dir[FU_PATH_BYTES + 504];
    fprintf(out, "device %s\n", d->m.bundle_device);
    snprintf(dir, sizeof dir, "%s/%s", b->bundles, d->m.bundle_device);
    list_files(out, dir, "bundle", 0);
    if (d->resume[0])
        list_files(out, d->resume, "resume", 3); /* a checkpoint's parts: no folders */
    broker_device_args(b, &a);
    for (int i = 0; i < a.n; i++)
        fprintf(out, "arg %s\n", a.argv[i]);
    d->fetched = 1;
    d->heard = broker_now();
}

/* "get NAME EPOCH REL AT": "ok SIZE LEN\n" and LEN bytes from AT. */
static void get_reply(broker *b, member *d, const char *rel, long long at, FILE *out)
{
    char path[FU_PATH_BYTES + 704];
    struct stat st;
    int fd = resolve(b, d, rel, path, sizeof path) == 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0 || fstat(fd, &st) != 0 || at < 0 || at > st.st_size) {
        fprintf(out, "refused: %s is none of %s's files", rel, d->m.bundle_device);
        if (fd >= 0)
            close(fd);
        return;
    }
    static char chunk[PROVIDER_CHUNK];
    ssize_t got = pread(fd, chunk, sizeof chunk, (off_t)at);
    close(fd);
    if (got < 0) {
        fprintf(out, "refused: %s: %s", rel, strerror(errno));
        return;
    }
    fprintf(out, "ok %lld %lld\n", (long long)st.st_size, (long long)got);
    fwrite(chunk, 1, (size_t)got, out);
    d->heard = broker_now(); /* fetching: not silent */
}

/* ---- its program's checkpoint parts --------------------------------------- */

void broker_provider_part(broker *b, member *m, int64_t step, const char *file, const char *xxh3, int live, int stage,
                          int n_stages)
{
    char here[FU_PATH_BYTES + 504];
    if (b->n_up == MAX_UPLOADS) {
        broker_say(b, "checkpoint", m->m.device, "too many parts in flight: %s's part of step %lld is not asked for",
                   m->m.device, (long long)step);
        return;
    }
    if (broker_part_here(b, m, file, here, sizeof here))
        return;
    upload *u = &b->up[b->n_up++];
    memset(u, 0, sizeof *u);
    u->id = ++b->up_ids;
    snprintf(u->agent, sizeof u->agent, "%s", m->agent);
    snprintf(u->device, sizeof u->device, "%s", m->m.bundle_device);
    snprintf(u->xxh3, sizeof u->xxh3, "%s", xxh3);
    snprintf(u->remote, sizeof u->remote, "%s", file);
    snprintf(u->file, sizeof u->file, "%s", here);
    snprintf(u->tmp, sizeof u->tmp, "%s.upload", here);
    u->step = step, u->live = live, u->stage = stage, u->n_stages = n_stages;
}

static void upload_done(broker *b, upload *u) { *u = b->up[--b->n_up]; }

/* "put NAME ID AT SIZE\n" and bytes: written into the part's temporary
 * file; taken (its XXH3 checked) when the last byte is in. */
static void put_part(broker *b, const char *name, int id, long long at, long long size, const char *bytes, size_t len,
                     FILE *out)
{
    upload *u = NULL;
    for (int i = 0; i < b->n_up; i++)
        if (b->up[i].id == id && strcmp(b->up[i].agent, name) == 0)
            u = &b->up[i];
    if (!u) {
        fprintf(out, "refused: no part %d is asked of %s", id, name);
        return;
    }
    int fd = open(u->tmp, O_WRONLY | O_CREAT | O_CLOEXEC | (at == 0 ? O_TRUNC : 0), 0644);
    int ok = fd >= 0 && at >= 0 && at + (long long)len <= size && pwrite(fd, bytes, len, (off_t)at) == (ssize_t)len;
    if (fd >= 0 && close(fd) != 0)
        ok = 0;
    if (!ok) {
        broker_say(b, "checkpoint", u->device, "%s's part of step %lld: the upload from provider %s failed: %s",
                   u->device, (long long)u->step, name, strerror(errno));
        unlink(u->tmp);
        upload_done(b, u);
        fprintf(out, "refused: the upload failed");
        return;
    }
    fprintf(out, "ok");
    if (at + (long long)len == size) {
        upload done = *u;
        upload_done(b, u);
        broker_take_part(b, done.tmp, done.file, done.device, done.step, done.xxh3, done.live, done.stage,
                         done.n_stages);
    }
}

/* ---- orders ---------------------------------------------------------------- */

static void orders(broker *b, provider *p, FILE *out)
{
    p->heard = broker_now();
    member *pool = NULL, *d = device_of(b, p->name);
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->mem[i].agent, p->name) == 0 && strcmp(b->mem[i].m.role, "standby") == 0)
            pool = &b->mem[i];
    if (pool)
        pool->heard = p->heard;
    upload *u = NULL;
    for (int i = 0; i < b->n_up && !u; i++)
        if (strcmp(b->up[i].agent, p->name) == 0 && (!b->up[i].asked || p->heard - b->up[i].asked > ASK_AGAIN_S))
            u = &b->up[i];
    if (p->gone || b->finished) {
        p->told = 1;
        fprintf(out, "stop");
    } else if (d && d->kill_sig) {
        fprintf(out, "kill %d", d->kill_sig);
        d->kill_sig = 0;
    } else if (d && d->run_epoch == b->epoch && !d->fetched) {
        fprintf(out, "run %lld", (long long)b->epoch);
    } else if (u) {
        u->asked = (int)(p->heard > 1 ? p->heard : 1);
        fprintf(out, "put %d %s", u->id, u->remote);
    } else {
        fprintf(out, d ? "ok" : "pool");
    }
}

int broker_provider_untold(const broker *b)
{
    int n = 0;
    for (int i = 0; i < b->n_prov; i++)
        n += !b->prov[i].told && broker_now() - b->prov[i].heard < 2 * b->peer_timeout;
    return n;
}

/* ---- a request ------------------------------------------------------------- */

/* A refusal in clear (the request did not open), said in the log
 * (broker_count_dropped). */
static void refuse_clear(broker *b, uint8_t **reply, size_t *len, const char *fmt, ...)
{
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (broker_count_dropped(b))
        broker_say(b, "refused", NULL, "refused a provider: %s", why);
    *len = strlen(INVITE_REFUSAL) + strlen(why);
    *reply = malloc(*len + 1);
    if (*reply)
        snprintf((char *)*reply, *len + 1, "%s%s", INVITE_REFUSAL, why);
    else
        *len = 0;
}

static void answer(broker *b, uint32_t id, char *text, size_t text_len, FILE *out)
{
    char verb[16], name[128];
    char *nl = memchr(text, '\n', text_len), *bytes = nl ? nl + 1 : text + text_len;
    size_t n_bytes = (size_t)(text + text_len - bytes);
    if (nl)
        *nl = '\0';
    int at = 0;
    if (sscanf(text, "%15s %127s %n", verb, name, &at) < 2) {
        fprintf(out, "refused: a request the broker does not understand");
        return;
    }
    provider *p = find_provider(b, name);
    long long epoch = 0, off = 0, size = 0;
    int part = 0, status = 0;
    char rel[FU_PATH_BYTES];
    member *d = p ? device_of(b, p->name) : NULL;
    if (strcmp(verb, "ping") == 0 || strcmp(verb, "probe") == 0) {
        fprintf(out, "ok");
    } else if (strcmp(verb, "offer") == 0) {
        offer(b, id, text + 6, out);
    } else if (!p && strcmp(verb, "wait") == 0) { /* (a broker started again knows no providers) */
        fprintf(out, "stop");
    } else if (!p || p->invite != id) {
        fprintf(out, "refused: %s has not offered a device under invite %u", name, id);
    } else if (strcmp(verb, "wait") == 0) {
        orders(b, p, out);
    } else if (strcmp(verb, "plan") == 0 && sscanf(text + at, "%lld", &epoch) == 1) {
        if (d && d->run_epoch == epoch && epoch == b->epoch)
            plan_reply(b, d, out);
        else
            fprintf(out, "refused: epoch %lld is over: the run is at epoch %lld", epoch, (long long)b->epoch);
    } else if (strcmp(verb, "get") == 0 && sscanf(text + at, "%lld %4095s %lld", &epoch, rel, &off) == 3) {
        if (d && d->run_epoch == epoch && epoch == b->epoch)
            get_reply(b, d, rel, off, out);
        else
            fprintf(out, "refused: epoch %lld is over: the run is at epoch %lld", epoch, (long long)b->epoch);
    } else if (strcmp(verb, "put") == 0 && sscanf(text + at, "%d %lld %lld", &part, &off, &size) == 3) {
        put_part(b, name, part, off, size, bytes, n_bytes, out);
    } else if (strcmp(verb, "ended") == 0 && sscanf(text + at, "%lld %d", &epoch, &status) == 2) {
        for (int i = 0; i < b->n; i++) {
            member *m = &b->mem[i];
            if (strcmp(m->agent, name) == 0 && m->run_epoch == epoch && !m->ended)
                m->agent_ended = 1, m->agent_status = status;
        }
        fprintf(out, "ok");
    } else if (strcmp(verb, "bye") == 0) {
        p->gone = p->told = 1;
        for (int i = 0; i < b->n; i++)
            if (strcmp(b->mem[i].agent, name) == 0 && strcmp(b->mem[i].m.role, "standby") == 0) {
                b->mem[i].ended = 1;
                snprintf(b->mem[i].m.status, sizeof b->mem[i].m.status, "gone");
                broker_save_member(b, &b->mem[i]);
            }
        broker_say(b, "left", name, "provider %s left the pool", name);
        fprintf(out, "ok");
    } else {
        fprintf(out, "refused: a request the broker does not understand");
    }
}

void broker_provider_request(broker *b, const uint8_t *frame, size_t len, uint8_t **reply, size_t *reply_len)
{
    uint32_t id = 0;
    *reply = NULL, *reply_len = 0;
    invite_frame_id(frame, len, &id);
    int state = broker_db_invite_state(b->db, id);
    if (state < 0) {
        refuse_clear(b, reply, reply_len, "this run made no invite %u", id);
        return;
    }
    if (state == 0) {
        refuse_clear(b, reply, reply_len, "invite %u was revoked (fusionc invite --revoke)", id);
        return;
    }
    uint8_t token[32], nonce[24];
    invite_token(b->secret, id, token);
    size_t plain_len = len - INVITE_HEADER - FU_BOX_OVERHEAD;
    char *plain = malloc(plain_len + 1);
    unsigned long long stamp = 0;
    int at = 0;
    if (!plain || invite_open_request(token, frame, len, plain, nonce) != 0) {
        refuse_clear(b, reply, reply_len, "a request under invite %u does not open: a wrong or altered invite", id);
        free(plain);
        return;
    }
    plain[plain_len] = '\0';
    char *text = NULL;
    size_t text_len = 0;
    FILE *out = open_memstream(&text, &text_len);
    /* Stamps counted apart from its program's (the same name, another clock's process). */
    char who[128] = "", key[160];
    int stamped = sscanf(plain, "%llu %n", &stamp, &at) == 1 && sscanf(plain + at, "%*s %127s", who) == 1;
    snprintf(key, sizeof key, "provider %s/agent", who);
    if (!stamped || !broker_fresh(b, key, stamp))
        fprintf(out, "refused: a stale or replayed request");
    else
        answer(b, id, plain + at, plain_len - (size_t)at, out);
    fclose(out);
    free(plain);
    *reply = malloc(text_len + FU_BOX_OVERHEAD);
    if (*reply) {
        invite_seal_reply(token, nonce, text, text_len, *reply);
        *reply_len = text_len + FU_BOX_OVERHEAD;
    }
    free(text);
}
