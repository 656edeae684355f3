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
    char dir[FU_PATH_BYTES], files[NVRTC_MAX_ARCHS + 1][FU_PATH_BYTES + 104], fat[FU_PATH_BYTES + 104],
        tool[FU_PATH_BYTES], images[NVRTC_MAX_ARCHS + 1][FU_PATH_BYTES + 204], create[FU_PATH_BYTES + 204];
    snprintf(dir, sizeof dir, "%s/fusion-fatbin-XXXXXX", tmp_root && *tmp_root ? tmp_root : "/tmp");
    if (!mkdtemp(dir))
        return diag_set(err, module_name, 0, "cannot make a temporary folder for fatbinary: %s", strerror(errno));
    int n = im->n_cubins, rc = 0;
    for (int k = 0; k <= n && rc == 0; k++) { /* the CUBINs, then the PTX (without its NUL) */
        snprintf(files[k], sizeof files[k], k < n ? "%s/sm_%d.cubin" : "%s/compute_%d.ptx", dir,
                 k < n ? im->sm[k] : im->ptx_sm);
        snprintf(images[k], sizeof images[k], "--image3=kind=%s,sm=%d,file=%.4200s", k < n ? "elf" : "ptx",
                 k < n ? im->sm[k] : im->ptx_sm, files[k]);
        if (k < n ? write_whole(files[k], im->cubin[k], im->cubin_bytes[k])
                  : write_whole(files[k], im->ptx, im->ptx_bytes - 1))
            rc = diag_set(err, dir, 0, "cannot write the images for fatbinary: %s", strerror(errno));
    }
    snprintf(fat, sizeof fat, "%s/module.fatbin", dir);
    if (rc == 0) {
        find_fatbinary(tool, sizeof tool);
        snprintf(create, sizeof create, "--create=%s", fat);
        char *argv[NVRTC_MAX_ARCHS + 6];
        int a = 0;
        argv[a++] = tool, argv[a++] = "--64", argv[a++] = "--compress=false", argv[a++] = create;
        for (int k = 0; k <= n; k++)
            argv[a++] = images[k];
        argv[a] = NULL;
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
    for (int k = 0; k <= n; k++)
        unlink(files[k]);
    unlink(fat), rmdir(dir);
    return rc;
}
