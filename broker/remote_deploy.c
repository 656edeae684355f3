/* remote_deploy.c: one device's bundle copied to its host, checked, and
 * made visible only when whole (remote_deploy.h).  `fusionc deploy`
 * (tools/deploy.c) does it for every device of a compile, the broker
 * (broker_remote.c) for each device of a new epoch.
 *
 * For a device (OUT/<device>/, its host from the cluster file):
 *
 *   1. its bundle's checksums: sha256sum of every file of OUT/<device>/,
 *      written to OUT/<device>/SHA256SUMS; the bundle's version ID is the
 *      XXH3 hash of that list, so two bundles with the same files have the
 *      same ID;
 *   2. one ssh call asks the host whether P/.fusion-bundles/<device>-ID is
 *      there and whole (sha256sum -c), which version P/<device> points to,
 *      and whether rsync is there; it removes a copy a failed deploy left;
 *   3. if the version is not there: copy OUT/<device>/ to
 *      P/.fusion-bundles/<device>-ID.tmp, by rsync (hard-linking the files
 *      that did not change from the version in use: --link-dest) when both
 *      ends have it, else by scp; then, on the host, check every file
 *      against SHA256SUMS and rename the .tmp to its name.  A failed copy or
 *      check removes the .tmp;
 *   4. P/<device> is pointed at the version (a new link renamed over the
 *      old one), and versions other than it and the one before are removed.
 *
 * Why sha256sum and not our own hash on the host: the host has coreutils
 * but no fusion; the local side runs the same tool so the list is the one
 * the host checks.
 */
#define _GNU_SOURCE
#include "remote_deploy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "../runtime/atomic_file.h"

#define ID_HEX 16

/* True when `name` is an executable on PATH. */
static int on_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path)
        return 0;
    char dir[FU_PATH_BYTES];
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(dir, sizeof dir, "%.*s/%s", (int)n, p, name);
        if (n > 0 && access(dir, X_OK) == 0)
            return 1;
        p += n + (p[n] == ':');
    }
    return 0;
}

/* The checksum list of OUT/<device>/ (sorted, paths relative to it), written
 * to its SHA256SUMS when that differs; the version ID from it; the bytes. */
static int bundle_checksums(const char *dir, char id[ID_HEX + 1], double *bytes, struct diag *err)
{
    char *argv[] = { "sh",
                     "-c",
                     "cd \"$1\" && find . -type f ! -name SHA256SUMS ! -name '*.tmp.*' -print0 | LC_ALL=C sort -z "
                     "| xargs -0 sha256sum && find . -type f ! -name SHA256SUMS ! -name '*.tmp.*' -printf '%s\\n' "
                     "| awk '{ s += $1 } END { printf \"bytes %.0f\\n\", s }'",
                     "sh",
                     (char *)dir,
                     NULL };
    char *text = NULL;
    int status = remote_capture(argv, &text);
    char *bytes_line = text ? strstr(text, "bytes ") : NULL;
    if (status != 0 || !bytes_line || bytes_line == text) {
        char reason[600];
        remote_last_line(text, reason, sizeof reason);
        free(text);
        return diag_set(err, dir, 0, "cannot checksum the bundle: %s", reason[0] ? reason : "sha256sum failed");
    }
    *bytes = strtod(bytes_line + 6, NULL);
    *bytes_line = '\0'; /* the list ends where the byte count starts */
    snprintf(id, ID_HEX + 1, "%016llx", (unsigned long long)XXH3_64bits(text, strlen(text)));
    char path[FU_PATH_BYTES + 200], why[FU_PATH_BYTES + 400];
    snprintf(path, sizeof path, "%s/SHA256SUMS", dir);
    FILE *old = fopen(path, "r");
    int same = 0;
    if (old) {
        size_t n = strlen(text);
        char *have = malloc(n + 2);
        same = have && fread(have, 1, n + 1, old) == n && memcmp(have, text, n) == 0;
        free(have);
        fclose(old);
    }
    int rc = 0;
    if (!same) {
        if (atomic_write_file(path, text, strlen(text), why, sizeof why))
            rc = diag_set(err, path, 0, "the checksum list: %s", why);
    }
    free(text);
    return rc;
}

/* The line of a tool's output that says why it failed: the first that names
 * a full disk or a refusal, else the last. */
static void failure_reason(const char *text, char *out, size_t len)
{
    static const char *const telling[] = { "No space left",      "Disk quota",           "Permission denied",
                                           "Connection refused", "Connection timed out", "No route to host",
                                           "Could not resolve",  "Read-only file system" };
    for (size_t i = 0; text && i < sizeof telling / sizeof telling[0]; i++) {
        const char *hit = strstr(text, telling[i]);
        if (hit) {
            const char *start = hit;
            while (start > text && start[-1] != '\n')
                start--;
            snprintf(out, len, "%.*s", (int)strcspn(start, "\n"), start);
            return;
        }
    }
    remote_last_line(text, out, len);
    if (!out[0])
        snprintf(out, len, "no message");
}

typedef struct {
    const remote_plan *plan;
    const remote_device *d;
    char where[800]; /* "device D on host H (user@addr:port)" */
    char id[ID_HEX + 1];
    char current[64]; /* the version P/D points to now ("" : none) */
    int host_has_rsync;
} deploy_job;

/* Run a shell script on the job's host; 0, or -1 with err naming the step. */
static int on_host(deploy_job *j, const char *script, const char *step, char **out, struct diag *err)
{
    char *text = NULL;
    int status = remote_run(j->plan, j->d, script, &text);
    if (status == 0) {
        if (out)
            *out = text;
        else
            free(text);
        return 0;
    }
    char reason[700];
    failure_reason(text, reason, sizeof reason);
    free(text);
    if (status == 255)
        return diag_set(err, j->d->device, 0, "%s: ssh failed: %s", j->where, reason);
    return diag_set(err, j->d->device, 0, "%s: %s failed: %s", j->where, step, reason);
}

/* Ask the host what it has (see the file's comment, step 2). */
static int probe(deploy_job *j, int *have, struct diag *err)
{
    char script[FU_PATH_BYTES];
    size_t at = 0;
    const char *D = j->d->device;
    at += (size_t)snprintf(script + at, sizeof script - at, "set -e; mkdir -p ");
    remote_quote(script, sizeof script, &at, j->d->path);
    at += (size_t)snprintf(script + at, sizeof script - at, "/.fusion-bundles; cd ");
    remote_quote(script, sizeof script, &at, j->d->path);
    snprintf(script + at, sizeof script - at,
             "; rm -rf '.fusion-bundles/%s-'????????????????.tmp"
             "; if [ -d '.fusion-bundles/%s-%s' ] && (cd '.fusion-bundles/%s-%s' && sha256sum -c --quiet --strict "
             "SHA256SUMS >/dev/null 2>&1); then echo 'state have'; else echo 'state need'; fi"
             "; cur=$(readlink '%s' 2>/dev/null || true); echo \"current ${cur##*/}\""
             "; if command -v rsync >/dev/null 2>&1; then echo 'copier rsync'; else echo 'copier scp'; fi",
             D, D, j->id, D, j->id, D);
    char *text = NULL;
    if (on_host(j, script, "preparing the bundle folder", &text, err))
        return -1;
    const char *s = strstr(text, "state ");
    const char *c = strstr(text, "current ");
    *have = s && strncmp(s + 6, "have", 4) == 0;
    if (c)
        snprintf(j->current, sizeof j->current, "%.*s", (int)strcspn(c + 8, "\n"), c + 8);
    j->host_has_rsync = strstr(text, "copier rsync") != NULL;
    free(text);
    if (!s)
        return diag_set(err, D, 0, "%s: the host answered something unexpected to the probe", j->where);
    return 0;
}

/* Copy OUT/<device>/ to P/.fusion-bundles/<device>-ID.tmp (step 3). */
static int copy_bundle(deploy_job *j, int use_rsync, double *sent, struct diag *err)
{
    char src[FU_PATH_BYTES + 104], dst[1200], target[400], ssh_cmd[FU_PATH_BYTES + 504], link_dest[200];
    char *argv[48], store[FU_PATH_BYTES];
    remote_target(j->d, target, sizeof target);
    int n = 0;
    if (use_rsync) {
        /* rsync's -e: ssh's argv up to the target, as one line (rsync splits it) */
        char *ssh_argv[32];
        int k = remote_ssh_argv(j->plan, j->d, ssh_argv, 30, store, sizeof store);
        size_t at = 0;
        for (int i = 0; i < k - 1 && at < sizeof ssh_cmd; i++)
            at += (size_t)snprintf(ssh_cmd + at, sizeof ssh_cmd - at, "%s%s", i ? " " : "", ssh_argv[i]);
        snprintf(src, sizeof src, "%s/%s/", j->plan->out_dir, j->d->device);
        snprintf(dst, sizeof dst, "%s:%s/.fusion-bundles/%s-%s.tmp/", target, j->d->path, j->d->device, j->id);
        argv[n++] = "rsync";
        argv[n++] = "-a";
        argv[n++] = "-H"; /* keep the bundle's hard links */
        argv[n++] = "-s"; /* the remote path as it is, not through its shell */
        argv[n++] = "--stats";
        argv[n++] = "-e";
        argv[n++] = ssh_cmd;
        if (j->current[0] && strlen(j->current) > ID_HEX) { /* files that did not change: hard links */
            snprintf(link_dest, sizeof link_dest, "--link-dest=../%s", j->current);
            argv[n++] = link_dest;
        }
        argv[n++] = src;
        argv[n++] = dst;
    } else {
        char port[16], timeout[48];
        snprintf(port, sizeof port, "%d", j->d->port);
        snprintf(timeout, sizeof timeout, "ConnectTimeout=%d",
                 j->plan->connect_timeout > 0 ? j->plan->connect_timeout : 10);
        snprintf(src, sizeof src, "%s/%s", j->plan->out_dir, j->d->device);
        snprintf(dst, sizeof dst, "%s:%s/.fusion-bundles/%s-%s.tmp", target, j->d->path, j->d->device, j->id);
        argv[n++] = "scp";
        argv[n++] = "-r";
        argv[n++] = "-p";
        argv[n++] = "-q";
        if (j->plan->ssh_config) {
            argv[n++] = "-F";
            argv[n++] = (char *)j->plan->ssh_config;
        }
        argv[n++] = "-P";
        argv[n++] = port;
        argv[n++] = "-o";
        argv[n++] = "BatchMode=yes";
        argv[n++] = "-o";
        argv[n++] = timeout;
        argv[n++] = src;
        argv[n++] = dst;
    }
    argv[n] = NULL;
    char *text = NULL;
    int status = remote_capture(argv, &text);
    if (status != 0) {
        char reason[700], cleanup[1400];
        failure_reason(text, reason, sizeof reason);
        free(text);
        /* Leave nothing behind that could pass for a bundle (the next probe would remove it too). */
        size_t at = (size_t)snprintf(cleanup, sizeof cleanup, "rm -rf ");
        char tmp_dir[1000];
        snprintf(tmp_dir, sizeof tmp_dir, "%s/.fusion-bundles/%s-%s.tmp", j->d->path, j->d->device, j->id);
        remote_quote(cleanup, sizeof cleanup, &at, tmp_dir);
        char *ignored = NULL;
        remote_run(j->plan, j->d, cleanup, &ignored);
        free(ignored);
        return diag_set(err, j->d->device, 0, "%s: copying the bundle with %s failed (exit %d): %s", j->where,
                        use_rsync ? "rsync" : "scp", status, reason);
    }
    const char *total = text ? strstr(text, "Total transferred file size: ") : NULL;
    if (total) { /* "1,234,567 bytes" */
        double v = 0;
        for (const char *p = total + 29; *p && *p != ' '; p++)
            if (*p >= '0' && *p <= '9')
                v = v * 10 + (*p - '0');
        *sent = v;
    }
    free(text);
    return 0;
}

/* Check the copy on the host and give it its name; point P/<device> at the
 * version; remove versions but it and the one before (steps 3 and 4). */
static int check_and_switch(deploy_job *j, int copied, struct diag *err)
{
    char script[FU_PATH_BYTES];
    const char *D = j->d->device, *id = j->id;
    size_t at = (size_t)snprintf(script, sizeof script, "set -e; cd ");
    remote_quote(script, sizeof script, &at, j->d->path);
    if (copied)
        at += (size_t)snprintf(script + at, sizeof script - at,
                               "; cd .fusion-bundles"
                               /* the run secret stays the owner's alone, whatever the copier did */
                               "; if [ -f '%s-%s.tmp/run.key' ]; then chmod 600 '%s-%s.tmp/run.key'; fi"
                               "; if ! (cd '%s-%s.tmp' && sha256sum -c --quiet --strict SHA256SUMS >&2); then"
                               " rm -rf '%s-%s.tmp'; echo 'the copy does not match the bundle checksums' >&2; exit 3;"
                               " fi; rm -rf '%s-%s'; mv -T '%s-%s.tmp' '%s-%s'; cd ..",
                               D, id, D, id, D, id, D, id, D, id, D, id, D, id);
    snprintf(script + at, sizeof script - at,
             "; ln -sfn '.fusion-bundles/%s-%s' '.%s.link.tmp'; mv -T '.%s.link.tmp' '%s'"
             "; for v in '.fusion-bundles/%s-'????????????????; do"
             " case \"$v\" in '.fusion-bundles/%s-%s'|'.fusion-bundles/%s') ;; *) rm -rf \"$v\";; esac; done",
             D, id, D, D, D, D, D, id, j->current[0] ? j->current : "-");
    return on_host(j, script, copied ? "checking the copy" : "switching to the bundle", NULL, err);
}

int deploy_device(const remote_plan *plan, const remote_device *d, const char *copier, int *copied, struct diag *err)
{
    deploy_job j = { .plan = plan, .d = d };
    char host[500];
    remote_describe(d, host, sizeof host);
    snprintf(j.where, sizeof j.where, "device %s on %s", d->device, host);
    char dir[FU_PATH_BYTES + 104];
    double bytes = 0, sent = -1;
    snprintf(dir, sizeof dir, "%s/%s", plan->out_dir, d->device);
    int have = 0;
    if (bundle_checksums(dir, j.id, &bytes, err) || probe(&j, &have, err))
        return -1;
    int use_rsync = 0;
    if (!have) {
        use_rsync = copier ? strcmp(copier, "rsync") == 0 : j.host_has_rsync && on_path("rsync");
        if (use_rsync && !j.host_has_rsync)
            return diag_set(err, d->device, 0, "%s: --copier rsync, but the host has no rsync", j.where);
        if (copy_bundle(&j, use_rsync, &sent, err))
            return -1;
    }
    if (check_and_switch(&j, !have, err))
        return -1;
    *copied = !have;
    if (have)
        printf("deploy: %s: unchanged (version %s), not copied\n", j.where, j.id);
    else if (sent >= 0)
        printf("deploy: %s: copied by rsync to %s/%s (bundle %.1f MB, %.1f MB sent), checksums verified, "
               "version %s\n",
               j.where, d->path, d->device, bytes / 1e6, sent / 1e6, j.id);
    else
        printf("deploy: %s: copied by %s to %s/%s (%.1f MB), checksums verified, version %s\n", j.where,
               use_rsync ? "rsync" : "scp", d->path, d->device, bytes / 1e6, j.id);
    fflush(stdout);
    return 0;
}
