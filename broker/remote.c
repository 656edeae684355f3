/* remote.c: see remote.h. */
#define _GNU_SOURCE
#include "remote.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../codegen/process.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

int remote_plan_load(remote_plan *p, const char *out_dir, const char *cluster_file, struct diag *err)
{
    char list[FU_PATH_BYTES + 104], xml[FU_PATH_BYTES + 104];
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
                remote_device_at(&c, c.devices[d].host, name, &p->devices[p->n_devices++]);
            }
        } else {
            rc = diag_set(err, list, line_no, "unknown entry '%s'", word);
        }
    }
    fclose(f);
    for (int k = 0; rc == 0 && k < c.n_standbys; k++) {
        remote_device *grown = realloc(p->standbys, (size_t)(p->n_standbys + 1) * sizeof *grown);
        if (!grown) {
            rc = diag_set(err, list, 0, "out of memory");
            break;
        }
        p->standbys = grown;
        remote_device_at(&c, c.standbys[k].host, c.standbys[k].name, &p->standbys[p->n_standbys++]);
    }
    for (int k = 0; rc == 0 && k < p->n_devices; k++) { /* the kinds, for the standbys' bundles */
        int d = cluster_find_device(&c, p->devices[k].device);
        p->devices[k].kind = (int)c.devices[d].kind;
        snprintf(p->devices[k].arch, sizeof p->devices[k].arch, "%s", c.devices[d].arch);
    }
    for (int k = 0; rc == 0 && k < p->n_standbys; k++) {
        p->standbys[k].kind = (int)c.standbys[k].kind;
        snprintf(p->standbys[k].arch, sizeof p->standbys[k].arch, "%s", c.standbys[k].arch);
    }
    cluster_free(&c);
    if (rc == 0 && (p->n_devices == 0 || !p->reporter[0]))
        rc = diag_set(err, list, 0, "the deploy list names no devices or no reporter");
    if (rc)
        remote_plan_free(p);
    return rc;
}

void remote_plan_free(remote_plan *p)
{
    free(p->devices);
    free(p->standbys);
    p->devices = p->standbys = NULL;
    p->n_devices = p->n_standbys = 0;
}

void remote_device_at(const cluster *c, int host, const char *device, remote_device *r)
{
    const cluster_host *h = &c->hosts[host];
    memset(r, 0, sizeof *r);
    snprintf(r->device, sizeof r->device, "%s", device);
    snprintf(r->host, sizeof r->host, "%s", h->name);
    snprintf(r->address, sizeof r->address, "%s", h->address);
    snprintf(r->user, sizeof r->user, "%s", h->user);
    r->port = h->port > 0 ? h->port : 22;
    const char *path = h->path[0] ? h->path : "fusion";
    if (strncmp(path, "~/", 2) == 0) /* ssh starts in the home folder; a quoted ~ would not expand */
        path += 2;
    snprintf(r->path, sizeof r->path, "%s", path[0] ? path : ".");
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

int remote_ssh_argv(const remote_plan *p, const remote_device *d, char *argv[], int max, char *store, size_t store_len)
{
    int n = 0;
    size_t used = 0;
#define KEEP(fmt, ...)                                                       \
    do {                                                                     \
        int w_ = snprintf(store + used, store_len - used, fmt, __VA_ARGS__); \
        if (w_ < 0 || (size_t)w_ >= store_len - used || n + 1 >= max)        \
            return -1;                                                       \
        argv[n++] = store + used;                                            \
        used += (size_t)w_ + 1;                                              \
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
    char *argv[32], store[FU_PATH_BYTES];
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

pid_t remote_spawn(const remote_plan *p, const remote_device *d, const char *command, int out_fd, int err_fd,
                   int own_group)
{
    char *argv[40], store[FU_PATH_BYTES];
    int n = remote_ssh_argv(p, d, argv, 36, store, sizeof store);
    if (n < 0)
        return -1;
    argv[n++] = (char *)command;
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int null = open("/dev/null", O_RDONLY);
    if (null < 0)
        _exit(126);
    dup2(null, STDIN_FILENO);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    if (own_group)
        setpgid(0, 0);
    execvp(argv[0], argv);
    fprintf(stderr, "cannot run ssh: %s\n", strerror(errno));
    _exit(127);
}

int remote_start_command(const remote_device *d, const char *bundle_device, char *const *args, int n_args,
                         const char *raw_tail, char *cmd, size_t len)
{
    char where[600], exe[200];
    size_t at = (size_t)snprintf(cmd, len, "cd ");
    if (remote_quote(cmd, len, &at, d->path))
        return -1;
    at += (size_t)snprintf(cmd + at, len - at, " 2>/dev/null && s=\"$PWD/checkpoints\" && cd ");
    snprintf(where, sizeof where, "%s", bundle_device);
    snprintf(exe, sizeof exe, "./fusion-%s", bundle_device);
    if (at >= len || remote_quote(cmd, len, &at, where))
        return -1;
    at += (size_t)snprintf(cmd + at, len - at, " 2>/dev/null || { echo \"fusion: no bundle at ");
    snprintf(where, sizeof where, "%s/%s", d->path, bundle_device);
    if (at >= len || remote_quote(cmd, len, &at, where))
        return -1;
    at += (size_t)snprintf(cmd + at, len - at,
                           " on this host: run fusionc deploy first\" >&2; exit 3; }"
                           "; echo $$ > fusion.pid && exec ");
    if (at >= len || remote_quote(cmd, len, &at, exe))
        return -1;
    for (int i = 0; i < n_args; i++) {
        if (at + 2 >= len)
            return -1;
        cmd[at++] = ' ';
        if (remote_quote(cmd, len, &at, args[i]))
            return -1;
    }
    if (raw_tail) {
        int w = snprintf(cmd + at, len - at, " %s", raw_tail);
        if (w < 0 || (size_t)w >= len - at)
            return -1;
    }
    return 0;
}

int remote_stop_device(const remote_plan *p, const remote_device *d, const char *bundle_device, char *said, size_t n)
{
    char script[FU_PATH_BYTES], where[600];
    snprintf(where, sizeof where, "%s/%s", d->path, bundle_device);
    size_t at = (size_t)snprintf(script, sizeof script, "cd ");
    if (remote_quote(script, sizeof script, &at, where))
        return -1;
    snprintf(script + at, sizeof script - at,
             " 2>/dev/null || { echo 'not deployed'; exit 0; }"
             "; p=$(cat fusion.pid 2>/dev/null || true); exe=$(readlink -f './fusion-%s')"
             "; if [ -n \"$p\" ] && [ \"$(readlink /proc/$p/exe 2>/dev/null)\" = \"$exe\" ]; then"
             " kill $p; i=0; while [ $i -lt 50 ] && kill -0 $p 2>/dev/null; do sleep 0.1; i=$((i+1)); done"
             "; kill -9 $p 2>/dev/null; echo \"stopped (pid $p)\"; else echo 'not running'; fi; rm -f fusion.pid",
             bundle_device);
    char *text = NULL;
    int status = remote_run(p, d, script, &text);
    remote_last_line(text, said, n);
    free(text);
    return status;
}

/* A local tar and a remote script joined by a pipe over ssh: push, the
 * local tar's output into the script's input; else the script's output
 * into the local tar's input.  Errors to log_fd.  0 when both exit 0. */
static int tar_over_ssh(const remote_plan *p, const remote_device *d, const char *script, char *const local_tar[],
                        int push, int log_fd)
{
    int pipe_fd[2];
    if (pipe(pipe_fd) != 0)
        return -1;
    pid_t tar = fork();
    if (tar == 0) {
        close(pipe_fd[push ? 0 : 1]);
        dup2(pipe_fd[push ? 1 : 0], push ? STDOUT_FILENO : STDIN_FILENO);
        if (!push)
            dup2(log_fd, STDOUT_FILENO);
        dup2(log_fd, STDERR_FILENO);
        execvp("tar", local_tar);
        _exit(127);
    }
    char *argv[40], store[FU_PATH_BYTES];
    int n = remote_ssh_argv(p, d, argv, 36, store, sizeof store);
    pid_t ssh = -1;
    if (tar > 0 && n > 0) {
        argv[n++] = (char *)script;
        argv[n] = NULL;
        ssh = fork();
        if (ssh == 0) {
            close(pipe_fd[push ? 1 : 0]);
            dup2(pipe_fd[push ? 0 : 1], push ? STDIN_FILENO : STDOUT_FILENO);
            if (push)
                dup2(log_fd, STDOUT_FILENO);
            dup2(log_fd, STDERR_FILENO);
            execvp(argv[0], argv);
            _exit(127);
        }
    }
    close(pipe_fd[0]);
    close(pipe_fd[1]);
    int st_tar = 1, st_ssh = 1;
    if (tar > 0)
        waitpid(tar, &st_tar, 0);
    if (ssh > 0)
        waitpid(ssh, &st_ssh, 0);
    return tar > 0 && ssh > 0 && WIFEXITED(st_tar) && WEXITSTATUS(st_tar) == 0 && WIFEXITED(st_ssh) &&
                   WEXITSTATUS(st_ssh) == 0
               ? 0
               : -1;
}

int remote_push_dir(const remote_plan *p, const remote_device *d, const char *local_dir, int log_fd)
{
    return remote_push_dir_into(p, d, local_dir, "checkpoints", 0, log_fd);
}

int remote_push_dir_into(const remote_plan *p, const remote_device *d, const char *local_dir, const char *under,
                         int gzip, int log_fd)
{
    char parent[FU_PATH_BYTES], script[2048];
    snprintf(parent, sizeof parent, "%s", local_dir);
    char *slash = strrchr(parent, '/');
    char *base = slash ? slash + 1 : parent;
    if (slash)
        *slash = '\0';
    char checkpoints[600];
    snprintf(checkpoints, sizeof checkpoints, "%s/%s", d->path, under);
    char target[1200];
    snprintf(target, sizeof target, "%s/%.590s", checkpoints, base);
    size_t at = (size_t)snprintf(script, sizeof script, "rm -rf "); /* no part of another plan left beside it */
    if (remote_quote(script, sizeof script, &at, target))
        return -1;
    at += (size_t)snprintf(script + at, sizeof script - at, " && mkdir -p ");
    if (at >= sizeof script || remote_quote(script, sizeof script, &at, checkpoints))
        return -1;
    at += (size_t)snprintf(script + at, sizeof script - at, " && tar -C ");
    if (at >= sizeof script || remote_quote(script, sizeof script, &at, checkpoints))
        return -1;
    snprintf(script + at, sizeof script - at, gzip ? " -xzf -" : " -xf -");
    char *local_tar[] = { "tar", "-C", slash ? parent : ".", gzip ? "-czf" : "-cf", "-", base, NULL };
    return tar_over_ssh(p, d, script, local_tar, 1, log_fd);
}

int remote_pull_dir(const remote_plan *p, const remote_device *d, const char *remote_dir, const char *local_dir,
                    int log_fd)
{
    char script[2048], from[600];
    snprintf(from, sizeof from, "%s/%s", d->path, remote_dir);
    size_t at = (size_t)snprintf(script, sizeof script, "tar -C ");
    if (remote_quote(script, sizeof script, &at, from))
        return -1;
    snprintf(script + at, sizeof script - at, " -cf - .");
    char *local_tar[] = { "tar", "-C", (char *)local_dir, "-xf", "-", NULL };
    return tar_over_ssh(p, d, script, local_tar, 0, log_fd);
}
