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
 * kernels' fusion_args need no translation.
 *
 * Streams are real queues, and lazy: every stream is a FIFO of deferred
 * operations (copies, launches, products, event records, waits), and
 * nothing runs when it is enqueued.  A stream runs its queue only as far as
 * the host demands: cuStreamSynchronize (all of it), cuEventSynchronize or
 * cuEventQuery (up to the event's record), a cross-stream wait reached in
 * another stream's queue (cuStreamWaitEvent: the waited-for stream runs up
 * to the record first), a free or an unregister (everything).  So a missing
 * wait shows: a kernel that is not ordered after the copy it reads runs
 * before it and reads stale memory; a host read of a page-locked buffer
 * before the event that guards it sees the old bytes; a host write to a
 * page-locked buffer a queued copy still reads changes what it copies.  As
 * on a GPU, a copy from pageable host memory (not cuMemHostRegister'ed)
 * takes its bytes when it is enqueued, and one to pageable memory waits for
 * its stream first (the driver stages both).
 *
 * What it checks on its own: the module is a fat binary (the magic), every
 * kernel asked for exists, launches stay within a GPU's limits, a copy or
 * launch names memory that was allocated (a device pointer outside every
 * allocation fails the call), and cuBLAS arguments are ones cuBLAS takes.
 * Each failure returns an error code, as the driver would, and says why on
 * stderr.
 *
 * cuBLAS: cublasSgemmStridedBatched sums in double (more exactly than a
 * GPU), or, after cublasSetMathMode(CUBLAS_TF32_TENSOR_OP_MATH), rounds
 * its operands to TF32 (10 mantissa bits, nearest even) and sums in f32,
 * as tensor cores do; cublasGemmStridedBatchedEx takes bf16 or fp16
 * operands (CUDA_R_16BF, CUDA_R_16F) with C in f32 or their own type,
 * CUBLAS_COMPUTE_32F: products summed in f32, C rounded to nearest even
 * (runtime/cpu/half.h's conversions).
 *
 * FUSION_EMU_COUNTS=FILE: at exit, append one line, the operations that
 * ran: "launches N gemms N htod N BYTES dtoh N BYTES second-stream htod N
 * dtoh N gemm-ex N tf32 N" (second-stream: copies that ran on the second
 * stream created, runtime/cuda/cuda.c's copy stream; gemm-ex: the products
 * of 16-bit operands among the gemms; tf32: the sgemms that ran with TF32
 * allowed).
 */
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <vector>

#include "../../runtime/cuda/cuda_program.h"
#include "cuda_emu.h"

extern "C" const cuda_emu_kernel emu_kernels[];
extern "C" const int emu_n_kernels;

namespace
{

const int kInvalidValue = 1, kOutOfMemory = 2, kNotFound = 500, kInvalidImage = 200;

std::map<uintptr_t, size_t> allocations; /* device memory: start -> bytes             */
std::map<uintptr_t, size_t> pinned;      /* cuMemHostRegister'ed host memory          */
struct counts_t {
    long long launches = 0, gemms = 0, htod = 0, htod_bytes = 0, dtoh = 0, dtoh_bytes = 0;
    long long second_htod = 0, second_dtoh = 0; /* copies that ran on the second stream created */
    long long gemm_ex = 0, tf32 = 0;
} counts;

/* A stream: its deferred operations, in order.  enqueued counts every
 * operation ever queued, done those that ran: operation i (from 1) has run
 * once done >= i. */
struct stream_t {
    int index = 0; /* 1: the first stream created, 2: the second, ... */
    std::deque<std::function<void()>> queue;
    long long enqueued = 0, done = 0;
};
/* An event: the stream and position of its last record (none: complete). */
struct event_t {
    stream_t *stream = nullptr;
    long long at = 0;
};
stream_t null_stream;            /* the legacy default stream, as one more queue */
std::vector<stream_t *> streams; /* every live stream, the default one first     */
int streams_created = 0;

stream_t *stream_of(void *s) { return s ? (stream_t *)s : &null_stream; }

void enqueue(stream_t *s, std::function<void()> op)
{
    s->queue.push_back(std::move(op));
    s->enqueued++;
}

/* Run s's queue up to and including operation `upto`.  A wait in it runs
 * the other stream first; waits name positions already queued when they
 * were made, so this always ends. */
void run_until(stream_t *s, long long upto)
{
    while (s->done < upto && !s->queue.empty()) {
        std::function<void()> op = std::move(s->queue.front());
        s->queue.pop_front();
        op();
        s->done++;
    }
}
void run_all(stream_t *s) { run_until(s, s->enqueued); }
void run_every_stream()
{
    run_all(&null_stream);
    for (stream_t *s : streams)
        run_all(s);
}

bool in_map(const std::map<uintptr_t, size_t> &m, uintptr_t p, size_t bytes)
{
    auto it = m.upper_bound(p);
    if (it == m.begin())
        return false;
    --it;
    return p >= it->first && p + bytes <= it->first + it->second;
}

/* Is [p, p + bytes) inside one allocation? */
bool owned(uintptr_t p, size_t bytes) { return in_map(allocations, p, bytes); }

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
            fprintf(f,
                    "launches %lld gemms %lld htod %lld %lld dtoh %lld %lld second-stream htod %lld dtoh %lld "
                    "gemm-ex %lld tf32 %lld\n",
                    counts.launches, counts.gemms, counts.htod, counts.htod_bytes, counts.dtoh, counts.dtoh_bytes,
                    counts.second_htod, counts.second_dtoh, counts.gemm_ex, counts.tf32);
            fclose(f);
        }
    }
} writer;

} // namespace

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
    *value = attribute == 75 ? 8 : attribute == 76 ? 0 : 0; /* compute capability 8.0 */
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
    memset(q, 0xA5, bytes); /* not zeros: a read before a write shows */
    allocations[(uintptr_t)q] = bytes;
    *p = (CUdeviceptr)(uintptr_t)q;
    return 0;
}
int cuMemFree_v2(CUdeviceptr p)
{
    auto it = allocations.find((uintptr_t)p);
    if (it == allocations.end())
        return refuse("cuMemFree of memory not allocated");
    run_every_stream(); /* the driver's cuMemFree waits for the device */
    free((void *)(uintptr_t)p);
    allocations.erase(it);
    return 0;
}
/* From page-locked memory the copy reads the host when it runs; from
 * pageable memory the driver stages the bytes before it returns. */
int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, void *stream)
{
    if (!owned((uintptr_t)dst, bytes))
        return refuse("cuMemcpyHtoD to device memory not allocated");
    stream_t *s = stream_of(stream);
    auto count = [s, bytes] {
        counts.htod++, counts.htod_bytes += (long long)bytes;
        counts.second_htod += s->index == 2;
    };
    if (in_map(pinned, (uintptr_t)src, bytes)) {
        enqueue(s, [=] { memcpy((void *)(uintptr_t)dst, src, bytes), count(); });
    } else {
        std::vector<char> staged((const char *)src, (const char *)src + bytes);
        enqueue(s, [=] { memcpy((void *)(uintptr_t)dst, staged.data(), bytes), count(); });
    }
    return 0;
}
/* To page-locked memory the copy writes the host when it runs; to pageable
 * memory the call returns when the stream has reached it and the bytes are there. */
int cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, void *stream)
{
    if (!owned((uintptr_t)src, bytes))
        return refuse("cuMemcpyDtoH from device memory not allocated");
    stream_t *s = stream_of(stream);
    enqueue(s, [=] {
        memcpy(dst, (const void *)(uintptr_t)src, bytes);
        counts.dtoh++, counts.dtoh_bytes += (long long)bytes;
        counts.second_dtoh += s->index == 2;
    });
    if (!in_map(pinned, (uintptr_t)dst, bytes))
        run_all(s);
    return 0;
}
int cuStreamCreate(void **stream, unsigned)
{
    stream_t *s = new stream_t;
    s->index = ++streams_created;
    streams.push_back(s);
    *stream = s;
    return 0;
}
int cuStreamSynchronize(void *stream)
{
    run_all(stream_of(stream));
    return 0;
}
int cuStreamDestroy_v2(void *stream)
{
    stream_t *s = stream_of(stream);
    if (s == &null_stream)
        return refuse("cuStreamDestroy of the default stream");
    for (size_t i = 0; i < streams.size(); i++)
        if (streams[i] == s) {
            run_all(s); /* the driver finishes the work queued first */
            streams.erase(streams.begin() + (long)i);
            delete s;
            return 0;
        }
    return refuse("cuStreamDestroy of a stream not created");
}
int cuEventCreate(void **event, unsigned)
{
    *event = new event_t;
    return 0;
}
int cuEventDestroy_v2(void *event)
{
    delete (event_t *)event;
    return 0;
}
/* The event completes when the stream has run what was queued before it. */
int cuEventRecord(void *event, void *stream)
{
    if (!event)
        return refuse("cuEventRecord without an event");
    event_t *e = (event_t *)event;
    e->stream = stream_of(stream);
    e->at = e->stream->enqueued;
    return 0;
}
int cuEventSynchronize(void *event)
{
    event_t *e = (event_t *)event;
    if (!e)
        return refuse("cuEventSynchronize without an event");
    if (e->stream)
        run_until(e->stream, e->at);
    return 0;
}
/* Lazy: a query runs what the event waits for, then says it is done. */
int cuEventQuery(void *event) { return cuEventSynchronize(event); }
/* What the stream runs after this waits for the event's record as it is now. */
int cuStreamWaitEvent(void *stream, void *event, unsigned)
{
    event_t *e = (event_t *)event;
    if (!e)
        return refuse("cuStreamWaitEvent without an event");
    stream_t *other = e->stream;
    long long at = e->at;
    if (other)
        enqueue(stream_of(stream), [other, at] { run_until(other, at); });
    return 0;
}
int cuMemHostRegister_v2(void *p, size_t bytes, unsigned)
{
    pinned[(uintptr_t)p] = bytes;
    return 0;
}
int cuMemHostUnregister(void *p)
{
    run_every_stream();
    return pinned.erase((uintptr_t)p) ? 0 : refuse("cuMemHostUnregister of memory not registered");
}
int cuGetErrorString(int error, const char **text)
{
    *text = error == kInvalidValue   ? "invalid argument (emulated)"
            : error == kNotFound     ? "named symbol not found (emulated)"
            : error == kInvalidImage ? "invalid image (emulated)"
            : error == kOutOfMemory  ? "out of memory (emulated)"
                                     : "error (emulated)";
    return 0;
}

int cuLaunchKernel(const cuda_emu_kernel *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *stream, void **params, void **extra)
{
    if (!f || !params || extra)
        return refuse("cuLaunchKernel without a function or parameters");
    if ((unsigned long long)bx * by * bz > 1024 || shared > 48 * 1024 || gx < 1 || gy < 1 || gz < 1)
        return refuse("a launch no GPU takes (block, grid or shared memory size)");
    /* One parameter, the kernel's fusion_args (rt_cuda_args): the pointers, the step, the loss scale. */
    rt_cuda_args copy; /* read when the call is made: it may live on the caller's stack */
    memcpy(&copy, params[0], sizeof copy);
    for (int k = 0; k < RT_CUDA_MAX_ARGS; k++)
        if (copy.p[k] && !owned((uintptr_t)copy.p[k], 1))
            return refuse("a kernel argument points outside device memory");
    enqueue(stream_of(stream), [=] {
        cuda_emu_launch(f, dim3{ gx, gy, gz }, dim3{ bx, by, bz }, shared, &copy);
        counts.launches++;
    });
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
static void *blas_stream; /* cublasSetStream_v2's; the products go on it */
int cublasSetStream_v2(void *, void *stream)
{
    blas_stream = stream;
    return 0;
}

static int math_mode; /* cublasSetMathMode's: 3 = CUBLAS_TF32_TENSOR_OP_MATH */
int cublasSetMathMode(void *, int mode)
{
    math_mode = mode;
    return 0;
}

/* x rounded to TF32: 10 mantissa bits, to nearest even (what is kept of an
 * f32 operand on a tensor core). */
static float tf32_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) /* inf and NaN as they are */
        u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}

/* cudaDataType: 0 CUDA_R_32F, 2 CUDA_R_16F, 14 CUDA_R_16BF. */
static int elem_bytes(int type) { return type == 0 ? 4 : type == 2 || type == 14 ? 2 : 0; }
static float elem_load(const void *p, int type, long long k)
{
    if (type == 0)
        return ((const float *)p)[k];
    uint16_t h = ((const uint16_t *)p)[k];
    return type == 14 ? bf16_to_f32(h) : fp16_to_f32(h);
}
static void elem_store(void *p, int type, long long k, float v)
{
    if (type == 0)
        ((float *)p)[k] = v;
    else
        ((uint16_t *)p)[k] = type == 14 ? f32_to_bf16(v) : f32_to_fp16(v);
}

/* Column-major C = alpha op(A) op(B) + beta C per batch entry: in double
 * (exact) or in f32 (tensor cores: wide = false), operands rounded to TF32
 * when tf32. */
static void gemm_run(int ta, int tb, int m, int n, int k, float alpha, const void *A, int at, int lda, long long sa,
                     const void *B, int bt, int ldb, long long sb, float beta, void *C, int ct, int ldc, long long sc,
                     int batch, bool wide, bool tf32)
{
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double acc = 0;
                float acc32 = 0;
                for (int l = 0; l < k; l++) {
                    float x = elem_load(A, at, b * sa + (ta ? l + (long long)i * lda : i + (long long)l * lda));
                    float y = elem_load(B, bt, b * sb + (tb ? j + (long long)l * ldb : l + (long long)j * ldb));
                    if (tf32)
                        x = tf32_round(x), y = tf32_round(y);
                    if (wide)
                        acc += (double)x * (double)y;
                    else
                        acc32 += x * y;
                }
                if (!wide)
                    acc = acc32;
                long long at_c = b * sc + i + (long long)j * ldc;
                double v = beta == 0.0f ? alpha * acc : alpha * acc + (double)beta * elem_load(C, ct, at_c);
                elem_store(C, ct, at_c, (float)v);
            }
}

static bool gemm_args_ok(int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc, int batch)
{
    return m >= 0 && n >= 0 && k >= 0 && batch >= 1 && lda >= (ta ? k : m) && lda >= 1 && ldb >= (tb ? n : k) &&
           ldb >= 1 && ldc >= m && ldc >= 1;
}

int cublasSgemmStridedBatched(void *, int ta, int tb, int m, int n, int k, const float *alpha, const float *A, int lda,
                              long long sa, const float *B, int ldb, long long sb, const float *beta, float *C, int ldc,
                              long long sc, int batch)
{
    if (!gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc, batch))
        return 7; /* CUBLAS_STATUS_INVALID_VALUE */
    if (!owned((uintptr_t)C, 4) || !owned((uintptr_t)A, 4) || !owned((uintptr_t)B, 4))
        return 7;
    float alpha_v = *alpha, beta_v = *beta; /* read now: they may live on the caller's stack */
    bool tf32 = math_mode == 3;
    enqueue(stream_of(blas_stream), [=] {
        gemm_run(ta, tb, m, n, k, alpha_v, A, 0, lda, sa, B, 0, ldb, sb, beta_v, C, 0, ldc, sc, batch, !tf32, tf32);
        counts.gemms++;
        counts.tf32 += tf32;
    });
    return 0;
}

/* A and B both bf16 or both fp16 (or both f32), C f32 or theirs;
 * CUBLAS_COMPUTE_32F (68) or its TF32 form (77). */
int cublasGemmStridedBatchedEx(void *, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at,
                               int lda, long long sa, const void *B, int bt, int ldb, long long sb, const void *beta,
                               void *C, int ct, int ldc, long long sc, int batch, int compute, int)
{
    if (!gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc, batch))
        return 7;
    if (!elem_bytes(at) || at != bt || !elem_bytes(ct) || (ct != 0 && ct != at) || (compute != 68 && compute != 77))
        return refuse("cublasGemmStridedBatchedEx: operand types or compute type it does not take"),
               15; /* NOT_SUPPORTED */
    if (!owned((uintptr_t)C, (size_t)elem_bytes(ct)) || !owned((uintptr_t)A, (size_t)elem_bytes(at)) ||
        !owned((uintptr_t)B, (size_t)elem_bytes(bt)))
        return 7;
    float alpha_v = *(const float *)alpha, beta_v = *(const float *)beta; /* COMPUTE_32F: float scalars */
    bool tf32 = at == 0 && (compute == 77 || math_mode == 3);
    enqueue(stream_of(blas_stream), [=] {
        gemm_run(ta, tb, m, n, k, alpha_v, A, at, lda, sa, B, bt, ldb, sb, beta_v, C, ct, ldc, sc, batch,
                 at == 0 && !tf32, tf32);
        counts.gemms++;
        counts.gemm_ex += at != 0;
        counts.tf32 += tf32;
    });
    return 0;
}

} // extern "C"
