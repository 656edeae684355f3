/* fatbin.h: the images of a CUDA module (nvrtc.h: a CUBIN an arch, PTX) packed into one
 * fat binary by the toolkit's `fatbinary`, the container nvcc embeds in an
 * executable's .nv_fatbin section: cuobjdump lists what is inside it, and
 * the driver's cuModuleLoadData takes it whole, choosing the CUBIN built
 * for the device's architecture, else compiling the PTX.
 *
 * Where fatbinary is looked for, in order: $FUSION_FATBINARY, $CUDA_HOME/bin,
 * the toolkit fusion was built beside (FUSION_CUDA_HOME), /usr/local/cuda/bin,
 * then PATH.  Uncompressed (--compress=false), so the images can be read
 * back from the bundle without the toolkit (tests/cuda_cubins.py).
 *
 * Layout (as fatbinary 13 writes it; cuda_cubins.py reads it): a 16-byte
 * header (u32 magic 0xBA55ED50, u16 version, u16 header size, u64 bytes
 * after it), then one entry an image: u16 kind (1 PTX, 2 ELF), u16
 * version, u32 entry header size, u64 padded payload size, ..., u32 SM at
 * byte 28; the payload follows the entry header. */
#ifndef FUSION_FATBIN_H
#define FUSION_FATBIN_H

#include <stddef.h>

#include "../ir/diag.h"
#include "nvrtc.h"

#define FATBIN_MAGIC 0xBA55ED50u

/* Pack im's CUBINs and its PTX; *out is malloc'd.
 * 0, or -1 with err saying what failed (fatbinary not found, or its
 * failure, naming `module_name`). */
int fatbin_pack(const nvrtc_images *im, const char *module_name, unsigned char **out, size_t *out_bytes,
                struct diag *err);

#endif
