/* checkpoint_store.c: the checkpoint layout (checkpoint_store.h). */
#define _GNU_SOURCE
#include "checkpoint_store.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "atomic_file.h"
#include "rt_error.h"

#define MANIFEST_HEAD "fusion checkpoint 1\n"
#define MANIFEST_MAX  (4 << 20) /* bytes: 16,000 parts fit; a larger file is not ours */

void ckpt_step_dir(const char *dir, int64_t step, char *out, size_t n)
{
    snprintf(out, n, "%s/step-%lld", dir, (long long)step);
}

void ckpt_part_name(const char *device, int several, char *name, size_t n)
{
    if (several)
        snprintf(name, n, "checkpoint-%s.safetensors", device);
    else
        snprintf(name, n, "checkpoint.safetensors");
}

int ckpt_parse_count(const char *text, uint64_t max, uint64_t *value)
{
    if (!text || !*text || strlen(text) > 20)
        return -1;
    uint64_t v = 0;
    for (const char *c = text; *c; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        unsigned d = (unsigned)(*c - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (v > max)
        return -1;
    *value = v;
    return 0;
}

int ckpt_measure(const char *path, int64_t *size, uint64_t *xxh3, char *err, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        return rt_error(err, n, "%s: cannot open it: %s", path, strerror(errno));
    }
    XXH3_state_t *s = XXH3_createState();
    static char buf[1 << 16]; /* one caller at a time: the main thread */
    size_t got;
    int64_t total = 0;
    int rc = s && XXH3_64bits_reset(s) == XXH_OK ? 0 : -1;
    while (rc == 0 && (got = fread(buf, 1, sizeof buf, f)) > 0) {
        rc = XXH3_64bits_update(s, buf, got) == XXH_OK ? 0 : -1;
        total += (int64_t)got;
    }
    if (rc == 0 && ferror(f))
        rc = -1;
    if (rc == 0) {
        *xxh3 = XXH3_64bits_digest(s);
        *size = total;
    } else {
        snprintf(err, n, "%s: cannot read it: %s", path, errno ? strerror(errno) : "read error");
    }
    XXH3_freeState(s);
    fclose(f);
    return rc;
}

/* The manifest's text (malloc'd), its checksum line last. */
static char *manifest_text(const ckpt_manifest *m, size_t *len)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        return NULL;
    fprintf(f, MANIFEST_HEAD "step %lld\n", (long long)m->step);
    for (int32_t i = 0; i < m->n_parts; i++)
        fprintf(f, "part %s %lld %016" PRIx64 "\n", m->parts[i].name, (long long)m->parts[i].size, m->parts[i].xxh3);
    fprintf(f, "parts %d\n", m->n_parts);
    fflush(f);
    uint64_t sum = XXH3_64bits(text, size);
    fprintf(f, "xxh3 %016" PRIx64 "\n", sum);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    *len = size;
    return text;
}

int ckpt_manifest_write(const char *step_dir, const ckpt_manifest *m, char *err, size_t n)
{
    char path[FU_PATH_BYTES + 304];
    snprintf(path, sizeof path, "%s/" CKPT_MANIFEST, step_dir);
    size_t len = 0;
    char *text = manifest_text(m, &len);
    if (!text) {
        snprintf(err, n, "%s: out of memory", path);
        return -1;
    }
    int rc = atomic_write_file(path, text, len, err, n);
    free(text);
    return rc;
}

void ckpt_manifest_free(ckpt_manifest *m)
{
    free(m->parts);
    m->parts = NULL;
    m->n_parts = 0;
}

const ckpt_part *ckpt_manifest_find(const ckpt_manifest *m, const char *name)
{
    for (int32_t i = 0; i < m->n_parts; i++)
        if (strcmp(m->parts[i].name, name) == 0)
            return &m->parts[i];
    return NULL;
}

/* 16 lowercase hex digits. */
static int parse_hex64(const char *text, uint64_t *v)
{
    if (strlen(text) != 16)
        return -1;
    uint64_t x = 0;
    for (int i = 0; i < 16; i++) {
        char c = text[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 99;
        if (d > 15)
            return -1;
        x = x << 4 | d;
    }
    *v = x;
    return 0;
}

/* The folder's own step, from its name's "step-N"; -1 when it is not one. */
static int64_t folder_step(const char *step_dir)
{
    const char *base = strrchr(step_dir, '/') ? strrchr(step_dir, '/') + 1 : step_dir;
    uint64_t v;
    if (strncmp(base, "step-", 5) != 0 || ckpt_parse_count(base + 5, CKPT_MAX_STEP, &v) != 0)
        return -1;
    return (int64_t)v;
}

/* The word after `key ` on a line, or NULL. */
static char *after(char *line, const char *key)
{
    size_t k = strlen(key);
    return strncmp(line, key, k) == 0 && line[k] == ' ' ? line + k + 1 : NULL;
}

static int parse_manifest(char *text, size_t len, const char *path, const char *step_dir, ckpt_manifest *m, char *err,
                          size_t n)
{
    /* The checksum line: the text's last line, over everything before it. */
    if (len < 2 || text[len - 1] != '\n') {
        return rt_error(err, n, "%s: does not end with a line break: truncated?", path);
    }
    text[len - 1] = '\0';
    char *last = strrchr(text, '\n');
    uint64_t want, sum;
    if (!last || !after(last + 1, "xxh3") || parse_hex64(after(last + 1, "xxh3"), &want) != 0) {
        return rt_error(
            err, n, "%s: no checksum line (\"xxh3 <16 hex digits>\") at its end: truncated or not a manifest", path);
    }
    size_t body = (size_t)(last + 1 - text);
    sum = XXH3_64bits(text, body);
    if (sum != want) {
        return rt_error(err, n,
                        "%s: its checksum is %016" PRIx64 " but its lines hash to %016" PRIx64 ": the manifest was "
                        "changed or damaged",
                        path, want, sum);
    }
    *last = '\0';
    if (strncmp(text, MANIFEST_HEAD, strlen(MANIFEST_HEAD)) != 0) {
        return rt_error(err, n, "%s: does not start with \"fusion checkpoint 1\"", path);
    }
    int cap = 0, saw_step = 0, saw_count = 0, line_no = 1;
    char *save = NULL;
    for (char *line = strtok_r(text + strlen(MANIFEST_HEAD), "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        line_no++;
        char *v;
        uint64_t x;
        if (saw_count) {
            return rt_error(err, n, "%s:%d: a line after \"parts\"", path, line_no);
        } else if ((v = after(line, "step")) && !saw_step) {
            if (ckpt_parse_count(v, CKPT_MAX_STEP, &x) != 0 || x == 0) {
                return rt_error(err, n, "%s:%d: step '%s' is not a step number", path, line_no, v);
            }
            m->step = (int64_t)x;
            saw_step = 1;
        } else if ((v = after(line, "part")) && saw_step) {
            char name[CKPT_PART_MAX + 1], size[32], hash[32], extra[2];
            if (sscanf(v, "%256s %31s %31s %1s", name, size, hash, extra) != 3 || strlen(name) >= CKPT_PART_MAX ||
                strchr(name, '/') || name[0] == '.' || ckpt_parse_count(size, (uint64_t)INT64_MAX, &x) != 0) {
                return rt_error(err, n, "%s:%d: not \"part NAME SIZE XXH3\": '%.200s'", path, line_no, line);
            }
            if (ckpt_manifest_find(m, name)) {
                return rt_error(err, n, "%s:%d: part '%s' is listed twice", path, line_no, name);
            }
            if (m->n_parts == cap) {
                cap = cap ? 2 * cap : 8;
                ckpt_part *grown = realloc(m->parts, (size_t)cap * sizeof *grown);
                if (!grown) {
                    return rt_error(err, n, "%s: out of memory", path);
                }
                m->parts = grown;
            }
            ckpt_part *p = &m->parts[m->n_parts];
            snprintf(p->name, sizeof p->name, "%s", name);
            p->size = (int64_t)x;
            if (parse_hex64(hash, &p->xxh3) != 0) {
                return rt_error(err, n, "%s:%d: part '%s': XXH3 '%s' is not 16 lowercase hex digits", path, line_no,
                                name, hash);
            }
            m->n_parts++;
        } else if ((v = after(line, "parts")) && saw_step) {
            if (ckpt_parse_count(v, (uint64_t)INT32_MAX, &x) != 0 || (int64_t)x != m->n_parts || x == 0) {
                return rt_error(err, n, "%s:%d: says %s parts, lists %d", path, line_no, v, m->n_parts);
            }
            saw_count = 1;
        } else {
            return rt_error(err, n, "%s:%d: unexpected line '%.200s'", path, line_no, line);
        }
    }
    if (!saw_count) {
        return rt_error(err, n, "%s: no \"parts N\" line: truncated?", path);
    }
    int64_t own = folder_step(step_dir);
    if (own >= 0 && own != m->step) {
        return rt_error(err, n, "%s: the manifest of step %lld in the folder of step %lld: moved from another step?",
                        path, (long long)m->step, (long long)own);
    }
    return 0;
}

int ckpt_manifest_read(const char *step_dir, ckpt_manifest *m, char *err, size_t n)
{
    memset(m, 0, sizeof *m);
    char path[FU_PATH_BYTES + 304];
    snprintf(path, sizeof path, "%s/" CKPT_MANIFEST, step_dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, n, "%s: %s", path, errno == ENOENT ? "missing: the step's save did not finish" : strerror(errno));
        return errno == ENOENT ? 1 : -1;
    }
    char *text = malloc(MANIFEST_MAX + 1);
    size_t len = text ? fread(text, 1, MANIFEST_MAX + 1, f) : 0;
    int bad = !text || ferror(f);
    fclose(f);
    if (bad || len > MANIFEST_MAX || memchr(text, '\0', len)) {
        snprintf(err, n, "%s: %s", path, bad ? "cannot read it" : "not a manifest (too large, or binary)");
        free(text);
        return -1;
    }
    int rc = parse_manifest(text, len, path, step_dir, m, err, n);
    free(text);
    if (rc)
        ckpt_manifest_free(m);
    return rc;
}

int ckpt_verify_part(const char *step_dir, const ckpt_manifest *m, const char *name, char *err, size_t n)
{
    char path[FU_PATH_BYTES + 304];
    snprintf(path, sizeof path, "%s/%s", step_dir, name);
    const ckpt_part *want = ckpt_manifest_find(m, name);
    if (!want) {
        return rt_error(err, n,
                        "%s: not a part of this checkpoint (%s/" CKPT_MANIFEST " does not list it): from another run?",
                        path, step_dir);
    }
    int64_t size;
    uint64_t hash;
    if (ckpt_measure(path, &size, &hash, err, n) != 0)
        return -1;
    if (size != want->size) {
        return rt_error(err, n, "%s: %lld bytes, the manifest says %lld: truncated or changed", path, (long long)size,
                        (long long)want->size);
    }
    if (hash != want->xxh3) {
        return rt_error(err, n,
                        "%s: its XXH3 is %016" PRIx64 ", the manifest says %016" PRIx64 ": the file is damaged or "
                        "from another device, step or run",
                        path, hash, want->xxh3);
    }
    return 0;
}

int ckpt_set_latest(const char *dir, int64_t step, char *err, size_t n)
{
    char path[FU_PATH_BYTES + 304], tmp[FU_PATH_BYTES + 404], target[64];
    snprintf(path, sizeof path, "%s/" CKPT_LATEST, dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    snprintf(target, sizeof target, "step-%lld", (long long)step);
    unlink(tmp);
    if (symlink(target, tmp) != 0 || rename(tmp, path) != 0) {
        snprintf(err, n, "%s: cannot point it at %s: %s", path, target, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return fsync_dir(dir, err, n);
}

static int newest_first(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

int ckpt_list_steps(const char *dir, int complete_only, int64_t **steps, char *err, size_t n)
{
    *steps = NULL;
    DIR *d = opendir(dir);
    if (!d) {
        return rt_error(err, n, "%s: cannot open the checkpoint folder: %s", dir, strerror(errno));
    }
    int count = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char step_dir[FU_PATH_BYTES + 304], manifest[FU_PATH_BYTES + 404];
        snprintf(step_dir, sizeof step_dir, "%s/%s", dir, e->d_name);
        int64_t s = folder_step(e->d_name);
        struct stat st;
        if (s < 0 || stat(step_dir, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        snprintf(manifest, sizeof manifest, "%s/" CKPT_MANIFEST, step_dir);
        if (complete_only && access(manifest, F_OK) != 0)
            continue;
        if (count == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *grown = realloc(*steps, (size_t)cap * sizeof *grown);
            if (!grown) {
                closedir(d);
                free(*steps);
                *steps = NULL;
                return rt_error(err, n, "%s: out of memory listing it", dir);
            }
            *steps = grown;
        }
        (*steps)[count++] = s;
    }
    closedir(d);
    if (count > 1)
        qsort(*steps, (size_t)count, sizeof **steps, newest_first);
    return count;
}

int ckpt_remove_step(const char *step_dir, char *err, size_t n)
{
    char path[FU_PATH_BYTES + 304];
    snprintf(path, sizeof path, "%s/" CKPT_MANIFEST, step_dir);
    if (unlink(path) != 0 && errno != ENOENT) {
        return rt_error(err, n, "%s: cannot remove it: %s", path, strerror(errno));
    }
    DIR *d = opendir(step_dir);
    if (!d)
        return errno == ENOENT ? 0 : (snprintf(err, n, "%s: %s", step_dir, strerror(errno)), -1);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", step_dir, e->d_name);
        if (unlink(path) != 0 && errno != ENOENT) {
            snprintf(err, n, "%s: cannot remove it: %s", path, strerror(errno));
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    if (rmdir(step_dir) != 0 && errno != ENOENT && errno != ENOTEMPTY) { /* ENOTEMPTY: another remover */
        return rt_error(err, n, "%s: cannot remove it: %s", step_dir, strerror(errno));
    }
    return 0;
}

int ckpt_prune(const char *dir, int keep, char *err, size_t n)
{
    int64_t *steps;
    int count = ckpt_list_steps(dir, 1, &steps, err, n), removed = 0;
    if (count < 0)
        return -1;
    for (int i = keep < 1 ? 1 : keep; i < count; i++) {
        char step_dir[FU_PATH_BYTES + 304];
        ckpt_step_dir(dir, steps[i], step_dir, sizeof step_dir);
        if (ckpt_remove_step(step_dir, err, n) != 0) {
            free(steps);
            return -1;
        }
        removed++;
    }
    free(steps);
    return removed;
}

/* Temporary files in folder. */
static int remove_temporaries(const char *folder, char *err, size_t n)
{
    DIR *d = opendir(folder);
    if (!d)
        return errno == ENOENT ? 0 : (snprintf(err, n, "%s: %s", folder, strerror(errno)), -1);
    int removed = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[FU_PATH_BYTES + 304];
        if (!is_temporary_name(e->d_name))
            continue;
        snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
        if (unlink(path) == 0)
            removed++;
        else if (errno != ENOENT) {
            snprintf(err, n, "%s: cannot remove it: %s", path, strerror(errno));
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    return removed;
}

int ckpt_remove_litter(const char *dir, char *err, size_t n)
{
    int64_t *steps;
    int count = ckpt_list_steps(dir, 0, &steps, err, n);
    if (count < 0)
        return errno == ENOENT ? 0 : -1;
    int removed = remove_temporaries(dir, err, n);
    for (int i = 0; i < count && removed >= 0; i++) {
        char step_dir[FU_PATH_BYTES + 304], manifest[FU_PATH_BYTES + 404];
        ckpt_step_dir(dir, steps[i], step_dir, sizeof step_dir);
        snprintf(manifest, sizeof manifest, "%s/" CKPT_MANIFEST, step_dir);
        if (access(manifest, F_OK) == 0) {
            int r = remove_temporaries(step_dir, err, n);
            removed = r < 0 ? -1 : removed + r;
        } else {
            removed = ckpt_remove_step(step_dir, err, n) != 0 ? -1 : removed + 1;
        }
    }
    free(steps);
    return removed;
}
