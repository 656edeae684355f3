/* device_program.h: a device program as runtime/main.c holds it (the
 * blobs of program.h copied out, the arena, the CUDA backend), for the
 * files of the training loop that need it (checkpoint.c). */
#ifndef FUSION_RT_DEVICE_PROGRAM_H
#define FUSION_RT_DEVICE_PROGRAM_H

#include "comm/diloco.h"
#include "cuda/cuda.h"
#include "program.h"
#include "../ir/ir.h" /* ROLE_PARAM */

typedef struct {
    rt_manifest manifest;
    rt_tensor_info *tensors;
    char *arena;
    rt_tensor *stash;        /* [n_stash] what a backward reads of its forward */
    int32_t *placement;      /* [n_stages * n_replicas] */
    rt_peer *peers;          /* [n_peers] */
    rt_link *links;          /* [n_links] */
    rt_diloco_param *diloco; /* [manifest.diloco.n_params]: --sync diloco's table */
    rt_cuda *cuda;           /* a CUDA device's backend; NULL on a CPU device */
} program;

/* How many of p's parameters are frozen (a fine-tune's base). */
static inline int32_t program_frozen_count(const program *p)
{
    int32_t n = 0;
    for (int32_t i = 0; i < p->manifest.n_tensors; i++)
        n += p->tensors[i].role == ROLE_PARAM && p->tensors[i].frozen;
    return n;
}

/* "fusion: error: <fmt>" on standard error; returns 1 (main.c). */
int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
