/* test_cuda_module_arch: which GPUs a bundle's kernels run on
 * (rt_cuda_module_runs_on, runtime/cuda/cuda_program.h): a CUBIN runs on
 * its major version at its minor or above, PTX on its capability and
 * newer (the driver compiles it); a GPU neither covers is refused at start. */
#include <string.h>

#include "check.h"
#include "cuda/cuda_program.h"

static rt_cuda_module_info module(const int *sms, int n, int ptx)
{
    rt_cuda_module_info m;
    memset(&m, 0, sizeof m);
    m.n_cubins = n;
    for (int k = 0; k < n; k++)
        m.cubin_sm[k] = sms[k];
    m.ptx_sm = ptx;
    return m;
}

static void test_cuda_module_runs_where_its_images_do(void)
{
    const int a100[] = { 80 };
    rt_cuda_module_info m = module(a100, 1, 80);
    CHECK(rt_cuda_module_runs_on(&m, 8, 0));
    CHECK(rt_cuda_module_runs_on(&m, 8, 6));  /* sm_80's CUBIN on an RTX 3090 */
    CHECK(rt_cuda_module_runs_on(&m, 9, 0));  /* compute_80 PTX on an H100 */
    CHECK(!rt_cuda_module_runs_on(&m, 7, 5)); /* a Turing card: nothing for it */
    const int consumer[] = { 75, 86 };
    m = module(consumer, 2, 86);
    CHECK(rt_cuda_module_runs_on(&m, 7, 5));
    CHECK(rt_cuda_module_runs_on(&m, 8, 9));  /* sm_86's CUBIN on Ada */
    CHECK(!rt_cuda_module_runs_on(&m, 8, 0)); /* sm_86 code is not for 8.0, and the PTX is compute_86 */
    CHECK(!rt_cuda_module_runs_on(&m, 7, 0)); /* a V100 */
    const int hopper[] = { 90 };
    m = module(hopper, 1, 90);
    CHECK(rt_cuda_module_runs_on(&m, 12, 0)); /* a newer GPU: the driver compiles the PTX */
}

int main(void)
{
    test_cuda_module_runs_where_its_images_do();
    CHECK_DONE();
}
