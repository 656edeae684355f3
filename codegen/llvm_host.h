/* llvm_host.h: emit one device's host program as an object file (LLVM C API). */
#ifndef FUSION_LLVM_HOST_H
#define FUSION_LLVM_HOST_H

#include "../ir/ir.h"
#include "../runtime/program.h"

typedef struct {
    int32_t     index;         /* the device's number in the cluster               */
    const char *name;          /* its name in the cluster                          */
    int32_t     stage, replica;/* what it runs (the graph's placement)             */
    int64_t     arena_bytes;   /* from the memory pass                             */
    int32_t     threads;
    double      slowdown;
    const rt_peer *peers;  int32_t n_peers;   /* every device of the cluster        */
    const rt_link *links;  int32_t n_links;   /* every link the program uses        */
    int32_t     port_base;
} llvm_device_info;

/* Lower every node of the device's stage (in order) and write the object
 * with the manifest, tables, ops and the three phase functions to
 * object_path (runtime/program.h). */
int llvm_emit_device(const ir_graph *g, const llvm_device_info *dev, const char *object_path, struct diag *err);

#endif
