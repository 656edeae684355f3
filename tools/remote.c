/* remote.c: see remote.h. */
#define _GNU_SOURCE
#include "remote.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../codegen/process.h"

int remote_plan_load(remote_plan *p, const char *out_dir, const char *cluster_file, struct diag *err)
{
    char list[4200], xml[4200];
    snprintf(list, sizeof list, "%s/deploy.txt", out_dir);
    snprintf(xml, sizeof xml, "%s/cluster.xml", out_dir);
    p->out_dir = out_dir;
    FILE *f = fopen(list, "r");
    if (!f)
        return diag_set(err, list, 0, "cannot read the deploy list: %s (is %s the output of `fusionc compile`?)",
                        strerror(errno), out_dir);
    cluster c;
    if (cluster_load(cluster_file ? cluster_file : xml, &c, err)) {
        fclose(f);
        return -1;
    }
    int rc = 0, line_no = 0;
    char line[512];
    while (rc == 0 && fgets(line, sizeof line, f)) {
        line_no++;
        char word[32], name[CLUSTER_NAME_MAX];
        if (line[0] == '#' || line[0] == '\n')
            continue;
        if (sscanf(line, "%31s %127s", word, name) != 2) {
            rc = diag_set(err, list, line_no, "expected 'device NAME' or 'reporter NAME', found '%.*s'",
                          (int)strcspn(line, "\n"), line);
        } else if (strcmp(word, "reporter") == 0) {
            snprintf(p->reporter, sizeof p->reporter, "%s", name);
        } else if (strcmp(word, "device") == 0) {
            int d = cluster_find_device(&c, name);
            remote_device *grown = realloc(p->devices, (size_t)(p->n_devices + 1) * sizeof *grown);
            if (d < 0) {
                rc = diag_set(err, cluster_file ? cluster_file : xml, 0,
                              "cluster '%s' has no device '%s', which %s was compiled for", c.name, name, out_dir);
            } else if (!grown) {
                rc = diag_set(err, list, line_no, "out of memory");
            } else {
                p->devices = grown;
                const cluster_host *h = &c.hosts[c.devices[d].host];
                remote_device *r = &p->devices[p->n_devices++];
                memset(r, 0, sizeof *r);
                snprintf(r->device, sizeof r->device, "%s", name);
                snprintf(r->host, sizeof r->host, "%s", h->name);
                snprintf(r->address, sizeof r->address, "%s", h->address);
                snprintf(r->user, sizeof r->user, "%s", h->user);
                r->port = h->port > 0 ? h->port : 22;
                const char *path = h->path[0] ? h->path : "fusion";
                if (strncmp(path, "~/", 2) == 0)   /* ssh starts in the home folder; a quoted ~ would not expand */
                    path += 2;
                snprintf(r->path, sizeof r->path, "%s", path[0] ? path : ".");
            }
        } else {
            rc = diag_set(err, list, line_no, "unknown entry '%s'", word);
        }
    }
    fclose(f);
    cluster_free(&c);
    if (rc == 0 && (p->n_devices == 0 || !p->reporter[0]))
        rc = diag_set(err, list, 0, "the deploy list names no devices or no reporter");
    if (rc && p->devices) {
        free(p->devices);
        p->devices = NULL;
        p->n_devices = 0;
    }
    return rc;
}

void remote_plan_free(remote_plan *p)
{
    free(p->devices);
    p->devices = NULL;
    p->n_devices = 0;
}

void remote_target(const remote_device *d, char *out, size_t len)
{
    if (d->user[0])
        snprintf(out, len, "%s@%s", d->user, d->address);
    else
        snprintf(out, len, "%s", d->address);
}

void remote_describe(const remote_device *d, char *out, size_t len)
{
    char target[400];
    remote_target(d, target, sizeof target);
    snprintf(out, len, "host %s (%s:%d)", d->host, target, d->port);
}

int remote_quote(char *buf, size_t len, size_t *at, const char *s)
{
    size_t n = *at;
    if (n + 1 >= len)
        return -1;
    buf[n++] = '\'';
    for (; *s; s++) {
        const char *piece = *s == '\'' ? "'\\''" : NULL;
        size_t k = piece ? 4 : 1;
        if (n + k + 2 >= len)
            return -1;
        if (piece)
            memcpy(buf + n, piece, k);
        else
            buf[n] = *s;
        n += k;
    }
    buf[n++] = '\'';
    buf[n] = '\0';
    *at = n;
    return 0;
}

int remote_ssh_argv(const remote_plan *p, const remote_device *d, char *argv[], int max, char *store,
                    size_t store_len)
{
    int n = 0;
    size_t used = 0;
#define KEEP(fmt, ...)                                                                   \
    do {                                                                                 \
        int w_ = snprintf(store + used, store_len - used, fmt, __VA_ARGS__);             \
        if (w_ < 0 || (size_t)w_ >= store_len - used || n + 1 >= max)                   \
            return -1;                                                                   \
        argv[n++] = store + used;                                                        \
        used += (size_t)w_ + 1;                                                          \
    } while (0)
    KEEP("%s", "ssh");
    if (p->ssh_config) {
        KEEP("%s", "-F");
        KEEP("%s", p->ssh_config);
    }
    KEEP("%s", "-p");
    KEEP("%d", d->port);
    KEEP("%s", "-o");
    KEEP("%s", "BatchMode=yes");
    KEEP("%s", "-o");
    KEEP("ConnectTimeout=%d", p->connect_timeout > 0 ? p->connect_timeout : 10);
    KEEP("%s", "-o");
    KEEP("%s", "ServerAliveInterval=5");
    KEEP("%s", "-o");
    KEEP("%s", "ServerAliveCountMax=3");
    char target[400];
    remote_target(d, target, sizeof target);
    KEEP("%s", target);
#undef KEEP
    argv[n] = NULL;
    return n;
}

int remote_capture(char *const argv[], char **out) { return run_capture_status(argv, 1, out); }

int remote_run(const remote_plan *p, const remote_device *d, const char *command, char **out)
{
    char *argv[32], store[4096];
    int n = remote_ssh_argv(p, d, argv, 30, store, sizeof store);
    if (n < 0) {
        *out = NULL;
        return -1;
    }
    argv[n++] = (char *)command;
    argv[n] = NULL;
    return remote_capture(argv, out);
}

void remote_last_line(const char *text, char *out, size_t len)
{
    out[0] = '\0';
    if (!text)
        return;
    const char *end = text + strlen(text);
    while (end > text && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' '))
        end--;
    const char *start = end;
    while (start > text && start[-1] != '\n')
        start--;
    snprintf(out, len, "%.*s", (int)(end - start), start);
}
