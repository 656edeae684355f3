/* cuda.c: the CUDA backend (see cuda.h): the driver API and cuBLAS through
 * dlopen, module loading (the fat binary), the device arena and what crosses to
 * it, launches.
 *
 * The driver's and cuBLAS's types and entry points are declared here (the
 * ABI is stable: the _v2 names are what cuda.h maps to since CUDA 4), so
 * building fusion needs no CUDA header and a bundle links nothing of CUDA.
 */
#define _GNU_SOURCE
#include "cuda.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../ir/ir.h"
#include "../comm/comm.h"
#include "../trace.h"
#include "../train_settings.h"
#include "cuda_gemm.h"
#include "../../ir/folders.h" /* FU_PATH_BYTES */
#include "../rt_error.h"
#include "../stats_mode.h"

typedef int cu_result; /* CUresult: 0 = CUDA_SUCCESS            */
typedef int cu_device;
typedef struct cu_ctx_s *cu_context;
typedef struct cu_mod_s *cu_module;
typedef struct cu_fn_s *cu_function;
typedef struct cu_stream_s *cu_stream;
typedef struct cu_event_s *cu_event;
typedef unsigned long long cu_deviceptr;
typedef struct cublas_s *cublas_handle;

#define CU_ATTR_CC_MAJOR        75
#define CU_ATTR_CC_MINOR        76
#define CU_EVENT_DISABLE_TIMING 2 /* cheaper to record: no timestamps */
#define RT_CUDA_UPLOADS         4 /* recv/allreduce uploads in flight  */

typedef struct {
    cu_result (*init)(unsigned);
    cu_result (*device_get)(cu_device *, int);
    cu_result (*device_attribute)(int *, int, cu_device);
    cu_result (*ctx_retain)(cu_context *, cu_device);
    cu_result (*ctx_release)(cu_device);
    cu_result (*ctx_set)(cu_context);
    cu_result (*module_load)(cu_module *, const void *);
    cu_result (*module_unload)(cu_module);
    cu_result (*module_function)(cu_function *, cu_module, const char *);
    cu_result (*mem_alloc)(cu_deviceptr *, size_t);
    cu_result (*mem_free)(cu_deviceptr);
    cu_result (*htod)(cu_deviceptr, const void *, size_t, cu_stream);
    cu_result (*dtoh)(void *, cu_deviceptr, size_t, cu_stream);
    cu_result (*stream_create)(cu_stream *, unsigned);
    cu_result (*stream_sync)(cu_stream);
    cu_result (*stream_destroy)(cu_stream);
    cu_result (*stream_wait_event)(cu_stream, cu_event, unsigned);
    cu_result (*event_create)(cu_event *, unsigned);
    cu_result (*event_record)(cu_event, cu_stream);
    cu_result (*event_sync)(cu_event);
    cu_result (*event_destroy)(cu_event);
    cu_result (*launch)(cu_function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, cu_stream,
                        void **, void **);
    cu_result (*host_register)(void *, size_t, unsigned);
    cu_result (*host_unregister)(void *);
    cu_result (*error_string)(cu_result, const char **);
    int (*blas_create)(cublas_handle *);
    int (*blas_destroy)(cublas_handle);
    int (*blas_stream)(cublas_handle, cu_stream);
    int (*blas_sgemm)(cublas_handle, int, int, int, int, int, const float *, const float *, int, long long,
                      const float *, int, long long, const float *, float *, int, long long, int);
    int (*blas_gemm_ex)(cublas_handle, int, int, int, int, int, const void *, const void *, int, int, long long,
                        const void *, int, int, long long, const void *, void *, int, int, long long, int, int, int);
    int (*blas_math_mode)(cublas_handle, int);
} cuda_api;

/* cuBLAS's enums, as its headers number them (stable across 11, 12, 13). */
#define CUDA_R_32F                 0
#define CUDA_R_16F                 2
#define CUDA_R_16BF                14
#define CUBLAS_COMPUTE_32F         68 /* f32 accumulator, operands as they are */
#define CUBLAS_GEMM_DEFAULT        -1
#define CUBLAS_TF32_TENSOR_OP_MATH 3 /* sgemm may round its operands to TF32 */

struct rt_cuda {
    cuda_api api;
    void *libcuda, *libcublas;
    cu_device device;
    cu_context context;
    cu_stream stream;  /* compute: kernels, products, the phases' copies */
    cu_stream copy;    /* the copies of send, recv and allreduce (run_on_host) */
    cu_event computed; /* on the compute stream: what was queued before a copy */
    cu_event copied;   /* on the copy stream: a send's inputs are on the host  */
    /* Uploads in flight: a recv's (or allreduce's) htod reads the host
     * arena range [lo, hi) until its event completes; the host must not
     * write that range before (run_on_host waits). */
    struct {
        cu_event done;
        int64_t lo, hi;
        int busy;
    } upload[RT_CUDA_UPLOADS];
    int next_upload;
    cu_module module;
    cublas_handle blas;
    cu_function *functions; /* [n_kernels] */
    const rt_cuda_step *steps;
    cu_deviceptr arena, scratch, status; /* status: the status word (int64), the flags word (int32), the
                                            gradient norm (float, clip_scale's) */
    int loss_scaling;                    /* the manifest's: read the flags word after an update */
    size_t arena_bytes;
    char *host_arena; /* page-locked while attached */
    int cc_major, cc_minor;
    /* What the host touches between phases (rt_cuda_set_host_tensors). */
    rt_cuda_range *inputs, *stash, *stash_replay, *grads, *state, loss, prefill_output;
    int32_t n_inputs, n_stash, n_stash_replay, n_grads, n_state;
    uint8_t *grad_fetched; /* [n_grads] 1: a bucket brought it down this backward */
    int device_current;    /* 0: the next phase copies the whole arena up */
};

static int fail_cu(rt_cuda *c, cu_result r, const char *what, char *why, size_t len)
{
    const char *s = NULL;
    if (c->api.error_string)
        c->api.error_string(r, &s);
    return rt_error(why, len, "CUDA: %s failed: %s (error %d)", what, s ? s : "unknown error", r);
}

static void *sym(void *lib, const char *name, int *missing)
{
    void *p = dlsym(lib, name);
    if (!p)
        *missing = 1;
    return p;
}

/* The driver and cuBLAS, or why not. */
static int load_libraries(rt_cuda *c, char *why, size_t len)
{
    c->libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!c->libcuda) {
        const char *e = dlerror();
        return rt_error(why, len,
                        "no CUDA driver found (%s); this program is for a CUDA device and needs the NVIDIA driver",
                        e ? e : "libcuda.so.1 does not load");
    }
    cuda_api *a = &c->api;
    int missing = 0;
    void *l = c->libcuda;
    a->init = sym(l, "cuInit", &missing);
    a->device_get = sym(l, "cuDeviceGet", &missing);
    a->device_attribute = sym(l, "cuDeviceGetAttribute", &missing);
    a->ctx_retain = sym(l, "cuDevicePrimaryCtxRetain", &missing);
    a->ctx_release = sym(l, "cuDevicePrimaryCtxRelease_v2", &missing);
    a->ctx_set = sym(l, "cuCtxSetCurrent", &missing);
    a->module_load = sym(l, "cuModuleLoadData", &missing);
    a->module_unload = sym(l, "cuModuleUnload", &missing);
    a->module_function = sym(l, "cuModuleGetFunction", &missing);
    a->mem_alloc = sym(l, "cuMemAlloc_v2", &missing);
    a->mem_free = sym(l, "cuMemFree_v2", &missing);
    a->htod = sym(l, "cuMemcpyHtoDAsync_v2", &missing);
    a->dtoh = sym(l, "cuMemcpyDtoHAsync_v2", &missing);
    a->stream_create = sym(l, "cuStreamCreate", &missing);
    a->stream_sync = sym(l, "cuStreamSynchronize", &missing);
    a->stream_destroy = sym(l, "cuStreamDestroy_v2", &missing);
    a->stream_wait_event = sym(l, "cuStreamWaitEvent", &missing);
    a->event_create = sym(l, "cuEventCreate", &missing);
    a->event_record = sym(l, "cuEventRecord", &missing);
    a->event_sync = sym(l, "cuEventSynchronize", &missing);
    a->event_destroy = sym(l, "cuEventDestroy_v2", &missing);
    a->launch = sym(l, "cuLaunchKernel", &missing);
    a->host_register = sym(l, "cuMemHostRegister_v2", &missing);
    a->host_unregister = sym(l, "cuMemHostUnregister", &missing);
    a->error_string = sym(l, "cuGetErrorString", &missing);
    if (missing) {
        return rt_error(why, len,
                        "the CUDA driver (libcuda.so.1) is too old: it lacks entry points this program needs");
    }
    /* The bundle's own cuBLAS first (codegen/bundle_libs.h: lib/ beside
     * the program; its run path, $ORIGIN, finds libcublasLt there), then the
     * host's (fusionc --cublas system). */
    const char *blas_names[] = { "libcublas.so.13", "libcublas.so.12", "libcublas.so.11" };
    char here[FU_PATH_BYTES], path[FU_PATH_BYTES + 104];
    ssize_t n = readlink("/proc/self/exe", here, sizeof here - 1);
    char *slash = n > 0 ? (here[n] = '\0', strrchr(here, '/')) : NULL;
    for (size_t i = 0; slash && i < sizeof blas_names / sizeof blas_names[0] && !c->libcublas; i++) {
        *slash = '\0';
        snprintf(path, sizeof path, "%s/lib/%s", here, blas_names[i]);
        c->libcublas = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    const char *host_names[] = { "libcublas.so", "libcublas.so.13", "libcublas.so.12", "libcublas.so.11" };
    for (size_t i = 0; i < sizeof host_names / sizeof host_names[0] && !c->libcublas; i++)
        c->libcublas = dlopen(host_names[i], RTLD_NOW | RTLD_LOCAL);
    if (!c->libcublas) {
        return rt_error(why, len,
                        "cuBLAS (libcublas.so) not found: neither in the bundle's lib/ nor on this host; install "
                        "the CUDA toolkit's cuBLAS or set LD_LIBRARY_PATH");
    }
    a->blas_create = sym(c->libcublas, "cublasCreate_v2", &missing);
    a->blas_destroy = sym(c->libcublas, "cublasDestroy_v2", &missing);
    a->blas_stream = sym(c->libcublas, "cublasSetStream_v2", &missing);
    a->blas_sgemm = sym(c->libcublas, "cublasSgemmStridedBatched", &missing);
    a->blas_gemm_ex = sym(c->libcublas, "cublasGemmStridedBatchedEx", &missing);
    a->blas_math_mode = sym(c->libcublas, "cublasSetMathMode", &missing);
    if (missing) {
        return rt_error(why, len,
                        "cuBLAS lacks cublasSgemmStridedBatched, cublasGemmStridedBatchedEx or cublasSetMathMode "
                        "(CUDA 11 or later is needed)");
    }
    return 0;
}

/* The fat binary (codegen/fatbin.h): the driver takes the CUBIN built for
 * the device's architecture (sm_80's serves every 8.x), else compiles the
 * PTX for it (a GPU newer than the cluster's newest arch). */
static int load_module(rt_cuda *c, const rt_cuda_module_info *info, char *why, size_t len)
{
    cu_result r = info->fatbin_bytes > 0 ? c->api.module_load(&c->module, fusion_cuda_fatbin_blob) : 1;
    if (r != 0)
        return fail_cu(c, r, "loading the kernels (the bundle's fat binary)", why, len);
    c->functions = calloc((size_t)info->n_kernels + 1, sizeof *c->functions);
    if (!c->functions) {
        return rt_error(why, len, "out of memory");
    }
    const char *name = (const char *)fusion_cuda_names_blob;
    for (int32_t k = 0; k < info->n_kernels; k++, name += strlen(name) + 1)
        if ((r = c->api.module_function(&c->functions[k], c->module, name)) != 0)
            return fail_cu(c, r, name, why, len);
    return 0;
}

int rt_cuda_open(rt_cuda **out, const rt_manifest *m, char *why, size_t len)
{
    *out = NULL;
    rt_cuda *c = calloc(1, sizeof *c);
    if (!c) {
        return rt_error(why, len, "out of memory");
    }
    rt_cuda_module_info info;
    memcpy(&info, fusion_cuda_info_blob, sizeof info);
    c->steps = (const rt_cuda_step *)fusion_cuda_steps_blob;
    c->arena_bytes = (size_t)m->arena_bytes;
    c->loss_scaling = m->loss_scaling;
    const char *dev_env = getenv("FUSION_CUDA_DEVICE");
    int ordinal = dev_env ? atoi(dev_env) : 0;
    cu_result r;
    int rc = load_libraries(c, why, len);
    if (rc == 0 && (r = c->api.init(0)) != 0)
        rc = fail_cu(c, r, "cuInit (is a GPU present and the driver loaded?)", why, len);
    if (rc == 0 && (r = c->api.device_get(&c->device, ordinal)) != 0)
        rc = fail_cu(c, r, "cuDeviceGet", why, len);
    if (rc == 0 && ((r = c->api.device_attribute(&c->cc_major, CU_ATTR_CC_MAJOR, c->device)) != 0 ||
                    (r = c->api.device_attribute(&c->cc_minor, CU_ATTR_CC_MINOR, c->device)) != 0))
        rc = fail_cu(c, r, "cuDeviceGetAttribute", why, len);
    if (rc == 0 && !rt_cuda_module_runs_on(&info, c->cc_major, c->cc_minor)) {
        char held[160] = "";
        for (int32_t k = 0; k < info.n_cubins && k < 8; k++)
            snprintf(held + strlen(held), sizeof held - strlen(held), "sm_%d CUBIN, ", info.cubin_sm[k]);
        snprintf(why, len,
                 "GPU %d has compute capability %d.%d, and this bundle holds %s%s PTX: compile it for a cluster "
                 "that names this GPU's arch (sm_%d%d)",
                 ordinal, c->cc_major, c->cc_minor, held, info.ptx_arch, c->cc_major, c->cc_minor);
        rc = -1;
    }
    if (rc == 0 && ((r = c->api.ctx_retain(&c->context, c->device)) != 0 || (r = c->api.ctx_set(c->context)) != 0))
        rc = fail_cu(c, r, "creating the context", why, len);
    if (rc == 0 && ((r = c->api.stream_create(&c->stream, 0)) != 0 || (r = c->api.stream_create(&c->copy, 0)) != 0))
        rc = fail_cu(c, r, "cuStreamCreate", why, len);
    if (rc == 0 && ((r = c->api.event_create(&c->computed, CU_EVENT_DISABLE_TIMING)) != 0 ||
                    (r = c->api.event_create(&c->copied, CU_EVENT_DISABLE_TIMING)) != 0))
        rc = fail_cu(c, r, "cuEventCreate", why, len);
    for (int i = 0; rc == 0 && i < RT_CUDA_UPLOADS; i++)
        if ((r = c->api.event_create(&c->upload[i].done, CU_EVENT_DISABLE_TIMING)) != 0)
            rc = fail_cu(c, r, "cuEventCreate", why, len);
    if (rc == 0)
        rc = load_module(c, &info, why, len);
    if (rc == 0 && (r = c->api.mem_alloc(&c->arena, c->arena_bytes + 64)) != 0)
        rc = fail_cu(c, r, "allocating the device arena", why, len);
    if (rc == 0 && (r = c->api.mem_alloc(&c->scratch, (size_t)info.scratch_bytes + 256)) != 0)
        rc = fail_cu(c, r, "allocating the scratch area", why, len);
    if (rc == 0 && (r = c->api.mem_alloc(&c->status, 64)) != 0)
        rc = fail_cu(c, r, "allocating the status word", why, len);
    if (rc == 0 && (c->api.blas_create(&c->blas) != 0 || c->api.blas_stream(c->blas, c->stream) != 0)) {
        snprintf(why, len, "cuBLAS: cannot create a handle");
        rc = -1;
    }
    /* --tf32: f32 products on TF32 tensor cores (10-bit mantissa operands,
     * f32 accumulator); the 16-bit products are GemmEx's either way. */
    if (rc == 0 && m->tf32 && c->api.blas_math_mode(c->blas, CUBLAS_TF32_TENSOR_OP_MATH) != 0) {
        snprintf(why, len, "cuBLAS: cannot allow TF32 (cublasSetMathMode)");
        rc = -1;
    }
    if (rc == 0) {
        struct {
            int64_t status;
            int32_t flags, pad;
        } words = { RT_CUDA_STATUS_OK, 0, 0 };
        if ((r = c->api.htod(c->status, &words, sizeof words, c->stream)) != 0 ||
            (r = c->api.stream_sync(c->stream)) != 0)
            rc = fail_cu(c, r, "initialising the status word", why, len);
    }
    if (rc) {
        rt_cuda_close(c);
        return -1;
    }
    *out = c;
    return 0;
}

int rt_cuda_attach_host_arena(rt_cuda *c, char *arena, char *why, size_t len)
{
    cu_result r = c->api.host_register(arena, c->arena_bytes, 0);
    if (r != 0)
        return fail_cu(c, r, "page-locking the host arena", why, len);
    c->host_arena = arena;
    return 0;
}

void rt_cuda_close(rt_cuda *c)
{
    if (!c)
        return;
    if (c->libcuda && c->api.init) {
        if (c->stream)
            c->api.stream_sync(c->stream);
        if (c->copy)
            c->api.stream_sync(c->copy);
        if (c->host_arena)
            c->api.host_unregister(c->host_arena);
        if (c->blas)
            c->api.blas_destroy(c->blas);
        if (c->arena)
            c->api.mem_free(c->arena);
        if (c->scratch)
            c->api.mem_free(c->scratch);
        if (c->status)
            c->api.mem_free(c->status);
        if (c->module)
            c->api.module_unload(c->module);
        for (int i = 0; i < RT_CUDA_UPLOADS; i++)
            if (c->upload[i].done)
                c->api.event_destroy(c->upload[i].done);
        if (c->computed)
            c->api.event_destroy(c->computed);
        if (c->copied)
            c->api.event_destroy(c->copied);
        if (c->copy)
            c->api.stream_destroy(c->copy);
        if (c->stream)
            c->api.stream_destroy(c->stream);
        if (c->context)
            c->api.ctx_release(c->device);
    }
    free(c->functions);
    free(c->inputs), free(c->stash), free(c->stash_replay), free(c->grads), free(c->state), free(c->grad_fetched);
    if (c->libcublas)
        dlclose(c->libcublas);
    if (c->libcuda)
        dlclose(c->libcuda);
    free(c);
}

/* ---- running --------------------------------------------------------------------- */

static int ctx_fail(rt_context *ctx, const rt_op *op, const char *what, cu_result r)
{
    const char *s = NULL;
    if (ctx->cuda && ctx->cuda->api.error_string)
        ctx->cuda->api.error_string(r, &s);
    snprintf(ctx->msg, sizeof ctx->msg, "op '%s' (line %d): CUDA %s failed: %s", op ? op->name : "-",
             op ? (int)op->line : 0, what, s ? s : "unknown error");
    return -1;
}

/* Copy ranges between the host arena and the device's, on the stream. */
static cu_result push(rt_cuda *c, const char *arena, const rt_cuda_range *r, int32_t n)
{
    cu_result e = 0;
    for (int32_t i = 0; i < n && e == 0; i++)
        if (r[i].bytes > 0)
            e = c->api.htod(c->arena + (cu_deviceptr)r[i].offset, arena + r[i].offset, (size_t)r[i].bytes, c->stream);
    return e;
}

static cu_result pull(rt_cuda *c, char *arena, const rt_cuda_range *r, int32_t n)
{
    cu_result e = 0;
    for (int32_t i = 0; i < n && e == 0; i++)
        if (r[i].bytes > 0)
            e = c->api.dtoh(arena + r[i].offset, c->arena + (cu_deviceptr)r[i].offset, (size_t)r[i].bytes, c->stream);
    return e;
}

static int take_ranges(rt_cuda_range **out, int32_t *n, const rt_tensor *t, int32_t count)
{
    *out = calloc((size_t)count + 1, sizeof **out);
    if (!*out)
        return -1;
    for (int32_t i = 0; i < count; i++)
        (*out)[i] = (rt_cuda_range){ t[i].offset, rt_tensor_bytes(&t[i]) };
    *n = count;
    return 0;
}

int rt_cuda_set_host_tensors(rt_cuda *c, const rt_tensor_info *tensors, int32_t n_tensors, const rt_tensor *stash,
                             int32_t n_stash, int32_t n_stash_replay, int32_t loss, int32_t prefill_output)
{
    rt_tensor *by_role[ROLE_COUNT];
    int32_t count[ROLE_COUNT] = { 0 };
    int rc = 0;
    for (int r = 0; r < ROLE_COUNT; r++)
        if (!(by_role[r] = calloc((size_t)n_tensors + 1, sizeof *by_role[r])))
            rc = -1;
    for (int32_t i = 0; rc == 0 && i < n_tensors; i++)
        if (tensors[i].role >= 0 && tensors[i].role < ROLE_COUNT)
            by_role[tensors[i].role][count[tensors[i].role]++] = tensors[i].t;
    /* The state a checkpoint reads: parameters, then the optimizer's moments. */
    for (int32_t i = 0; rc == 0 && i < count[ROLE_STATE]; i++)
        by_role[ROLE_PARAM][count[ROLE_PARAM] + i] = by_role[ROLE_STATE][i];
    if (rc == 0 && (take_ranges(&c->inputs, &c->n_inputs, by_role[ROLE_INPUT], count[ROLE_INPUT]) ||
                    take_ranges(&c->grads, &c->n_grads, by_role[ROLE_GRADIENT], count[ROLE_GRADIENT]) ||
                    take_ranges(&c->state, &c->n_state, by_role[ROLE_PARAM], count[ROLE_PARAM] + count[ROLE_STATE]) ||
                    take_ranges(&c->stash, &c->n_stash, stash, n_stash) ||
                    take_ranges(&c->stash_replay, &c->n_stash_replay, stash, n_stash_replay) ||
                    !(c->grad_fetched = calloc((size_t)c->n_grads + 1, 1))))
        rc = -1;
    if (rc == 0 && loss >= 0 && loss < n_tensors)
        c->loss = (rt_cuda_range){ tensors[loss].t.offset, rt_tensor_bytes(&tensors[loss].t) };
    if (rc == 0 && prefill_output >= 0 && prefill_output < n_tensors)
        c->prefill_output =
            (rt_cuda_range){ tensors[prefill_output].t.offset, rt_tensor_bytes(&tensors[prefill_output].t) };
    for (int r = 0; r < ROLE_COUNT; r++)
        free(by_role[r]);
    return rc;
}

int rt_cuda_phase_begin(char *arena, rt_context *ctx)
{
    rt_cuda *c = ctx->cuda;
    cu_result r = 0;
    if (!c->device_current) { /* the first phase, or the host wrote the parameters */
        r = c->api.htod(c->arena, arena, c->arena_bytes, c->stream);
        c->device_current = r == 0;
    } else if (ctx->phase == PHASE_FORWARD || ctx->phase == PHASE_PREFILL) {
        r = push(c, arena, c->inputs, c->n_inputs);
        if (r == 0 && ctx->replay) /* what main put back for the forward to run again */
            r = push(c, arena, c->stash_replay, c->n_stash_replay);
    } else if (ctx->phase == PHASE_BACKWARD && ctx->stash_restored) { /* main put a waiting micro-batch's back */
        r = ctx->stash_restored == 2 ? push(c, arena, c->stash, c->n_stash)
                                     : push(c, arena, c->stash_replay, c->n_stash_replay);
    } else if (ctx->phase == PHASE_UPDATE) {
        r = push(c, arena, c->grads, c->n_grads); /* main's mean over the micro-batches */
    }
    return r ? ctx_fail(ctx, NULL, "copying to the device", r) : 0;
}

int rt_cuda_phase_end(char *arena, rt_context *ctx)
{
    rt_cuda *c = ctx->cuda;
    cu_result r = 0;
    int32_t flags = 0, words[2] = { 0, 0 }; /* the flags word and the gradient norm's (a float) */
    if (ctx->phase == PHASE_FORWARD && !ctx->replay) {
        r = pull(c, arena, &c->loss, 1);
        if (r == 0 && ctx->keep_stash) /* main keeps it: the backward waits (2: whole) */
            r = ctx->keep_stash == 2 ? pull(c, arena, c->stash, c->n_stash)
                                     : pull(c, arena, c->stash_replay, c->n_stash_replay);
    } else if (ctx->phase == PHASE_PREFILL) {
        r = pull(c, arena, &c->prefill_output, 1);
    } else if (ctx->phase == PHASE_BACKWARD) {
        /* main sums them over micro-batches; what a bucket fetched is on
         * the host already, and there main may have replaced it by the
         * micro-batches' mean (comm/overlap.c), so it is not pulled again. */
        for (int32_t i = 0; i < c->n_grads; i++) {
            if (!c->grad_fetched[i] && r == 0)
                r = pull(c, arena, &c->grads[i], 1);
            c->grad_fetched[i] = 0;
        }
    } else if (ctx->phase == PHASE_UPDATE) {
        /* Did an adamw skip the step (fp16's overflow)?  The flags word
         * says so (main's loss scaler reads ctx->overflowed); clip_scale
         * left the gradient norm in the word after it. */
        r = c->api.dtoh(words, c->status + 8, sizeof words, c->stream);
    }
    if (r == 0)
        r = c->api.stream_sync(c->stream);
    if (r == 0 && ctx->phase == PHASE_UPDATE) {
        memcpy(&flags, &words[0], sizeof flags);
        float norm;
        memcpy(&norm, &words[1], sizeof norm);
        ctx->grad_norm = norm;
        if (!c->loss_scaling)
            flags = 0;
    }
    if (r == 0 && (flags & RT_CUDA_FLAG_SKIPPED)) {
        int32_t zero = 0;
        ctx->overflowed = 1;
        r = c->api.htod(c->status + 8, &zero, sizeof zero, c->stream);
        if (r == 0)
            r = c->api.stream_sync(c->stream);
    }
    /* Every upload was waited for by the compute stream (run_on_host), so
     * its slot of the host arena is free once that stream is. */
    for (int i = 0; r == 0 && i < RT_CUDA_UPLOADS; i++)
        c->upload[i].busy = 0;
    return r ? ctx_fail(ctx, NULL, "copying back to the host", r) : 0;
}

int rt_cuda_pull_state(rt_cuda *c, char *arena, char *why, size_t len)
{
    cu_result r = pull(c, arena, c->state, c->n_state);
    if (r == 0)
        r = c->api.stream_sync(c->stream);
    return r ? fail_cu(c, r, "copying the parameters and optimizer state back", why, len) : 0;
}

void rt_cuda_host_wrote(rt_cuda *c) { c->device_current = 0; }

static cu_deviceptr place(const rt_cuda *c, const rt_cuda_arg *a)
{
    switch (a->kind) {
    case RT_CUDA_ARG_ARENA:
        return c->arena + (cu_deviceptr)a->value;
    case RT_CUDA_ARG_SCRATCH:
        return c->scratch + (cu_deviceptr)a->value;
    case RT_CUDA_ARG_STATUS:
        return c->status;
    case RT_CUDA_ARG_FLAGS:
        return c->status + 8;
    default:
        return 0;
    }
}

/* After a kernel that checks ids: the first bad position, reported as the
 * CPU kernels report it (the ids are in the host arena too). */
static int check_status(rt_cuda *c, const rt_op *op, char *arena, rt_context *ctx)
{
    int64_t pos = RT_CUDA_STATUS_OK, ok = RT_CUDA_STATUS_OK;
    cu_result r = c->api.dtoh(&pos, c->status, sizeof pos, c->stream);
    if (r == 0)
        r = c->api.stream_sync(c->stream);
    if (r)
        return ctx_fail(ctx, op, "reading the status word", r);
    if (pos == RT_CUDA_STATUS_OK)
        return 0;
    c->api.htod(c->status, &ok, sizeof ok, c->stream);
    int ids = op->op == OP_EMBEDDING || op->op == OP_EMBEDDING_BACKWARD ? 0 : 1;
    const int32_t *idx = (const int32_t *)(arena + op->in[ids].offset);
    snprintf(ctx->msg, sizeof ctx->msg, "op '%s' (line %d): %s %d at position %lld is out of range", op->name,
             (int)op->line, ids == 0 ? "token id" : "target", (int)idx[pos], (long long)pos);
    return -1;
}

/* An all-reduce whose bucket comm/overlap.h reduced: the host arena holds
 * its input, the average, already (rt_overlap_finish put it there before
 * the update phase, whose start copied it up), so its input need not come
 * down; the op only copies it to its output (rt_comm_allreduce). */
static int bucket_reduced(const rt_op *op, const rt_context *ctx)
{
    return op->op == OP_ALLREDUCE && ctx->comm && ctx->comm->overlap && op->ints[ATTR_BUCKET] >= 0;
}

/* Wait for the uploads in flight that read host arena bytes in [lo, hi). */
static cu_result uploads_wait(rt_cuda *c, int64_t lo, int64_t hi)
{
    cu_result r = 0;
    for (int i = 0; i < RT_CUDA_UPLOADS && r == 0; i++)
        if (c->upload[i].busy && c->upload[i].lo < hi && lo < c->upload[i].hi) {
            r = c->api.event_sync(c->upload[i].done);
            c->upload[i].busy = r != 0;
        }
    return r;
}

/* send, recv, allreduce: on the host, over the pinned host arena, with
 * their copies on the copy stream so that the compute stream never waits
 * for the host and the host waits for the compute stream only where it
 * needs a kernel's result (a send's input).
 *
 * Down (a send's or allreduce's inputs):
 *   computed on the compute stream, the copy stream waits for it: the copy
 *     reads what the kernels queued so far wrote (read after write);
 *   the copies, then copied on the copy stream; the host waits for copied
 *     (not for the compute stream) before the hub takes the bytes.  Nothing
 *     launched later can overwrite the device source before the copy, as
 *     the host launches nothing until copied; the copy stream runs in order,
 *     so an upload still reading the same host bytes reads them first.
 * Up (a recv's or allreduce's outputs):
 *   before the host writes the outputs' host range, it waits for the
 *     uploads in flight that read that range (write after read on the host:
 *     the next receive into the same tensor);
 *   computed on the compute stream, the copy stream waits for it: kernels
 *     queued earlier may still read the device range the memory plan gives
 *     these outputs (write after read on the device);
 *   the copies, then the slot's event on the copy stream, and the compute
 *     stream waits for it: the kernels launched after read what came up
 *     (read after write).  The host does not wait: it goes on launching,
 *     and its next receive overlaps the copy and the kernels before it.
 * A phase's end synchronises the compute stream, which has waited for
 * every upload: no copy is in flight between phases. */
static int run_on_host(rt_cuda *c, const rt_op *op, char *arena, rt_context *ctx)
{
    cu_result r = 0;
    if (op->n_in > 0 && !bucket_reduced(op, ctx)) {
        r = c->api.event_record(c->computed, c->stream);
        if (r == 0)
            r = c->api.stream_wait_event(c->copy, c->computed, 0);
        for (int i = 0; i < op->n_in && r == 0; i++)
            r = c->api.dtoh(arena + op->in[i].offset, c->arena + (cu_deviceptr)op->in[i].offset,
                            (size_t)rt_tensor_bytes(&op->in[i]), c->copy);
        if (r == 0)
            r = c->api.event_record(c->copied, c->copy);
        if (r == 0)
            r = c->api.event_sync(c->copied);
        if (r)
            return ctx_fail(ctx, op, "copying to the host", r);
    }
    int64_t lo = INT64_MAX, hi = INT64_MIN; /* the host range the outputs cover */
    for (int i = 0; i < op->n_out; i++) {
        int64_t at = op->out[i].offset, end = at + rt_tensor_bytes(&op->out[i]);
        lo = at < lo ? at : lo;
        hi = end > hi ? end : hi;
    }
    if (op->n_out > 0 && (r = uploads_wait(c, lo, hi)) != 0)
        return ctx_fail(ctx, op, "waiting for an upload", r);
    /* An all-reduce goes at once, not in a bucket: its result must be on the
     * device before the next step reads it.  The overlap's hook ran already
     * (rt_cuda_op_run), before this op's copies. */
    int (*before_op)(void *, const rt_op *, rt_context *) = ctx->before_op;
    ctx->before_op = NULL;
    int rc = rt_op_run(op, arena, ctx);
    ctx->before_op = before_op;
    if (rc != 0 || ((op->op == OP_ALLREDUCE || op->op == OP_ALLGATHER) && rt_step_flush_buckets(ctx)))
        return -1;
    if (op->n_out == 0)
        return 0;
    /* The next slot; if it is still in flight (RT_CUDA_UPLOADS receives
     * ago), the host waits for it. */
    int k = c->next_upload;
    c->next_upload = (k + 1) % RT_CUDA_UPLOADS;
    if (c->upload[k].busy && (r = c->api.event_sync(c->upload[k].done)) != 0)
        return ctx_fail(ctx, op, "waiting for an upload", r);
    c->upload[k].busy = 0;
    r = c->api.event_record(c->computed, c->stream);
    if (r == 0)
        r = c->api.stream_wait_event(c->copy, c->computed, 0);
    for (int i = 0; i < op->n_out && r == 0; i++)
        r = c->api.htod(c->arena + (cu_deviceptr)op->out[i].offset, arena + op->out[i].offset,
                        (size_t)rt_tensor_bytes(&op->out[i]), c->copy);
    if (r == 0)
        r = c->api.event_record(c->upload[k].done, c->copy);
    if (r == 0)
        r = c->api.stream_wait_event(c->stream, c->upload[k].done, 0);
    if (r)
        return ctx_fail(ctx, op, "copying to the device", r);
    c->upload[k].lo = lo, c->upload[k].hi = hi, c->upload[k].busy = 1;
    return 0;
}

/* A gradient bucket's members down to the host arena, for the overlap's
 * thread (cuda.h).  The send's pattern (run_on_host): the copy stream
 * waits for the kernels queued so far (the ops before the hook's, which
 * made the gradients: read after write), the host for the copies only.
 * An upload still reading the same host bytes is waited for first (write
 * after read on the host).  Nothing is launched until the copies are done,
 * so no later kernel can change a gradient under them. */
int rt_cuda_fetch(void *cuda, const rt_overlap_range *ranges, int32_t n, rt_context *ctx)
{
    rt_cuda *c = cuda;
    cu_result r = 0;
    for (int32_t i = 0; i < n && r == 0; i++)
        r = uploads_wait(c, ranges[i].offset, ranges[i].offset + ranges[i].bytes);
    if (r == 0)
        r = c->api.event_record(c->computed, c->stream);
    if (r == 0)
        r = c->api.stream_wait_event(c->copy, c->computed, 0);
    for (int32_t i = 0; i < n && r == 0; i++)
        if (ranges[i].bytes > 0)
            r = c->api.dtoh(c->host_arena + ranges[i].offset, c->arena + (cu_deviceptr)ranges[i].offset,
                            (size_t)ranges[i].bytes, c->copy);
    if (r == 0)
        r = c->api.event_record(c->copied, c->copy);
    if (r == 0)
        r = c->api.event_sync(c->copied);
    if (r)
        return ctx_fail(ctx, NULL, "copying a gradient bucket to the host", r);
    /* The backward's end pulls the rest (rt_cuda_phase_end). */
    for (int32_t i = 0; i < n; i++)
        for (int32_t g = 0; g < c->n_grads; g++)
            if (c->grads[g].offset == ranges[i].offset && c->grads[g].bytes == ranges[i].bytes)
                c->grad_fetched[g] = 1;
    return 0;
}

/* The cudaDataType of a product operand's dtype; -1: cuBLAS does not take it. */
static int blas_type(int32_t dtype)
{
    return dtype == DT_F32 ? CUDA_R_32F : dtype == DT_BF16 ? CUDA_R_16BF : dtype == DT_F16 ? CUDA_R_16F : -1;
}

/* One product step: f32 operands, an sgemm (TF32 when the handle allows
 * it); 16-bit ones, GemmEx with an f32 accumulator and C in its own type. */
static int run_gemm(rt_cuda *c, const rt_op *op, const rt_cuda_step *s, rt_context *ctx)
{
    rt_cuda_colmajor_gemm g = rt_cuda_gemm_colmajor(s);
    const rt_cuda_arg *a = &s->arg[g.a_arg], *b = &s->arg[g.b_arg], *cc = &s->arg[2];
    void *A = (void *)(uintptr_t)place(c, a), *B = (void *)(uintptr_t)place(c, b), *C = (void *)(uintptr_t)place(c, cc);
    if (g.m > INT32_MAX || g.n > INT32_MAX || g.k > INT32_MAX || g.batch > INT32_MAX) {
        snprintf(ctx->msg, sizeof ctx->msg, "op '%s': a matrix product too large for cuBLAS's int sizes", op->name);
        return -1;
    }
    int st;
    const char *what;
    if (a->dtype == DT_F32 && b->dtype == DT_F32 && cc->dtype == DT_F32) {
        what = "cublasSgemmStridedBatched";
        st = c->api.blas_sgemm(c->blas, g.trans_a, g.trans_b, (int)g.m, (int)g.n, (int)g.k, &g.alpha, A, (int)g.lda,
                               g.stride_a, B, (int)g.ldb, g.stride_b, &g.beta, C, (int)g.ldc, g.stride_c, (int)g.batch);
    } else {
        what = "cublasGemmStridedBatchedEx";
        st = c->api.blas_gemm_ex(c->blas, g.trans_a, g.trans_b, (int)g.m, (int)g.n, (int)g.k, &g.alpha, A,
                                 blas_type(a->dtype), (int)g.lda, g.stride_a, B, blas_type(b->dtype), (int)g.ldb,
                                 g.stride_b, &g.beta, C, blas_type(cc->dtype), (int)g.ldc, g.stride_c, (int)g.batch,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
    if (st != 0) {
        snprintf(ctx->msg, sizeof ctx->msg, "op '%s' (line %d): %s failed (status %d)", op->name, (int)op->line, what,
                 st);
        return -1;
    }
    return 0;
}

int rt_cuda_op_run(const rt_op *op, const rt_cuda_op *cop, char *arena, rt_context *ctx)
{
    rt_cuda *c = ctx->cuda;
    /* The step's last backward: a bucket whose gradients the ops before
     * this one made final goes to the all-reduce thread (rt_cuda_fetch
     * brings it down first). */
    if (ctx->before_op && ctx->before_op(ctx->before_op_user, op, ctx))
        return -1;
    if (bucket_reduced(op, ctx) && op->in[0].offset == op->out[0].offset)
        return 0; /* in place: the average is on the device already */
    int on_device = 0, on_host = 0;
    for (int32_t i = cop->first; i < cop->first + cop->count; i++) {
        on_device |= c->steps[i].kind != RT_CUDA_STEP_HOST;
        on_host |= c->steps[i].kind == RT_CUDA_STEP_HOST;
    }
    int paced = on_device && ctx->emulate_devices && op->est_seconds > 0;
    /* --trace: an op run on the GPU alone is a span that ends when the
     * stream is done with it, so the span is its time on the GPU, not its
     * launch's (the host no longer runs ahead while tracing).  A host
     * step's message is drawn by rt_op_run. */
    int traced = ctx->trace && on_device && !on_host;
    double t0 = paced ? rt_seconds_now() : 0.0, span0 = traced ? rt_trace_clock() : 0.0;
    /* The run's settings; a caller without them (a test) gets the op's own. */
    rt_train_settings compiled;
    const rt_train_settings *train = ctx->train;
    if (!train) {
        rt_train_settings_from_ops(op, 1, &compiled);
        train = &compiled;
    }
    for (int32_t i = cop->first; i < cop->first + cop->count; i++) {
        const rt_cuda_step *s = &c->steps[i];
        if (s->kind == RT_CUDA_STEP_HOST) {
            if (run_on_host(c, op, arena, ctx))
                return -1;
        } else if (s->kind == RT_CUDA_STEP_GEMM) {
            if (run_gemm(c, op, s, ctx))
                return -1;
        } else {
            rt_cuda_args args;
            for (int k = 0; k < RT_CUDA_MAX_ARGS; k++)
                args.p[k] = place(c, &s->arg[k]);
            args.step = ctx->step;
            args.adam_step = ctx->step - ctx->skipped;
            args.loss_scale = ctx->loss_scale > 0 ? ctx->loss_scale : 1.0f;
            args.inject_overflow = ctx->inject_overflow;
            args.loss_weight = ctx->loss_weight > 0 ? ctx->loss_weight : 1.0f;
            args.lr = (float)rt_train_lr(train, ctx->step);
            args.max_norm = train->grad_clip;
            args.weight_decay = train->weight_decay;
            args.stats_mode = rt_stats_mode_of(ctx);
            args.unused = 0;
            void *params[] = { &args };
            cu_result r = c->api.launch(c->functions[s->kernel], s->grid[0], s->grid[1], s->grid[2], s->block[0],
                                        s->block[1], s->block[2], s->shared_bytes, c->stream, params, NULL);
            if (r)
                return ctx_fail(ctx, op, "cuLaunchKernel", r);
            if (s->check_status && check_status(c, op, arena, ctx))
                return -1;
        }
    }
    if (paced || traced) { /* the op is done when the stream is */
        cu_result r = c->api.stream_sync(c->stream);
        if (r)
            return ctx_fail(ctx, op, "cuStreamSynchronize", r);
        if (paced)
            rt_pace_op(ctx, op->est_seconds, rt_seconds_now() - t0);
        if (traced)
            rt_op_trace(op, ctx, span0, rt_trace_clock());
    }
    return 0;
}
