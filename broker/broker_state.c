/* broker_state.c: the broker's clock, its voice and its member table
 * (broker_state.h). */
#include "broker_state.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "../ir/folders.h" /* FU_PATH_BYTES */

int broker_fresh(broker *b, const char *text, uint64_t stamp)
{
    char who[128];
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    double off = (double)stamp / 1e6 - ((double)t.tv_sec + 1e-9 * (double)t.tv_nsec);
    if (sscanf(text, "%*s %127s", who) != 1 || off > 60 || off < -60)
        return 0;
    int k = 0;
    while (k < b->n_stamps && strcmp(b->stamps[k].device, who) != 0)
        k++;
    if (k == b->n_stamps) {
        if (k == (int)(sizeof b->stamps / sizeof b->stamps[0]))
            k = 0; /* full: the oldest entry's place (the freshness window still holds) */
        else
            b->n_stamps++;
        snprintf(b->stamps[k].device, sizeof b->stamps[k].device, "%s", who);
        b->stamps[k].last = 0;
    }
    if (stamp <= b->stamps[k].last)
        return 0;
    b->stamps[k].last = stamp;
    return 1;
}

double broker_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Prints "broker: [epoch E] TEXT" and logs it as an event of `kind`. */
void broker_say(broker *b, const char *kind, const char *device, const char *fmt, ...)
{
    char text[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    printf("broker: [epoch %lld] %s\n", (long long)b->epoch, text);
    fflush(stdout);
    if (b->db)
        broker_db_event(b->db, b->epoch, kind, device, text);
}

int broker_count_dropped(broker *b) { return ++b->dropped <= 10 || b->dropped % 100 == 0; }

member *broker_find_member(broker *b, const char *device)
{
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->mem[i].m.device, device) == 0)
            return &b->mem[i];
    return NULL;
}

void broker_save_member(broker *b, member *m) { broker_db_member(b->db, b->epoch, &m->m); }

void broker_use_cluster(broker *b, cluster *c, const char *path)
{
    cluster_free(&b->c);
    b->c = *c;
    snprintf(b->cluster_path, sizeof b->cluster_path, "%s", path);
    broker_db_set(b->db, "cluster", path);
}

void broker_load_run_cluster(broker *b)
{
    snprintf(b->cluster_path, sizeof b->cluster_path, "%s/cluster.xml", b->out);
    char written[FU_PATH_BYTES];
    cluster c;
    struct diag d = { 0 };
    if (broker_db_get(b->db, "cluster", written, sizeof written) == 0 && cluster_load(written, &c, &d) == 0)
        broker_use_cluster(b, &c, written);
}

/* The members of a bundle folder's plan (its deploy.txt), at their cluster addresses. */
int broker_read_plan(broker *b, const char *bundles)
{
    char path[FU_PATH_BYTES + 504], line[512], name[128];
    snprintf(path, sizeof path, "%s/deploy.txt", bundles);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "fusionc broker: %s: %s (is %s a compile's output?)\n", path, strerror(errno), bundles);
        return -1;
    }
    int kept = 0;
    for (int i = 0; i < b->n; i++) /* the standbys not taken in stay */
        if (strcmp(b->mem[i].m.role, "standby") == 0 && strcmp(b->mem[i].m.status, "used") != 0)
            b->mem[kept++] = b->mem[i];
    b->n = kept;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "reporter %127s", name) == 1)
            snprintf(b->reporter, sizeof b->reporter, "%s", name);
        if (sscanf(line, "device %127s", name) != 1 || b->n == MAX_MEMBERS)
            continue;
        member *m = &b->mem[b->n++];
        memset(m, 0, sizeof *m);
        snprintf(m->m.device, sizeof m->m.device, "%s", name);
        snprintf(m->m.bundle_device, sizeof m->m.bundle_device, "%s", name);
        snprintf(m->m.role, sizeof m->m.role, "device");
        int d = cluster_find_device(&b->c, name);
        snprintf(m->m.address, sizeof m->m.address, "%s",
                 d >= 0 ? b->c.hosts[b->c.devices[d].host].address : "127.0.0.1");
        snprintf(m->m.host, sizeof m->m.host, "%s", d >= 0 ? b->c.hosts[b->c.devices[d].host].name : "");
        for (int k = 0; k < b->n_prov; k++) /* a provider's device: its agent runs the program */
            if (strcmp(b->prov[k].name, name) == 0 && !b->prov[k].gone)
                snprintf(m->agent, sizeof m->agent, "%s", name);
    }
    fclose(f);
    return 0;
}

void broker_add_standbys(broker *b)
{
    for (int s = 0; s < b->c.n_standbys && b->n < MAX_MEMBERS; s++) {
        member *m = &b->mem[b->n++];
        memset(m, 0, sizeof *m);
        snprintf(m->m.device, sizeof m->m.device, "%s", b->c.standbys[s].name);
        snprintf(m->m.role, sizeof m->m.role, "standby");
        snprintf(m->m.address, sizeof m->m.address, "%s", b->c.hosts[b->c.standbys[s].host].address);
        snprintf(m->m.host, sizeof m->m.host, "%s", b->c.hosts[b->c.standbys[s].host].name);
    }
}
