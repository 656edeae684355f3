/* cluster.h: the hardware a model is trained on, read from a cluster XML.
 *
 * A cluster is regions of hosts of devices, plus links.  All quantities are
 * stored in base SI units as doubles (bytes, bytes/s, seconds, FLOP/s),
 * whatever units the file spelled them in ("20Mbps", "40ms", "16GiB").
 *
 * Link resolution between two devices (cluster_link_between):
 *   same device            -> infinite bandwidth, zero latency
 *   same host              -> the host's link-bandwidth / link-latency
 *                             (default CLUSTER_DEFAULT_HOST_* below)
 *   two hosts that accept no connection (inbound="false") -> no path:
 *                             CLUSTER_NO_PATH_* below, a link no plan
 *                             takes while it has another; a plan that
 *                             needs one is refused (codegen/bundle.c)
 *   explicit host-host <link> (either direction) -> that link
 *   same region            -> the region's bandwidth / latency
 *   explicit region-region <link> (either direction) -> that link
 *   otherwise              -> error at load time: every pair of regions that
 *                             has devices must be joined by a link.
 * Links are symmetric.
 *
 * The file format is documented at the top of frontend/cluster.xsd; the
 * quantities' units in frontend/units.h.
 */
#ifndef FUSION_CLUSTER_H
#define FUSION_CLUSTER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../ir/diag.h"

#define CLUSTER_NAME_MAX               128
#define CLUSTER_DEFAULT_HOST_BANDWIDTH (256e9 / 8) /* bytes/s: 256 Gbps, PCIe/NVLink class */
#define CLUSTER_DEFAULT_HOST_LATENCY   1e-6        /* seconds                           */
/* No path between two devices (both hosts behind NAT, cluster_has_path):
 * priced so that every estimate stays finite (no 0/0 in the planners'
 * sums) and no plan uses it while it has another: 1 byte/s, an hour. */
#define CLUSTER_NO_PATH_BANDWIDTH 1.0
#define CLUSTER_NO_PATH_LATENCY   3600.0

typedef enum { DEVICE_CPU, DEVICE_CUDA } device_kind;

/* The arithmetic a device's peak is stated for (cluster.xsd: peak-fp32,
 * peak-tf32, peak-bf16, peak-fp16).  Dense figures, never sparsity's: a
 * matrix product with inputs of that type and fp32 accumulation.  tf32 is
 * fp32 data through the tensor cores (opt-in for fp32 compiles). */
typedef enum { PEAK_FP32, PEAK_TF32, PEAK_BF16, PEAK_FP16, PEAK_COUNT } peak_kind;

typedef struct {
    char name[CLUSTER_NAME_MAX]; /* unique in the cluster               */
    device_kind kind;
    char arch[32];                 /* "sm_80", "sm_90", "x86_64"; may be "" */
    double peak_flops[PEAK_COUNT]; /* FLOP/s per peak_kind; 0: not stated */
    double memory_bytes;
    double memory_bandwidth; /* bytes/s                             */
    int threads;             /* CPU threads to use (>= 1)           */
    double slowdown;         /* >= 1: emulate a device this many times slower (default 1) */
    int host;                /* index into cluster.hosts            */
    int line;                /* source line                          */
    int standby;             /* standby="true": a spare (cluster.standbys) */
} cluster_device;

typedef struct {
    char name[CLUSTER_NAME_MAX];
    char address[256];     /* "127.0.0.1", "node3.lab.example"    */
    char user[64];         /* ssh user; "" = current user         */
    int port;              /* ssh port, default 22                */
    char path[256];        /* where bundles go; default "fusion"  */
    int region;            /* index into cluster.regions          */
    double link_bandwidth; /* bytes/s between devices of this host */
    double link_latency;   /* seconds                              */
    int inbound;           /* 0: inbound="false", behind NAT: it only
                              connects out (its links are opened from it) */
    int line;
} cluster_host;

typedef struct {
    char name[CLUSTER_NAME_MAX];
    double bandwidth; /* bytes/s between hosts of this region */
    double latency;   /* seconds                              */
    int line;
} cluster_region;

/* An explicit link between two regions or two hosts (by name). */
typedef struct {
    char from[CLUSTER_NAME_MAX], to[CLUSTER_NAME_MAX];
    int between_hosts; /* 0: regions, 1: hosts                */
    int a, b;          /* indices of the two regions / hosts  */
    double bandwidth;  /* bytes/s                              */
    double latency;    /* seconds                              */
    int line;
} cluster_link;

typedef struct {
    char name[CLUSTER_NAME_MAX];
    char file[512]; /* the file it was read from           */
    cluster_region *regions;
    int n_regions;
    cluster_host *hosts;
    int n_hosts;
    cluster_device *devices;
    int n_devices;
    cluster_link *links;
    int n_links;
    /* Devices marked standby="true": spares that no plan uses (the
     * broker puts one in a lost device's place); not in devices. */
    cluster_device *standbys;
    int n_standbys;
} cluster;

/* Parse and validate (cluster.xsd, then the semantic checks: unique names,
 * resolvable links, positive quantities, known units).  On failure fill err
 * with file:line and return -1; *c is then empty and safe to free. */
int cluster_load(const char *path, cluster *c, struct diag *err);
int cluster_load_memory(const char *buf, int len, const char *name, cluster *c, struct diag *err);
void cluster_free(cluster *c);

/* Bandwidth (bytes/s) and latency (s) between two devices, per the rules above.
 * An index out of range gets bandwidth 0 and latency INFINITY. */
void cluster_link_between(const cluster *c, int dev_a, int dev_b, double *bandwidth, double *latency);
/* Whether a link between the two devices can be opened: one of their
 * hosts accepts connections (or they share one). */
int cluster_has_path(const cluster *c, int dev_a, int dev_b);

/* Whether s is a name cluster.xsd takes ([A-Za-z_][A-Za-z0-9_.-]*) of at
 * most max characters (cluster.xsd's own bound: 127). */
int cluster_name_valid(const char *s, size_t max);

/* Index of the region / host / device with this name, or -1. */
int cluster_find_region(const cluster *c, const char *name);
int cluster_find_host(const cluster *c, const char *name);
int cluster_find_device(const cluster *c, const char *name);

/* "fp32", "tf32", "bf16", "fp16" (the attribute is "peak-" and this). */
const char *cluster_peak_name(peak_kind k);
/* 0 when every device states a peak of kind k; else -1 with err naming the
 * first device that does not (its file and line) and what it does state. */
int cluster_require_peak(const cluster *c, peak_kind k, struct diag *err);

/* Sites, for baselines (cluster_subset.c): the regions when there are
 * several, else the hosts when there are several (*by_host = 1), else
 * none (0). */
int cluster_sites(const cluster *c, int *by_host);
/* Site `index` (a region, or a host when by_host) as a cluster of its own:
 * its region, hosts and devices re-indexed, the links between its hosts.
 * *out is then the caller's to cluster_free.  -1 (out empty) for an index
 * out of range or when memory runs out. */
int cluster_subset(const cluster *c, int index, int by_host, cluster *out);

/* c without the devices named names[0, n) (their hosts and regions stay):
 * the survivors of a lost device, for a new plan.  -1 with err naming the
 * first name that is no device of c, or when none would be left. */
int cluster_without(const cluster *c, const char *const *names, int n, cluster *out, struct diag *err);

/* c with the standbys named names[0, n) made devices (a device that joined
 * a run: the broker's new plan).  -1 with err naming one that is no standby. */
int cluster_with(const cluster *c, const char *const *names, int n, cluster *out, struct diag *err);

/* One line per region/host/device and the link matrix by region, for `fusionc check -v`. */
void cluster_print_summary(const cluster *c, FILE *out);

#endif
