/* llvm_host.c: the host program of one device, built with the LLVM C API
 * and emitted as an object file (see runtime/program.h for its contents).
 *
 * The schedule becomes two straight lines of calls, fusion_forward_backward
 * and fusion_update (the optimizer's ops): for each op placed on the
 * device, in order,
 *
 *     %r = call i32 @rt_op_run(i8* <ops blob + i * sizeof(rt_op)>, i8* %arena, i8* %ctx)
 *     br (%r != 0), %fail, %next
 *
 * with every size and arena offset a constant inside the op's bytes.  Only
 * calls that work on LLVM 14 to 16 are used (LLVMBuildCall2, typed
 * function types).
 */
#include "llvm_host.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <xxhash.h>

#include "../runtime/atomic_file.h"
#include "../ir/ops.h"
#include "../passes/passes.h"
#include "cuda_kernels.h"
#include "../passes/lower.h"
#include "../runtime/shard.h"
#include "nvrtc.h"
#include "fatbin.h"

static int32_t stage_of(const ir_node *n) { return n->stage >= 0 ? n->stage : 0; }

/* A constant [len x i8] global holding `bytes`, 16-byte aligned. */
static LLVMValueRef add_blob(LLVMModuleRef m, LLVMContextRef cx, const char *name, const void *bytes, size_t len)
{
    LLVMValueRef init = LLVMConstStringInContext(cx, (const char *)bytes, (unsigned)len, 1);
    LLVMValueRef global = LLVMAddGlobal(m, LLVMTypeOf(init), name);
    LLVMSetInitializer(global, init);
    LLVMSetGlobalConstant(global, 1);
    LLVMSetAlignment(global, 16);
    LLVMSetLinkage(global, LLVMExternalLinkage);
    return global;
}

/* The graph's identity: a hash of its text form, so peers built from
 * another compile are told apart at the handshake. */
uint64_t llvm_graph_build_id(const ir_graph *g)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return 0;
    ir_graph_print(g, f);
    fclose(f);
    uint64_t id = XXH3_64bits(text, len);
    free(text);
    return id;
}

/* The model's identity for checkpoints: a hash of its parameters' names
 * and shapes (the params no op produces: a tied parameter received on a
 * later stage is a copy), in value order.  Every plan of one model has the
 * same; a model with a layer more or a wider one has another. */
uint64_t llvm_graph_model_id(const ir_graph *g)
{
    XXH3_state_t *s = XXH3_createState();
    if (!s || XXH3_64bits_reset(s) != XXH_OK) {
        XXH3_freeState(s);
        return 0;
    }
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != ROLE_PARAM || x->producer >= 0)
            continue;
        const char *name = ir_value_name(g, v);
        XXH3_64bits_update(s, name, strlen(name) + 1);
        int64_t shape[1 + IR_MAX_RANK] = { x->shape.rank };
        for (int i = 0; i < x->shape.rank; i++)
            shape[1 + i] = x->shape.dim[i];
        XXH3_64bits_update(s, shape, sizeof shape);
    }
    uint64_t id = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return id;
}

/* Is v the gradient of a param (grad.<param>)?  main dumps those. */
static int is_param_gradient(const ir_graph *g, int32_t v)
{
    const char *name = ir_value_name(g, v);
    if (g->values[v].role != ROLE_GRADIENT || strncmp(name, "grad.", 5) != 0)
        return 0;
    int32_t p = ir_find_value(g, name + 5);
    return p >= 0 && g->values[p].role == ROLE_PARAM;
}

/* The stage a value lives on: its producer's, or its readers' (the comm
 * pass leaves every value on one stage); -1 when nothing touches it. */
static int32_t value_stage(const ir_graph *g, int32_t v, const int32_t *reader_stage)
{
    if (g->values[v].producer >= 0)
        return stage_of(&g->nodes[g->values[v].producer]);
    return reader_stage[v];
}

/* The data loader's feeds: the model's first two i32 inputs of rank 2
 * (B,T) are the token ids and the targets; in an inference graph the
 * first is the token ids and decode.pos their positions, and the prefill
 * pass's copies prefill.<ids> and prefill.decode.pos the prompt step's;
 * a training graph with one f32 input of rank 4 and one i32 of rank 1 is
 * an image classifier: its images (B,C,H,W) and labels (B). */
static int32_t feed_of(const ir_graph *g, int32_t v)
{
    const char *name = ir_value_name(g, v);
    if (g->output >= 0 && strcmp(name, "decode.pos") == 0)
        return RT_FEED_POSITIONS;
    if (g->prefill_output >= 0 && strcmp(name, "prefill.decode.pos") == 0)
        return RT_FEED_PREFILL_POSITIONS;
    if (g->prefill_output >= 0 && strncmp(name, "prefill.", 8) == 0)
        return RT_FEED_PREFILL_TOKENS; /* the prefill pass's copy of the token ids */
    int32_t k = 0, images = -1, labels = -1, n_images = 0, n_labels = 0;
    for (int32_t u = 0; u < g->n_values; u++) {
        const ir_value *val = &g->values[u];
        if (val->role != ROLE_INPUT)
            continue;
        if (val->dtype == DT_F32 && val->shape.rank == 4)
            images = u, n_images++;
        if (val->dtype == DT_I32 && val->shape.rank == 1)
            labels = u, n_labels++;
        if (val->dtype != DT_I32 || val->shape.rank != 2)
            continue;
        if (u == v)
            return k < 2 ? k : -1;
        k++;
    }
    /* An image classifier: one (B,C,H,W) input and one (B) of labels. */
    if (n_images == 1 && n_labels == 1 && g->output < 0)
        return v == images ? RT_FEED_IMAGES : v == labels ? RT_FEED_LABELS : -1;
    return -1;
}

/* The tensors main needs to find on this stage: sources (inputs, params,
 * state), the loss, and each param's gradient. */
static int collect_tensors(const ir_graph *g, int32_t stage, const int32_t *reader_stage, rt_tensor_info **out,
                           int32_t *count, int32_t *loss, int32_t *output, int32_t *logits, int32_t *prefill_output)
{
    rt_tensor_info *t = calloc((size_t)g->n_values + 1, sizeof *t);
    if (!t)
        return -1;
    int32_t n = 0;
    *loss = *output = *logits = *prefill_output = -1;
    int32_t ce_logits =
        g->loss >= 0 && g->values[g->loss].producer >= 0 && g->nodes[g->values[g->loss].producer].op == OP_CROSS_ENTROPY
            ? g->nodes[g->values[g->loss].producer].in[0]
            : -1;
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *val = &g->values[v];
        if (val->producer >= 0 && v != g->loss && v != g->output && v != g->prefill_output && v != ce_logits &&
            !is_param_gradient(g, v))
            continue;
        if (value_stage(g, v, reader_stage) != stage)
            continue;
        if (v == g->loss)
            *loss = n;
        if (v == g->output)
            *output = n;
        if (v == g->prefill_output)
            *prefill_output = n;
        if (v == ce_logits)
            *logits = n;
        rt_tensor_info *ti = &t[n++];
        ti->feed = val->role == ROLE_INPUT ? feed_of(g, v) : -1;
        snprintf(ti->name, sizeof ti->name, "%s", ir_value_name(g, v));
        ti->role = val->role;
        ti->frozen = val->frozen;
        ti->dtype = val->dtype;
        ti->t.dtype = val->dtype;
        ti->init_kind = val->init.kind;
        ti->init_a = val->init.a;
        ti->t.rank = val->shape.rank;
        for (int i = 0; i < val->shape.rank; i++)
            ti->t.dim[i] = val->shape.dim[i];
        ti->t.offset = val->offset;
    }
    *out = t;
    *count = n;
    return 0;
}

/* A batchnorm's running statistics (its inputs 3 and 4) are marked so. */
static void mark_running_stats(const rt_op *op, rt_tensor_info *tensors, int32_t n_tensors)
{
    if (op->op != OP_BATCHNORM || op->n_in != 5)
        return;
    for (int32_t i = 0; i < n_tensors; i++)
        tensors[i].running |= tensors[i].role == ROLE_STATE &&
                              (tensors[i].t.offset == op->in[3].offset || tensors[i].t.offset == op->in[4].offset);
}

/* --shard-optimizer: a sharded adamw's moments are this replica's piece
 * of its parameter (runtime/shard.h): their tensors get the piece's size
 * and where it lies in the whole (checkpoints read and write by it). */
static void mark_moment_pieces(const rt_op *op, rt_tensor_info *tensors, int32_t n_tensors, int32_t replica, int32_t R)
{
    if (op->op != OP_ADAMW || !op->ints[ATTR_SHARD] || R < 2)
        return;
    int64_t whole = rt_tensor_numel(&op->in[0]);
    int32_t q = shard_piece_of(replica, R);
    for (int32_t i = 0; i < n_tensors; i++) {
        rt_tensor_info *ti = &tensors[i];
        if (ti->t.offset != op->in[2].offset && ti->t.offset != op->in[3].offset)
            continue;
        ti->whole = whole;
        ti->whole_lo = shard_piece_lo(whole, q, R);
        memset(ti->t.dim, 0, sizeof ti->t.dim);
        ti->t.rank = 1;
        ti->t.dim[0] = shard_piece_size(whole, q, R);
    }
}

/* Each all-reduce's `ready` (ATTR_READY): the index in ops of the backward
 * op that makes its gradient final (the gradient's producer), or -1 when
 * another phase makes it; the runtime starts a bucket's all-reduce once
 * every member's ready op has run in the step's last backward
 * (runtime/comm/overlap.h).  ops are the stage's nodes in graph order. */
static void set_allreduce_ready(const ir_graph *g, int32_t stage, rt_op *ops, const ir_phase *ops_phase, int32_t n_ops)
{
    for (int32_t i = 0, k = 0; i < g->n_nodes && k < n_ops; i++) {
        if (stage_of(&g->nodes[i]) != stage)
            continue;
        rt_op *op = &ops[k++];
        if (op->op != OP_ALLREDUCE)
            continue;
        op->ints[ATTR_READY] = -1;
        int32_t producer = g->values[g->nodes[i].in[0]].producer;
        for (int32_t j = 0, at = 0; producer >= 0 && j < i; j++) {
            if (stage_of(&g->nodes[j]) != stage)
                continue;
            if (j == producer && ops_phase[at] == PHASE_BACKWARD)
                op->ints[ATTR_READY] = at;
            at++;
        }
    }
}

/* i32 NAME(i8* arena, i8* ctx): one rt_op_run call for each op i with
 * phase[i] == phase, in order; returns -1 at the first that fails. */
/* A call that returns i32, then on to %fail unless it returned 0. */
static void build_checked_call(LLVMBuilderRef b, LLVMContextRef cx, LLVMValueRef fn, LLVMTypeRef type,
                               LLVMValueRef *args, unsigned n_args, LLVMValueRef step, LLVMBasicBlockRef fail)
{
    LLVMTypeRef i32 = LLVMInt32TypeInContext(cx);
    LLVMValueRef rc = LLVMBuildCall2(b, type, fn, args, n_args, "");
    LLVMValueRef failed = LLVMBuildICmp(b, LLVMIntNE, rc, LLVMConstInt(i32, 0, 0), "");
    LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(cx, step, "");
    LLVMMoveBasicBlockBefore(next, fail);
    LLVMBuildCondBr(b, failed, fail, next);
    LLVMPositionBuilderAtEnd(b, next);
}

static LLVMValueRef declare(LLVMModuleRef m, const char *name, LLVMTypeRef type)
{
    LLVMValueRef f = LLVMGetNamedFunction(m, name);
    return f ? f : LLVMAddFunction(m, name, type);
}

/* On a CUDA device (cuda_ops_len > 0) each op is
 *     rt_cuda_op_run(<op>, <its rt_cuda_op>, arena, ctx)
 * between rt_cuda_phase_begin(arena, ctx) and rt_cuda_phase_end(arena, ctx). */
static void add_step_function(LLVMModuleRef m, LLVMContextRef cx, const char *name, const ir_phase *phase,
                              int32_t n_ops, ir_phase want, int32_t blob_len, int32_t cuda_ops_len)
{
    LLVMTypeRef i8p = LLVMPointerType(LLVMInt8TypeInContext(cx), 0), i32 = LLVMInt32TypeInContext(cx);
    LLVMTypeRef i64 = LLVMInt64TypeInContext(cx);
    LLVMTypeRef run_params[4] = { i8p, i8p, i8p, i8p }, step_params[2] = { i8p, i8p };
    LLVMTypeRef run_type = LLVMFunctionType(i32, run_params, 3, 0);
    LLVMTypeRef cuda_run_type = LLVMFunctionType(i32, run_params, 4, 0);
    LLVMTypeRef phase_type = LLVMFunctionType(i32, step_params, 2, 0);
    int cuda = cuda_ops_len > 0;
    LLVMValueRef run = cuda ? declare(m, "rt_cuda_op_run", cuda_run_type) : declare(m, "rt_op_run", run_type);
    LLVMValueRef step = LLVMAddFunction(m, name, LLVMFunctionType(i32, step_params, 2, 0));
    LLVMValueRef ops = LLVMGetNamedGlobal(m, "fusion_ops_blob");
    LLVMValueRef cuda_ops = LLVMGetNamedGlobal(m, "fusion_cuda_ops_blob");
    LLVMTypeRef blob_type = LLVMArrayType(LLVMInt8TypeInContext(cx), (unsigned)blob_len);
    LLVMTypeRef cuda_blob_type = LLVMArrayType(LLVMInt8TypeInContext(cx), (unsigned)cuda_ops_len);

    LLVMBuilderRef b = LLVMCreateBuilderInContext(cx);
    LLVMBasicBlockRef fail = LLVMAppendBasicBlockInContext(cx, step, "fail");
    LLVMBasicBlockRef block = LLVMAppendBasicBlockInContext(cx, step, "entry");
    LLVMMoveBasicBlockBefore(block, fail);
    LLVMPositionBuilderAtEnd(b, block);
    LLVMValueRef arena = LLVMGetParam(step, 0), ctx = LLVMGetParam(step, 1);
    LLVMValueRef phase_args[2] = { arena, ctx };
    if (cuda)
        build_checked_call(b, cx, declare(m, "rt_cuda_phase_begin", phase_type), phase_type, phase_args, 2, step, fail);
    for (int32_t i = 0; i < n_ops; i++) {
        if (phase[i] != want)
            continue;
        LLVMValueRef index[2] = { LLVMConstInt(i64, 0, 0), LLVMConstInt(i64, (uint64_t)i * sizeof(rt_op), 0) };
        LLVMValueRef op = LLVMConstInBoundsGEP2(blob_type, ops, index, 2);
        if (cuda) {
            LLVMValueRef cindex[2] = { LLVMConstInt(i64, 0, 0),
                                       LLVMConstInt(i64, (uint64_t)i * sizeof(rt_cuda_op), 0) };
            LLVMValueRef cop = LLVMConstInBoundsGEP2(cuda_blob_type, cuda_ops, cindex, 2);
            LLVMValueRef args[4] = { op, cop, arena, ctx };
            build_checked_call(b, cx, run, cuda_run_type, args, 4, step, fail);
        } else {
            LLVMValueRef args[3] = { op, arena, ctx };
            build_checked_call(b, cx, run, run_type, args, 3, step, fail);
        }
    }
    if (cuda)
        build_checked_call(b, cx, declare(m, "rt_cuda_phase_end", phase_type), phase_type, phase_args, 2, step, fail);
    LLVMBuildRet(b, LLVMConstInt(i32, 0, 0));
    LLVMPositionBuilderAtEnd(b, fail);
    LLVMBuildRet(b, LLVMConstInt(i32, (uint64_t)-1, 1));
    LLVMDisposeBuilder(b);
}

/* The stash table: memory_stash_values as arena places, *replay of them
 * what a replay needs.  A stage that recomputes keeping some micro-batches
 * whole (ir_placement.keep) lists its forward's inputs first, then the
 * rest of what its backward reads (memory_stash_values_as). */
static int collect_stash(const ir_graph *g, int32_t stage, rt_tensor **out, int32_t *count, int32_t *replay)
{
    rt_tensor *t = calloc((size_t)g->n_values + 1, sizeof *t);
    int32_t *ids = malloc(((size_t)g->n_values + 1) * sizeof *ids);
    int32_t *whole = malloc(((size_t)g->n_values + 1) * sizeof *whole);
    int32_t n = t && ids && whole ? memory_stash_values(g, stage, ids) : -1;
    *replay = n;
    if (n >= 0 && ir_placement_recompute(&g->placement, stage) && ir_placement_keep(&g->placement, stage) > 0) {
        int32_t n_whole = memory_stash_values_as(g, stage, 0, whole);
        for (int32_t i = 0; i < n_whole; i++) {
            int listed = 0;
            for (int32_t j = 0; j < *replay && !listed; j++)
                listed = ids[j] == whole[i];
            if (!listed)
                ids[n++] = whole[i];
        }
        n = n_whole < 0 ? -1 : n;
    }
    free(whole);
    for (int32_t i = 0; i < n; i++) {
        const ir_value *val = &g->values[ids[i]];
        /* rt_tensor has no dtype: every stashed element is 4 bytes (f32, i32). */
        t[i].rank = val->shape.rank;
        for (int d = 0; d < val->shape.rank; d++)
            t[i].dim[d] = val->shape.dim[d];
        t[i].offset = val->offset;
    }
    free(ids);
    if (n < 0) {
        free(t);
        return -1;
    }
    *out = t;
    *count = n;
    return 0;
}

/* A CPU device's CUDA blobs: zero kernels, so main can refer to them all. */
static void add_empty_cuda_module(LLVMModuleRef m, LLVMContextRef cx)
{
    rt_cuda_module_info info;
    memset(&info, 0, sizeof info);
    add_blob(m, cx, "fusion_cuda_info_blob", &info, sizeof info);
    const char *names[] = { "fusion_cuda_steps_blob", "fusion_cuda_ops_blob", "fusion_cuda_names_blob",
                            "fusion_cuda_fatbin_blob" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        add_blob(m, cx, names[i], "", 1);
}

/* Write bytes to dir/name, whole or not at all. */
static int write_file(const char *dir, const char *name, const void *bytes, size_t len, struct diag *err)
{
    char path[FU_PATH_BYTES], why[FU_PATH_BYTES + 200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (atomic_write_file(path, bytes, len, why, sizeof why))
        return diag_set(err, path, 0, "%s", why);
    return 0;
}

/* A CUDA device: every op's steps and kernels (cuda_kernels.c), compiled
 * by NVRTC (nvrtc.c, cached), embedded as the fusion_cuda_* blobs. */
static int add_cuda_module(LLVMModuleRef m, LLVMContextRef cx, const llvm_device_info *dev, const rt_op *ops,
                           const ir_phase *ops_phase, int32_t n_ops, int32_t *cuda_ops_len, struct diag *err)
{
    cuda_plan plan;
    cuda_plan_init(&plan);
    nvrtc_images im;
    memset(&im, 0, sizeof im);
    char *names = NULL;
    int rc = 0;
    plan.fuse = 1;
    for (int32_t i = 0; i < n_ops && rc == 0; i++) {
        plan.group = ops_phase[i]; /* a kernel fuses only with one of its own phase */
        rc = cuda_plan_add_op(&plan, &ops[i], err);
    }
    if (rc == 0 && plan.oom)
        rc = diag_set(err, dev->name, 0, "out of memory generating CUDA kernels");
    if (rc == 0)
        rc = write_file(dev->cuda_dump_dir, "kernels.cu", plan.source, plan.source_len, err);
    if (rc == 0)
        rc = nvrtc_compile(plan.source, dev->name, dev->cuda_sms, dev->n_cuda_sms, &im, err);
    if (rc == 0)
        rc = write_file(dev->cuda_dump_dir, "kernels.ptx", im.ptx, im.ptx_bytes - 1, err);
    unsigned char *fat = NULL;
    size_t fat_bytes = 0;
    if (rc == 0)
        rc = fatbin_pack(&im, dev->name, &fat, &fat_bytes, err);
    size_t names_len = 0;
    for (int32_t k = 0; rc == 0 && k < plan.n_kernels; k++)
        names_len += strlen(plan.names[k]) + 1;
    if (rc == 0 && !(names = malloc(names_len + 1)))
        rc = diag_set(err, dev->name, 0, "out of memory");
    if (rc == 0) {
        size_t at = 0;
        for (int32_t k = 0; k < plan.n_kernels; k++) {
            size_t n = strlen(plan.names[k]) + 1;
            memcpy(names + at, plan.names[k], n);
            at += n;
        }
        rt_cuda_module_info info;
        memset(&info, 0, sizeof info);
        info.n_kernels = plan.n_kernels;
        info.n_steps = plan.n_steps;
        info.scratch_bytes = plan.scratch_bytes;
        info.fatbin_bytes = (int64_t)fat_bytes;
        info.names_bytes = (int64_t)names_len;
        snprintf(info.ptx_arch, sizeof info.ptx_arch, "compute_%d", im.ptx_sm);
        info.n_cubins = im.n_cubins;
        for (int k = 0; k < im.n_cubins && k < 8; k++)
            info.cubin_sm[k] = im.sm[k];
        info.ptx_sm = im.ptx_sm;
        add_blob(m, cx, "fusion_cuda_info_blob", &info, sizeof info);
        add_blob(m, cx, "fusion_cuda_steps_blob", plan.steps, (size_t)plan.n_steps * sizeof *plan.steps);
        add_blob(m, cx, "fusion_cuda_ops_blob", plan.ops, (size_t)plan.n_ops * sizeof *plan.ops);
        add_blob(m, cx, "fusion_cuda_names_blob", names, names_len);
        /* Where nvcc puts it, so that cuobjdump finds it. */
        LLVMSetSection(add_blob(m, cx, "fusion_cuda_fatbin_blob", fat, fat_bytes), ".nv_fatbin");
        *cuda_ops_len = (int32_t)((size_t)plan.n_ops * sizeof *plan.ops);
        if (*cuda_ops_len == 0) /* no ops on this device: nothing to run, but keep the CUDA path */
            *cuda_ops_len = 1;
    } else {
        add_empty_cuda_module(m, cx);
    }
    free(names);
    free(fat);
    nvrtc_images_free(&im);
    cuda_plan_free(&plan);
    return rc;
}

/* The fewest significant digits (6 at least) that read back to v. */
static int shortest_digits(double v)
{
    char buf[40];
    int p = 6;
    for (; p < 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    return p;
}

/* The model's hyper-parameters as built, "name=value ..." (rt_manifest.hypers). */
static int hypers_text(const ir_graph *g, char *out, size_t size, struct diag *err)
{
    size_t k = 0;
    out[0] = 0;
    for (int32_t i = 0; i < g->n_hypers; i++) {
        const ir_hyper *h = &g->hypers[i];
        int n = h->is_float
                    ? snprintf(out + k, size - k, "%s%s=%.*g", k ? " " : "", ir_str(g, h->name), shortest_digits(h->f),
                               h->f)
                    : snprintf(out + k, size - k, "%s%s=%lld", k ? " " : "", ir_str(g, h->name), (long long)h->i);
        if (n < 0 || (size_t)n >= size - k)
            return diag_set(err, ir_str(g, g->name), 0,
                            "the model's hyper-parameters take more than %zu bytes written out", size - 1);
        k += (size_t)n;
    }
    return 0;
}

int llvm_emit_device(const ir_graph *g, const llvm_device_info *dev, const char *object_path, struct diag *err)
{
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    int32_t n_ops = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        n_ops += stage_of(&g->nodes[i]) == dev->stage;
    rt_op *ops = calloc((size_t)n_ops + 1, sizeof *ops);
    ir_phase *ops_phase = calloc((size_t)n_ops + 1, sizeof *ops_phase);
    int64_t *offsets = malloc(((size_t)g->n_values + 1) * sizeof *offsets);
    int32_t *reader_stage = malloc(((size_t)g->n_values + 1) * sizeof *reader_stage);
    rt_tensor_info *tensors = NULL;
    rt_tensor *stash = NULL;
    int32_t n_tensors = 0, loss = -1, output = -1, logits = -1, prefill_output = -1, k = 0, n_stash = 0,
            n_stash_replay = 0;
    int rc = 0;
    if (!ops || !ops_phase || !offsets || !reader_stage) {
        rc = diag_set(err, file, 0, "out of memory generating code");
        goto done;
    }
    for (int32_t v = 0; v < g->n_values; v++)
        reader_stage[v] = -1;
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++)
            if (reader_stage[g->nodes[i].in[j]] < 0)
                reader_stage[g->nodes[i].in[j]] = stage_of(&g->nodes[i]);
    if (collect_tensors(g, dev->stage, reader_stage, &tensors, &n_tensors, &loss, &output, &logits, &prefill_output) ||
        collect_stash(g, dev->stage, &stash, &n_stash, &n_stash_replay)) {
        rc = diag_set(err, file, 0, "out of memory generating code");
        goto done;
    }
    for (int32_t v = 0; v < g->n_values; v++) {
        offsets[v] = g->values[v].offset;
        if (offsets[v] < 0 && value_stage(g, v, reader_stage) == dev->stage) {
            rc = diag_set(err, file, 0, "value '%s' has no place in the arena: run the memory pass first",
                          ir_value_name(g, v));
            goto done;
        }
    }
    for (int32_t i = 0; i < g->n_nodes && rc == 0; i++)
        if (stage_of(&g->nodes[i]) == dev->stage) {
            ops_phase[k] = g->nodes[i].phase == PHASE_NONE ? PHASE_FORWARD : g->nodes[i].phase;
            rc = lower_node(g, i, offsets, g->nodes[i].ws_offset, &ops[k], err);
            ops[k++].est_seconds = dev->spec ? estimate_node_seconds(g, i, dev->spec) : 0.0;
        }
    if (rc)
        goto done;
    set_allreduce_ready(g, dev->stage, ops, ops_phase, n_ops);

    const ir_placement *pl = &g->placement;
    int32_t S = pl->n_stages > 0 ? pl->n_stages : 1, R = pl->n_stages > 0 ? pl->n_replicas : 1;
    for (int32_t i = 0; i < n_ops; i++) {
        mark_moment_pieces(&ops[i], tensors, n_tensors, dev->replica, R);
        mark_running_stats(&ops[i], tensors, n_tensors);
        lower_for_replica(&ops[i], dev->replica, R);
    }
    int32_t single = 0;
    const int32_t *placement = pl->n_stages > 0 ? pl->device : &single;
    rt_manifest manifest;
    memset(&manifest, 0, sizeof manifest);
    snprintf(manifest.model, sizeof manifest.model, "%s", ir_str(g, g->name));
    snprintf(manifest.device, sizeof manifest.device, "%s", dev->name);
    manifest.build_id = dev->build_id ? dev->build_id : llvm_graph_build_id(g);
    manifest.model_id = llvm_graph_model_id(g);
    if ((rc = hypers_text(g, manifest.hypers, sizeof manifest.hypers, err)) != 0)
        goto done;
    manifest.arena_bytes = dev->arena_bytes;
    manifest.n_ops = n_ops;
    manifest.n_tensors = n_tensors;
    manifest.threads = dev->threads;
    manifest.loss = loss;
    manifest.output = output;
    manifest.inference = g->output >= 0;
    manifest.logits = logits;
    manifest.prefill_output = prefill_output;
    for (int32_t v = 0; v < g->n_values && g->prefill_output >= 0; v++) /* P: the prompt step's tokens a sequence */
        if (feed_of(g, v) == RT_FEED_PREFILL_TOKENS && g->values[v].role == ROLE_INPUT)
            manifest.prefill = (int32_t)g->values[v].shape.dim[1];
    manifest.slowdown = dev->slowdown;
    manifest.device_index = dev->index;
    manifest.stage = dev->stage;
    manifest.replica = dev->replica;
    manifest.n_stages = S;
    manifest.n_replicas = R;
    manifest.micro_batches = pl->n_stages > 0 && pl->micro_batches > 0 ? pl->micro_batches : 1;
    manifest.warmup = pl->n_stages > 0 ? ir_placement_warmup(pl, dev->stage) : 0;
    manifest.recompute = pl->n_stages > 0 ? ir_placement_recompute(pl, dev->stage) : 0;
    manifest.keep = pl->n_stages > 0 ? ir_placement_keep(pl, dev->stage) : 0;
    manifest.precision = (int32_t)g->precision;
    manifest.loss_scaling = g->precision == DT_F16;
    manifest.tf32 = g->tf32 != 0;
    manifest.n_stash = n_stash;
    manifest.n_stash_replay = n_stash_replay;
    manifest.n_peers = dev->n_peers;
    manifest.n_links = dev->n_links;
    manifest.port_base = dev->port_base;
    manifest.backend = dev->cuda_dump_dir ? RT_BACKEND_CUDA : RT_BACKEND_CPU;
    snprintf(manifest.arch, sizeof manifest.arch, "%s", dev->arch ? dev->arch : "");
    if (dev->diloco)
        manifest.diloco = *dev->diloco;
    /* The global batch: the first input's elements (token ids), per
     * micro-batch and replica, times M and R. */
    for (int32_t v = 0; v < g->n_values && manifest.tokens_per_step == 0; v++)
        if (g->values[v].role == ROLE_INPUT && g->values[v].shape.rank > 0)
            manifest.tokens_per_step = ir_shape_numel(&g->values[v].shape) * manifest.micro_batches * R;
    /* An image classifier counts images: its images' first dim. */
    for (int32_t v = 0; v < g->n_values; v++)
        if (g->values[v].role == ROLE_INPUT && feed_of(g, v) == RT_FEED_IMAGES) {
            manifest.images = 1;
            manifest.tokens_per_step = g->values[v].shape.dim[0] * manifest.micro_batches * R;
        }

    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    LLVMContextRef cx = LLVMContextCreate();
    LLVMModuleRef m = LLVMModuleCreateWithNameInContext(dev->name, cx);
    char *triple = LLVMGetDefaultTargetTriple();
    LLVMSetTarget(m, triple);
    add_blob(m, cx, "fusion_manifest_blob", &manifest, sizeof manifest);
    add_blob(m, cx, "fusion_tensors_blob", tensors, (size_t)n_tensors * sizeof *tensors);
    add_blob(m, cx, "fusion_ops_blob", ops, (size_t)n_ops * sizeof *ops);
    add_blob(m, cx, "fusion_stash_blob", stash, (size_t)n_stash * sizeof *stash);
    add_blob(m, cx, "fusion_placement_blob", placement, (size_t)S * (size_t)R * sizeof *placement);
    add_blob(m, cx, "fusion_peers_blob", dev->peers, (size_t)dev->n_peers * sizeof *dev->peers);
    add_blob(m, cx, "fusion_links_blob", dev->links, (size_t)dev->n_links * sizeof *dev->links);
    if (dev->diloco && dev->diloco->n_params > 0)
        add_blob(m, cx, "fusion_diloco_blob", dev->diloco_params,
                 (size_t)dev->diloco->n_params * sizeof *dev->diloco_params);
    else
        add_blob(m, cx, "fusion_diloco_blob", "", 1);
    int32_t blob_len = (int32_t)((size_t)n_ops * sizeof *ops);
    int32_t cuda_ops_len = 0;
    if (dev->cuda_dump_dir)
        rc = add_cuda_module(m, cx, dev, ops, ops_phase, n_ops, &cuda_ops_len, err);
    else
        add_empty_cuda_module(m, cx);
    add_step_function(m, cx, "fusion_forward", ops_phase, n_ops, PHASE_FORWARD, blob_len, cuda_ops_len);
    add_step_function(m, cx, "fusion_backward", ops_phase, n_ops, PHASE_BACKWARD, blob_len, cuda_ops_len);
    add_step_function(m, cx, "fusion_update", ops_phase, n_ops, PHASE_UPDATE, blob_len, cuda_ops_len);
    add_step_function(m, cx, "fusion_prefill", ops_phase, n_ops, PHASE_PREFILL, blob_len, cuda_ops_len);

    char *message = NULL;
    LLVMTargetRef target;
    if (rc) {
        /* the CUDA module failed (err says why): nothing to emit */
    } else if (LLVMVerifyModule(m, LLVMReturnStatusAction, &message)) {
        rc = diag_set(err, file, 0, "internal error: the generated module does not verify: %s", message);
    } else if (LLVMGetTargetFromTriple(triple, &target, &message)) {
        rc = diag_set(err, file, 0, "no LLVM target for %s: %s", triple, message);
    } else {
        LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, triple, "generic", "", LLVMCodeGenLevelDefault,
                                                          LLVMRelocPIC, LLVMCodeModelDefault);
        LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(tm);
        LLVMSetModuleDataLayout(m, layout);
        if (LLVMTargetMachineEmitToFile(tm, m, (char *)object_path, LLVMObjectFile, &message))
            rc = diag_set(err, object_path, 0, "cannot emit the object: %s", message);
        LLVMDisposeTargetData(layout);
        LLVMDisposeTargetMachine(tm);
    }
    LLVMDisposeMessage(message);
    LLVMDisposeMessage(triple);
    LLVMDisposeModule(m);
    LLVMContextDispose(cx);
done:
    free(ops);
    free(ops_phase);
    free(offsets);
    free(reader_stage);
    free(tensors);
    free(stash);
    return rc;
}
