/* remote.h: the hosts of a compiled cluster, reached over ssh, for
 * `fusionc deploy`, `launch` and `stop` (tools/deploy.c, tools/launch.c).
 *
 * What a compile leaves for them (codegen/bundle.c): OUT/deploy.txt, the
 * devices in the order they start and the one that reports the loss, and
 * OUT/cluster.xml, the cluster file the compile read, where each host's
 * address, ssh user, port and path are.  `--cluster FILE` reads another
 * cluster file instead (the machines moved, or got other addresses); it
 * must name every device of the compile.
 *
 * On a host, device D's bundle lives under the host's path P (relative to
 * the ssh user's home unless absolute):
 *
 *     P/D                        a symbolic link to the version in use
 *     P/.fusion-bundles/D-ID/    a whole, verified bundle (ID: its content's hash)
 *     P/.fusion-bundles/D-ID.tmp a copy in progress; never run, never linked
 *
 * so a copy that fails leaves only a .tmp that the next deploy removes, and
 * the link moves to a new version in one rename.
 *
 * ssh runs with BatchMode (never a password prompt: keys or an agent), a
 * connect timeout, and `-F FILE` when --ssh-config is given (the tests'
 * keys and host options).  Nothing here runs a remote shell on a string it
 * did not quote (remote_quote).
 */
#ifndef FUSION_REMOTE_H
#define FUSION_REMOTE_H

#include <stddef.h>
#include <sys/types.h>

#include "../frontend/cluster.h"
#include "../ir/diag.h"

typedef struct {
    char device[CLUSTER_NAME_MAX];
    char host[CLUSTER_NAME_MAX];
    char address[256];
    char user[64]; /* "" : ssh's default user */
    int port;
    char path[256]; /* as the remote shell takes it: "~/" dropped */
    int kind;       /* device_kind, and arch: a standby stands in for devices of its own */
    char arch[32];
} remote_device;

typedef struct {
    const char *out_dir;
    const char *ssh_config; /* -F FILE, or NULL */
    int connect_timeout;    /* seconds */
    char reporter[CLUSTER_NAME_MAX];
    remote_device *devices; /* in start order */
    int n_devices;
    remote_device *standbys; /* the cluster file's standby="true" devices */
    int n_standbys;
} remote_plan;

/* Read OUT/deploy.txt and the cluster file (OUT/cluster.xml, or
 * cluster_file), and find every device's host.  0, or -1 with err. */
int remote_plan_load(remote_plan *p, const char *out_dir, const char *cluster_file, struct diag *err);
void remote_plan_free(remote_plan *p);

/* r: device `device` on cluster host `host` (its address, user, port, path). */
void remote_device_at(const cluster *c, int host, const char *device, remote_device *r);

/* "user@address" or "address". */
void remote_target(const remote_device *d, char *out, size_t len);
/* "host (user@address:port)", for messages. */
void remote_describe(const remote_device *d, char *out, size_t len);

/* s in single quotes for a POSIX shell ('it'\''s'), appended to buf at *at;
 * -1 when it does not fit. */
int remote_quote(char *buf, size_t len, size_t *at, const char *s);

/* ssh's own argv for d, up to and including the target: ssh [-F cfg] -p PORT
 * -o BatchMode=yes -o ConnectTimeout=N ... user@address.  store keeps the
 * strings; returns the count (argv is NULL-terminated after it). */
int remote_ssh_argv(const remote_plan *p, const remote_device *d, char *argv[], int max, char *store, size_t store_len);

/* Run argv, its standard output and error together in *out (malloc'd; the
 * caller frees).  Returns the exit status (128 + N for signal N), or -1 when
 * it cannot start. */
int remote_capture(char *const argv[], char **out);
/* Run `command` through ssh on d's host; as remote_capture (255: ssh
 * itself failed: refused, unknown host, no key). */
int remote_run(const remote_plan *p, const remote_device *d, const char *command, char **out);
/* Start `command` through ssh on d's host, its output to out_fd and err_fd
 * (stdin /dev/null; own_group: in a process group of its own, so that a
 * Ctrl-C at the caller's terminal is the caller's to pass on).  The ssh
 * process's pid, or -1. */
pid_t remote_spawn(const remote_plan *p, const remote_device *d, const char *command, int out_fd, int err_fd,
                   int own_group);

/* The remote command that runs bundle_device's program on d's host with
 * args (each quoted) and raw_tail (not quoted; may use $s, the host's
 * PATH/checkpoints folder as an absolute path):
 *     cd PATH && s="$PWD/checkpoints" && cd BUNDLE || {no bundle: exit 3};
 *     echo $$ > fusion.pid && exec ./fusion-BUNDLE ARGS... TAIL
 * 0, or -1 when it does not fit len. */
int remote_start_command(const remote_device *d, const char *bundle_device, char *const *args, int n_args,
                         const char *raw_tail, char *cmd, size_t len);

/* Stops the program of bundle_device on d's host (the pid in its
 * fusion.pid, if that is the bundle's program): SIGTERM, then after 5 s
 * SIGKILL.  What the host said in said; ssh's status (0 ok). */
int remote_stop_device(const remote_plan *p, const remote_device *d, const char *bundle_device, char *said, size_t n);

/* local_dir (a folder) copied to PATH/checkpoints/<its name> on d's host,
 * in place of what was there (tar over ssh; errors to log_fd).  0, or -1. */
int remote_push_dir(const remote_plan *p, const remote_device *d, const char *local_dir, int log_fd);
/* The same into PATH/under/<its name> (fusionc probe: under "."), gzipped
 * on the way when gzip (a program's libraries: a third of their size). */
int remote_push_dir_into(const remote_plan *p, const remote_device *d, const char *local_dir, const char *under,
                         int gzip, int log_fd);

/* PATH/remote_dir on d's host copied into local_dir (made by the caller;
 * what is there stays beside it: the parts of other hosts), tar over ssh;
 * errors to log_fd.  0, or -1. */
int remote_pull_dir(const remote_plan *p, const remote_device *d, const char *remote_dir, const char *local_dir,
                    int log_fd);
/* The last non-empty line of text, trimmed, in out (for messages). */
void remote_last_line(const char *text, char *out, size_t len);

#endif
