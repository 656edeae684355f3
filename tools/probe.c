/* probe.c: `fusionc probe CLUSTER -o MEASURED.xml`: the cluster file with
 * what its hosts and links measure, in place of what was typed in.
 *
 * Over ssh (the hosts' address, user, port and path from CLUSTER, as
 * `fusionc deploy` reaches them):
 *   1. fusion-probe (tools/probe_agent.c, beside fusionc) and the libraries
 *      it needs (codegen/bundle_libs.h) go to PATH/.fusion-probe on every
 *      host, by tar over ssh;
 *   2. each CPU device is measured on its host as `fusionc profile`
 *      measures (its own threads): peak-fp32, peak-bf16, peak-fp16,
 *      memory-bandwidth.  A CUDA device keeps its declared figures (said);
 *   3. each region with two hosts or more: its first two hosts' path
 *      (the region's bandwidth and latency); each pair of regions: their
 *      first hosts' path (the <link>, made when the file had none).  A path
 *      is measured from its first host to the second's address (the one
 *      the devices use): fusion-probe serve on the second, link on the
 *      first, over nanomsg as the devices' traffic goes.
 * MEASURED.xml is CLUSTER's document with those attributes replaced
 * (libxml2; comments and the rest kept), a comment saying what was
 * measured, written atomically and loaded back to check it. */
#define _GNU_SOURCE
#include "probe.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../broker/remote.h"
#include "../codegen/bundle_libs.h"
#include "../frontend/cluster.h"
#include "../frontend/units.h"
#include "../ir/folders.h"

typedef struct {
    const char *cluster_file, *out_file, *ssh_config;
    double seconds;
    int port, connect_timeout;
} probe_options;

static const cli_option probe_options_table[] = {
    { .name = "-o",
      .alias = "--out",
      .metavar = "FILE",
      CLI_STRING(probe_options, out_file),
      .help = "the measured cluster file (required)" },
    { .name = "--ssh-config",
      .metavar = "FILE",
      CLI_STRING(probe_options, ssh_config),
      .help = "passed to ssh as -F FILE" },
    { .name = "--seconds",
      .metavar = "S",
      CLI_DOUBLE(probe_options, seconds),
      .lo = 0.1,
      .hi = 600,
      .expects = "seconds in [0.1, 600]",
      .help = "time to spend on each measurement (default 2)" },
    { .name = "--port",
      .metavar = "P",
      CLI_INT(probe_options, port),
      .lo = 1,
      .hi = 65535,
      .expects = "a port in [1, 65535]",
      .help = "the TCP port a link's far end listens on (default 29560)" },
    { .name = "--connect-timeout",
      .metavar = "S",
      CLI_INT(probe_options, connect_timeout),
      .lo = 1,
      .hi = INT_MAX,
      .expects = "a positive number of seconds",
      .help = "give up on a host that does not answer in S seconds (default 10)" },
};

const cli_usage probe_usage = {
    "usage: fusionc probe CLUSTER -o MEASURED.xml [--ssh-config FILE] [--seconds S] [--port P]\n"
    "\n"
    "Measure CLUSTER's hosts over ssh and write it again with what they measured: each CPU\n"
    "device's peaks and memory bandwidth (as fusionc profile measures), each region's\n"
    "bandwidth and latency (its first two hosts) and each pair of regions' link (their\n"
    "first hosts), over nanomsg as the devices talk.  fusion-probe and its libraries go to\n"
    "PATH/.fusion-probe on each host first; a host needs only the C library and sshd.\n"
    "\n",
    probe_options_table,
    NULL,
    sizeof probe_options_table / sizeof probe_options_table[0],
    21,
    NULL
};

/* What was measured of a path between two hosts. */
typedef struct {
    double bandwidth, latency; /* bytes/s, seconds; 0: not measured */
} path_figure;

/* A device's measured figures, as the cluster file writes them ("" none). */
typedef struct {
    char peak_fp32[32], peak_bf16[32], peak_fp16[32], memory_bandwidth[32];
} device_figure;

/* The value of attribute `name` in a <device .../> line, in out. */
static void line_attr(const char *line, const char *name, char *out, size_t n)
{
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *at = strstr(line, key);
    out[0] = '\0';
    if (at) {
        at += strlen(key);
        snprintf(out, n, "%.*s", (int)strcspn(at, "\""), at);
    }
}

/* Host h's first device, or -1. */
static int first_device(const cluster *c, int h)
{
    for (int d = 0; d < c->n_devices; d++)
        if (c->devices[d].host == h)
            return d;
    return -1;
}

/* ssh to host h (a remote_device standing for it: its first device's name). */
static void host_target(const cluster *c, int h, remote_device *r)
{
    int d = first_device(c, h);
    remote_device_at(c, h, d >= 0 ? c->devices[d].name : c->hosts[h].name, r);
}

/* "cd PATH/.fusion-probe && OMP_WAIT_POLICY=passive ./fusion-probe " + rest. */
static int agent_command(const remote_device *r, const char *rest, char *cmd, size_t n)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/.fusion-probe", r->path);
    size_t at = (size_t)snprintf(cmd, n, "cd ");
    if (remote_quote(cmd, n, &at, dir))
        return -1;
    int k = snprintf(cmd + at, n - at, " && OMP_WAIT_POLICY=passive exec ./fusion-probe %s", rest);
    return k < 0 || (size_t)k >= n - at ? -1 : 0;
}

/* Copy fusion-probe and its libraries to every host.  0, or -1 (said). */
static int push_agent(const remote_plan *plan, const cluster *c, char *tmp_root)
{
    char exe[PATH_MAX], agent[PATH_MAX + 32], dir[PATH_MAX + 64], copy[PATH_MAX + 96];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return fprintf(stderr, "fusionc probe: cannot find fusionc's own folder\n"), -1;
    exe[len] = '\0';
    *strrchr(exe, '/') = '\0';
    snprintf(agent, sizeof agent, "%s/fusion-probe", exe);
    if (access(agent, X_OK) != 0)
        return fprintf(stderr, "fusionc probe: %s is missing (it is built beside fusionc)\n", agent), -1;
    snprintf(dir, sizeof dir, "%s/.fusion-probe", tmp_root);
    snprintf(copy, sizeof copy, "%s/fusion-probe", dir);
    struct diag err = { 0 };
    bundle_libs seen = { 0 };
    int rc = mkdir(dir, 0755) != 0 || bundle_copy_file(agent, copy, &err) || bundle_libs_copy(&seen, copy, dir, &err);
    bundle_libs_free(&seen);
    if (rc) {
        diag_print(&err);
        return -1;
    }
    for (int h = 0; h < c->n_hosts; h++) {
        remote_device r;
        host_target(c, h, &r);
        char log[PATH_MAX + 64], host[500];
        snprintf(log, sizeof log, "%s/push-%d.log", tmp_root, h);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        remote_describe(&r, host, sizeof host);
        if (fd < 0 || remote_push_dir_into(plan, &r, dir, ".", 1, fd) != 0) {
            char text[4096] = "", last[400];
            FILE *f = fopen(log, "r"); /* its last 4 KiB: ssh's or tar's complaint */
            if (f) {
                if (fseek(f, -(long)(sizeof text - 1), SEEK_END) != 0)
                    rewind(f);
                text[fread(text, 1, sizeof text - 1, f)] = '\0';
                fclose(f);
            }
            remote_last_line(text, last, sizeof last);
            fprintf(stderr, "fusionc probe: host %s: cannot copy fusion-probe there: %s\n", host,
                    last[0] ? last : "ssh failed");
            if (fd >= 0)
                close(fd);
            return -1;
        }
        close(fd);
    }
    return 0;
}

/* Measure device d on its host (fusion-probe profile).  0, or -1 (said). */
static int measure_device(const remote_plan *plan, const cluster *c, int d, double seconds, device_figure *f)
{
    const cluster_device *dev = &c->devices[d];
    remote_device r;
    remote_device_at(c, dev->host, dev->name, &r);
    char rest[200], cmd[2048], host[500];
    snprintf(rest, sizeof rest, "profile --threads %d --seconds %.3g --name %s", dev->threads > 0 ? dev->threads : 1,
             seconds, dev->name);
    char *out = NULL;
    int rc = agent_command(&r, rest, cmd, sizeof cmd) ? -1 : remote_run(plan, &r, cmd, &out);
    const char *line = out ? strstr(out, "<device ") : NULL;
    remote_describe(&r, host, sizeof host);
    if (rc != 0 || !line) {
        char last[400] = "";
        remote_last_line(out ? out : "", last, sizeof last);
        fprintf(stderr, "fusionc probe: device %s on %s: fusion-probe profile failed (exit %d): %s\n", dev->name, host,
                rc, last[0] ? last : "no output");
        free(out);
        return -1;
    }
    line_attr(line, "peak-fp32", f->peak_fp32, sizeof f->peak_fp32);
    line_attr(line, "peak-bf16", f->peak_bf16, sizeof f->peak_bf16);
    line_attr(line, "peak-fp16", f->peak_fp16, sizeof f->peak_fp16);
    line_attr(line, "memory-bandwidth", f->memory_bandwidth, sizeof f->memory_bandwidth);
    free(out);
    return 0;
}

/* The path from host a to host b's address.  0, or -1 (said). */
static int measure_path(const remote_plan *plan, const cluster *c, int a, int b, const probe_options *o, path_figure *f)
{
    remote_device ra, rb;
    host_target(c, a, &ra);
    host_target(c, b, &rb);
    char rest[400], cmd[2048], from[500], to[500];
    remote_describe(&ra, from, sizeof from);
    remote_describe(&rb, to, sizeof to);
    /* the far end: silent 10 s past the measurement, it goes */
    snprintf(rest, sizeof rest, "serve %d %.3g", o->port, o->seconds + 10);
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    pid_t far = agent_command(&rb, rest, cmd, sizeof cmd) ? -1 : remote_spawn(plan, &rb, cmd, devnull, devnull, 1);
    if (devnull >= 0)
        close(devnull);
    if (far < 0)
        return fprintf(stderr, "fusionc probe: cannot start fusion-probe serve on %s\n", to), -1;
    snprintf(rest, sizeof rest, "link %s %d %.3g", c->hosts[b].address, o->port, o->seconds);
    char *out = NULL;
    int rc = agent_command(&ra, rest, cmd, sizeof cmd) ? -1 : remote_run(plan, &ra, cmd, &out);
    double latency = 0, bps = 0;
    const char *at = out ? strstr(out, "latency-s ") : NULL;
    int ok = rc == 0 && at && sscanf(at, "latency-s %lf bandwidth-bps %lf", &latency, &bps) == 2 && bps > 0;
    if (!ok) {
        char last[400] = "";
        remote_last_line(out ? out : "", last, sizeof last);
        fprintf(stderr, "fusionc probe: the path %s -> %s: fusion-probe link failed (exit %d): %s\n", from, to, rc,
                last[0] ? last : "no output");
        kill(far, SIGTERM);
    }
    free(out);
    waitpid(far, NULL, 0);
    f->bandwidth = bps / 8, f->latency = latency;
    return ok ? 0 : -1;
}

/* Set attribute name on node to value. */
static void set_attr(xmlNodePtr node, const char *name, const char *value)
{
    if (value && value[0])
        xmlSetProp(node, BAD_CAST name, BAD_CAST value);
}

static int name_is(xmlNodePtr node, const char *attr, const char *value)
{
    xmlChar *v = xmlGetProp(node, BAD_CAST attr);
    int same = v && strcmp((const char *)v, value) == 0;
    xmlFree(v);
    return same;
}

/* CLUSTER's document with the figures set, to o->out_file (atomically),
 * then loaded back.  0, or -1 (said). */
static int write_measured(const probe_options *o, const cluster *c, const device_figure *dev, const path_figure *region,
                          const path_figure *pair, const char *note)
{
    xmlDocPtr doc = xmlReadFile(o->cluster_file, NULL, XML_PARSE_NONET);
    xmlNodePtr root = doc ? xmlDocGetRootElement(doc) : NULL;
    if (!root)
        return fprintf(stderr, "fusionc probe: cannot read %s again\n", o->cluster_file), -1;
    int R = c->n_regions;
    char bw[32], lat[32];
    uint8_t *linked = calloc((size_t)R * R + 1, 1);
    for (xmlNodePtr n = root->children; n; n = n->next) {
        if (n->type != XML_ELEMENT_NODE)
            continue;
        if (xmlStrcmp(n->name, BAD_CAST "region") == 0) {
            for (int g = 0; g < R; g++)
                if (name_is(n, "name", c->regions[g].name) && region[g].bandwidth > 0) {
                    units_attr(region[g].bandwidth, UNIT_BANDWIDTH, bw, sizeof bw);
                    units_attr(region[g].latency, UNIT_TIME, lat, sizeof lat);
                    set_attr(n, "bandwidth", bw), set_attr(n, "latency", lat);
                }
            for (xmlNodePtr h = n->children; h; h = h->next)
                for (xmlNodePtr d = h->type == XML_ELEMENT_NODE ? h->children : NULL; d; d = d->next)
                    for (int k = 0; d->type == XML_ELEMENT_NODE && k < c->n_devices; k++)
                        if (name_is(d, "name", c->devices[k].name)) {
                            set_attr(d, "peak-fp32", dev[k].peak_fp32);
                            set_attr(d, "peak-bf16", dev[k].peak_bf16);
                            set_attr(d, "peak-fp16", dev[k].peak_fp16);
                            set_attr(d, "memory-bandwidth", dev[k].memory_bandwidth);
                        }
        } else if (xmlStrcmp(n->name, BAD_CAST "link") == 0) {
            for (int i = 0; linked && i < R; i++)
                for (int j = 0; j < R; j++) {
                    const path_figure *f = &pair[i < j ? i * R + j : j * R + i];
                    if (i == j || f->bandwidth <= 0 || !name_is(n, "from", c->regions[i].name) ||
                        !name_is(n, "to", c->regions[j].name))
                        continue;
                    units_attr(f->bandwidth, UNIT_BANDWIDTH, bw, sizeof bw);
                    units_attr(f->latency, UNIT_TIME, lat, sizeof lat);
                    set_attr(n, "bandwidth", bw), set_attr(n, "latency", lat);
                    linked[i < j ? i * R + j : j * R + i] = 1;
                }
        }
    }
    for (int i = 0; linked && i < R; i++) /* the pairs the file had no <link> for */
        for (int j = i + 1; j < R; j++) {
            const path_figure *f = &pair[i * R + j];
            if (linked[i * R + j] || f->bandwidth <= 0)
                continue;
            xmlNodePtr l = xmlNewChild(root, NULL, BAD_CAST "link", NULL);
            units_attr(f->bandwidth, UNIT_BANDWIDTH, bw, sizeof bw);
            units_attr(f->latency, UNIT_TIME, lat, sizeof lat);
            set_attr(l, "from", c->regions[i].name), set_attr(l, "to", c->regions[j].name);
            set_attr(l, "bandwidth", bw), set_attr(l, "latency", lat);
        }
    free(linked);
    xmlNodePtr comment = xmlNewDocComment(doc, BAD_CAST note);
    xmlAddPrevSibling(root, comment);
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", o->out_file, (int)getpid());
    int rc = xmlSaveFormatFileEnc(tmp, doc, "UTF-8", 0) < 0 ? -1 : 0;
    xmlFreeDoc(doc);
    cluster back = { 0 };
    struct diag err = { 0 };
    if (rc == 0 && cluster_load(tmp, &back, &err) != 0) {
        diag_print(&err);
        rc = -1;
    }
    cluster_free(&back);
    if (rc == 0 && rename(tmp, o->out_file) != 0)
        rc = -1;
    if (rc != 0) {
        unlink(tmp);
        fprintf(stderr, "fusionc probe: cannot write %s: %s\n", o->out_file, strerror(errno));
    }
    return rc;
}

/* The first two hosts of region g (-1 where there are fewer). */
static void region_hosts(const cluster *c, int g, int *first, int *second)
{
    *first = *second = -1;
    for (int h = 0; h < c->n_hosts; h++)
        if (c->hosts[h].region == g) {
            if (*first < 0)
                *first = h;
            else if (*second < 0)
                *second = h;
        }
}

int probe_main(int argc, char **argv)
{
    probe_options o = { .seconds = 2, .port = 29560, .connect_timeout = 10 };
    char why[512];
    for (int i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            cli_usage_print(stdout, &probe_usage);
            return 0;
        }
        int took = cli_take(&probe_usage, argc, argv, &i, &o, why, sizeof why);
        if (took < 0)
            return cli_usage_fail(&probe_usage, "fusionc probe", "%s", why);
        if (took == 0 && !o.cluster_file && argv[i][0] != '-')
            o.cluster_file = argv[i];
        else if (took == 0)
            return cli_usage_fail(&probe_usage, "fusionc probe", "unexpected argument '%s'", argv[i]);
    }
    if (!o.cluster_file || !o.out_file)
        return cli_usage_fail(&probe_usage, "fusionc probe", "%s", "expected CLUSTER and -o MEASURED.xml");
    cluster c = { 0 };
    struct diag err = { 0 };
    if (cluster_load(o.cluster_file, &c, &err)) {
        diag_print(&err);
        return 1;
    }
    remote_plan plan = { .ssh_config = o.ssh_config, .connect_timeout = o.connect_timeout };
    char tmp_root[] = "/tmp/fusion-probe.XXXXXX";
    int R = c.n_regions, rc = 1;
    device_figure *dev = calloc((size_t)c.n_devices + 1, sizeof *dev);
    path_figure *region = calloc((size_t)R + 1, sizeof *region), *pair = calloc((size_t)R * R + 1, sizeof *pair);
    int made = dev && region && pair && mkdtemp(tmp_root);
    if (!made || push_agent(&plan, &c, tmp_root))
        goto done;
    char bw[32], lat[32], was_bw[32], was_lat[32];
    int measured = 0, links = 0, kept = 0;
    for (int d = 0; d < c.n_devices; d++) {
        if (c.devices[d].kind != DEVICE_CPU) {
            printf("probe: %s (%s) keeps its declared peaks: fusion-probe measures CPUs only\n", c.devices[d].name,
                   c.devices[d].arch);
            kept++;
            continue;
        }
        if (measure_device(&plan, &c, d, o.seconds, &dev[d]))
            goto done;
        units_attr(c.devices[d].peak_flops[PEAK_FP32], UNIT_FLOPS, was_bw, sizeof was_bw);
        printf("probe: %s on %s: peak-fp32 %s (declared %s), memory-bandwidth %s\n", c.devices[d].name,
               c.hosts[c.devices[d].host].name, dev[d].peak_fp32, was_bw, dev[d].memory_bandwidth);
        measured++;
    }
    for (int g = 0; g < R; g++) {
        int a, b;
        region_hosts(&c, g, &a, &b);
        if (b < 0)
            continue;
        if (measure_path(&plan, &c, a, b, &o, &region[g]))
            goto done;
        units_attr(region[g].bandwidth, UNIT_BANDWIDTH, bw, sizeof bw);
        units_attr(region[g].latency, UNIT_TIME, lat, sizeof lat);
        units_attr(c.regions[g].bandwidth, UNIT_BANDWIDTH, was_bw, sizeof was_bw);
        units_attr(c.regions[g].latency, UNIT_TIME, was_lat, sizeof was_lat);
        printf("probe: region %s (%s -> %s): %s, %s (declared %s, %s)\n", c.regions[g].name, c.hosts[a].name,
               c.hosts[b].name, bw, lat, was_bw, was_lat);
        links++;
    }
    for (int i = 0; i < R; i++)
        for (int j = i + 1; j < R; j++) {
            int a, b, unused;
            region_hosts(&c, i, &a, &unused);
            region_hosts(&c, j, &b, &unused);
            if (a < 0 || b < 0)
                continue;
            path_figure *f = &pair[i * R + j];
            if (measure_path(&plan, &c, a, b, &o, f))
                goto done;
            units_attr(f->bandwidth, UNIT_BANDWIDTH, bw, sizeof bw);
            units_attr(f->latency, UNIT_TIME, lat, sizeof lat);
            double was_bandwidth = 0, was_latency = 0;
            cluster_link_between(&c, first_device(&c, a), first_device(&c, b), &was_bandwidth, &was_latency);
            units_attr(was_bandwidth, UNIT_BANDWIDTH, was_bw, sizeof was_bw);
            units_attr(was_latency, UNIT_TIME, was_lat, sizeof was_lat);
            printf("probe: link %s <-> %s (%s -> %s): %s, %s (declared %s, %s)\n", c.regions[i].name, c.regions[j].name,
                   c.hosts[a].name, c.hosts[b].name, bw, lat, was_bw, was_lat);
            links++;
        }
    char note[400];
    snprintf(note, sizeof note,
             " measured by fusionc probe from %s: %d CPU device%s (%d kept as declared), %d path%s, %.3g s each ",
             o.cluster_file, measured, measured == 1 ? "" : "s", kept, links, links == 1 ? "" : "s", o.seconds);
    if (write_measured(&o, &c, dev, region, pair, note) == 0) {
        printf("probe: wrote %s\n", o.out_file);
        rc = 0;
    }
done:
    if (made && (folders_empty(tmp_root, &err) != 0 || rmdir(tmp_root) != 0))
        fprintf(stderr, "fusionc probe: warning: could not remove %s\n", tmp_root);
    free(dev), free(region), free(pair);
    cluster_free(&c);
    return rc;
}
