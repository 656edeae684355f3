/* bundle.h: compile a graph for a cluster into OUT/<device>/fusion-<device>,
 * one standalone executable per device (its host program linked with the
 * static runtime), plus OUT/<device>/manifest.txt.  Every file is written
 * under a temporary name and renamed when whole. */
#ifndef FUSION_BUNDLE_H
#define FUSION_BUNDLE_H

#include "../frontend/cluster.h"
#include "../ir/ir.h"
#include "../runtime/program.h"

typedef struct {
    const char *cc;              /* the C compiler that links (default: the one fusion was built with) */
    const char *runtime_libs[4]; /* static libraries to link, NULL-terminated */
    const char *link_flags;      /* e.g. "-lopenblas -fopenmp -lm"            */
    int cublas_system;           /* 1: a CUDA device's bundle leaves cuBLAS to the host
                                    (--cublas system); 0: it carries it in lib/ */
    const char *run_key;         /* the run secret's file to use (--run-key: a re-plan of a running
                                    run); NULL: a new secret.  Either way OUT/run.key and every
                                    bundle's run.key, mode 0600 (runtime/comm/seal.h) */
} bundle_toolchain;

/* The toolchain fusion was built with (paths fixed at build time). */
const bundle_toolchain *bundle_default_toolchain(void);

/* One bundle per device of the graph's placement (every replica of every
 * stage), and OUT/launch-local.sh, which starts them all on this machine
 * (see bundle.c).  port_base: link i of the program listens on
 * port_base + i (0: 29500). */
int bundle_write(const ir_graph *g, const cluster *c, const char *out_dir, const bundle_toolchain *tc,
                 int32_t port_base, struct diag *err);

/* --sync diloco: one graph a site, each placed on its site (device
 * indices the whole cluster's), its bundles and the run's outer settings
 * (runtime/program.h; site, n_sites, row_offset and n_params are filled
 * here: the sites' rows of the global batch follow each other in site
 * order).  The devices of all sites share one build id and one link list;
 * each parameter's holders in every two sites get a link. */
typedef struct {
    int32_t n_sites;
    const ir_graph *graphs[RT_MAX_SITES];
    int64_t site_rows[RT_MAX_SITES]; /* each site's rows of the global batch */
    rt_diloco_info outer;
} bundle_sites;

int bundle_write_sites(const bundle_sites *s, const cluster *c, const char *out_dir, const bundle_toolchain *tc,
                       int32_t port_base, struct diag *err);

#endif
