/* estimate.c: the workload estimator (FusionLLM's), and the `estimate` pass.
 *
 * Our reading of the paper (shared/docs/papers.md):
 *
 *   t_op   = max(flops / peak, bytes / memory_bandwidth) + launch
 *   t_edge = latency + bytes / bandwidth
 *
 * with `peak` the device's matrix-product rate in the arithmetic the op
 * runs in (the cluster file's peak-fp32, -tf32, -bf16 or -fp16: datasheet
 * figures for GPUs, `fusionc profile`'s measurement for CPUs), so a matrix
 * product runs at the device's peak and everything else is bounded by
 * memory traffic, whose bytes are the tensors' in their dtypes.  A device the cluster file marks `slowdown="k"` is
 * emulated k times slower by the runtime, and estimated so.
 *
 * The pass writes each node's time on its device (or, before the fence
 * pass has placed it, on the cluster's first device) into est_time; the
 * fence pass asks estimate_node_seconds for every device it considers.
 */
#include <math.h>
#include <string.h>

#include "../ir/ops.h"
#include "passes.h"

/* What one op costs a device before any arithmetic: a kernel call and its
 * loop set-up on a CPU, a launch on a GPU. */
#define LAUNCH_SECONDS_CPU  4e-6
#define LAUNCH_SECONDS_CUDA 8e-6

const cluster_device *estimate_default_device(void)
{
    /* One AVX2/FMA core at about its sgemm rate (local-1's figures). */
    static const cluster_device cpu = { .name = "cpu0",
                                        .kind = DEVICE_CPU,
                                        .arch = "x86_64",
                                        .peak_flops = { [PEAK_FP32] = 50e9, [PEAK_BF16] = 50e9, [PEAK_FP16] = 50e9 },
                                        .memory_bytes = 4.0 * (1u << 30),
                                        .memory_bandwidth = 10e9,
                                        .threads = 1,
                                        .slowdown = 1.0 };
    return &cpu;
}

double estimate_usable_memory(const cluster_device *d)
{
    if (d->memory_bytes <= 0)
        return 0.0;
    double usable = d->memory_bytes - (d->kind == DEVICE_CUDA ? ESTIMATE_CUDA_CONTEXT_BYTES : 0.0);
    return usable > 0 ? usable : 1.0; /* a device smaller than its context fits nothing */
}

peak_kind estimate_peak_kind(ir_dtype precision, int tf32)
{
    return precision == DT_BF16 ? PEAK_BF16 : precision == DT_F16 ? PEAK_FP16 : tf32 ? PEAK_TF32 : PEAK_FP32;
}

peak_kind estimate_graph_peak_kind(const ir_graph *g) { return estimate_peak_kind(g->precision, g->tf32); }

peak_kind estimate_node_peak_kind(const ir_graph *g, int32_t n)
{
    const ir_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_in + node->n_out; i++) {
        ir_dtype dt = g->values[i < node->n_in ? node->in[i] : node->out[i - node->n_in]].dtype;
        if (dt == DT_BF16 || dt == DT_F16)
            return estimate_peak_kind(dt, 0);
    }
    return estimate_peak_kind(DT_F32, g->tf32);
}

double estimate_node_seconds(const ir_graph *g, int32_t n, const cluster_device *d)
{
    const ir_node *node = &g->nodes[n];
    if ((unsigned)node->op >= OP_COUNT || node->op == OP_SEND || node->op == OP_RECV)
        return 0.0; /* the link's time, not the device's */
    const op_def *def = &op_table[node->op];
    double flops = def->flops_forward ? def->flops_forward(g, node) : 0.0;
    double bytes = def->bytes_forward ? def->bytes_forward(g, node) : 0.0;
    /* A peak the file does not state was refused before any pass ran
     * (fusionc: cluster_require_peak); 1 GFLOPS guards a caller that did not. */
    double peak = d->peak_flops[estimate_node_peak_kind(g, n)];
    if (!(peak > 0))
        peak = 1e9;
    double bandwidth = d->memory_bandwidth > 0 ? d->memory_bandwidth : 1e9;
    double t = fmax(flops / peak, bytes / bandwidth);
    t += d->kind == DEVICE_CUDA ? LAUNCH_SECONDS_CUDA : LAUNCH_SECONDS_CPU;
    return t * (d->slowdown >= 1.0 ? d->slowdown : 1.0);
}

double estimate_launch_seconds(const cluster_device *d)
{
    return (d->kind == DEVICE_CUDA ? LAUNCH_SECONDS_CUDA : LAUNCH_SECONDS_CPU) *
           (d->slowdown >= 1.0 ? d->slowdown : 1.0);
}

double estimate_transfer_seconds(double bytes, double bandwidth, double latency)
{
    if (bytes <= 0)
        return 0.0;
    if (!(bandwidth > 0) || isinf(bandwidth))
        return latency;
    return latency + bytes / bandwidth;
}

int pass_estimate(ir_graph *g, const pass_options *opt, struct diag *err)
{
    const cluster *c = opt->cluster;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        int32_t dev = g->nodes[i].device;
        const cluster_device *d = estimate_default_device();
        if (c && c->n_devices > 0)
            d = &c->devices[dev >= 0 && dev < c->n_devices ? dev : 0];
        g->nodes[i].est_time = estimate_node_seconds(g, i, d);
    }
    return 0;
}
