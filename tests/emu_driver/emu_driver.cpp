/* emu_driver.cpp: a stand-in for libcuda.so.1 and libcublas.so that runs a
 * CUDA bundle's own kernels on the CPU, so that a CUDA device's whole
 * program (runtime/cuda/cuda.c: module loading, the arena copies, launches,
 * cuBLAS calls, the status word, communication on the host) runs end to
 * end on a machine without a GPU (tests/test_cuda_emulated_training.sh).
 *
 * Built by the test for one bundle: the bundle's kernels.cu, compiled as
 * C++ against tests/unit/cuda_emu.h (blocks in turn, each block's threads
 * as fibers up to each __syncthreads), with a table of its kernels by name
 * (emu_kernels) that cuModuleGetFunction looks them up in.  Device memory
 * is host memory: a device pointer is the address malloc returned, so the
 * kernels' fusion_args need no translation.  Every call is synchronous, in
 * order: streams are one queue, so this checks what is copied and when
 * against what the kernels read, not the overlap of copies and kernels.
 *
 * What it checks on its own: the module is a fat binary (the magic), every
 * kernel asked for exists, launches stay within a GPU's limits, a copy or
 * launch names memory that was allocated (a device pointer outside every
 * allocation fails the call), and cuBLAS arguments are ones cuBLAS takes.
 * Each failure returns an error code, as the driver would, and says why on
 * stderr.
 *
 * FUSION_EMU_COUNTS=FILE: at exit, append one line, the calls made:
 * "launches N gemms N htod N BYTES dtoh N BYTES".
 */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "cuda_emu.h"

extern "C" const cuda_emu_kernel emu_kernels[];
extern "C" const int emu_n_kernels;

namespace {

const int kInvalidValue = 1, kOutOfMemory = 2, kNotFound = 500, kInvalidImage = 200;

std::map<uintptr_t, size_t> allocations;   /* device memory: start -> bytes */
struct counts_t {
    long long launches = 0, gemms = 0, htod = 0, htod_bytes = 0, dtoh = 0, dtoh_bytes = 0;
} counts;

/* Is [p, p + bytes) inside one allocation? */
bool owned(uintptr_t p, size_t bytes)
{
    auto it = allocations.upper_bound(p);
    if (it == allocations.begin())
        return false;
    --it;
    return p >= it->first && p + bytes <= it->first + it->second;
}

int refuse(const char *what)
{
    fprintf(stderr, "emulated CUDA driver: %s\n", what);
    return kInvalidValue;
}

struct counts_writer {
    ~counts_writer()
    {
        const char *path = getenv("FUSION_EMU_COUNTS");
        if (!path || !*path)
            return;
        if (FILE *f = fopen(path, "a")) {
            fprintf(f, "launches %lld gemms %lld htod %lld %lld dtoh %lld %lld\n", counts.launches, counts.gemms,
                    counts.htod, counts.htod_bytes, counts.dtoh, counts.dtoh_bytes);
            fclose(f);
        }
    }
} writer;

}   // namespace

extern "C" {

typedef unsigned long long CUdeviceptr;

int cuInit(unsigned) { return 0; }
int cuDeviceGet(int *device, int ordinal)
{
    *device = ordinal;
    return ordinal == 0 ? 0 : kInvalidValue;
}
int cuDeviceGetAttribute(int *value, int attribute, int)
{
    *value = attribute == 75 ? 8 : attribute == 76 ? 0 : 0;   /* compute capability 8.0 */
    return 0;
}
int cuDevicePrimaryCtxRetain(void **ctx, int)
{
    static int context;
    *ctx = &context;
    return 0;
}
int cuDevicePrimaryCtxRelease_v2(int) { return 0; }
int cuCtxSetCurrent(void *) { return 0; }

int cuModuleLoadData(void **module, const void *image)
{
    uint32_t magic;
    memcpy(&magic, image, sizeof magic);
    if (magic != 0xBA55ED50u)
        return fprintf(stderr, "emulated CUDA driver: the module is not a fat binary\n"), kInvalidImage;
    static int the_module;
    *module = &the_module;
    return 0;
}
int cuModuleUnload(void *) { return 0; }
int cuModuleGetFunction(const cuda_emu_kernel **function, void *, const char *name)
{
    for (int k = 0; k < emu_n_kernels; k++)
        if (strcmp(emu_kernels[k].name, name) == 0) {
            *function = &emu_kernels[k];
            return 0;
        }
    fprintf(stderr, "emulated CUDA driver: no kernel named %s in the module\n", name);
    return kNotFound;
}

int cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
    void *q = malloc(bytes ? bytes : 1);
    if (!q)
        return kOutOfMemory;
    memset(q, 0xA5, bytes);   /* not zeros: a read before a write shows */
    allocations[(uintptr_t)q] = bytes;
    *p = (CUdeviceptr)(uintptr_t)q;
    return 0;
}
int cuMemFree_v2(CUdeviceptr p)
{
    auto it = allocations.find((uintptr_t)p);
    if (it == allocations.end())
        return refuse("cuMemFree of memory not allocated");
    free((void *)(uintptr_t)p);
    allocations.erase(it);
    return 0;
}
int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, void *)
{
    if (!owned((uintptr_t)dst, bytes))
        return refuse("cuMemcpyHtoD to device memory not allocated");
    memcpy((void *)(uintptr_t)dst, src, bytes);
    counts.htod++, counts.htod_bytes += (long long)bytes;
    return 0;
}
int cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, void *)
{
    if (!owned((uintptr_t)src, bytes))
        return refuse("cuMemcpyDtoH from device memory not allocated");
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    counts.dtoh++, counts.dtoh_bytes += (long long)bytes;
    return 0;
}
int cuStreamCreate(void **stream, unsigned)
{
    static int the_stream;
    *stream = &the_stream;
    return 0;
}
int cuStreamSynchronize(void *) { return 0; }
int cuStreamDestroy_v2(void *) { return 0; }
int cuMemHostRegister_v2(void *, size_t, unsigned) { return 0; }
int cuMemHostUnregister(void *) { return 0; }
int cuGetErrorString(int error, const char **text)
{
    *text = error == kInvalidValue ? "invalid argument (emulated)" : error == kNotFound ? "named symbol not found (emulated)"
          : error == kInvalidImage ? "invalid image (emulated)" : error == kOutOfMemory ? "out of memory (emulated)"
                                   : "error (emulated)";
    return 0;
}

int cuLaunchKernel(const cuda_emu_kernel *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *, void **params, void **extra)
{
    if (!f || !params || extra)
        return refuse("cuLaunchKernel without a function or parameters");
    if ((unsigned long long)bx * by * bz > 1024 || shared > 48 * 1024 || gx < 1 || gy < 1 || gz < 1)
        return refuse("a launch no GPU takes (block, grid or shared memory size)");
    /* One parameter, the kernel's fusion_args: RT_CUDA_MAX_ARGS pointers, then the step. */
    const CUdeviceptr *args = (const CUdeviceptr *)params[0];
    for (int k = 0; k < 8; k++)
        if (args[k] && !owned((uintptr_t)args[k], 1))
            return refuse("a kernel argument points outside device memory");
    cuda_emu_launch(f, dim3{ gx, gy, gz }, dim3{ bx, by, bz }, shared, params[0]);
    counts.launches++;
    return 0;
}

/* ---- cuBLAS -------------------------------------------------------------------- */

int cublasCreate_v2(void **handle)
{
    static int the_handle;
    *handle = &the_handle;
    return 0;
}
int cublasDestroy_v2(void *) { return 0; }
int cublasSetStream_v2(void *, void *) { return 0; }

/* Column-major C = alpha op(A) op(B) + beta C per batch entry, in double. */
int cublasSgemmStridedBatched(void *, int ta, int tb, int m, int n, int k, const float *alpha, const float *A,
                              int lda, long long sa, const float *B, int ldb, long long sb, const float *beta, float *C,
                              int ldc, long long sc, int batch)
{
    if (m < 0 || n < 0 || k < 0 || batch < 1 || lda < (ta ? k : m) || lda < 1 || ldb < (tb ? n : k) || ldb < 1 ||
        ldc < m || ldc < 1)
        return 7;   /* CUBLAS_STATUS_INVALID_VALUE */
    if (!owned((uintptr_t)C, 4) || !owned((uintptr_t)A, 4) || !owned((uintptr_t)B, 4))
        return 7;
    for (int b = 0; b < batch; b++) {
        const float *Ab = A + b * sa, *Bb = B + b * sb;
        float *Cb = C + b * sc;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double acc = 0;
                for (int l = 0; l < k; l++)
                    acc += (double)(ta ? Ab[l + (long long)i * lda] : Ab[i + (long long)l * lda]) *
                           (double)(tb ? Bb[j + (long long)l * ldb] : Bb[l + (long long)j * ldb]);
                float *c = &Cb[i + (long long)j * ldc];
                *c = *beta == 0.0f ? (float)(*alpha * acc) : (float)(*alpha * acc + (double)*beta * *c);
            }
    }
    counts.gemms++;
    return 0;
}

}   // extern "C"
