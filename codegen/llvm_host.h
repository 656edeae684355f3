/* llvm_host.h: emit one device's host program as an object file (LLVM C API). */
#ifndef FUSION_LLVM_HOST_H
#define FUSION_LLVM_HOST_H

#include "../ir/ir.h"
#include "../runtime/program.h"

typedef struct {
    int32_t     index;         /* the device's number in the graph (node.device)  */
    const char *name;          /* its name in the cluster                          */
    int64_t     arena_bytes;   /* from the memory pass                             */
    int32_t     threads;
    double      slowdown;
} llvm_device_info;

/* Lower every node placed on the device (in order) and write the object with
 * the manifest, tensor table, ops and fusion_step to object_path. */
int llvm_emit_device(const ir_graph *g, const llvm_device_info *dev, const char *object_path, struct diag *err);

#endif
