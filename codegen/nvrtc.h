/* nvrtc.h: CUDA C source -> a CUBIN for each GPU architecture asked for
 * (the cluster's: sm_75, sm_80, sm_86, sm_89, sm_90, ...) and PTX for the
 * newest of them, with NVRTC, through an on-disk cache.
 *
 * NVRTC is loaded with dlopen when a CUDA device is first compiled, not
 * linked: fusionc builds and compiles CPU clusters on machines without the
 * CUDA toolkit, and says plainly what is missing only when a cluster needs
 * it.  Where it looks, in order: $FUSION_NVRTC (a library path),
 * $CUDA_HOME/lib64, the toolkit fusion was built beside (FUSION_CUDA_HOME),
 * /usr/local/cuda/lib64, then the loader's own search (libnvrtc.so).
 *
 * The cache: DIR/<XXH3-128 of source, options and NVRTC version>.fkm, one
 * file holding the images, written under a temporary name and
 * renamed; DIR is $FUSION_CACHE_DIR, else $XDG_CACHE_HOME/fusion, else
 * ~/.cache/fusion.  FUSION_CACHE_DIR=off disables it.  A cache file that
 * does not read back whole is ignored and rewritten.
 */
#ifndef FUSION_NVRTC_H
#define FUSION_NVRTC_H

#include <stddef.h>

#include "../ir/diag.h"

#define NVRTC_MAX_ARCHS  8
#define NVRTC_DEFAULT_SM 80 /* a device whose arch the cluster file leaves out */

typedef struct {
    int n_cubins;
    int sm[NVRTC_MAX_ARCHS]; /* 75, 80, 86, ...: cubin[k] is for sm_<sm[k]>, ascending */
    unsigned char *cubin[NVRTC_MAX_ARCHS];
    size_t cubin_bytes[NVRTC_MAX_ARCHS];
    int ptx_sm;       /* the PTX is compute_<ptx_sm>: the newest arch asked for */
    char *ptx;        /* NUL-terminated                                           */
    size_t ptx_bytes; /* with its NUL */
    int from_cache;
} nvrtc_images;

/* Compile source (a whole module) to a CUBIN for each of sms[0..n) (SM
 * numbers, distinct, at most NVRTC_MAX_ARCHS) and PTX for the largest.  0,
 * or -1 with err naming what failed (NVRTC not found, or the compiler's
 * log). */
int nvrtc_compile(const char *source, const char *module_name, const int *sms, int n_sms, nvrtc_images *out,
                  struct diag *err);
void nvrtc_images_free(nvrtc_images *im);

/* The SM numbers the loaded NVRTC can compile for (nvrtcGetSupportedArchs),
 * ascending, into sms[0..max); how many, or -1 with err (NVRTC not found). */
int nvrtc_supported_sms(int *sms, int max, struct diag *err);

/* "13.0" when NVRTC loads; NULL (why in err) otherwise. */
const char *nvrtc_version_string(struct diag *err);

#endif
