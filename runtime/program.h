/* program.h: what a generated device program holds, and what runtime/main.c
 * reads from it.
 *
 * The code generator (codegen/llvm_host.c) emits, per device, an object
 * with three constant blobs and one function:
 *
 *   fusion_manifest_blob  an rt_manifest: model, device, arena size, counts
 *   fusion_tensors_blob   rt_tensor_info[n_tensors]: every input, param,
 *                         optimizer state, the loss and each param's
 *                         gradient (grad.<param>), with its place in the
 *                         arena (the data loader, the initialiser, the
 *                         checkpoints, the log and --dump-grads find them)
 *   fusion_ops_blob       rt_op[n_ops]: the schedule's ops
 *   fusion_forward_backward(arena, ctx), fusion_update(arena, ctx)
 *                         the schedule, split before the optimizer's ops (so
 *                         gradients can be read between the two): straight
 *                         lines of rt_op_run(&ops[i], arena, ctx) calls
 *
 * The blobs are the C structs' bytes (compiler and runtime are built
 * together, for the same ABI); main copies them out before use.
 */
#ifndef FUSION_RT_PROGRAM_H
#define FUSION_RT_PROGRAM_H

#include <stdint.h>

#include "exec.h"

#define RT_TENSOR_NAME_MAX 128

typedef struct {
    char    model[64];
    char    device[64];
    uint64_t build_id;         /* hash of the compiled graph: peers must match */
    int64_t arena_bytes;
    int32_t n_ops, n_tensors;
    int32_t threads;           /* the device's CPU threads                      */
    int32_t loss;              /* index into the tensors of the loss, -1 none   */
    double  slowdown;          /* >= 1: run this many times slower (emulation)  */
} rt_manifest;

typedef struct {
    char      name[RT_TENSOR_NAME_MAX];
    int32_t   role;            /* ir_role                                        */
    int32_t   dtype;           /* ir_dtype                                       */
    int32_t   init_kind;       /* ir_init_kind                                   */
    double    init_a;
    rt_tensor t;               /* dims and place in the arena                    */
} rt_tensor_info;

/* Defined by the generated object. */
extern const unsigned char fusion_manifest_blob[];
extern const unsigned char fusion_tensors_blob[];
extern const unsigned char fusion_ops_blob[];
int fusion_forward_backward(char *arena, rt_context *ctx);
int fusion_update(char *arena, rt_context *ctx);

#endif
