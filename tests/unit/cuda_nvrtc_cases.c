/* test_cuda_kernels_nvrtc: every kernel of the emulation harness's cases
 * (cuda_cases.c: every op, forward and backward, in f32, bf16 and fp16,
 * and the fused chains) compiled by NVRTC as the code generator compiles a
 * device's module: CUBIN for sm_80 and sm_90, PTX for compute_80
 * (codegen/nvrtc.c, through its cache).  The harness runs this very source
 * on the CPU; here it must also be CUDA that NVRTC takes, with
 * cuda_bf16.h and cuda_fp16.h, and every kernel must be an entry of the
 * PTX.  Needs the CUDA toolkit (NVRTC): without it the test FAILS, saying
 * what is missing.  Prints the counts; exits 1 on any failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../codegen/cuda_kernels.h"
#include "../../codegen/nvrtc.h"
#include "cuda_cases.h"

int main(void)
{
    cuda_case *cases = NULL;
    cuda_chain *chains = NULL;
    int n = 0, n_chains = 0, failed = 0;
    cuda_plan plan;
    cuda_plan_init(&plan);
    struct diag err;
    memset(&err, 0, sizeof err);
    char why[600];
    if (cuda_cases_plan(&plan, &cases, &n, &chains, &n_chains, NULL, why, sizeof why)) {
        printf("FAIL plan: %s\n", why);
        return 1;
    }
    nvrtc_images im;
    /* Turing, Ampere (data centre and consumer), Ada, Hopper: every kernel on each */
    static const int sms[] = { 75, 80, 86, 89, 90 };
    if (nvrtc_compile(plan.source, "cuda_cases", sms, 5, &im, &err)) {
        printf("FAIL: NVRTC: %s\n", err.msg);
        return 1;
    }
    int half = 0;
    for (int32_t k = 0; k < plan.n_kernels; k++) {
        char entry[160];
        snprintf(entry, sizeof entry, ".entry %s(", plan.names[k]);
        if (!strstr(im.ptx, entry)) {
            printf("FAIL: kernel %s is not in the PTX\n", plan.names[k]);
            failed++;
        }
    }
    for (const char *at = plan.source; (at = strstr(at, "\nextern \"C\" __global__")) != NULL; at++) {
        const char *end = strstr(at + 1, "\nextern \"C\" __global__");
        const char *b = strstr(at, "__nv_bfloat16 *"), *h = strstr(at, "__half *");
        half += (b && (!end || b < end)) || (h && (!end || h < end));
    }
    char sizes[300] = "";
    for (int k = 0; k < im.n_cubins; k++) {
        snprintf(sizes + strlen(sizes), sizeof sizes - strlen(sizes), "%ssm_%d (%zu bytes)", k ? ", " : "", im.sm[k],
                 im.cubin_bytes[k]);
        if (im.cubin_bytes[k] == 0) {
            printf("FAIL: an empty CUBIN for sm_%d\n", im.sm[k]);
            failed++;
        }
    }
    if (im.n_cubins != 5 || im.ptx_sm != 90) {
        printf("FAIL: %d CUBINs and compute_%d PTX, expected 5 and compute_90\n", im.n_cubins, im.ptx_sm);
        failed++;
    }
    printf("%d cases and %d chains: %d kernels (%d of them on bf16 or fp16 tensors), compiled for %s and compute_%d "
           "(%zu bytes of PTX)%s\n",
           n, n_chains, plan.n_kernels, half, sizes, im.ptx_sm, im.ptx_bytes, im.from_cache ? ", from the cache" : "");
    printf("%s\n", failed ? "FAILED" : "ok");
    nvrtc_images_free(&im);
    cuda_plan_free(&plan);
    free(chains);
    free(cases);
    return failed ? 1 : 0;
}
