/* running_stats.c: batch norm's running statistics averaged over a
 * stage's replicas (running_stats.h). */
#include "running_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The message id of the average: no op's tensor id is negative, -1 is the
 * step's loss (stepper.c). */
#define RUNNING_STATS_TAG (-2)

int running_stats_mean_over_replicas(program *p, rt_comm *comm, rt_context *ctx)
{
    const rt_manifest *mf = &p->manifest;
    int64_t n = 0;
    for (int32_t i = 0; i < mf->n_tensors; i++)
        n += p->tensors[i].running ? rt_tensor_numel(&p->tensors[i].t) : 0;
    if (mf->n_replicas < 2 || n == 0)
        return 0;
    if (!comm) {
        snprintf(ctx->msg, sizeof ctx->msg, "batch norm's running statistics: no links to the other replicas");
        return -1;
    }
    char why[512];
    if (p->cuda && rt_cuda_pull_state(p->cuda, p->arena, why, sizeof why)) { /* they live on the device */
        snprintf(ctx->msg, sizeof ctx->msg, "batch norm's running statistics: %.400s", why);
        return -1;
    }
    float *all = malloc((size_t)n * sizeof *all);
    if (!all) {
        snprintf(ctx->msg, sizeof ctx->msg, "out of memory for batch norm's running statistics");
        return -1;
    }
    /* One message round for all of them, in tensor order (the same on every replica). */
    int64_t at = 0;
    for (int32_t i = 0; i < mf->n_tensors; i++)
        if (p->tensors[i].running) {
            int64_t k = rt_tensor_numel(&p->tensors[i].t);
            memcpy(all + at, p->arena + p->tensors[i].t.offset, (size_t)k * sizeof *all);
            at += k;
        }
    int rc = rt_comm_mean_over_replicas(comm, all, n, RUNNING_STATS_TAG, ctx);
    at = 0;
    for (int32_t i = 0; i < mf->n_tensors && rc == 0; i++)
        if (p->tensors[i].running) {
            int64_t k = rt_tensor_numel(&p->tensors[i].t);
            memcpy(p->arena + p->tensors[i].t.offset, all + at, (size_t)k * sizeof *all);
            at += k;
        }
    free(all);
    if (rc == 0 && p->cuda)
        rt_cuda_host_wrote(p->cuda);
    return rc;
}
