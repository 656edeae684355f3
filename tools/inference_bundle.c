/* inference_bundle.c: the inference program's cache and the release of
 * generated text (inference_bundle.h). */
#define _GNU_SOURCE
#include "inference_bundle.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <xxhash.h>

#include "../ir/folders.h" /* FU_PATH_BYTES */
#include "options.h"       /* compile_option_take */

/* ---- the cache ------------------------------------------------------------------ */

/* The cache's root folder into buf. */
static void cache_root(char *buf, size_t n)
{
    const char *dir = getenv("FUSION_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (dir && *dir)
        snprintf(buf, n, "%s", dir);
    else if (xdg && *xdg)
        snprintf(buf, n, "%s/fusion", xdg);
    else
        snprintf(buf, n, "%s/.cache/fusion", home && *home ? home : "/tmp");
}

static int make_dirs(const char *path)
{
    char tmp[FU_PATH_BYTES];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static void hash_file(XXH3_state_t *s, const char *path)
{
    FILE *f = fopen(path, "rb");
    char buf[65536];
    size_t got;
    while (f && (got = fread(buf, 1, sizeof buf, f)) > 0)
        XXH3_64bits_update(s, buf, got);
    if (f)
        fclose(f);
}

/* The compile's key: its arguments, the files they name, this fusionc. */
static uint64_t compile_key(const char *const *forward, int n_forward, int64_t rows)
{
    XXH3_state_t *s = XXH3_createState();
    if (!s || XXH3_64bits_reset(s) != XXH_OK) {
        XXH3_freeState(s);
        return 0;
    }
    struct stat st;
    XXH3_64bits_update(s, &rows, sizeof rows);
    for (int i = 0; i < n_forward; i++) {
        XXH3_64bits_update(s, forward[i], strlen(forward[i]) + 1);
        if (stat(forward[i], &st) == 0 && S_ISREG(st.st_mode))
            hash_file(s, forward[i]);
    }
    if (stat("/proc/self/exe", &st) == 0) {
        int64_t id[2] = { (int64_t)st.st_size, (int64_t)st.st_mtime };
        XXH3_64bits_update(s, id, sizeof id);
    }
    uint64_t h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}

/* Run argv[0] with argv, its output into log; its exit status (-1: not run). */
static int run_logged(char *const *argv, const char *log)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void print_file(FILE *to, const char *path)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f))
        fputs(line, to);
    if (f)
        fclose(f);
}

/* The compiled inference program for o into dir (made, or found made). 0, or 1 said. */
int inference_compile_cached(const char *const *forward, int n_forward, int64_t rows, const char *who, char *dir,
                             size_t n)
{
    char root[FU_PATH_BYTES - 64], tmp[FU_PATH_BYTES + 32], log[FU_PATH_BYTES + 48];
    cache_root(root, sizeof root);
    snprintf(dir, n, "%s/generate/%016llx", root, (unsigned long long)compile_key(forward, n_forward, rows));
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    snprintf(tmp, sizeof tmp, "%s.%d", dir, (int)getpid());
    snprintf(log, sizeof log, "%s.log", tmp);
    char parent[FU_PATH_BYTES];
    snprintf(parent, sizeof parent, "%s/generate", root);
    if (make_dirs(parent) != 0) {
        fprintf(stderr, "%s: cannot make the cache folder %s: %s\n", who, parent, strerror(errno));
        return 1;
    }
    char *argv[INFERENCE_MAX_FORWARD + 16], batch[40];
    snprintf(batch, sizeof batch, "batch=%lld", (long long)rows);
    int k = 0;
    argv[k++] = "/proc/self/exe";
    argv[k++] = "compile";
    for (int i = 0; i < n_forward && i < INFERENCE_MAX_FORWARD; i++)
        argv[k++] = (char *)forward[i];
    const char *extra[] = { "--inference", "--set", batch, "--set", "seq=1", "-o", tmp };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        argv[k++] = (char *)extra[i];
    int prefill_given = 0; /* else a prompt step of 64 tokens (at most ctx: passes/prefill.c) */
    for (int i = 0; i < n_forward; i++)
        prefill_given |= strcmp(forward[i], "--prefill") == 0 || strncmp(forward[i], "--prefill=", 10) == 0;
    if (!prefill_given)
        argv[k++] = "--prefill", argv[k++] = INFERENCE_DEFAULT_PREFILL;
    argv[k] = NULL;
    int rc = run_logged(argv, log);
    if (rc != 0) {
        fprintf(stderr, "%s: compiling the inference program failed:\n", who);
        print_file(stderr, log);
        unlink(log);
        return rc == 2 ? 2 : 1;
    }
    unlink(log);
    if (rename(tmp, dir) != 0 && !(errno == ENOTEMPTY || errno == EEXIST)) { /* another run's may be there first */
        fprintf(stderr, "%s: cannot move %s to %s: %s\n", who, tmp, dir, strerror(errno));
        return 1;
    }
    return 0;
}

/* The one device program in dir into prog; 0, or 1 said. */
int inference_find_programs(const char *dir, const char *who, inference_program *out, int max, int *n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    *n = 0;
    while (d && (e = readdir(d))) {
        char path[FU_PATH_BYTES + 600], manifest[FU_PATH_BYTES + 600], line[256];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s/fusion-%s", dir, e->d_name, e->d_name);
        snprintf(manifest, sizeof manifest, "%s/%s/manifest.txt", dir, e->d_name);
        if (e->d_name[0] == '.' || stat(path, &st) != 0 || !S_ISREG(st.st_mode) || *n == max)
            continue;
        inference_program *p = &out[(*n)++];
        snprintf(p->path, sizeof p->path, "%s", path);
        p->stage = 0, p->stages = 1;
        FILE *f = fopen(manifest, "r");
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "stage %d of %d", &p->stage, &p->stages) == 2)
                break;
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    if (*n > 0)
        return 0;
    fprintf(stderr, "%s: %s holds no device program\n", who, dir);
    return 1;
}

int inference_forward_arg(int argc, char **argv, int *i, const char **forward, int *n_forward, char *why, size_t n)
{
    int first = *i;
    if (strcmp(argv[first], "-o") == 0 || strcmp(argv[first], "--inference") == 0)
        return snprintf(why, n, "%s: the program is compiled into the cache, as an inference program", argv[first]), -1;
    int took = compile_option_take(argc, argv, i, why, n);
    if (took < 0)
        return -1;
    if (took == 0 && argv[first][0] == '-' && argv[first][1])
        return snprintf(why, n, "unknown option '%s'", argv[first]), -1;
    for (int k = first; k <= *i; k++) {
        if (*n_forward == INFERENCE_MAX_FORWARD)
            return snprintf(why, n, "too many arguments"), -1;
        forward[(*n_forward)++] = argv[k];
    }
    return 0;
}

/* ---- releasing text ----------------------------------------------------------------- */

/* How many bytes at the end of s[0, n) begin a UTF-8 character not yet whole. */
static size_t utf8_unfinished(const char *s, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

size_t inference_text_end(const char *text, size_t n, const char *const *stop, int n_stop, int final, int *stopped)
{
    size_t end = n, hold = 0;
    for (int k = 0; k < n_stop; k++) {
        const char *at = memmem(text, end, stop[k], strlen(stop[k]));
        if (at) {
            end = (size_t)(at - text);
            *stopped = 1;
        }
    }
    if (*stopped || final)
        return end;
    hold = utf8_unfinished(text, end);
    for (int k = 0; k < n_stop; k++) /* a stop text's beginning at the end: wait */
        for (size_t m = strlen(stop[k]) - 1; m > hold && m > 0; m--)
            if (m <= end && memcmp(text + end - m, stop[k], m) == 0) {
                hold = m;
                break;
            }
    return end - hold;
}
