/* test_cluster.c: every shipped cluster file loads; counts and link
 * resolution match what the files say; the shipped devices state their
 * datasheets' dense peaks per arithmetic, and a compile's precision can be
 * checked against them (cluster_require_peak); and each kind of bad cluster
 * file is refused with a message naming what is wrong, at the right line. */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cluster.h"

/* The source tree: $FUSION_SOURCE_DIR (ctest sets it), else two levels up
 * from this file as the compiler named it. */
static const char *source_dir(void)
{
    static char dir[1024];
    const char *env = getenv("FUSION_SOURCE_DIR");
    if (env && *env)
        return env;
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *tail = strstr(dir, "tests/unit/test_cluster.c");
    if (!tail)
        return ".";
    if (tail == dir)
        return ".";
    tail[-1] = '\0'; /* drop "/tests/unit/test_cluster.c" */
    return dir;
}

static int load_shipped(const char *file, cluster *c)
{
    char path[2048];
    struct diag err = { "", 0, "" };
    snprintf(path, sizeof path, "%s/clusters/%s", source_dir(), file);
    int rc = cluster_load(path, c, &err);
    if (rc != 0)
        fprintf(stderr, "  loading %s: %s:%d: %s\n", file, err.file, err.line, err.msg);
    return rc;
}

static int device(const cluster *c, const char *name)
{
    int i = cluster_find_device(c, name);
    if (i < 0)
        fprintf(stderr, "  no device '%s' in %s\n", name, c->file);
    return i;
}

/* Bandwidth and latency between two named devices. */
static void link_of(const cluster *c, const char *a, const char *b, double *bw, double *lat)
{
    *bw = -1;
    *lat = -1;
    int ia = device(c, a), ib = device(c, b);
    if (ia >= 0 && ib >= 0)
        cluster_link_between(c, ia, ib, bw, lat);
}

static void test_cluster_every_shipped_file_loads(void)
{
    char dir_path[2048];
    snprintf(dir_path, sizeof dir_path, "%s/clusters", source_dir());
    DIR *dir = opendir(dir_path);
    CHECK(dir != NULL);
    if (!dir) {
        fprintf(stderr, "  cannot open %s: set FUSION_SOURCE_DIR\n", dir_path);
        return;
    }
    int n_files = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 4, ".xml") != 0)
            continue;
        cluster c;
        n_files++;
        CHECK_INT(0, load_shipped(e->d_name, &c));
        CHECK(c.n_devices >= 1);
        /* the cluster's name is the file's name without .xml */
        char stem[256];
        snprintf(stem, sizeof stem, "%.*s", (int)(n - 4), e->d_name);
        CHECK_STR(stem, c.name);
        /* every device reaches every other over a finite, positive link */
        int bad = 0;
        for (int i = 0; i < c.n_devices; i++)
            for (int j = 0; j < c.n_devices; j++) {
                double bw, lat;
                cluster_link_between(&c, i, j, &bw, &lat);
                bad += !(bw > 0 && lat >= 0 && isfinite(lat) && (i == j || isfinite(bw)));
            }
        CHECK_INT(0, bad);
        cluster_free(&c);
    }
    closedir(dir);
    CHECK(n_files >= 8);
}

static void test_cluster_counts(void)
{
    static const struct {
        const char *file;
        int regions, hosts, devices, links;
    } want[] = {
        { "local-1.xml", 1, 1, 1, 0 },
        { "local-4.xml", 2, 4, 4, 1 },
        { "dtfm-datacenter-ondemand.xml", 1, 8, 64, 0 },
        { "dtfm-datacenter-spot.xml", 1, 16, 64, 0 },
        { "dtfm-multi-dc.xml", 2, 64, 64, 1 },
        { "dtfm-regional.xml", 4, 64, 64, 6 },
        { "dtfm-worldwide.xml", 8, 64, 64, 28 },
        { "fusionllm-48.xml", 6, 17, 48, 15 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        cluster c;
        if (load_shipped(want[i].file, &c) != 0) {
            CHECK(!"shipped cluster loads");
            continue;
        }
        CHECK_INT(want[i].regions, c.n_regions);
        CHECK_INT(want[i].hosts, c.n_hosts);
        CHECK_INT(want[i].devices, c.n_devices);
        CHECK_INT(want[i].links, c.n_links);
        cluster_free(&c);
    }
}

static void test_cluster_local_files(void)
{
    cluster c;
    double bw, lat;
    if (load_shipped("local-1.xml", &c) == 0) {
        const cluster_device *d = &c.devices[0];
        CHECK_INT(DEVICE_CPU, d->kind);
        CHECK_INT(2, d->threads);
        CHECK_NEAR(8.0 * 1073741824.0, d->memory_bytes, 0);
        CHECK_NEAR(10e9, d->memory_bandwidth, 0);
        CHECK_STR("127.0.0.1", c.hosts[0].address);
        CHECK_INT(22, c.hosts[0].port); /* defaults */
        CHECK_STR("fusion", c.hosts[0].path);
        CHECK_STR("", c.hosts[0].user);
        CHECK_NEAR(1.0, d->slowdown, 0);
        cluster_free(&c);
    }
    if (load_shipped("local-4.xml", &c) != 0)
        return;
    CHECK_INT(4, c.n_devices);
    for (int i = 0; i < c.n_devices; i++) {
        CHECK_INT(1, c.devices[i].threads);
        CHECK_STR("127.0.0.1", c.hosts[c.devices[i].host].address);
    }
    link_of(&c, "cpu-a0", "cpu-a1", &bw, &lat); /* same site */
    CHECK_NEAR(10e9 / 8, bw, 1e-3);
    CHECK_NEAR(50e-6, lat, 1e-15);
    link_of(&c, "cpu-b1", "cpu-b0", &bw, &lat);
    CHECK_NEAR(10e9 / 8, bw, 1e-3);
    link_of(&c, "cpu-a0", "cpu-b1", &bw, &lat); /* across the slow link, both ways */
    CHECK_NEAR(20e6 / 8, bw, 1e-6);
    CHECK_NEAR(0.040, lat, 1e-15);
    link_of(&c, "cpu-b0", "cpu-a1", &bw, &lat);
    CHECK_NEAR(20e6 / 8, bw, 1e-6);
    CHECK_NEAR(0.040, lat, 1e-15);
    link_of(&c, "cpu-a0", "cpu-a0", &bw, &lat); /* itself */
    CHECK(isinf(bw) && bw > 0);
    CHECK_NEAR(0.0, lat, 0);
    cluster_link_between(&c, 0, 99, &bw, &lat); /* out of range: no link */
    CHECK_NEAR(0.0, bw, 0);
    CHECK(isinf(lat));
    cluster_link_between(&c, -1, 0, &bw, &lat);
    CHECK_NEAR(0.0, bw, 0);
    cluster_free(&c);
}

static void test_cluster_paper_links(void)
{
    cluster c;
    double bw, lat;
    if (load_shipped("dtfm-worldwide.xml", &c) == 0) {
        link_of(&c, "virginia-g3", "tokyo-g5", &bw, &lat);
        CHECK_NEAR(0.524e9 / 8, bw, 1e-3);
        CHECK_NEAR(0.143, lat, 1e-12);
        link_of(&c, "tokyo-g0", "virginia-g0", &bw, &lat); /* symmetric */
        CHECK_NEAR(0.524e9 / 8, bw, 1e-3);
        link_of(&c, "seoul-g1", "london-g2", &bw, &lat);
        CHECK_NEAR(0.342e9 / 8, bw, 1e-3);
        CHECK_NEAR(0.238, lat, 1e-12);
        link_of(&c, "london-g0", "ireland-g7", &bw, &lat);
        CHECK_NEAR(1.09e9 / 8, bw, 1e-3);
        CHECK_NEAR(0.012, lat, 1e-12);
        link_of(&c, "oregon-g0", "oregon-g1", &bw, &lat); /* inside a city */
        CHECK_NEAR(2e9 / 8, bw, 1e-3);
        CHECK_NEAR(0.005, lat, 1e-12);
        cluster_free(&c);
    }
    if (load_shipped("dtfm-multi-dc.xml", &c) == 0) {
        link_of(&c, "ohio-g00", "virginia-g31", &bw, &lat);
        CHECK_NEAR(1.12e9 / 8, bw, 1e-3);
        CHECK_NEAR(0.011, lat, 1e-12);
        link_of(&c, "ohio-g00", "ohio-g31", &bw, &lat);
        CHECK_NEAR(5e9 / 8, bw, 1e-3);
        CHECK_NEAR(0.001, lat, 1e-12);
        cluster_free(&c);
    }
    if (load_shipped("dtfm-datacenter-ondemand.xml", &c) == 0) {
        link_of(&c, "node0-g0", "node0-g7", &bw, &lat); /* in a node */
        CHECK_NEAR(100e9 / 8, bw, 1e-3);
        link_of(&c, "node0-g0", "node7-g7", &bw, &lat); /* between nodes */
        CHECK_NEAR(25e9 / 8, bw, 1e-3);
        CHECK_INT(DEVICE_CUDA, c.devices[0].kind);
        CHECK_STR("sm_70", c.devices[0].arch);
        CHECK_NEAR(15.7e12, c.devices[0].peak_flops[PEAK_FP32], 0);
        CHECK_NEAR(125e12, c.devices[0].peak_flops[PEAK_FP16], 0);
        CHECK_NEAR(0, c.devices[0].peak_flops[PEAK_BF16], 0); /* Volta: no bf16 */
        cluster_free(&c);
    }
    if (load_shipped("fusionllm-48.xml", &c) == 0) {
        double lo = INFINITY, hi = 0;
        for (int i = 0; i < c.n_links; i++) {
            lo = fmin(lo, c.links[i].bandwidth);
            hi = fmax(hi, c.links[i].bandwidth);
        }
        CHECK_NEAR(8e6 / 8, lo, 1e-6); /* FusionLLM's range: 8 Mbps .. 10 Gbps */
        CHECK_NEAR(10e9 / 8, hi, 1e-3);
        cluster_free(&c);
    }
}

/* Every device of every shipped cluster file states its datasheet's dense
 * peaks, and only the arithmetics it has: V100 (sm_70) no tf32 or bf16; a
 * CPU the same figure for fp32, bf16 and fp16 (its kernels compute in fp32).
 * The two sm_86 cards are told apart by memory (RTX 3090 24 GiB, 3080 10 GiB). */
static void test_cluster_shipped_peaks_are_the_datasheets(void)
{
    static const struct {
        const char *arch;
        double memory_gib;         /* 0: any */
        double tflops[PEAK_COUNT]; /* fp32, tf32, bf16, fp16; 0: not stated */
    } sheet[] = {
        { "sm_70", 0, { 15.7, 0, 0, 125 } },          /* Tesla V100 datasheet            */
        { "sm_80", 0, { 19.5, 156, 312, 312 } },      /* A100 datasheet                  */
        { "sm_86", 24, { 35.6, 35.6, 71, 71 } },      /* RTX 3090, GA102 whitepaper      */
        { "sm_86", 10, { 29.8, 29.8, 59.5, 59.5 } },  /* RTX 3080, GA102 whitepaper      */
        { "sm_89", 0, { 82.6, 82.6, 165.2, 165.2 } }, /* RTX 4090, Ada whitepaper        */
        { "sm_90", 0, { 67, 494.7, 989.4, 989.4 } },  /* H100 SXM5 datasheet             */
    };
    char dir_path[2048];
    snprintf(dir_path, sizeof dir_path, "%s/clusters", source_dir());
    DIR *dir = opendir(dir_path);
    CHECK(dir != NULL);
    if (!dir)
        return;
    int n_gpus = 0, n_cpus = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t n = strlen(e->d_name);
        cluster c;
        if (n < 5 || strcmp(e->d_name + n - 4, ".xml") != 0 || load_shipped(e->d_name, &c) != 0)
            continue;
        int reported = 0; /* the first device at fault in a file is named, not every one */
        for (int i = 0; i < c.n_devices; i++) {
            const cluster_device *d = &c.devices[i];
            int failures = check_failures;
            n_cpus += d->kind == DEVICE_CPU;
            n_gpus += d->kind == DEVICE_CUDA;
            if (reported)
                continue;
            if (d->kind == DEVICE_CPU) {
                CHECK(d->peak_flops[PEAK_FP32] > 0);
                CHECK_NEAR(d->peak_flops[PEAK_FP32], d->peak_flops[PEAK_BF16], 0);
                CHECK_NEAR(d->peak_flops[PEAK_FP32], d->peak_flops[PEAK_FP16], 0);
                CHECK_NEAR(0, d->peak_flops[PEAK_TF32], 0);
            } else {
                int row = -1;
                for (int r = 0; r < (int)(sizeof sheet / sizeof sheet[0]) && row < 0; r++)
                    if (strcmp(sheet[r].arch, d->arch) == 0 &&
                        (sheet[r].memory_gib == 0 || sheet[r].memory_gib * 1073741824.0 == d->memory_bytes))
                        row = r;
                CHECK(row >= 0);
                for (int k = 0; row >= 0 && k < PEAK_COUNT; k++)
                    CHECK_NEAR(sheet[row].tflops[k] * 1e12, d->peak_flops[k], 1.0);
            }
            if (check_failures != failures) {
                fprintf(stderr, "  in %s:%d, device '%s' (%s)\n", c.file, d->line, d->name, d->arch);
                reported = 1;
            }
        }
        cluster_free(&c);
    }
    closedir(dir);
    CHECK(n_gpus >= 5 * 64 + 3 * 48);
    CHECK(n_cpus >= 8);
}

/* cluster_require_peak: a compile in bf16 needs every device to state
 * peak-bf16; a V100 does not, and is named with its file and line. */
static const char *mixed_xml =
    "<cluster name='mixed'>\n"
    "  <region name='r' bandwidth='10Gbps' latency='50us'>\n"
    "    <host name='h0' address='10.0.0.1'>\n"
    "      <device name='a100' kind='cuda' arch='sm_80' peak-fp32='19.5TFLOPS' peak-tf32='156TFLOPS' "
    "peak-bf16='312TFLOPS' peak-fp16='312TFLOPS' memory='80GiB' memory-bandwidth='2039GB/s'/>\n"
    "      <device name='v100' kind='cuda' arch='sm_70' peak-fp32='15.7TFLOPS' peak-fp16='125TFLOPS' "
    "memory='32GiB' memory-bandwidth='900GB/s'/>\n"
    "    </host>\n"
    "  </region>\n"
    "</cluster>\n";

static void test_cluster_require_peak(void)
{
    CHECK_STR("fp32", cluster_peak_name(PEAK_FP32));
    CHECK_STR("tf32", cluster_peak_name(PEAK_TF32));
    CHECK_STR("bf16", cluster_peak_name(PEAK_BF16));
    CHECK_STR("fp16", cluster_peak_name(PEAK_FP16));
    CHECK_STR("?", cluster_peak_name(PEAK_COUNT));

    cluster c;
    struct diag err = { "", 0, "" };
    int rc = cluster_load_memory(mixed_xml, (int)strlen(mixed_xml), "mixed.xml", &c, &err);
    CHECK_INT(0, rc);
    if (rc != 0) {
        fprintf(stderr, "  %s:%d: %s\n", err.file, err.line, err.msg);
        return;
    }
    CHECK_INT(0, cluster_require_peak(&c, PEAK_FP32, &err));
    CHECK_INT(0, cluster_require_peak(&c, PEAK_FP16, &err));
    err = (struct diag){ "", 0, "" };
    CHECK_INT(-1, cluster_require_peak(&c, PEAK_BF16, &err));
    CHECK_STR("mixed.xml", err.file);
    CHECK_INT(5, err.line);
    CHECK_CONTAINS(err.msg, "device 'v100' sm_70 states no peak-bf16 (it states peak-fp32, peak-fp16)");
    CHECK_INT(-1, cluster_require_peak(&c, PEAK_TF32, &err));
    CHECK_CONTAINS(err.msg, "device 'v100' sm_70 states no peak-tf32");

    /* the summary lists the peaks each device states, and no others */
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    cluster_print_summary(&c, out);
    fclose(out);
    CHECK_CONTAINS(text, "device a100: cuda sm_80, peak fp32 19.5 TFLOPS, tf32 156 TFLOPS, bf16 312 TFLOPS, fp16 312 "
                         "TFLOPS, memory 80 GiB");
    CHECK_CONTAINS(text, "device v100: cuda sm_70, peak fp32 15.7 TFLOPS, fp16 125 TFLOPS, memory 32 GiB");
    free(text);
    cluster_free(&c);

    /* the A100 alone has every arithmetic */
    const char *a100_only = "<cluster name='a'>\n  <region name='r' bandwidth='10Gbps' latency='50us'>\n"
                            "    <host name='h0' address='10.0.0.1'>\n"
                            "      <device name='a100' kind='cuda' arch='sm_80' peak-fp32='19.5TFLOPS' "
                            "peak-tf32='156TFLOPS' peak-bf16='312TFLOPS' peak-fp16='312TFLOPS' memory='80GiB' "
                            "memory-bandwidth='2039GB/s'/>\n    </host>\n  </region>\n</cluster>\n";
    CHECK_INT(0, cluster_load_memory(a100_only, (int)strlen(a100_only), "a100.xml", &c, &err));
    for (int k = 0; k < PEAK_COUNT; k++)
        CHECK_INT(0, cluster_require_peak(&c, (peak_kind)k, &err));
    cluster_free(&c);

    /* shipped files: fusionllm-48's V100s have no bf16, local-gpu-4's A100s and H100s do */
    if (load_shipped("fusionllm-48.xml", &c) == 0) {
        err = (struct diag){ "", 0, "" };
        CHECK_INT(-1, cluster_require_peak(&c, PEAK_BF16, &err));
        CHECK_CONTAINS(err.file, "clusters/fusionllm-48.xml");
        CHECK(err.line > 0);
        CHECK_CONTAINS(err.msg, "sm_70 states no peak-bf16 (it states peak-fp32, peak-fp16)");
        int v = -1; /* the first V100 in file order: the one named */
        for (int i = 0; i < c.n_devices && v < 0; i++)
            if (strcmp(c.devices[i].arch, "sm_70") == 0)
                v = i;
        CHECK(v >= 0);
        if (v >= 0) {
            CHECK_INT(c.devices[v].line, err.line);
            char want[CLUSTER_NAME_MAX + 16];
            snprintf(want, sizeof want, "device '%s' ", c.devices[v].name);
            CHECK_CONTAINS(err.msg, want);
        }
        CHECK_INT(0, cluster_require_peak(&c, PEAK_FP16, &err));
        cluster_free(&c);
    }
    if (load_shipped("local-gpu-4.xml", &c) == 0) {
        CHECK_INT(0, cluster_require_peak(&c, PEAK_BF16, &err));
        CHECK_INT(0, cluster_require_peak(&c, PEAK_TF32, &err));
        cluster_free(&c);
    }
}

/* A two-site cluster with a host-host link that overrides the site link,
 * and a host with two devices and no link attributes (the defaults). */
static const char *override_xml =
    "<cluster name='t'>\n"
    "  <region name='A' bandwidth='1Gbps' latency='1ms'>\n"
    "    <host name='a0' address='10.0.0.1' user='me' port='2222' path='/opt/f'>\n"
    "      <device name='d0' kind='cpu' peak-fp32='1GFLOPS' memory='1GiB' memory-bandwidth='1GB/s'/>\n"
    "      <device name='d1' kind='cuda' arch='sm_80' peak-fp32='19.5TFLOPS' peak-tf32='156TFLOPS' "
    "peak-bf16='312TFLOPS'\n"
    "              peak-fp16='312TFLOPS' memory='80GiB' memory-bandwidth='2039GB/s'"
    " threads='4' slowdown='2.5'/>\n"
    "    </host>\n"
    "    <host name='a1' address='10.0.0.2'>\n"
    "      <device name='d2' kind='cpu' peak-fp32='1GFLOPS' peak-bf16='0.8GFLOPS' memory='1GiB' "
    "memory-bandwidth='1GB/s'/>\n"
    "    </host>\n"
    "  </region>\n"
    "  <region name='B' bandwidth='1Gbps' latency='1ms'>\n"
    "    <host name='b0' address='10.0.1.1' link-bandwidth='64GB/s' link-latency='3us'>\n"
    "      <device name='d3' kind='cpu' peak-fp32='1GFLOPS' memory='1GiB' memory-bandwidth='1GB/s'/>\n"
    "    </host>\n"
    "  </region>\n"
    "  <link from='A' to='B' bandwidth='10Mbps' latency='50ms'/>\n"
    "  <link from='b0' to='a1' bandwidth='100Mbps' latency='20ms'/>\n"
    "</cluster>\n";

static void test_cluster_link_rules_and_defaults(void)
{
    cluster c;
    struct diag err = { "", 0, "" };
    int rc = cluster_load_memory(override_xml, (int)strlen(override_xml), "override.xml", &c, &err);
    CHECK_INT(0, rc);
    if (rc != 0) {
        fprintf(stderr, "  %s:%d: %s\n", err.file, err.line, err.msg);
        return;
    }
    double bw, lat;
    link_of(&c, "d0", "d1", &bw, &lat); /* same host, default host link */
    CHECK_NEAR(CLUSTER_DEFAULT_HOST_BANDWIDTH, bw, 0);
    CHECK_NEAR(CLUSTER_DEFAULT_HOST_LATENCY, lat, 0);
    link_of(&c, "d0", "d2", &bw, &lat); /* same region */
    CHECK_NEAR(1e9 / 8, bw, 1e-6);
    CHECK_NEAR(1e-3, lat, 1e-15);
    link_of(&c, "d0", "d3", &bw, &lat); /* region link */
    CHECK_NEAR(10e6 / 8, bw, 1e-6);
    CHECK_NEAR(0.050, lat, 1e-15);
    link_of(&c, "d3", "d2", &bw, &lat); /* host link beats the region link, either direction */
    CHECK_NEAR(100e6 / 8, bw, 1e-6);
    CHECK_NEAR(0.020, lat, 1e-15);
    link_of(&c, "d2", "d3", &bw, &lat);
    CHECK_NEAR(100e6 / 8, bw, 1e-6);

    CHECK_INT(1, c.links[1].between_hosts);
    CHECK_INT(cluster_find_host(&c, "b0"), c.links[1].a);
    CHECK_INT(cluster_find_host(&c, "a1"), c.links[1].b);
    CHECK_INT(0, c.links[0].between_hosts);
    CHECK_INT(cluster_find_region(&c, "B"), c.links[0].b);
    CHECK_INT(-1, cluster_find_region(&c, "a0"));
    CHECK_INT(2222, c.hosts[0].port);
    CHECK_STR("me", c.hosts[0].user);
    CHECK_STR("/opt/f", c.hosts[0].path);
    CHECK_NEAR(64e9, c.hosts[2].link_bandwidth, 0);
    CHECK_NEAR(3e-6, c.hosts[2].link_latency, 1e-18);
    const cluster_device *d1 = &c.devices[device(&c, "d1")];
    CHECK_INT(DEVICE_CUDA, d1->kind);
    CHECK_STR("sm_80", d1->arch);
    CHECK_INT(4, d1->threads);
    CHECK_NEAR(2.5, d1->slowdown, 0);
    CHECK_NEAR(80.0 * 1073741824.0, d1->memory_bytes, 0);
    CHECK_NEAR(19.5e12, d1->peak_flops[PEAK_FP32], 0);
    CHECK_NEAR(156e12, d1->peak_flops[PEAK_TF32], 0);
    CHECK_NEAR(312e12, d1->peak_flops[PEAK_BF16], 0);
    CHECK_NEAR(312e12, d1->peak_flops[PEAK_FP16], 0);
    const cluster_device *d2 = &c.devices[device(&c, "d2")];
    CHECK_NEAR(1e9, d2->peak_flops[PEAK_FP32], 0); /* only what the file states */
    CHECK_NEAR(0.8e9, d2->peak_flops[PEAK_BF16], 1e-6);
    CHECK_NEAR(0, d2->peak_flops[PEAK_TF32], 0);
    CHECK_NEAR(0, d2->peak_flops[PEAK_FP16], 0);
    CHECK_INT(6, d1->line);
    CHECK_INT(0, d1->host);
    CHECK_INT(13, c.hosts[2].line);
    CHECK_INT(1, c.hosts[2].region);
    CHECK_STR("override.xml", c.file);

    /* the summary names everything and has the region matrix */
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    cluster_print_summary(&c, out);
    fclose(out);
    CHECK_CONTAINS(text, "cluster t (override.xml): 2 regions, 3 hosts, 4 devices, 2 links");
    CHECK_CONTAINS(text, "host a0: me@10.0.0.1:2222 path /opt/f");
    CHECK_CONTAINS(text, "device d1: cuda sm_80, peak fp32 19.5 TFLOPS, tf32 156 TFLOPS, bf16 312 TFLOPS, fp16 312 "
                         "TFLOPS, memory 80 GiB at 2039 GB/s, 4 threads, slowdown 2.5x");
    CHECK_CONTAINS(text, "device d0: cpu, peak fp32 1 GFLOPS, memory 1 GiB at 1 GB/s, 1 thread\n");
    CHECK_CONTAINS(text, "device d2: cpu, peak fp32 1 GFLOPS, bf16 800 MFLOPS, memory");
    CHECK_CONTAINS(text, "b0 <-> a1: 100 Mbps, 20 ms");
    CHECK_CONTAINS(text, "10 Mbps, 50 ms");
    free(text);
    cluster_free(&c);
    CHECK(c.devices == NULL && c.n_devices == 0);
    cluster_free(&c); /* twice is harmless */
}

/* ---- bad input ---------------------------------------------------------- */

/* The line holding "<!--here-->": where the error must be reported. */
static int marked_line(const char *xml)
{
    const char *mark = strstr(xml, "<!--here-->");
    if (!mark)
        return -1;
    int line = 1;
    for (const char *p = xml; p < mark; p++)
        line += *p == '\n';
    return line;
}

/* Loading `xml` must fail, at the marked line (or `line` when >= 0), with
 * a message containing `needle`; the cluster is left empty. */
static void check_refused(const char *what, const char *xml, int len, int line, const char *needle)
{
    cluster c;
    struct diag err = { "", 0, "" };
    memset(&c, 0xab, sizeof c); /* load must not rely on a cleared struct */
    int rc = cluster_load_memory(xml, len < 0 ? (int)strlen(xml) : len, "bad.xml", &c, &err);
    int want_line = line >= 0 ? line : marked_line(xml);
    int failures = check_failures;
    CHECK_INT(-1, rc);
    CHECK_STR("bad.xml", err.file);
    CHECK_INT(want_line, err.line);
    CHECK_CONTAINS(err.msg, needle);
    CHECK(c.regions == NULL && c.hosts == NULL && c.devices == NULL && c.links == NULL);
    CHECK_INT(0, c.n_devices);
    if (check_failures != failures || getenv("TEST_VERBOSE"))
        fprintf(stderr, "  in case: %s (message: %s:%d: %s)\n", what, err.file, err.line, err.msg);
    cluster_free(&c);
}

#define HEAD       "<cluster name='bad'>\n"
#define REGION_A   "  <region name='siteA' bandwidth='10Gbps' latency='50us'>\n"
#define REGION_B   "  <region name='siteB' bandwidth='10Gbps' latency='50us'>\n"
#define DEV(n)     "      <device name='" n "' kind='cpu' peak-fp32='50GFLOPS' memory='4GiB' memory-bandwidth='10GB/s'/>\n"
#define HOST(h, d) "    <host name='" h "' address='127.0.0.1'>\n" DEV(d) "    </host>\n"
#define END_REGION "  </region>\n"
#define LINK_AB    "  <link from='siteA' to='siteB' bandwidth='20Mbps' latency='40ms'/>\n"
#define TAIL       "</cluster>\n"

static void test_cluster_refuses_bad_input(void)
{
    /* units: the message names the element, attribute, value and expected units */
    check_refused("unknown unit",
                  HEAD "  <region name='siteA' bandwidth='10Gbit' latency='50us'><!--here-->\n" HOST("a0", "d0")
                      END_REGION TAIL,
                  -1, -1,
                  "region 'siteA': bandwidth=\"10Gbit\": unknown unit 'Gbit' for a bandwidth: expected one of bps, "
                  "Kbps, Mbps, Gbps");
    check_refused(
        "missing unit",
        HEAD REGION_A HOST("a0", "d0") END_REGION REGION_B HOST("b0", "d1") END_REGION
        "  <link from='siteA' to='siteB' bandwidth='20Mbps' latency='40'/><!--here-->\n" TAIL,
        -1, -1, "link from 'siteA' to 'siteB': latency=\"40\": missing unit after '40': expected one of ns, us, ms, s");
    check_refused("bytes/s where a size goes",
                  HEAD REGION_A "    <host name='a0' address='127.0.0.1'>\n"
                                "      <device name='d0' kind='cpu' peak-fp32='50GFLOPS' memory='4GB/s' "
                                "memory-bandwidth='10GB/s'/><!--here-->\n"
                                "    </host>\n" END_REGION TAIL,
                  -1, -1, "device 'd0': memory=\"4GB/s\": '4GB/s' is a bandwidth, but a size was expected");
    check_refused("negative peak",
                  HEAD REGION_A "    <host name='a0' address='127.0.0.1'>\n"
                                "      <device name='d0' kind='cpu' peak-fp32='-50GFLOPS' memory='4GiB' "
                                "memory-bandwidth='10GB/s'/><!--here-->\n"
                                "    </host>\n" END_REGION TAIL,
                  -1, -1, "device 'd0': peak-fp32=\"-50GFLOPS\": '-50GFLOPS' is negative");
    check_refused("zero host link",
                  HEAD REGION_A "    <host name='a0' address='127.0.0.1' link-bandwidth='0Gbps'><!--here-->\n" DEV(
                      "d0") "    </host>\n" END_REGION TAIL,
                  -1, -1, "host 'a0': link-bandwidth=\"0Gbps\": '0Gbps' is zero");
    check_refused("trailing garbage",
                  HEAD REGION_A "    <host name='a0' address='127.0.0.1' link-latency='2us!'><!--here-->\n" DEV(
                      "d0") "    </host>\n" END_REGION TAIL,
                  -1, -1, "link-latency=\"2us!\": unexpected '!'");

    /* peaks: one per arithmetic; a bare peak says none */
    check_refused(
        "a bare peak",
        HEAD REGION_A
        "    <host name='a0' address='127.0.0.1'>\n"
        "      <device name='c0' kind='cpu' peak='50GFLOPS' memory='8GiB' memory-bandwidth='20GB/s'/><!--here-->\n"
        "    </host>\n" END_REGION TAIL,
        -1, -1,
        "device 'c0': peak=\"50GFLOPS\" does not say for which arithmetic; write peak-fp32 (and peak-tf32, "
        "peak-bf16, peak-fp16 where the device has them)");
    check_refused(
        "a bare peak beside peak-fp32",
        HEAD REGION_A
        "    <host name='a0' address='127.0.0.1'>\n"
        "      <device name='g0' kind='cuda' arch='sm_80' peak-fp32='19.5TFLOPS' peak='312TFLOPS' memory='80GiB'\n"
        "              memory-bandwidth='2TB/s'/><!--here-->\n"
        "    </host>\n" END_REGION TAIL,
        -1, -1, "device 'g0': peak=\"312TFLOPS\" does not say for which arithmetic");
    check_refused("no peak at all",
                  HEAD REGION_A
                  "    <host name='a0' address='127.0.0.1'>\n"
                  "      <device name='c0' kind='cpu' memory='8GiB' memory-bandwidth='20GB/s'/><!--here-->\n"
                  "    </host>\n" END_REGION TAIL,
                  -1, -1,
                  "device 'c0': no peak: expected peak-fp32=\"...\" (and peak-tf32, peak-bf16, peak-fp16 where the "
                  "device has them)");
    check_refused("a zero peak-bf16",
                  HEAD REGION_A "    <host name='a0' address='127.0.0.1'>\n"
                                "      <device name='c0' kind='cpu' peak-fp32='50GFLOPS' peak-bf16='0GFLOPS' "
                                "memory='8GiB' memory-bandwidth='20GB/s'/><!--here-->\n"
                                "    </host>\n" END_REGION TAIL,
                  -1, -1, "device 'c0': peak-bf16=\"0GFLOPS\": '0GFLOPS' is zero");
    check_refused(
        "a peak in the wrong unit",
        HEAD REGION_A
        "    <host name='a0' address='127.0.0.1'>\n"
        "      <device name='c0' kind='cpu' peak-fp16='50GB/s' memory='8GiB' memory-bandwidth='20GB/s'/><!--here-->\n"
        "    </host>\n" END_REGION TAIL,
        -1, -1, "device 'c0': peak-fp16=\"50GB/s\": '50GB/s' is a bandwidth");

    /* names */
    check_refused(
        "host named like a region",
        HEAD REGION_A HOST("a0", "d0") END_REGION REGION_B
        "    <host name='siteA' address='127.0.0.1'><!--here-->\n" DEV("d1") "    </host>\n" END_REGION LINK_AB TAIL,
        -1, -1, "host 'siteA': the name is already used by the region at line 2");
    check_refused("two devices with one name",
                  HEAD REGION_A HOST("a0", "d0") "    <host name='a1' address='127.0.0.1'>\n"
                                                 "      <device name='d0' kind='cpu' peak-fp32='50GFLOPS' "
                                                 "memory='4GiB' memory-bandwidth='10GB/s'/><!--here-->\n"
                                                 "    </host>\n" END_REGION TAIL,
                  -1, -1,
                  "device 'd0': the name is already used by the device at line 4 (device names must be unique)");

    /* links */
    check_refused("link to an unknown name",
                  HEAD REGION_A HOST("a0", "d0") END_REGION REGION_B HOST("b0", "d1") END_REGION LINK_AB
                  "  <link from='siteA' to='siteC' bandwidth='20Mbps' latency='40ms'/><!--here-->\n" TAIL,
                  -1, -1, "link to=\"siteC\": no region or host is named 'siteC'");
    check_refused("link to a device",
                  HEAD REGION_A HOST("a0", "d0") END_REGION REGION_B HOST("b0", "d1") END_REGION LINK_AB
                  "  <link from='d0' to='b0' bandwidth='20Mbps' latency='40ms'/><!--here-->\n" TAIL,
                  -1, -1, "'d0' is a device; a link joins two regions or two hosts");
    check_refused("link from a region to a host",
                  HEAD REGION_A HOST("a0", "d0") END_REGION REGION_B HOST("b0", "d1") END_REGION LINK_AB
                  "  <link from='siteA' to='b0' bandwidth='20Mbps' latency='40ms'/><!--here-->\n" TAIL,
                  -1, -1,
                  "link from region 'siteA' to host 'b0': a link joins two regions or two hosts, not one of each");
    check_refused("link from a region to itself",
                  HEAD REGION_A HOST("a0", "d0") END_REGION
                  "  <link from='siteA' to='siteA' bandwidth='20Mbps' latency='40ms'/><!--here-->\n" TAIL,
                  -1, -1, "link from region 'siteA' to itself");
    check_refused("the same link twice, reversed",
                  HEAD REGION_A HOST("a0", "d0") END_REGION REGION_B HOST("b0", "d1") END_REGION LINK_AB
                  "  <link from='siteB' to='siteA' bandwidth='1Gbps' latency='4ms'/><!--here-->\n" TAIL,
                  -1, -1, "duplicate link between regions 'siteB' and 'siteA': the first is at line 12");
    check_refused("two regions with devices and no link",
                  HEAD REGION_A HOST("a0", "d0") END_REGION
                  "  <region name='siteB' bandwidth='10Gbps' latency='50us'><!--here-->\n" HOST("b0", "d1")
                      END_REGION TAIL,
                  -1, -1, "regions 'siteA' and 'siteB' have no link: add <link from=\"siteA\" to=\"siteB\"");
    check_refused("three regions, two links missing",
                  HEAD REGION_A HOST("a0", "d0") END_REGION REGION_B HOST("b0", "d1") END_REGION
                  "  <region name='siteC' bandwidth='10Gbps' latency='50us'><!--here-->\n" HOST("c0", "d2")
                      END_REGION LINK_AB TAIL,
                  -1, -1,
                  "regions 'siteA' and 'siteC' have no link: add <link from=\"siteA\" to=\"siteC\" bandwidth=\"...\" "
                  "latency=\"...\"/> (1 other pair of regions lacks a link too)");

    /* devices */
    check_refused("cuda without arch",
                  HEAD REGION_A "    <host name='a0' address='127.0.0.1'>\n"
                                "      <device name='g0' kind='cuda' peak-fp32='19.5TFLOPS' memory='80GiB' "
                                "memory-bandwidth='2TB/s'/><!--here-->\n"
                                "    </host>\n" END_REGION TAIL,
                  -1, -1, "device 'g0': a cuda device needs arch=\"sm_NN\"");
    check_refused("cuda with a non-CUDA arch",
                  HEAD REGION_A "    <host name='a0' address='127.0.0.1'>\n"
                                "      <device name='g0' kind='cuda' arch='ampere' peak-fp32='19.5TFLOPS' "
                                "memory='80GiB' memory-bandwidth='2TB/s'/><!--here-->\n"
                                "    </host>\n" END_REGION TAIL,
                  -1, -1, "device 'g0': arch=\"ampere\": expected a CUDA architecture sm_NN");
    check_refused("cpu with a CUDA arch",
                  HEAD REGION_A "    <host name='a0' address='127.0.0.1'>\n"
                                "      <device name='c0' kind='cpu' arch='sm_80' peak-fp32='1TFLOPS' memory='8GiB' "
                                "memory-bandwidth='20GB/s'/><!--here-->\n"
                                "    </host>\n" END_REGION TAIL,
                  -1, -1, "arch=\"sm_80\" is a CUDA architecture, but kind=\"cpu\"");
    check_refused("no devices at all",
                  "<cluster name='empty'><!--here-->\n  <region name='r' bandwidth='1Gbps' latency='1ms'/>\n" TAIL, -1,
                  -1, "cluster 'empty' has no devices");

    /* caught by the schema, still with the line */
    check_refused("threads out of range",
                  HEAD REGION_A "    <host name='a0' address='127.0.0.1'>\n"
                                "      <device name='c0' kind='cpu' peak-fp32='1TFLOPS' memory='8GiB' "
                                "memory-bandwidth='20GB/s' threads='0'/><!--here-->\n"
                                "    </host>\n" END_REGION TAIL,
                  -1, -1, "threads");
    check_refused("port out of range",
                  HEAD REGION_A "    <host name='a0' address='127.0.0.1' port='70000'><!--here-->\n" DEV(
                      "d0") "    </host>\n" END_REGION TAIL,
                  -1, -1, "65535");
    check_refused("slowdown below 1",
                  HEAD REGION_A "    <host name='a0' address='127.0.0.1'>\n"
                                "      <device name='c0' kind='cpu' peak-fp32='1TFLOPS' memory='8GiB' "
                                "memory-bandwidth='20GB/s' slowdown='0.5'/><!--here-->\n"
                                "    </host>\n" END_REGION TAIL,
                  -1, -1, "slowdown");
    check_refused(
        "unknown arithmetic",
        HEAD REGION_A
        "    <host name='a0' address='127.0.0.1'>\n"
        "      <device name='c0' kind='cpu' peak-fp8='1TFLOPS' memory='8GiB' memory-bandwidth='20GB/s'/><!--here-->\n"
        "    </host>\n" END_REGION TAIL,
        -1, -1, "peak-fp8");
    check_refused("unknown element",
                  HEAD REGION_A "    <host name='a0' address='127.0.0.1'>\n"
                                "      <gpu name='c0'/><!--here-->\n"
                                "    </host>\n" END_REGION TAIL,
                  -1, -1, "gpu");
    check_refused("a name with a space",
                  HEAD "  <region name='site A' bandwidth='10Gbps' latency='50us'><!--here-->\n" HOST("a0", "d0")
                      END_REGION TAIL,
                  -1, -1, "site A");
    check_refused("a model file given as a cluster", "<?xml version='1.0'?>\n<model name='mlp'><!--here-->\n</model>\n",
                  -1, -1, "the root element is <model>: expected <cluster>");

    /* not XML at all: xml_read's messages */
    check_refused("malformed XML", HEAD REGION_A "    <host name='a0'<!--here-->\n" END_REGION TAIL, -1, -1, "");
    check_refused("empty input", "", 0, 0, "empty");
    check_refused("binary input", "<cluster\0name='x'/>", 19, 1, "binary");
}

static void test_cluster_load_file_errors(void)
{
    cluster c;
    struct diag err = { "", 0, "" };
    CHECK_INT(-1, cluster_load("/nonexistent/cluster.xml", &c, &err));
    CHECK_STR("/nonexistent/cluster.xml", err.file);
    CHECK_INT(0, err.line);
    CHECK_CONTAINS(err.msg, "cannot open");
    CHECK(c.devices == NULL);
    cluster_free(&c);

    char path[] = "/tmp/test_cluster_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd); /* empty file */
    CHECK_INT(-1, cluster_load(path, &c, &err));
    CHECK_CONTAINS(err.msg, "empty");
    FILE *f = fopen(path, "wb");
    fwrite("\x7f"
           "ELF\0\1\2",
           1, 7, f);
    fclose(f);
    CHECK_INT(-1, cluster_load(path, &c, &err));
    CHECK_CONTAINS(err.msg, "binary");
    f = fopen(path, "w");
    fputs(HEAD REGION_A "\n\n   <oops>\n" TAIL, f);
    fclose(f);
    CHECK_INT(-1, cluster_load(path, &c, &err));
    CHECK_STR(path, err.file);
    CHECK(err.line >= 5);
    unlink(path);
    CHECK_INT(-1, cluster_load(NULL, &c, &err));
    CHECK_INT(-1, cluster_load_memory(NULL, 10, "x", &c, &err));
}

/* Hosts behind NAT: b0 and b1 take no connection, a0 does. */
static const char *const nat_xml =
    "<cluster name='nat'>\n"
    "  <region name='A' bandwidth='1Gbps' latency='1ms'>\n"
    "    <host name='a0' address='10.0.0.1'><device name='d0' kind='cpu' peak-fp32='1GFLOPS' memory='1GiB' "
    "memory-bandwidth='1GB/s'/></host>\n"
    "    <host name='b0' address='10.0.0.2' inbound='false'><device name='d1' kind='cpu' peak-fp32='1GFLOPS' "
    "memory='1GiB' memory-bandwidth='1GB/s'/><device name='d2' kind='cpu' peak-fp32='1GFLOPS' memory='1GiB' "
    "memory-bandwidth='1GB/s'/></host>\n"
    "    <host name='b1' address='10.0.0.3' inbound='false'><device name='d3' kind='cpu' peak-fp32='1GFLOPS' "
    "memory='1GiB' memory-bandwidth='1GB/s'/></host>\n"
    "  </region>\n"
    "</cluster>\n";

static void test_cluster_behind_nat(void)
{
    cluster c;
    struct diag err = { "", 0, "" };
    int rc = cluster_load_memory(nat_xml, (int)strlen(nat_xml), "nat.xml", &c, &err);
    CHECK_INT(0, rc);
    if (rc != 0)
        return;
    CHECK_INT(1, c.hosts[0].inbound);
    CHECK_INT(0, c.hosts[1].inbound);
    double bw, lat;
    link_of(&c, "d0", "d1", &bw, &lat); /* one end takes connections: the region's link */
    CHECK_NEAR(1e9 / 8, bw, 1e-6);
    CHECK(cluster_has_path(&c, 0, 1));
    link_of(&c, "d1", "d2", &bw, &lat); /* one host behind NAT: its own devices reach each other */
    CHECK_NEAR(CLUSTER_DEFAULT_HOST_BANDWIDTH, bw, 0);
    CHECK(cluster_has_path(&c, 1, 2));
    link_of(&c, "d1", "d3", &bw, &lat); /* two hosts behind NAT: no path, priced so */
    CHECK_NEAR(CLUSTER_NO_PATH_BANDWIDTH, bw, 0);
    CHECK_NEAR(CLUSTER_NO_PATH_LATENCY, lat, 0);
    CHECK(!cluster_has_path(&c, 1, 3));
    cluster_free(&c);
}

int main(void)
{
    test_cluster_every_shipped_file_loads();
    test_cluster_counts();
    test_cluster_local_files();
    test_cluster_paper_links();
    test_cluster_shipped_peaks_are_the_datasheets();
    test_cluster_require_peak();
    test_cluster_link_rules_and_defaults();
    test_cluster_behind_nat();
    test_cluster_refuses_bad_input();
    test_cluster_load_file_errors();
    CHECK_DONE();
}
