/* nvrtc.h: CUDA C source -> CUBIN for sm_80 and sm_90, and PTX for
 * compute_80, with NVRTC, through an on-disk cache.
 *
 * NVRTC is loaded with dlopen when a CUDA device is first compiled, not
 * linked: fusionc builds and compiles CPU clusters on machines without the
 * CUDA toolkit, and says plainly what is missing only when a cluster needs
 * it.  Where it looks, in order: $FUSION_NVRTC (a library path),
 * $CUDA_HOME/lib64, the toolkit fusion was built beside (FUSION_CUDA_HOME),
 * /usr/local/cuda/lib64, then the loader's own search (libnvrtc.so).
 *
 * The cache: DIR/<XXH3-128 of source, options and NVRTC version>.fkm, one
 * file holding the three images, written under a temporary name and
 * renamed; DIR is $FUSION_CACHE_DIR, else $XDG_CACHE_HOME/fusion, else
 * ~/.cache/fusion.  FUSION_CACHE_DIR=off disables it.  A cache file that
 * does not read back whole is ignored and rewritten.
 */
#ifndef FUSION_NVRTC_H
#define FUSION_NVRTC_H

#include <stddef.h>

#include "../ir/diag.h"

typedef struct {
    unsigned char *cubin_sm80, *cubin_sm90;
    char *ptx;                                            /* NUL-terminated                     */
    size_t cubin_sm80_bytes, cubin_sm90_bytes, ptx_bytes; /* ptx: with its NUL */
    int from_cache;
} nvrtc_images;

/* Compile source (a whole module) to the three images.  0, or -1 with err
 * naming what failed (NVRTC not found, or the compiler's log). */
int nvrtc_compile(const char *source, const char *module_name, nvrtc_images *out, struct diag *err);
void nvrtc_images_free(nvrtc_images *im);

/* "13.0" when NVRTC loads; NULL (why in err) otherwise. */
const char *nvrtc_version_string(struct diag *err);

#endif
