/* safetensors_test_files.h: files by hand for the safetensors tests
 * (test_safetensors.c, test_safetensors_half.c): a scratch folder, raw
 * bytes in and out, a header with counting data after it.  Include it
 * after check.h. */
#ifndef FUSION_SAFETENSORS_TEST_FILES_H
#define FUSION_SAFETENSORS_TEST_FILES_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[1024]; /* short enough that dir/name fits PATH_MAX */

/* dir/name, in one of a few rotating buffers. */
static const char *in_dir(const char *name)
{
    static char buf[4][PATH_MAX];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, PATH_MAX, "%s/%s", dir, name);
    return p;
}

static void write_bytes(const char *path, const void *bytes, size_t n)
{
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(bytes, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* A safetensors file by hand: the header JSON as given (no padding), then
 * data_len bytes 0, 1, 2, ... */
static void write_raw(const char *path, const char *header, size_t data_len)
{
    size_t n = strlen(header);
    unsigned char *buf = malloc(8 + n + data_len);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, n);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + n + i] = (unsigned char)i;
    write_bytes(path, buf, 8 + n + data_len);
    free(buf);
}

static unsigned char *read_bytes(const char *path, size_t *n)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)size + 1);
    *n = fread(buf, 1, (size_t)size, fp);
    fclose(fp);
    return buf;
}

/* The file at path holds exactly the n bytes `expected` (check.h's
 * CHECK_INT says where the first difference is). */
static void check_file_bytes(const char *path, const char *expected, size_t n_expected)
{
    size_t n = 0;
    unsigned char *bytes = read_bytes(path, &n);
    CHECK_INT(n_expected, n);
    for (size_t i = 0; bytes && i < n && i < n_expected; i++)
        if (bytes[i] != (unsigned char)expected[i]) {
            CHECK_INT((unsigned char)expected[i], bytes[i]);
            fprintf(stderr, "  first difference at byte %zu\n", i);
            break;
        }
    free(bytes);
}

/* dir = a new folder $TMPDIR/NAME-XXXXXX; 0, or -1 (printed). */
static int scratch_dir_make(const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    if (mkdtemp(dir))
        return 0;
    perror("mkdtemp");
    return -1;
}

static void scratch_dir_remove(void)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

#endif
