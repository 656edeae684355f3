/* llvm_host.h: emit one device's host program as an object file (LLVM C API). */
#ifndef FUSION_LLVM_HOST_H
#define FUSION_LLVM_HOST_H

#include "../frontend/cluster.h"
#include "../ir/ir.h"
#include "../runtime/program.h"

typedef struct {
    int32_t index;          /* the device's number in the cluster               */
    const char *name;       /* its name in the cluster                          */
    int32_t stage, replica; /* what it runs (the graph's placement)             */
    int64_t arena_bytes;    /* from the memory pass                             */
    int32_t threads;
    double slowdown;
    const rt_peer *peers;
    int32_t n_peers; /* every device of the cluster        */
    const rt_link *links;
    int32_t n_links; /* every link the program uses        */
    int32_t port_base;
    /* A CUDA device: its ops also lower to CUDA steps and kernels, compiled
     * by NVRTC and embedded (runtime/cuda/cuda_program.h); the generated
     * source and PTX are written to cuda_dump_dir (kernels.cu, kernels.ptx).
     * NULL: a CPU device. */
    const char *cuda_dump_dir;
    const char *arch; /* the cluster file's arch, for the manifest        */
    /* The SMs its kernels are compiled for (a CUBIN each, PTX for the
     * newest): every distinct arch of the cluster's CUDA devices, so a
     * bundle runs on any of them (codegen/bundle.c: bundle_cuda_sms). */
    const int *cuda_sms;
    int n_cuda_sms;
    /* --sync diloco (runtime/program.h): the run's outer synchronisation and
     * every parameter's holder in each site; NULL: exact.  build_id, when
     * not 0, replaces the graph's: the sites' graphs differ, and their
     * devices must still recognise each other as one compile. */
    const rt_diloco_info *diloco;
    const rt_diloco_param *diloco_params;
    uint64_t build_id;
    const cluster_device *spec; /* its declared speed: each op's estimated seconds on
                                  it (passes.h) go into rt_op.est_seconds, for
                                  --emulate-devices; NULL: none                    */
} llvm_device_info;

/* Lower every node of the device's stage (in order) and write the object
 * with the manifest, tables, ops and the three phase functions to
 * object_path (runtime/program.h).  For a CUDA device the phase functions
 * call rt_cuda_op_run (runtime/cuda/cuda.h) instead of rt_op_run, between
 * rt_cuda_phase_begin and rt_cuda_phase_end. */
/* The graph's identity, a hash of its text form: the manifest's build id. */
uint64_t llvm_graph_build_id(const ir_graph *g);
/* A hash of the model's parameters (names, shapes): the same for every plan of one model. */
uint64_t llvm_graph_model_id(const ir_graph *g);

int llvm_emit_device(const ir_graph *g, const llvm_device_info *dev, const char *object_path, struct diag *err);

#endif
