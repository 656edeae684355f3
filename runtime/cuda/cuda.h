/* cuda.h: the CUDA backend of a device program (libfusion_rt_cuda).
 *
 * The driver (libcuda.so.1) and cuBLAS (libcublas.so) are loaded with
 * dlopen when a CUDA program starts, so a bundle links and starts on any
 * machine, and one without a driver stops at once with one line saying so.
 * cuBLAS is the bundle's own (lib/libcublas.so.N beside the program, with
 * libcublasLt.so.N, which it finds through its run path $ORIGIN:
 * codegen/bundle_libs.h), else the host's (fusionc --cublas system).
 *
 * Memory.  The device holds the arena (the memory pass's plan, the same
 * offsets as on a CPU), the scratch area the steps ask for, a status
 * word and a flags word.  The host keeps its arena too, page-locked (cuMemHostRegister), and
 * it is what main.c reads and writes between phases.  Only what the host
 * touches crosses (rt_cuda_set_host_tensors names it): the first phase
 * copies the whole arena up (the parameters main initialised or resumed);
 * then a forward takes the inputs main loaded up and brings the loss and
 * the stash down, a backward takes the stash up (main may have put a
 * waiting micro-batch's back) and brings the gradients down (main sums
 * them), the update takes the gradients up (their mean).  Parameters and
 * optimizer state stay on the device; rt_cuda_pull_state brings them down
 * for a checkpoint.  Communication ops (send, recv, allreduce) run on the
 * host over the pinned arena: their inputs come down first, their outputs
 * go back up, both on a second stream (the copy stream) ordered against the
 * compute stream by events (cuda.c, run_on_host, says which hazard each
 * prevents).  What overlaps: a recv's upload, and the kernels queued before
 * it, with the host's launching and its next receive (the host waits for
 * an upload only before it writes those host bytes again); the kernels
 * after it wait on the device, not the host.  A send's copy down waits for
 * the kernels queued before it, and the host for that copy, not for the
 * compute stream.  The phases' own copies (inputs, stash, gradients) stay
 * on the compute stream and do not overlap compute.
 *
 * Products.  A step of f32 operands is cublasSgemmStridedBatched; the
 * program's tf32 flag (fusionc --tf32) sets the handle's math mode to
 * CUBLAS_TF32_TENSOR_OP_MATH, so those may run on TF32 tensor cores.  A
 * step of bf16 or fp16 operands (a --precision bf16 or fp16 program) is
 * cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F: tensor cores, an f32
 * accumulator, C in f32 (a weight's gradient) or the operands' type.
 *
 * fp16's loss scaling.  Each launch carries this step's loss scale and
 * whether an overflow is injected (rt_cuda_args), for the seed (fill) and
 * clip_scale; an adamw that finds clip_scale's NaN leaves its parameter
 * alone and sets a bit in the flags word, which the update phase's end
 * reads into ctx->overflowed for main's scaler.
 *
 * Modules.  The program embeds one fat binary (codegen/fatbin.h: CUBIN for
 * sm_80 and sm_90, PTX for compute_80) in its .nv_fatbin section; the
 * driver takes from it the CUBIN for the device's architecture (8.x: sm_80,
 * 9.0: sm_90), else compiles the PTX for the device it has.  A device older
 * than 8.0 is refused.
 *
 * Gradient buckets (comm/overlap.h).  On a stage of several replicas the
 * step's last backward hands each bucket to the all-reduce thread as soon
 * as its gradients are final: rt_cuda_fetch, the overlap's fetch hook,
 * copies the bucket's gradients down on the copy stream once the kernels
 * queued so far have run, and the host waits for that copy only (the
 * send's pattern); the backward's end then brings down only the gradients
 * no bucket fetched.  The averaged gradients go back up with the update
 * phase's copy of the gradients, before any update kernel reads them.
 *
 * --emulate-devices.  Each op's steps are launched, the compute stream is
 * synchronised, and what the op took short of its estimate (rt_op's
 * est_seconds) is waited out as on a CPU (exec.h, rt_pace_op).  So the
 * emulation gives up the stream's asynchrony: it paces to a declared
 * device, it does not measure this one.
 *
 * What has run: nothing here has run on a GPU (no machine of this project
 * has one).  The kernels are checked on the CPU by the emulation harness
 * (tests/unit/test_cuda_emulation.cpp); this file runs whole on an emulated
 * driver (tests/test_cuda_emulated_training.sh) and stops cleanly without
 * a driver.
 */
#ifndef FUSION_RT_CUDA_H
#define FUSION_RT_CUDA_H

#include <stddef.h>

#include "../comm/overlap.h"
#include "../exec.h"
#include "../program.h"
#include "cuda_program.h"

typedef struct rt_cuda rt_cuda;

/* Load the driver and cuBLAS, pick the device ($FUSION_CUDA_DEVICE, default
 * 0), load the module, allocate the device arena and scratch.  0, or -1
 * with a one-line reason in why (starting "no CUDA driver found" when
 * libcuda.so.1 does not load). */
int rt_cuda_open(rt_cuda **out, const rt_manifest *m, char *why, size_t why_len);
/* Page-lock the host arena (arena_bytes of m) and use it as the staging area. */
int rt_cuda_attach_host_arena(rt_cuda *c, char *arena, char *why, size_t why_len);
void rt_cuda_close(rt_cuda *c);

/* An arena range the host touches. */
typedef struct {
    int64_t offset, bytes;
} rt_cuda_range;

/* What crosses between phases: the tensors by role (inputs, gradients,
 * parameters and state), the stash (main.c's; its first n_stash_replay
 * tensors what a replay needs, all of them a micro-batch kept whole), the loss or an inference
 * program's output after the forward and its prompt step's output after
 * the prefill phase (indices into tensors, -1: none).  0, or -1 when out
 * of memory. */
int rt_cuda_set_host_tensors(rt_cuda *c, const rt_tensor_info *tensors, int32_t n_tensors, const rt_tensor *stash,
                             int32_t n_stash, int32_t n_stash_replay, int32_t loss, int32_t prefill_output);
/* Bring the parameters and optimizer state down to the host arena (before a checkpoint). */
int rt_cuda_pull_state(rt_cuda *c, char *arena, char *why, size_t why_len);
/* The host wrote to its arena beyond the sets above: the next phase copies it all up. */
void rt_cuda_host_wrote(rt_cuda *c);

/* comm/overlap.h's fetch hook (user: the rt_cuda): bring ranges[n] of the
 * device arena (a gradient bucket's members) down to the host arena once
 * the kernels queued so far have run; the backward's end leaves them be.
 * 0, or -1 with ctx->msg set. */
int rt_cuda_fetch(void *cuda, const rt_overlap_range *ranges, int32_t n, rt_context *ctx);

/* Called by the generated phase functions (codegen/llvm_host.c). */
int rt_cuda_phase_begin(char *arena, rt_context *ctx);
int rt_cuda_phase_end(char *arena, rt_context *ctx);
int rt_cuda_op_run(const rt_op *op, const rt_cuda_op *cop, char *arena, rt_context *ctx);

#endif
