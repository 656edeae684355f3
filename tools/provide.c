/* provide.c: `fusionc provide --invite FILE` (provide.h): this machine's
 * device offered to a run, and run for it when the broker takes it in.
 *
 * The agent measures its device as `fusionc profile` does (or states its
 * peak: --emulate-peak), finds the address its peers reach it at (the one
 * this machine sends from towards the broker), measures its link to the
 * broker (the fastest of five round trips; eight 256 KiB requests), and
 * offers the device (broker_provider.h has the requests).  Then it asks
 * for orders every half second, always connecting out, never listening:
 *   run E    the program of the device it plays in epoch E: its bundle
 *            folder and the checkpoint it resumes from, fetched through the
 *            broker into DIR (files kept by their XXH3 in DIR/cache, so a
 *            later epoch fetches only what changed), then started with the
 *            run's arguments, --broker the invite's address, --save
 *            DIR/checkpoints, its output in DIR/logs/DEVICE.log; it dies
 *            with the agent (PR_SET_PDEATHSIG), as a lost device
 *   put N F  a checkpoint part its program wrote, uploaded
 *   kill S   its program signalled (a new plan; a recovery)
 *   stop     the run is over, or the device was declared lost: exit 0
 * and it says how its program ended.  Files go only under DIR. */
#define _GNU_SOURCE
#include "provide.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../broker/broker_provider.h" /* PROVIDER_CHUNK */
#include "../broker/invite.h"
#include "../frontend/units.h"
#include "../runtime/broker_client.h" /* rt_broker_stamp */
#include "../runtime/checkpoint_store.h"
#include "../runtime/comm/seal.h"
#include "profile.h"

#define ORDERS_MS   500
#define ANSWER_MS   10000
#define GIVE_UP_S   60.0
#define PROBE_BYTES (256 << 10)

typedef struct {
    const char *invite_file, *name, *dir, *peak, *kind, *arch, *memory, *address;
    int threads;
    double seconds;
} provide_options;

/* clang-format off */
static const cli_option provide_options_table[] = {
    { .name = "--invite", .metavar = "FILE", CLI_NONEMPTY(provide_options, invite_file), .expects = "a file",
      .help = "the run's invite (the broker's OUT/invite.key, or one from fusionc invite)" },
    { .name = "--name", .metavar = "NAME", CLI_NONEMPTY(provide_options, name), .expects = "a device name",
      .help = "this device's name in the run (default provider-HOSTNAME)" },
    { .name = "--dir", .metavar = "DIR", CLI_NONEMPTY(provide_options, dir), .expects = "a folder",
      .help = "where the programs, checkpoints and logs go (default ./fusion-provider-NAME)" },
    { .name = "--threads", .metavar = "N", CLI_INT(provide_options, threads), .lo = 1, .hi = 1024,
      .expects = "an integer from 1 to 1024", .help = "CPU threads to offer (default: every core)" },
    { .name = "--seconds", .metavar = "S", CLI_DOUBLE(provide_options, seconds), .lo = 0.1, .hi = 3600,
      .expects = "a number of seconds from 0.1 to 3600", .help = "time to spend measuring the device (default 3)" },
    { .name = "--emulate-peak", .metavar = "Q", CLI_NONEMPTY(provide_options, peak), .expects = "a compute rate",
      .help = "state the device's peak (fp32, bf16, fp16) as Q (\"1GFLOPS\") instead of\n"
              "measuring it; with the run's --emulate-devices its program is paced to it" },
    { .name = "--kind", .metavar = "K", CLI_NONEMPTY(provide_options, kind), .expects = "cpu or cuda",
      .help = "the device kind offered: cpu (default) or cuda (then --arch, --emulate-peak\n"
              "and --memory: GPUs are not measured)" },
    { .name = "--arch", .metavar = "A", CLI_NONEMPTY(provide_options, arch), .expects = "an arch",
      .help = "the device's arch (cuda: sm_NN; a CPU's is this machine's)" },
    { .name = "--memory", .metavar = "Q", CLI_NONEMPTY(provide_options, memory), .expects = "a size",
      .help = "state the device's memory (\"24GiB\") instead of measuring it" },
    { .name = "--address", .metavar = "A", CLI_NONEMPTY(provide_options, address), .expects = "an address",
      .help = "where the run's devices reach this one (default: this machine's address on\n"
              "the route to the broker)" },
};

const cli_usage provide_usage = {
    "usage: fusionc provide --invite FILE [--name NAME] [--dir DIR] [--threads N] [--emulate-peak Q]\n"
    "\n"
    "Offers this machine's device to a run: measures it (as fusionc profile does) and its link to the\n"
    "broker, connects to the broker named in the invite (outbound only), and waits in its pool.  The\n"
    "broker weighs it at the next complete checkpoint and takes it in when the plan with it is at\n"
    "least 10% faster; the provider then fetches its program and the checkpoint through the broker,\n"
    "runs it, and uploads its checkpoint parts.  It exits 0 when the run ends or no longer needs it.\n",
    provide_options_table, NULL, sizeof provide_options_table / sizeof provide_options_table[0], 18, NULL
};
/* clang-format on */

/* ---- talking to the broker ------------------------------------------------ */

typedef struct {
    provide_options o;
    invite inv;
    int sock;
    uint64_t last_stamp;
    char name[128], dir[FU_PATH_BYTES];
    double last_answer;
    pid_t child;
    long long child_epoch;
    char device[128];
} agent;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void stop_child(agent *a, int sig)
{
    if (a->child <= 0)
        return;
    kill(a->child, sig);
    for (int i = 0; i < 50 && waitpid(a->child, NULL, WNOHANG) == 0; i++)
        usleep(100000);
    if (waitpid(a->child, NULL, WNOHANG) == 0) {
        kill(a->child, SIGKILL);
        waitpid(a->child, NULL, 0);
    }
    a->child = 0;
}

/* Exits the agent: its program stopped first. */
static _Noreturn void leave(agent *a, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    FILE *f = status ? stderr : stdout;
    fprintf(f, "%s%s: ", status ? "fusionc provide: " : "provider ", a->name[0] ? a->name : "");
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    va_end(ap);
    stop_child(a, SIGTERM);
    exit(status);
}

/* One request (text, then len bytes) and its reply (malloc'd, NUL-terminated,
 * its length in *reply_len): NULL when the broker did not answer.  A refusal
 * in clear (the invite is wrong or revoked) ends the agent. */
static char *ask(agent *a, const char *text, const void *bytes, size_t len, size_t *reply_len)
{
    char head[FU_PATH_BYTES + 512];
    int h = snprintf(head, sizeof head, "%llu %s", (unsigned long long)rt_broker_stamp(&a->last_stamp), text);
    size_t plain_len = (size_t)h + len;
    uint8_t *plain = malloc(plain_len), *frame = malloc(plain_len + INVITE_HEADER + FU_BOX_OVERHEAD), nonce[24];
    if (!plain || !frame)
        leave(a, 1, "out of memory");
    memcpy(plain, head, (size_t)h);
    if (len)
        memcpy(plain + h, bytes, len);
    size_t frame_len = invite_seal_request(&a->inv, plain, plain_len, frame, nonce);
    free(plain);
    char *got = NULL, *reply = NULL;
    int n = nn_send(a->sock, frame, frame_len, 0) < 0 ? -1 : nn_recv(a->sock, &got, NN_MSG, 0);
    free(frame);
    if (n < 0) {
        if (now_s() - a->last_answer > GIVE_UP_S)
            leave(a, 1, "no answer from the broker at %s for %.0f s: is the run going, and does this machine reach it?",
                  a->inv.url, GIVE_UP_S);
        return NULL;
    }
    a->last_answer = now_s();
    if (n >= (int)strlen(INVITE_REFUSAL) && memcmp(got, INVITE_REFUSAL, strlen(INVITE_REFUSAL)) == 0) {
        fprintf(stderr, "fusionc provide: %s: the broker refused the invite: %.*s\n", a->o.invite_file,
                n - (int)strlen(INVITE_REFUSAL), got + strlen(INVITE_REFUSAL));
        nn_freemsg(got);
        stop_child(a, SIGTERM);
        exit(1);
    }
    reply = n >= FU_BOX_OVERHEAD ? malloc((size_t)n - FU_BOX_OVERHEAD + 1) : NULL;
    if (!reply || invite_open_reply(a->inv.token, nonce, (const uint8_t *)got, (size_t)n, reply) != 0) {
        nn_freemsg(got);
        free(reply);
        leave(a, 1, "a reply from %s does not open under the invite: not this run's broker", a->inv.url);
    }
    *reply_len = (size_t)n - FU_BOX_OVERHEAD;
    reply[*reply_len] = '\0';
    nn_freemsg(got);
    return reply;
}

/* ask, retried until answered (ask gives up after GIVE_UP_S). */
static char *ask_until(agent *a, const char *text, const void *bytes, size_t len, size_t *reply_len)
{
    char *r;
    while (!(r = ask(a, text, bytes, len, reply_len)))
        ;
    return r;
}

/* ---- measuring --------------------------------------------------------------- */

/* This machine's address on the route to the broker's host (a UDP socket
 * connected there sends nothing, and names the address it would send from). */
static int route_address(const char *url, char *out, size_t n)
{
    char host[300];
    const char *h = url + 6, *colon = strrchr(h, ':');
    if (!colon || (size_t)(colon - h) >= sizeof host)
        return -1;
    snprintf(host, sizeof host, "%.*s", (int)(colon - h), h);
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_DGRAM }, *res = NULL;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0 || !res)
        return -1;
    int fd = socket(AF_INET, SOCK_DGRAM, 0), rc = -1;
    struct sockaddr_in me;
    socklen_t len = sizeof me;
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&me, &len) == 0 && inet_ntop(AF_INET, &me.sin_addr, out, (socklen_t)n))
        rc = 0;
    if (fd >= 0)
        close(fd);
    freeaddrinfo(res);
    return rc;
}

/* A TCP port this machine listens on, on every address, for the broker
 * to try (broker_provider.h: whether the run's devices can connect to
 * this one, or it must open its links itself).  The kernel completes a
 * connection into the listen queue; nothing is accepted.  The socket, or
 * -1 (then the offer names no port, and the broker takes the provider
 * for one that accepts no connection). */
static int open_door(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in any = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY), .sin_port = 0 };
    socklen_t len = sizeof any;
    if (fd < 0 || bind(fd, (struct sockaddr *)&any, sizeof any) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&any, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(any.sin_port);
    return fd;
}

/* The link to the broker: latency (s) half the fastest of five round
 * trips; bandwidth (bytes/s) of eight PROBE_BYTES requests less their
 * latencies. */
static void measure_link(agent *a, double *bandwidth, double *latency)
{
    char text[200];
    size_t len;
    double rtt = 1e9;
    snprintf(text, sizeof text, "ping %s", a->name);
    for (int i = 0; i < 5; i++) {
        double t0 = now_s();
        free(ask_until(a, text, NULL, 0, &len));
        rtt = now_s() - t0 < rtt ? now_s() - t0 : rtt;
    }
    static char probe[PROBE_BYTES];
    memset(probe, 0x5a, sizeof probe); /* (sealed: what it holds does not matter) */
    snprintf(text, sizeof text, "probe %s\n", a->name);
    double t0 = now_s();
    for (int i = 0; i < 8; i++)
        free(ask_until(a, text, probe, sizeof probe, &len));
    double t = now_s() - t0 - 8 * rtt;
    *latency = rtt / 2;
    *bandwidth = 8.0 * PROBE_BYTES / (t > 1e-6 ? t : 1e-6);
}

/* "offer NAME k=v ...": the device as measured, or as stated. */
static void offer(agent *a)
{
    const provide_options *o = &a->o;
    profile_result r = { 0 };
    struct utsname u;
    uname(&u);
    int cuda = o->kind && strcmp(o->kind, "cuda") == 0;
    double peak = 0, memory = 0;
    char why[256];
    if (o->peak && units_parse(o->peak, UNIT_FLOPS, &peak, why, sizeof why))
        leave(a, 2, "--emulate-peak %s: %s", o->peak, why);
    if (o->memory && units_parse(o->memory, UNIT_SIZE, &memory, why, sizeof why))
        leave(a, 2, "--memory %s: %s", o->memory, why);
    if (cuda) { /* GPUs are not measured (fusionc profile writes CPU lines): all stated */
        if (!o->arch || !o->peak || !o->memory)
            leave(a, 2, "--kind cuda needs --arch, --emulate-peak and --memory (a GPU is not measured)");
        r.memory = memory, r.bandwidth = 1e12, r.threads = 1;
    } else {
        printf("provider %s: measuring this machine's CPU (%d thread%s, %.1f s)\n", a->name, o->threads,
               o->threads == 1 ? "" : "s", o->seconds);
        fflush(stdout);
        if (profile_measure(o->threads, o->seconds, !o->peak, &r, 0))
            leave(a, 1, "the measurement failed");
        if (o->memory)
            r.memory = memory;
    }
    if (o->peak)
        r.fp32 = r.bf16 = r.fp16 = peak;
    char address[256];
    if (o->address)
        snprintf(address, sizeof address, "%s", o->address);
    else if (route_address(a->inv.url, address, sizeof address))
        leave(a, 1, "cannot tell which address the run's devices reach this machine at: give --address");
    double bw, lat;
    measure_link(a, &bw, &lat);
    int door_port = 0, door = open_door(&door_port);
    char p32[32], p16b[32], p16[32], mem[32], mbw[32], text[1400], door_text[32] = "";
    if (door >= 0)
        snprintf(door_text, sizeof door_text, " inbound-port=%d", door_port);
    profile_quantity(p32, sizeof p32, r.fp32, PROFILE_FLOPS);
    profile_quantity(p16b, sizeof p16b, r.bf16, PROFILE_FLOPS);
    profile_quantity(p16, sizeof p16, r.fp16, PROFILE_FLOPS);
    profile_quantity(mem, sizeof mem, r.memory, PROFILE_BYTES);
    profile_quantity(mbw, sizeof mbw, r.bandwidth, PROFILE_RATE);
    snprintf(text, sizeof text,
             "offer %s kind=%s arch=%s machine=%s peak-fp32=%s peak-bf16=%s peak-fp16=%s memory=%s "
             "memory-bandwidth=%s threads=%d address=%s link-bandwidth=%.3fGbps link-latency=%.1fus%s",
             a->name, cuda ? "cuda" : "cpu", o->arch ? o->arch : u.machine, u.machine, p32, p16b, p16, mem, mbw,
             cuda ? 1 : o->threads, address, bw * 8 / 1e9, lat * 1e6, door_text);
    size_t len;
    char *reply = ask_until(a, text, NULL, 0, &len);
    if (door >= 0)
        close(door);
    if (strncmp(reply, "ok ", 3) != 0) {
        fprintf(stderr, "fusionc provide: %s: the broker at %s %s\n", a->name, a->inv.url, reply);
        free(reply);
        exit(1);
    }
    int inbound = strstr(reply, " inbound") != NULL;
    free(reply);
    printf("provider %s: offered a %s %s device (peak-fp32 %s%s, memory %s at %s, %d thread%s) at %s; its link "
           "to the broker %.3f Gbps, %.1f us; %s; waits in the run's pool at %s\n",
           a->name, cuda ? "cuda" : "cpu", o->arch ? o->arch : u.machine, p32, o->peak ? ", stated" : "", mem, mbw,
           cuda ? 1 : o->threads, cuda || o->threads == 1 ? "" : "s", address, bw * 8 / 1e9, lat * 1e6,
           inbound ? "the broker reached it at that address"
                   : "the broker could not connect to it there (behind NAT or a firewall): it opens its links itself",
           a->inv.url);
    fflush(stdout);
}

/* ---- running its program -------------------------------------------------------- */

/* mkdir -p of path's folders (not its last part). */
static void make_parents(const char *path)
{
    char p[FU_PATH_BYTES];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(p, 0755);
        *s = '/';
    }
}

/* Whether path holds size bytes whose XXH3 is hash (16 hex digits); the
 * XXH3 it has into hex ("" when unreadable). */
static int holds(const char *path, long long size, const char *hash, char hex[32])
{
    int64_t have_size;
    uint64_t have;
    char why[300];
    hex[0] = '\0';
    if (ckpt_measure(path, &have_size, &have, why, sizeof why) != 0)
        return 0;
    snprintf(hex, 32, "%016llx", (unsigned long long)have);
    return have_size == size && strcmp(hex, hash) == 0;
}

/* File REL (SIZE bytes, XXH3 hash) of epoch E into dest: from DIR/cache
 * when it holds it, else fetched through the broker into the cache. */
static int fetch(agent *a, long long epoch, const char *rel, long long size, const char *hash, const char *dest)
{
    char cached[FU_PATH_BYTES + 64], tmp[FU_PATH_BYTES + 96], text[FU_PATH_BYTES + 300], hex[32];
    snprintf(cached, sizeof cached, "%s/cache/%s-%lld", a->dir, hash, size);
    if (holds(cached, size, hash, hex))
        goto place;
    snprintf(tmp, sizeof tmp, "%s.part", cached);
    make_parents(tmp);
    FILE *f = fopen(tmp, "wb");
    if (!f)
        leave(a, 1, "%s: %s", tmp, strerror(errno));
    long long at = 0;
    do { /* (an empty file: one request) */
        snprintf(text, sizeof text, "get %s %lld %s %lld", a->name, epoch, rel, at);
        size_t len;
        char *reply = ask_until(a, text, NULL, 0, &len), *nl = strchr(reply, '\n');
        long long total = -1, got = -1;
        if (!nl || sscanf(reply, "ok %lld %lld", &total, &got) != 2 || total != size ||
            got != (long long)(len - (size_t)(nl + 1 - reply))) {
            fprintf(stderr, "provider %s: %s: %s\n", a->name, rel,
                    nl ? "the broker sent a size it did not list" : reply);
            free(reply);
            fclose(f);
            unlink(tmp);
            return -1;
        }
        fwrite(nl + 1, 1, (size_t)got, f);
        free(reply);
        if (got == 0 && at < size) { /* (the file shrank under the broker) */
            fclose(f);
            unlink(tmp);
            return -1;
        }
        at += got;
    } while (at < size);
    hex[0] = '\0'; /* (a failed close: unread) */
    if (fclose(f) != 0 || !holds(tmp, size, hash, hex) || rename(tmp, cached) != 0) {
        fprintf(stderr, "provider %s: %s arrived with XXH3 %s, not the %s listed: refused\n", a->name, rel,
                hex[0] ? hex : "(unreadable)", hash);
        unlink(tmp);
        return -1;
    }
place:
    make_parents(dest);
    unlink(dest);
    if (link(cached, dest) != 0) {
        fprintf(stderr, "provider %s: %s: %s\n", a->name, dest, strerror(errno));
        return -1;
    }
    /* The run secret as fu_secret_load wants it; the program runnable. */
    const char *base = strrchr(dest, '/') ? strrchr(dest, '/') + 1 : dest;
    chmod(dest, strcmp(base, "run.key") == 0 ? 0600 : strncmp(base, "fusion-", 7) == 0 ? 0755 : 0644);
    return 0;
}

/* "run E": the plan asked for, its files fetched, its program started. */
static void run_epoch(agent *a, long long epoch)
{
    stop_child(a, SIGKILL); /* an older epoch's, if its kill did not come */
    char text[300], base[FU_PATH_BYTES + 64];
    snprintf(text, sizeof text, "plan %s %lld", a->name, epoch);
    size_t len;
    char *plan = ask_until(a, text, NULL, 0, &len);
    if (strncmp(plan, "device ", 7) != 0) {
        printf("provider %s: epoch %lld: %s\n", a->name, epoch, plan);
        free(plan);
        return;
    }
    snprintf(base, sizeof base, "%s/epoch-%lld", a->dir, epoch);
    char *argv[1024], device[128] = "", prog[FU_PATH_BYTES + 300], save[FU_PATH_BYTES + 64],
                      resume[FU_PATH_BYTES + 128] = "";
    int n = 1, files = 0, broker_next = 0;
    double t0 = now_s();
    char *save_ptr = NULL;
    for (char *line = strtok_r(plan, "\n", &save_ptr); line; line = strtok_r(NULL, "\n", &save_ptr)) {
        char rel[FU_PATH_BYTES], hash[32], dest[2 * FU_PATH_BYTES + 200];
        long long size;
        if (sscanf(line, "device %127s", device) == 1)
            continue;
        if (sscanf(line, "file %4095s %lld %31s", rel, &size, hash) == 3) {
            snprintf(dest, sizeof dest, "%s/%s", base, rel);
            if (strstr(rel, "..") || fetch(a, epoch, rel, size, hash, dest)) {
                printf("provider %s: epoch %lld: %s could not be fetched; waiting for the broker's next order\n",
                       a->name, epoch, rel);
                free(plan);
                return;
            }
            if (strncmp(rel, "resume/", 7) == 0)
                snprintf(resume, sizeof resume, "%s/resume", base);
            files++;
        } else if (strncmp(line, "arg ", 4) == 0 && n < 1000) {
            /* --broker: the address in the invite, the one this machine reaches */
            argv[n++] = broker_next ? a->inv.url : line + 4;
            broker_next = strcmp(line + 4, "--broker") == 0;
        }
    }
    snprintf(prog, sizeof prog, "%s/bundle/fusion-%s", base, device);
    snprintf(save, sizeof save, "%s/checkpoints", a->dir);
    argv[0] = prog;
    argv[n++] = "--save", argv[n++] = save;
    if (resume[0])
        argv[n++] = "--resume", argv[n++] = resume;
    argv[n] = NULL;
    char log[FU_PATH_BYTES + 300];
    snprintf(log, sizeof log, "%s/logs/%s.log", a->dir, device);
    make_parents(log);
    printf("provider %s: runs %s of epoch %lld (%d files through the broker in %.2f s%s); its log: %s\n", a->name,
           device, epoch, files, now_s() - t0, resume[0] ? ", resuming from the run's checkpoint" : "", log);
    fflush(stdout);
    pid_t agent_pid = getpid(), pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the agent gone: its program too */
        if (getppid() != agent_pid)
            _exit(127);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0)
            dup2(fd, 1), dup2(fd, 2), close(fd);
        execv(prog, argv);
        fprintf(stderr, "provider: cannot run %s: %s\n", prog, strerror(errno));
        _exit(127);
    }
    free(plan);
    a->child = pid > 0 ? pid : 0;
    a->child_epoch = epoch;
    snprintf(a->device, sizeof a->device, "%s", device);
}

/* "put ID FILE": a part its program wrote (under DIR only), uploaded. */
static void upload_part(agent *a, int id, const char *file)
{
    char real[FU_PATH_BYTES], dir[FU_PATH_BYTES];
    size_t len;
    if (!realpath(file, real) || !realpath(a->dir, dir) || strncmp(real, dir, strlen(dir)) != 0 ||
        real[strlen(dir)] != '/') {
        fprintf(stderr, "provider %s: the broker asked for %s, which is not under %s: not sent\n", a->name, file,
                a->dir);
        return;
    }
    FILE *f = fopen(real, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        fprintf(stderr, "provider %s: %s: %s\n", a->name, file, strerror(errno));
        if (f)
            fclose(f);
        return;
    }
    static char chunk[PROVIDER_CHUNK];
    char text[200];
    long long at = 0;
    do {
        size_t got = fread(chunk, 1, sizeof chunk, f);
        snprintf(text, sizeof text, "put %s %d %lld %lld\n", a->name, id, at, (long long)st.st_size);
        char *reply = ask_until(a, text, chunk, got, &len);
        int ok = strcmp(reply, "ok") == 0;
        if (!ok)
            fprintf(stderr, "provider %s: uploading %s: %s\n", a->name, file, reply);
        free(reply);
        if (!ok || got == 0)
            break;
        at += (long long)got;
    } while (at < st.st_size);
    fclose(f);
}

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

static int serve_run(agent *a)
{
    char text[300];
    size_t len;
    for (;;) {
        int status;
        if (a->child > 0 && waitpid(a->child, &status, WNOHANG) == a->child) {
            a->child = 0;
            printf("provider %s: %s of epoch %lld ended (%s %d)\n", a->name, a->device, a->child_epoch,
                   WIFSIGNALED(status) ? "signal" : "exit status",
                   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            fflush(stdout);
            snprintf(text, sizeof text, "ended %s %lld %d", a->name, a->child_epoch, status);
            free(ask_until(a, text, NULL, 0, &len));
        }
        if (interrupted) {
            snprintf(text, sizeof text, "bye %s", a->name);
            free(ask(a, text, NULL, 0, &len));
            leave(a, 130, "interrupted: left the run's pool");
        }
        snprintf(text, sizeof text, "wait %s", a->name);
        char *order = ask(a, text, NULL, 0, &len), file[FU_PATH_BYTES];
        long long epoch;
        int sig, id;
        if (!order) {
            continue;
        } else if (strcmp(order, "stop") == 0) {
            free(order);
            leave(a, 0, "the broker needs this device no more (the run is over, or it was declared lost)");
        } else if (sscanf(order, "kill %d", &sig) == 1) {
            if (a->child > 0)
                kill(a->child, sig);
        } else if (sscanf(order, "run %lld", &epoch) == 1) {
            run_epoch(a, epoch);
        } else if (sscanf(order, "put %d %4095[^\n]", &id, file) == 2) {
            upload_part(a, id, file);
        } else if (strcmp(order, "ok") != 0 && strcmp(order, "pool") != 0) {
            fprintf(stderr, "provider %s: the broker said '%s'\n", a->name, order);
        }
        int busy = strncmp(order, "put ", 4) == 0 || strncmp(order, "run ", 4) == 0;
        free(order);
        if (!busy)
            usleep(ORDERS_MS * 1000);
    }
}

int cmd_provide(int argc, char **argv)
{
    static agent a;
    a.o = (provide_options){ .threads = (int)sysconf(_SC_NPROCESSORS_ONLN), .seconds = 3.0 };
    char why[FU_PATH_BYTES + 504];
    for (int i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            cli_usage_print(stdout, &provide_usage);
            return 0;
        }
        int took = cli_take(&provide_usage, argc, argv, &i, &a.o, why, sizeof why);
        if (took == 0)
            snprintf(why, sizeof why, "unexpected argument '%s'", argv[i]);
        if (took <= 0)
            return cli_usage_fail(&provide_usage, "fusionc provide", "%s", why);
    }
    if (!a.o.invite_file)
        return cli_usage_fail(&provide_usage, "fusionc provide", "%s", "expected --invite FILE");
    if (a.o.kind && strcmp(a.o.kind, "cpu") != 0 && strcmp(a.o.kind, "cuda") != 0)
        return cli_usage_fail(&provide_usage, "fusionc provide", "--kind expects cpu or cuda, found '%s'", a.o.kind);
    if (invite_read(a.o.invite_file, &a.inv, why, sizeof why)) {
        fprintf(stderr, "fusionc provide: %s\n", why);
        return 1;
    }
    if (a.o.name) {
        snprintf(a.name, sizeof a.name, "%s", a.o.name);
    } else {
        char host[64] = "";
        gethostname(host, sizeof host - 1);
        for (char *c = host; *c; c++)
            if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-", *c))
                *c = '-';
        snprintf(a.name, sizeof a.name, "provider-%s", host);
    }
    if (a.o.dir)
        snprintf(a.dir, sizeof a.dir, "%s", a.o.dir);
    else
        snprintf(a.dir, sizeof a.dir, "fusion-provider-%s", a.name);
    if (mkdir(a.dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "fusionc provide: %s: %s\n", a.dir, strerror(errno));
        return 1;
    }
    int timeout = ANSWER_MS, unlimited = -1;
    a.sock = nn_socket(AF_SP, NN_REQ);
    if (a.sock < 0 || nn_setsockopt(a.sock, NN_SOL_SOCKET, NN_RCVTIMEO, &timeout, sizeof timeout) < 0 ||
        nn_setsockopt(a.sock, NN_SOL_SOCKET, NN_SNDTIMEO, &timeout, sizeof timeout) < 0 ||
        nn_setsockopt(a.sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &unlimited, sizeof unlimited) < 0 ||
        nn_connect(a.sock, a.inv.url) < 0) {
        fprintf(stderr, "fusionc provide: %s: %s\n", a.inv.url, nn_strerror(nn_errno()));
        return 1;
    }
    a.last_answer = now_s();
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    offer(&a);
    return serve_run(&a);
}
