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

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <xxhash.h>

#include "../ir/ops.h"
#include "../passes/passes.h"
#include "lower.h"

static int32_t stage_of(const ir_node *n) { return n->stage >= 0 ? n->stage : 0; }

/* A constant [len x i8] global holding `bytes`, 16-byte aligned. */
static void add_blob(LLVMModuleRef m, LLVMContextRef cx, const char *name, const void *bytes, size_t len)
{
    LLVMValueRef init = LLVMConstStringInContext(cx, (const char *)bytes, (unsigned)len, 1);
    LLVMValueRef global = LLVMAddGlobal(m, LLVMTypeOf(init), name);
    LLVMSetInitializer(global, init);
    LLVMSetGlobalConstant(global, 1);
    LLVMSetAlignment(global, 16);
    LLVMSetLinkage(global, LLVMExternalLinkage);
}

/* The graph's identity: a hash of its text form, so peers built from
 * another compile are told apart at the handshake. */
static uint64_t graph_build_id(const ir_graph *g)
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
 * (B,T) are the token ids and the targets. */
static int32_t feed_of(const ir_graph *g, int32_t v)
{
    int32_t k = 0;
    for (int32_t u = 0; u < g->n_values; u++) {
        const ir_value *val = &g->values[u];
        if (val->role != ROLE_INPUT || val->dtype != DT_I32 || val->shape.rank != 2)
            continue;
        if (u == v)
            return k < 2 ? k : -1;
        k++;
    }
    return -1;
}

/* The tensors main needs to find on this stage: sources (inputs, params,
 * state), the loss, and each param's gradient. */
static int collect_tensors(const ir_graph *g, int32_t stage, const int32_t *reader_stage, rt_tensor_info **out,
                           int32_t *count, int32_t *loss)
{
    rt_tensor_info *t = calloc((size_t)g->n_values + 1, sizeof *t);
    if (!t)
        return -1;
    int32_t n = 0;
    *loss = -1;
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *val = &g->values[v];
        if (val->producer >= 0 && v != g->loss && !is_param_gradient(g, v))
            continue;
        if (value_stage(g, v, reader_stage) != stage)
            continue;
        if (v == g->loss)
            *loss = n;
        rt_tensor_info *ti = &t[n++];
        ti->feed = val->role == ROLE_INPUT ? feed_of(g, v) : -1;
        snprintf(ti->name, sizeof ti->name, "%s", ir_value_name(g, v));
        ti->role = val->role;
        ti->dtype = val->dtype;
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

/* i32 NAME(i8* arena, i8* ctx): one rt_op_run call for each op i with
 * phase[i] == phase, in order; returns -1 at the first that fails. */
static void add_step_function(LLVMModuleRef m, LLVMContextRef cx, const char *name, const ir_phase *phase,
                              int32_t n_ops, ir_phase want, int32_t blob_len)
{
    LLVMTypeRef i8p = LLVMPointerType(LLVMInt8TypeInContext(cx), 0), i32 = LLVMInt32TypeInContext(cx);
    LLVMTypeRef i64 = LLVMInt64TypeInContext(cx);
    LLVMTypeRef run_params[3] = { i8p, i8p, i8p }, step_params[2] = { i8p, i8p };
    LLVMTypeRef run_type = LLVMFunctionType(i32, run_params, 3, 0);
    LLVMValueRef run = LLVMGetNamedFunction(m, "rt_op_run");
    if (!run)
        run = LLVMAddFunction(m, "rt_op_run", run_type);
    LLVMValueRef step = LLVMAddFunction(m, name, LLVMFunctionType(i32, step_params, 2, 0));
    LLVMValueRef ops = LLVMGetNamedGlobal(m, "fusion_ops_blob");
    LLVMTypeRef blob_type = LLVMArrayType(LLVMInt8TypeInContext(cx), (unsigned)blob_len);

    LLVMBuilderRef b = LLVMCreateBuilderInContext(cx);
    LLVMBasicBlockRef fail = LLVMAppendBasicBlockInContext(cx, step, "fail");
    LLVMBasicBlockRef block = LLVMAppendBasicBlockInContext(cx, step, "entry");
    LLVMMoveBasicBlockBefore(block, fail);
    LLVMPositionBuilderAtEnd(b, block);
    LLVMValueRef arena = LLVMGetParam(step, 0), ctx = LLVMGetParam(step, 1);
    for (int32_t i = 0; i < n_ops; i++) {
        if (phase[i] != want)
            continue;
        LLVMValueRef index[2] = { LLVMConstInt(i64, 0, 0), LLVMConstInt(i64, (uint64_t)i * sizeof(rt_op), 0) };
        LLVMValueRef op = LLVMConstInBoundsGEP2(blob_type, ops, index, 2);
        LLVMValueRef args[3] = { op, arena, ctx };
        LLVMValueRef rc = LLVMBuildCall2(b, run_type, run, args, 3, "");
        LLVMValueRef failed = LLVMBuildICmp(b, LLVMIntNE, rc, LLVMConstInt(i32, 0, 0), "");
        LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(cx, step, "");
        LLVMMoveBasicBlockBefore(next, fail);
        LLVMBuildCondBr(b, failed, fail, next);
        LLVMPositionBuilderAtEnd(b, next);
    }
    LLVMBuildRet(b, LLVMConstInt(i32, 0, 0));
    LLVMPositionBuilderAtEnd(b, fail);
    LLVMBuildRet(b, LLVMConstInt(i32, (uint64_t)-1, 1));
    LLVMDisposeBuilder(b);
}

/* The stash table: memory_stash_values as arena places. */
static int collect_stash(const ir_graph *g, int32_t stage, rt_tensor **out, int32_t *count)
{
    rt_tensor *t = calloc((size_t)g->n_values + 1, sizeof *t);
    int32_t *ids = malloc(((size_t)g->n_values + 1) * sizeof *ids);
    int32_t n = t && ids ? memory_stash_values(g, stage, ids) : -1;
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
    int32_t n_tensors = 0, loss = -1, k = 0, n_stash = 0;
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
    if (collect_tensors(g, dev->stage, reader_stage, &tensors, &n_tensors, &loss) ||
        collect_stash(g, dev->stage, &stash, &n_stash)) {
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
            rc = lower_node(g, i, offsets, g->nodes[i].ws_offset, &ops[k++], err);
        }
    if (rc)
        goto done;

    const ir_placement *pl = &g->placement;
    int32_t S = pl->n_stages > 0 ? pl->n_stages : 1, R = pl->n_stages > 0 ? pl->n_replicas : 1;
    int32_t single = 0;
    const int32_t *placement = pl->n_stages > 0 ? pl->device : &single;
    rt_manifest manifest;
    memset(&manifest, 0, sizeof manifest);
    snprintf(manifest.model, sizeof manifest.model, "%s", ir_str(g, g->name));
    snprintf(manifest.device, sizeof manifest.device, "%s", dev->name);
    manifest.build_id = graph_build_id(g);
    manifest.arena_bytes = dev->arena_bytes;
    manifest.n_ops = n_ops;
    manifest.n_tensors = n_tensors;
    manifest.threads = dev->threads;
    manifest.loss = loss;
    manifest.slowdown = dev->slowdown;
    manifest.device_index = dev->index;
    manifest.stage = dev->stage;
    manifest.replica = dev->replica;
    manifest.n_stages = S;
    manifest.n_replicas = R;
    manifest.micro_batches = pl->n_stages > 0 && pl->micro_batches > 0 ? pl->micro_batches : 1;
    manifest.warmup = pl->n_stages > 0 ? ir_placement_warmup(pl, dev->stage) : 0;
    manifest.n_stash = n_stash;
    manifest.n_peers = dev->n_peers;
    manifest.n_links = dev->n_links;
    manifest.port_base = dev->port_base;
    /* The global batch: the first input's elements (token ids), per
     * micro-batch and replica, times M and R. */
    for (int32_t v = 0; v < g->n_values && manifest.tokens_per_step == 0; v++)
        if (g->values[v].role == ROLE_INPUT && g->values[v].shape.rank > 0)
            manifest.tokens_per_step = ir_shape_numel(&g->values[v].shape) * manifest.micro_batches * R;

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
    int32_t blob_len = (int32_t)((size_t)n_ops * sizeof *ops);
    add_step_function(m, cx, "fusion_forward", ops_phase, n_ops, PHASE_FORWARD, blob_len);
    add_step_function(m, cx, "fusion_backward", ops_phase, n_ops, PHASE_BACKWARD, blob_len);
    add_step_function(m, cx, "fusion_update", ops_phase, n_ops, PHASE_UPDATE, blob_len);

    char *message = NULL;
    LLVMTargetRef target;
    if (LLVMVerifyModule(m, LLVMReturnStatusAction, &message)) {
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
