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
#include "lower.h"

static int32_t device_of(const ir_node *n) { return n->device >= 0 ? n->device : 0; }

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

/* The tensors main needs to find: sources (inputs, params, state), the
 * loss, and each param's gradient. */
static int collect_tensors(const ir_graph *g, rt_tensor_info **out, int32_t *count, int32_t *loss)
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
        if (v == g->loss)
            *loss = n;
        rt_tensor_info *ti = &t[n++];
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

/* i32 NAME(i8* arena, i8* ctx): one rt_op_run call for each of ops
 * [first, end), in order; returns -1 at the first that fails. */
static void add_step_function(LLVMModuleRef m, LLVMContextRef cx, const char *name, int32_t first, int32_t end,
                              int32_t blob_len)
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
    for (int32_t i = first; i < end; i++) {
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

int llvm_emit_device(const ir_graph *g, const llvm_device_info *dev, const char *object_path, struct diag *err)
{
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    int32_t n_ops = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        n_ops += device_of(&g->nodes[i]) == dev->index;
    rt_op *ops = calloc((size_t)n_ops + 1, sizeof *ops);
    ir_phase *ops_phase = calloc((size_t)n_ops + 1, sizeof *ops_phase);
    int64_t *offsets = malloc(((size_t)g->n_values + 1) * sizeof *offsets);
    rt_tensor_info *tensors = NULL;
    int32_t n_tensors = 0, loss = -1, k = 0;
    int rc = 0;
    if (!ops || !ops_phase || !offsets || collect_tensors(g, &tensors, &n_tensors, &loss)) {
        rc = diag_set(err, file, 0, "out of memory generating code");
        goto done;
    }
    for (int32_t v = 0; v < g->n_values; v++) {
        offsets[v] = g->values[v].offset;
        if (offsets[v] < 0) {
            rc = diag_set(err, file, 0, "value '%s' has no place in the arena: run the memory pass first",
                          ir_value_name(g, v));
            goto done;
        }
    }
    for (int32_t i = 0; i < g->n_nodes && rc == 0; i++)
        if (device_of(&g->nodes[i]) == dev->index) {
            ops_phase[k] = g->nodes[i].phase;
            rc = lower_node(g, i, offsets, g->nodes[i].ws_offset, &ops[k++], err);
        }
    if (rc)
        goto done;

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
    /* The optimizer's ops come last (the optimizer pass appends them). */
    int32_t first_update = n_ops;
    while (first_update > 0 && ops_phase[first_update - 1] == PHASE_UPDATE)
        first_update--;
    int32_t blob_len = (int32_t)((size_t)n_ops * sizeof *ops);
    add_step_function(m, cx, "fusion_forward_backward", 0, first_update, blob_len);
    add_step_function(m, cx, "fusion_update", first_update, n_ops, blob_len);

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
    free(tensors);
    return rc;
}
