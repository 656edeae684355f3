/* fatbin.c: see fatbin.h. */
#define _GNU_SOURCE
#include "fatbin.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "process.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

#ifndef FUSION_CUDA_HOME
#define FUSION_CUDA_HOME "/usr/local/cuda"
#endif

/* The first fatbinary that exists, else the bare name (PATH). */
static void find_fatbinary(char *path, size_t len)
{
    const char *env = getenv("FUSION_FATBINARY"), *home = getenv("CUDA_HOME");
    char candidates[4][FU_PATH_BYTES];
    int n = 0;
    if (env && *env)
        snprintf(candidates[n++], sizeof candidates[0], "%s", env);
    if (home && *home)
        snprintf(candidates[n++], sizeof candidates[0], "%s/bin/fatbinary", home);
    snprintf(candidates[n++], sizeof candidates[0], "%s/bin/fatbinary", FUSION_CUDA_HOME);
    snprintf(candidates[n++], sizeof candidates[0], "/usr/local/cuda/bin/fatbinary");
    for (int i = 0; i < n; i++)
        if (access(candidates[i], X_OK) == 0) {
            size_t n = strnlen(candidates[i], len - 1);
            memcpy(path, candidates[i], n);
            path[n] = '\0';
            return;
        }
    snprintf(path, len, "fatbinary");
}

static int write_whole(const char *path, const void *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(bytes, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int read_whole(const char *path, unsigned char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0 || st.st_size <= 0) {
        if (f)
            fclose(f);
        return -1;
    }
    unsigned char *bytes = malloc((size_t)st.st_size);
    int ok = bytes && fread(bytes, 1, (size_t)st.st_size, f) == (size_t)st.st_size;
    fclose(f);
    if (!ok) {
        free(bytes);
        return -1;
    }
    *out = bytes;
    *len = (size_t)st.st_size;
    return 0;
}

int fatbin_pack(const nvrtc_images *im, const char *module_name, unsigned char **out, size_t *out_bytes,
                struct diag *err)
{
    const char *tmp_root = getenv("TMPDIR");
    char dir[FU_PATH_BYTES], sm80[FU_PATH_BYTES + 104], sm90[FU_PATH_BYTES + 104], ptx[FU_PATH_BYTES + 104],
        fat[FU_PATH_BYTES + 104], tool[FU_PATH_BYTES];
    snprintf(dir, sizeof dir, "%s/fusion-fatbin-XXXXXX", tmp_root && *tmp_root ? tmp_root : "/tmp");
    if (!mkdtemp(dir))
        return diag_set(err, module_name, 0, "cannot make a temporary folder for fatbinary: %s", strerror(errno));
    snprintf(sm80, sizeof sm80, "%s/sm_80.cubin", dir);
    snprintf(sm90, sizeof sm90, "%s/sm_90.cubin", dir);
    snprintf(ptx, sizeof ptx, "%s/compute_80.ptx", dir);
    snprintf(fat, sizeof fat, "%s/module.fatbin", dir);
    int rc = 0;
    if (write_whole(sm80, im->cubin_sm80, im->cubin_sm80_bytes) ||
        write_whole(sm90, im->cubin_sm90, im->cubin_sm90_bytes) ||
        write_whole(ptx, im->ptx, im->ptx_bytes - 1)) /* without its NUL */
        rc = diag_set(err, dir, 0, "cannot write the images for fatbinary: %s", strerror(errno));
    if (rc == 0) {
        find_fatbinary(tool, sizeof tool);
        char create[FU_PATH_BYTES + 204], image80[FU_PATH_BYTES + 204], image90[FU_PATH_BYTES + 204],
            image_ptx[FU_PATH_BYTES + 204];
        snprintf(create, sizeof create, "--create=%s", fat);
        snprintf(image80, sizeof image80, "--image3=kind=elf,sm=80,file=%s", sm80);
        snprintf(image90, sizeof image90, "--image3=kind=elf,sm=90,file=%s", sm90);
        snprintf(image_ptx, sizeof image_ptx, "--image3=kind=ptx,sm=80,file=%s", ptx);
        char *argv[] = { tool, "--64", "--compress=false", create, image80, image90, image_ptx, NULL };
        struct diag why;
        if (run_command(argv, &why, module_name))
            rc = diag_set(err, module_name, 0,
                          "packing the CUDA images with %s: %s (the CUDA toolkit's fatbinary is "
                          "needed: set CUDA_HOME or FUSION_FATBINARY)",
                          tool, why.msg);
    }
    if (rc == 0 && read_whole(fat, out, out_bytes))
        rc = diag_set(err, fat, 0, "fatbinary wrote no fat binary");
    uint32_t magic = 0;
    if (rc == 0)
        memcpy(&magic, *out, sizeof magic);
    if (rc == 0 && (*out_bytes < 16 || magic != FATBIN_MAGIC)) {
        free(*out);
        *out = NULL;
        rc = diag_set(err, fat, 0, "fatbinary's output does not start with the fat binary magic 0x%08x", FATBIN_MAGIC);
    }
    unlink(sm80), unlink(sm90), unlink(ptx), unlink(fat), rmdir(dir);
    return rc;
}
