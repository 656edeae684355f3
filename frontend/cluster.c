/* cluster.c: read a cluster file into a `cluster` (see cluster.h).
 *
 * The file format (frontend/cluster.xsd has the full list and defaults):
 *
 *   <cluster name="local-4">
 *     <region name="siteA" bandwidth="10Gbps" latency="50us">
 *       <host name="a0" address="127.0.0.1" user="" port="22" path="fusion"
 *             link-bandwidth="256Gbps" link-latency="1us">
 *         <device name="cpu0" kind="cpu" peak-fp32="50GFLOPS" memory="4GiB"
 *                 memory-bandwidth="10GB/s" threads="1" slowdown="1"/>
 *         <device name="gpu0" kind="cuda" arch="sm_80" peak-fp32="19.5TFLOPS"
 *                 peak-tf32="156TFLOPS" peak-bf16="312TFLOPS" peak-fp16="312TFLOPS"
 *                 memory="80GiB" memory-bandwidth="2039GB/s"/>
 *       </host>
 *     </region>
 *     <region name="siteB" ...> ... </region>
 *     <link from="siteA" to="siteB" bandwidth="20Mbps" latency="40ms"/>
 *   </cluster>
 *
 * Loading is three steps: xml_read (well-formed), xml_validate against the
 * embedded cluster.xsd (structure, required attributes, name syntax, integer
 * ranges), then the semantic checks here, each reported at the line of the
 * element at fault:
 *   - every quantity parses with its unit (units.c), and is > 0;
 *   - a device states at least one peak-fp32/-tf32/-bf16/-fp16, and no
 *     bare peak (read_peaks);
 *   - kind="cuda" has arch="sm_NN"; kind="cpu" has no sm_ arch;
 *   - region and host names are unique together (a link names either),
 *     device names are unique;
 *   - a link joins two regions or two hosts, not itself, and is not repeated;
 *   - every two regions that have devices are joined by a region link;
 *   - there is at least one device.
 * Name checks sort the names, so a large generated file is not quadratic.
 */
#include "cluster.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/tree.h>

#include "units.h"
#include "xml_util.h"

extern const unsigned char cluster_xsd[];
extern const unsigned cluster_xsd_len;

/* What the walk over the document needs at hand. */
typedef struct {
    const char *path;
    struct diag *err;
    cluster *c;
} loader;

/* ---- attributes ------------------------------------------------------- */

static int is_element(xmlNodePtr node, const char *name)
{
    const char *n = xml_element_name(node);
    return n && strcmp(n, name) == 0;
}

/* The element a message is about: "host 'a0'". */
static const char *owner(xmlNodePtr node, char *buf, size_t size)
{
    if (is_element(node, "link")) {
        xmlChar *from = xmlGetProp(node, (const xmlChar *)"from"), *to = xmlGetProp(node, (const xmlChar *)"to");
        snprintf(buf, size, "link from '%s' to '%s'", from ? (const char *)from : "", to ? (const char *)to : "");
        xmlFree(from);
        xmlFree(to);
        return buf;
    }
    xmlChar *name = xmlGetProp(node, (const xmlChar *)"name");
    if (name)
        snprintf(buf, size, "%s '%s'", (const char *)node->name, (const char *)name);
    else
        snprintf(buf, size, "<%s>", (const char *)node->name);
    xmlFree(name);
    return buf;
}

/* A quantity attribute with its unit; `dflt` < 0 means required. */
static int attr_quantity(loader *ld, xmlNodePtr node, const char *attr, unit_kind kind, double dflt, double *out)
{
    char text[128], why[DIAG_MSG_MAX / 2], who[2 * CLUSTER_NAME_MAX + 32];
    int got = xml_attr(node, attr, text, sizeof text, ld->path, ld->err);
    if (got < 0)
        return -1;
    if (got == 0) {
        if (dflt < 0) /* the schema makes it required; kept for callers without it */
            return diag_set(ld->err, ld->path, xml_line(node), "%s: missing attribute %s (%s such as '%s')",
                            owner(node, who, sizeof who), attr, units_kind_name(kind),
                            kind == UNIT_TIME   ? "40ms"
                            : kind == UNIT_SIZE ? "16GiB"
                                                : "10Gbps");
        *out = dflt;
        return 0;
    }
    if (units_parse(text, kind, out, why, sizeof why) != 0)
        return diag_set(ld->err, ld->path, xml_line(node), "%s: %s=\"%s\": %s", owner(node, who, sizeof who), attr,
                        text, why);
    return 0;
}

/* Trim the spaces xs:int and xs:decimal allow around a value, and a '+'. */
static const char *trim_number(char *text)
{
    char *s = text;
    while (isspace((unsigned char)*s))
        s++;
    if (*s == '+')
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* An integer attribute in [lo, hi], `dflt` when absent. */
static int attr_int(loader *ld, xmlNodePtr node, const char *attr, long lo, long hi, int dflt, int *out)
{
    char text[64], who[CLUSTER_NAME_MAX + 16];
    int got = xml_attr(node, attr, text, sizeof text, ld->path, ld->err);
    if (got < 0)
        return -1;
    if (got == 0) {
        *out = dflt;
        return 0;
    }
    const char *s = trim_number(text);
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < lo || v > hi)
        return diag_set(ld->err, ld->path, xml_line(node), "%s: %s=\"%s\": expected a whole number from %ld to %ld",
                        owner(node, who, sizeof who), attr, text, lo, hi);
    *out = (int)v;
    return 0;
}

/* A plain number attribute >= lo, `dflt` when absent. */
static int attr_number_at_least(loader *ld, xmlNodePtr node, const char *attr, double lo, double dflt, double *out)
{
    char text[64], why[256], who[CLUSTER_NAME_MAX + 16];
    int got = xml_attr(node, attr, text, sizeof text, ld->path, ld->err);
    if (got < 0)
        return -1;
    if (got == 0) {
        *out = dflt;
        return 0;
    }
    double v;
    if (units_parse_number(trim_number(text), &v, why, sizeof why) != 0)
        return diag_set(ld->err, ld->path, xml_line(node), "%s: %s=\"%s\": %s", owner(node, who, sizeof who), attr,
                        text, why);
    if (v < lo)
        return diag_set(ld->err, ld->path, xml_line(node), "%s: %s=\"%s\": expected a number of at least %g",
                        owner(node, who, sizeof who), attr, text, lo);
    *out = v;
    return 0;
}

/* A required name (the schema has checked its syntax). */
static int attr_name(loader *ld, xmlNodePtr node, const char *attr, char *buf, size_t size)
{
    int got = xml_attr(node, attr, buf, size, ld->path, ld->err);
    if (got < 0)
        return -1;
    if (got == 0 || buf[0] == '\0')
        return diag_set(ld->err, ld->path, xml_line(node), "<%s>: missing attribute %s", (const char *)node->name,
                        attr);
    return 0;
}

static int is_cuda_arch(const char *arch)
{
    if (strncmp(arch, "sm_", 3) != 0 || !arch[3])
        return 0;
    for (const char *p = arch + 3; *p; p++)
        if (!isdigit((unsigned char)*p))
            return 0;
    return 1;
}

/* ---- elements --------------------------------------------------------- */

/* peak-fp32, peak-tf32, peak-bf16, peak-fp16: at least one; a bare peak
 * is refused, since the figure a file gives means nothing until it says
 * for which arithmetic (an A100's 19.5 and 312 TFLOPS are both "its peak"). */
static int read_peaks(loader *ld, xmlNodePtr node, cluster_device *d)
{
    char who[2 * CLUSTER_NAME_MAX + 32], text[128], attr[32];
    int stated = 0, bare = xml_attr(node, "peak", text, sizeof text, ld->path, ld->err);
    if (bare < 0)
        return -1;
    if (bare > 0)
        return diag_set(ld->err, ld->path, xml_line(node),
                        "%s: peak=\"%s\" does not say for which arithmetic; write peak-fp32 (and peak-tf32, "
                        "peak-bf16, peak-fp16 where the device has them), dense datasheet figures",
                        owner(node, who, sizeof who), text);
    for (int k = 0; k < PEAK_COUNT; k++) {
        snprintf(attr, sizeof attr, "peak-%s", cluster_peak_name((peak_kind)k));
        if (attr_quantity(ld, node, attr, UNIT_FLOPS, 0.0, &d->peak_flops[k]) != 0)
            return -1;
        stated += d->peak_flops[k] > 0;
    }
    if (!stated)
        return diag_set(ld->err, ld->path, xml_line(node),
                        "%s: no peak: expected peak-fp32=\"...\" (and peak-tf32, peak-bf16, peak-fp16 where the "
                        "device has them)",
                        owner(node, who, sizeof who));
    return 0;
}

const char *cluster_peak_name(peak_kind k)
{
    static const char *const names[PEAK_COUNT] = { "fp32", "tf32", "bf16", "fp16" };
    return (unsigned)k < PEAK_COUNT ? names[k] : "?";
}

int cluster_require_peak(const cluster *c, peak_kind k, struct diag *err)
{
    for (int i = 0; i < c->n_devices; i++) {
        const cluster_device *d = &c->devices[i];
        if (d->peak_flops[k] > 0)
            continue;
        char have[128] = "";
        for (int j = 0; j < PEAK_COUNT; j++)
            if (d->peak_flops[j] > 0)
                snprintf(have + strlen(have), sizeof have - strlen(have), "%speak-%s", have[0] ? ", " : "",
                         cluster_peak_name((peak_kind)j));
        return diag_set(err, c->file, d->line,
                        "device '%s'%s%s states no peak-%s (it states %s): add the "
                        "datasheet's dense %s figure, or compile for a precision it has",
                        d->name, d->arch[0] ? " " : "", d->arch, cluster_peak_name(k), have, cluster_peak_name(k));
    }
    return 0;
}

static int read_device(loader *ld, xmlNodePtr node, int host, cluster_device *d)
{
    char kind[16], who[CLUSTER_NAME_MAX + 16];
    d->host = host;
    d->line = xml_line(node);
    if (attr_name(ld, node, "name", d->name, sizeof d->name) != 0)
        return -1;
    if (xml_attr(node, "kind", kind, sizeof kind, ld->path, ld->err) < 0)
        return -1;
    if (strcmp(kind, "cpu") == 0)
        d->kind = DEVICE_CPU;
    else if (strcmp(kind, "cuda") == 0)
        d->kind = DEVICE_CUDA;
    else
        return diag_set(ld->err, ld->path, d->line, "%s: kind=\"%s\": expected cpu or cuda",
                        owner(node, who, sizeof who), kind);
    if (xml_attr(node, "arch", d->arch, sizeof d->arch, ld->path, ld->err) < 0)
        return -1;
    if (d->kind == DEVICE_CUDA && !d->arch[0])
        return diag_set(ld->err, ld->path, d->line,
                        "%s: a cuda device needs arch=\"sm_NN\" "
                        "(sm_70 V100, sm_80 A100, sm_86 RTX 30xx, sm_89 RTX 40xx, sm_90 H100)",
                        owner(node, who, sizeof who));
    if (d->kind == DEVICE_CUDA && !is_cuda_arch(d->arch))
        return diag_set(ld->err, ld->path, d->line,
                        "%s: arch=\"%s\": expected a CUDA architecture sm_NN, such as sm_80",
                        owner(node, who, sizeof who), d->arch);
    if (d->kind == DEVICE_CPU && strncmp(d->arch, "sm_", 3) == 0)
        return diag_set(ld->err, ld->path, d->line, "%s: arch=\"%s\" is a CUDA architecture, but kind=\"cpu\"",
                        owner(node, who, sizeof who), d->arch);
    if (read_peaks(ld, node, d) != 0 || attr_quantity(ld, node, "memory", UNIT_SIZE, -1, &d->memory_bytes) != 0 ||
        attr_quantity(ld, node, "memory-bandwidth", UNIT_BANDWIDTH, -1, &d->memory_bandwidth) != 0 ||
        attr_int(ld, node, "threads", 1, 1024, 1, &d->threads) != 0 ||
        attr_number_at_least(ld, node, "slowdown", 1.0, 1.0, &d->slowdown) != 0)
        return -1;
    char standby[8] = "";
    if (xml_attr(node, "standby", standby, sizeof standby, ld->path, ld->err) < 0)
        return -1;
    d->standby = strcmp(standby, "true") == 0 || strcmp(standby, "1") == 0;
    return 0;
}

/* A host's address: an IPv4 address (four numbers 0-255), an IPv6 one
 * (brackets allowed) or a host name (RFC 1123 labels).  A name of digits
 * and dots only must be an IPv4 address: "127.0.123456789012" is a typo,
 * and it used to be found only when the run's connect timed out. */
static int address_valid(const char *address)
{
    unsigned char buf[sizeof(struct in6_addr)];
    char bare[256];
    size_t n = strlen(address);
    if (n == 0 || n >= sizeof bare)
        return 0;
    if (strspn(address, "0123456789.") == n)
        return inet_pton(AF_INET, address, buf) == 1;
    if (strchr(address, ':')) {
        int bracketed = address[0] == '[' && address[n - 1] == ']';
        snprintf(bare, sizeof bare, "%.*s", (int)(bracketed ? n - 2 : n), address + bracketed);
        return inet_pton(AF_INET6, bare, buf) == 1;
    }
    if (n > 253)
        return 0;
    for (const char *label = address; *label;) {
        size_t len = strcspn(label, ".");
        if (len == 0 || len > 63 || label[0] == '-' || label[len - 1] == '-' ||
            strspn(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") < len)
            return 0;
        label += len;
        if (*label == '.' && *++label == '\0')
            return 0; /* a trailing dot */
    }
    return 1;
}

static int read_host(loader *ld, xmlNodePtr node, int region, cluster_host *h)
{
    h->region = region;
    h->line = xml_line(node);
    if (attr_name(ld, node, "name", h->name, sizeof h->name) != 0 ||
        attr_name(ld, node, "address", h->address, sizeof h->address) != 0 ||
        xml_attr(node, "user", h->user, sizeof h->user, ld->path, ld->err) < 0 ||
        attr_int(ld, node, "port", 1, 65535, 22, &h->port) != 0 ||
        xml_attr(node, "path", h->path, sizeof h->path, ld->path, ld->err) < 0 ||
        attr_quantity(ld, node, "link-bandwidth", UNIT_BANDWIDTH, CLUSTER_DEFAULT_HOST_BANDWIDTH, &h->link_bandwidth) !=
            0 ||
        attr_quantity(ld, node, "link-latency", UNIT_TIME, CLUSTER_DEFAULT_HOST_LATENCY, &h->link_latency) != 0)
        return -1;
    char inbound[8] = "";
    if (xml_attr(node, "inbound", inbound, sizeof inbound, ld->path, ld->err) < 0)
        return -1;
    h->inbound = !(strcmp(inbound, "false") == 0 || strcmp(inbound, "0") == 0);
    if (!address_valid(h->address))
        return diag_set(ld->err, ld->path, h->line,
                        "host '%s': address '%s' is not an IPv4 address (four numbers 0-255), an IPv6 address or "
                        "a host name",
                        h->name, h->address);
    if (h->path[0] == '\0')
        snprintf(h->path, sizeof h->path, "fusion");
    return 0;
}

static int read_region(loader *ld, xmlNodePtr node, cluster_region *r)
{
    r->line = xml_line(node);
    if (attr_name(ld, node, "name", r->name, sizeof r->name) != 0 ||
        attr_quantity(ld, node, "bandwidth", UNIT_BANDWIDTH, -1, &r->bandwidth) != 0 ||
        attr_quantity(ld, node, "latency", UNIT_TIME, -1, &r->latency) != 0)
        return -1;
    return 0;
}

static int read_link(loader *ld, xmlNodePtr node, cluster_link *l)
{
    l->line = xml_line(node);
    l->a = l->b = -1;
    if (attr_name(ld, node, "from", l->from, sizeof l->from) != 0 ||
        attr_name(ld, node, "to", l->to, sizeof l->to) != 0 ||
        attr_quantity(ld, node, "bandwidth", UNIT_BANDWIDTH, -1, &l->bandwidth) != 0 ||
        attr_quantity(ld, node, "latency", UNIT_TIME, -1, &l->latency) != 0)
        return -1;
    return 0;
}

/* Count, allocate once per kind, then fill in document order. */
static int read_tree(loader *ld, xmlNodePtr root)
{
    cluster *c = ld->c;
    int nr = 0, nh = 0, nd = 0, nl = 0;
    for (xmlNodePtr r = root->children; r; r = r->next) {
        if (is_element(r, "link"))
            nl++;
        if (!is_element(r, "region"))
            continue;
        nr++;
        for (xmlNodePtr h = r->children; h; h = h->next) {
            if (!is_element(h, "host"))
                continue;
            nh++;
            for (xmlNodePtr d = h->children; d; d = d->next)
                nd += is_element(d, "device");
        }
    }
    c->regions = calloc((size_t)nr + 1, sizeof *c->regions);
    c->hosts = calloc((size_t)nh + 1, sizeof *c->hosts);
    c->devices = calloc((size_t)nd + 1, sizeof *c->devices);
    c->links = calloc((size_t)nl + 1, sizeof *c->links);
    if (!c->regions || !c->hosts || !c->devices || !c->links)
        return diag_set(ld->err, ld->path, 0, "out of memory reading the cluster");

    for (xmlNodePtr r = root->children; r; r = r->next) {
        if (is_element(r, "link")) {
            if (read_link(ld, r, &c->links[c->n_links]) != 0)
                return -1;
            c->n_links++;
            continue;
        }
        if (!is_element(r, "region"))
            continue;
        int ri = c->n_regions;
        if (read_region(ld, r, &c->regions[ri]) != 0)
            return -1;
        c->n_regions++;
        for (xmlNodePtr h = r->children; h; h = h->next) {
            if (!is_element(h, "host"))
                continue;
            int hi = c->n_hosts;
            if (read_host(ld, h, ri, &c->hosts[hi]) != 0)
                return -1;
            c->n_hosts++;
            for (xmlNodePtr d = h->children; d; d = d->next) {
                if (!is_element(d, "device"))
                    continue;
                if (read_device(ld, d, hi, &c->devices[c->n_devices]) != 0)
                    return -1;
                c->n_devices++;
            }
        }
    }
    return 0;
}

/* ---- names ------------------------------------------------------------ */

/* A name and what it names, for sorting and lookup. */
typedef enum { NAMED_REGION, NAMED_HOST, NAMED_DEVICE } named_kind;

typedef struct {
    const char *name;
    named_kind kind;
    int index;
    int line;
} named;

static const char *named_kind_word(named_kind k)
{
    return k == NAMED_REGION ? "region" : k == NAMED_HOST ? "host" : "device";
}

static int cmp_named(const void *pa, const void *pb)
{
    const named *a = pa, *b = pb;
    int r = strcmp(a->name, b->name);
    return r ? r : (a->line > b->line) - (a->line < b->line);
}

/* Sort `names` and report the first duplicate in file order. */
static int check_unique(loader *ld, named *names, int n, const char *scope)
{
    qsort(names, (size_t)n, sizeof *names, cmp_named);
    const named *dup = NULL, *first = NULL;
    for (int i = 1; i < n; i++)
        if (strcmp(names[i - 1].name, names[i].name) == 0 && (!dup || names[i].line < dup->line)) {
            int j = i - 1;
            while (j > 0 && strcmp(names[j - 1].name, names[i].name) == 0)
                j--;
            dup = &names[i];
            first = &names[j];
        }
    if (!dup)
        return 0;
    return diag_set(ld->err, ld->path, dup->line, "%s '%s': the name is already used by the %s at line %d (%s)",
                    named_kind_word(dup->kind), dup->name, named_kind_word(first->kind), first->line, scope);
}

static const named *find_named(const named *names, int n, const char *name)
{
    named key = { name, NAMED_REGION, 0, -1 };
    int lo = 0, hi = n; /* first entry >= key: the one with the smallest line */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (cmp_named(&names[mid], &key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && strcmp(names[lo].name, name) == 0 ? &names[lo] : NULL;
}

/* ---- links ------------------------------------------------------------ */

static int resolve_link(loader *ld, const named *places, int n_places, const named *devices, int n_devices,
                        cluster_link *l)
{
    const char *ends[2] = { l->from, l->to };
    const named *found[2];
    for (int e = 0; e < 2; e++) {
        found[e] = find_named(places, n_places, ends[e]);
        if (found[e])
            continue;
        if (find_named(devices, n_devices, ends[e]))
            return diag_set(ld->err, ld->path, l->line,
                            "link %s=\"%s\": '%s' is a device; a link joins two regions or two hosts",
                            e ? "to" : "from", ends[e], ends[e]);
        return diag_set(ld->err, ld->path, l->line, "link %s=\"%s\": no region or host is named '%s'",
                        e ? "to" : "from", ends[e], ends[e]);
    }
    if (found[0]->kind != found[1]->kind)
        return diag_set(ld->err, ld->path, l->line,
                        "link from %s '%s' to %s '%s': a link joins two regions or two hosts, not one of each",
                        named_kind_word(found[0]->kind), l->from, named_kind_word(found[1]->kind), l->to);
    if (found[0]->index == found[1]->index)
        return diag_set(ld->err, ld->path, l->line, "link from %s '%s' to itself: a link joins two different %ss",
                        named_kind_word(found[0]->kind), l->from, named_kind_word(found[0]->kind));
    l->between_hosts = found[0]->kind == NAMED_HOST;
    l->a = found[0]->index;
    l->b = found[1]->index;
    return 0;
}

/* A link as an unordered pair, for sorting. */
typedef struct {
    int between_hosts, lo, hi, index;
} link_key;

static int cmp_link_key(const void *pa, const void *pb)
{
    const link_key *a = pa, *b = pb;
    if (a->between_hosts != b->between_hosts)
        return a->between_hosts - b->between_hosts;
    if (a->lo != b->lo)
        return (a->lo > b->lo) - (a->lo < b->lo);
    if (a->hi != b->hi)
        return (a->hi > b->hi) - (a->hi < b->hi);
    return (a->index > b->index) - (a->index < b->index);
}

static int same_pair(const link_key *a, const link_key *b)
{
    return a->between_hosts == b->between_hosts && a->lo == b->lo && a->hi == b->hi;
}

static link_key key_of(const cluster_link *l, int index)
{
    link_key k = { l->between_hosts, l->a < l->b ? l->a : l->b, l->a < l->b ? l->b : l->a, index };
    return k;
}

/* No pair linked twice; every two regions with devices linked. */
static int check_links(loader *ld, link_key *keys)
{
    const cluster *c = ld->c;
    for (int i = 0; i < c->n_links; i++)
        keys[i] = key_of(&c->links[i], i);
    qsort(keys, (size_t)c->n_links, sizeof *keys, cmp_link_key);
    int dup = -1, first = -1; /* the repeat that comes first in the file */
    for (int i = 1; i < c->n_links; i++) {
        if (!same_pair(&keys[i], &keys[i - 1]) || (dup >= 0 && keys[i].index > dup))
            continue;
        dup = keys[i].index;
        int j = i - 1;
        while (j > 0 && same_pair(&keys[j - 1], &keys[i]))
            j--;
        first = keys[j].index;
    }
    if (dup >= 0) {
        const cluster_link *l = &c->links[dup];
        return diag_set(ld->err, ld->path, l->line, "duplicate link between %s '%s' and '%s': the first is at line %d",
                        l->between_hosts ? "hosts" : "regions", l->from, l->to, c->links[first].line);
    }

    /* Region pairs: keys are sorted, region links first, so a pair (i, j),
     * i < j, is linked iff bsearch finds it.  Walking the pairs in order
     * finds the first missing one within n_links + 1 probes. */
    int *devices_in = calloc((size_t)c->n_regions + 1, sizeof *devices_in);
    if (!devices_in)
        return diag_set(ld->err, ld->path, 0, "out of memory checking links");
    for (int d = 0; d < c->n_devices; d++)
        devices_in[c->hosts[c->devices[d].host].region]++;
    long long with_devices = 0, linked = 0;
    for (int r = 0; r < c->n_regions; r++)
        with_devices += devices_in[r] > 0;
    for (int i = 0; i < c->n_links; i++)
        linked += !keys[i].between_hosts && devices_in[keys[i].lo] && devices_in[keys[i].hi];
    long long missing = with_devices * (with_devices - 1) / 2 - linked;
    int rc = 0;
    for (int i = 0; missing > 0 && i < c->n_regions && rc == 0; i++) {
        if (!devices_in[i])
            continue;
        for (int j = i + 1; j < c->n_regions; j++) {
            if (!devices_in[j])
                continue;
            link_key want = { 0, i, j, -1 };
            int lo = 0, hi = c->n_links;
            while (lo < hi) {
                int mid = lo + (hi - lo) / 2;
                if (cmp_link_key(&keys[mid], &want) < 0)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo < c->n_links && same_pair(&keys[lo], &want))
                continue;
            const cluster_region *a = &c->regions[i], *b = &c->regions[j];
            char more[96] = "";
            if (missing > 1)
                snprintf(more, sizeof more, " (%lld other pair%s of regions lack%s a link too)", missing - 1,
                         missing > 2 ? "s" : "", missing > 2 ? "" : "s");
            rc = diag_set(ld->err, ld->path, b->line,
                          "regions '%s' and '%s' have no link: add <link from=\"%s\" to=\"%s\" bandwidth=\"...\" "
                          "latency=\"...\"/>%s",
                          a->name, b->name, a->name, b->name, more);
            break;
        }
    }
    free(devices_in);
    return rc;
}

/* ---- checks over the whole cluster ------------------------------------ */

static int check_cluster(loader *ld, int root_line)
{
    cluster *c = ld->c;
    if (c->n_devices == 0)
        return diag_set(ld->err, ld->path, root_line,
                        "cluster '%s' has no devices: add a <host> with a <device> inside a <region>", c->name);

    int n_places = c->n_regions + c->n_hosts, rc = -1;
    named *places = calloc((size_t)n_places + 1, sizeof *places);
    named *devices = calloc((size_t)c->n_devices + 1, sizeof *devices);
    link_key *keys = calloc((size_t)c->n_links + 1, sizeof *keys);
    if (!places || !devices || !keys) {
        diag_set(ld->err, ld->path, 0, "out of memory checking the cluster");
        goto done;
    }
    for (int i = 0; i < c->n_regions; i++)
        places[i] = (named){ c->regions[i].name, NAMED_REGION, i, c->regions[i].line };
    for (int i = 0; i < c->n_hosts; i++)
        places[c->n_regions + i] = (named){ c->hosts[i].name, NAMED_HOST, i, c->hosts[i].line };
    for (int i = 0; i < c->n_devices; i++)
        devices[i] = (named){ c->devices[i].name, NAMED_DEVICE, i, c->devices[i].line };
    if (check_unique(ld, places, n_places, "names of regions and hosts must be unique together") != 0 ||
        check_unique(ld, devices, c->n_devices, "device names must be unique") != 0)
        goto done;
    for (int i = 0; i < c->n_links; i++)
        if (resolve_link(ld, places, n_places, devices, c->n_devices, &c->links[i]) != 0)
            goto done;
    if (check_links(ld, keys) != 0)
        goto done;
    rc = 0;
done:
    free(places);
    free(devices);
    free(keys);
    return rc;
}

/* ---- loading ---------------------------------------------------------- */

static int load_doc(xmlDocPtr doc, const char *path, cluster *c, struct diag *err)
{
    loader ld = { path, err, c };
    xmlNodePtr root = xmlDocGetRootElement(doc);
    if (!root || !is_element(root, "cluster"))
        return diag_set(err, path, xml_line(root),
                        "the root element is <%s>: expected <cluster> (is this a cluster file?)",
                        root ? (const char *)root->name : "");
    if (xml_validate(doc, cluster_xsd, cluster_xsd_len, path, err) != 0)
        return -1;
    if (attr_name(&ld, root, "name", c->name, sizeof c->name) != 0 || read_tree(&ld, root) != 0)
        return -1;
    if (check_cluster(&ld, xml_line(root)) != 0)
        return -1;
    /* The spares apart: every plan, link list and bundle is of the rest. */
    c->standbys = calloc((size_t)c->n_devices + 1, sizeof *c->standbys);
    if (!c->standbys)
        return diag_set(err, path, 0, "out of memory reading the cluster");
    int kept = 0;
    for (int i = 0; i < c->n_devices; i++) {
        if (c->devices[i].standby)
            c->standbys[c->n_standbys++] = c->devices[i];
        else
            c->devices[kept++] = c->devices[i];
    }
    c->n_devices = kept;
    if (kept == 0)
        return diag_set(err, path, xml_line(root),
                        "every device of cluster '%s' is a standby: a plan needs one that "
                        "is not",
                        c->name);
    return 0;
}

static int load(const char *path, const char *buf, size_t len, cluster *c, struct diag *err)
{
    memset(c, 0, sizeof *c);
    if (!path)
        path = "<cluster>";
    snprintf(c->file, sizeof c->file, "%s", path);
    xmlDocPtr doc = xml_read(path, buf, len, err);
    if (!doc) {
        memset(c, 0, sizeof *c);
        return -1;
    }
    int rc = load_doc(doc, path, c, err);
    xmlFreeDoc(doc);
    if (rc != 0)
        cluster_free(c);
    return rc;
}

int cluster_load(const char *path, cluster *c, struct diag *err)
{
    if (!path) {
        memset(c, 0, sizeof *c);
        return diag_set(err, "<cluster>", 0, "no cluster file given");
    }
    return load(path, NULL, 0, c, err);
}

int cluster_load_memory(const char *buf, int len, const char *name, cluster *c, struct diag *err)
{
    if (!buf || len < 0) {
        memset(c, 0, sizeof *c);
        return diag_set(err, name ? name : "<cluster>", 0, "no cluster text given");
    }
    /* xml_read treats a NULL buffer as "read the file", so pass "" for an
     * empty one: the message is then "file is empty". */
    return load(name, len ? buf : "", (size_t)len, c, err);
}

void cluster_free(cluster *c)
{
    if (!c)
        return;
    free(c->regions);
    free(c->hosts);
    free(c->devices);
    free(c->links);
    free(c->standbys);
    memset(c, 0, sizeof *c);
}

/* ---- queries ---------------------------------------------------------- */

int cluster_find_region(const cluster *c, const char *name)
{
    for (int i = 0; i < c->n_regions; i++)
        if (strcmp(c->regions[i].name, name) == 0)
            return i;
    return -1;
}

int cluster_find_host(const cluster *c, const char *name)
{
    for (int i = 0; i < c->n_hosts; i++)
        if (strcmp(c->hosts[i].name, name) == 0)
            return i;
    return -1;
}

int cluster_find_device(const cluster *c, const char *name)
{
    for (int i = 0; i < c->n_devices; i++)
        if (strcmp(c->devices[i].name, name) == 0)
            return i;
    return -1;
}

static const cluster_link *find_link(const cluster *c, int between_hosts, int a, int b)
{
    for (int i = 0; i < c->n_links; i++) {
        const cluster_link *l = &c->links[i];
        if (l->between_hosts == between_hosts && ((l->a == a && l->b == b) || (l->a == b && l->b == a)))
            return l;
    }
    return NULL;
}

void cluster_link_between(const cluster *c, int dev_a, int dev_b, double *bandwidth, double *latency)
{
    double bw = 0.0, lat = INFINITY; /* no link: what an invalid index gets */
    if (c && dev_a >= 0 && dev_b >= 0 && dev_a < c->n_devices && dev_b < c->n_devices) {
        int ha = c->devices[dev_a].host, hb = c->devices[dev_b].host;
        int ra = c->hosts[ha].region, rb = c->hosts[hb].region;
        const cluster_link *l;
        if (dev_a == dev_b)
            bw = INFINITY, lat = 0.0;
        else if (ha == hb)
            bw = c->hosts[ha].link_bandwidth, lat = c->hosts[ha].link_latency;
        else if (!c->hosts[ha].inbound && !c->hosts[hb].inbound)
            bw = CLUSTER_NO_PATH_BANDWIDTH, lat = CLUSTER_NO_PATH_LATENCY;
        else if ((l = find_link(c, 1, ha, hb)))
            bw = l->bandwidth, lat = l->latency;
        else if (ra == rb)
            bw = c->regions[ra].bandwidth, lat = c->regions[ra].latency;
        else if ((l = find_link(c, 0, ra, rb)))
            bw = l->bandwidth, lat = l->latency;
    }
    if (bandwidth)
        *bandwidth = bw;
    if (latency)
        *latency = lat;
}

int cluster_has_path(const cluster *c, int dev_a, int dev_b)
{
    if (dev_a < 0 || dev_b < 0 || dev_a >= c->n_devices || dev_b >= c->n_devices)
        return 0;
    int ha = c->devices[dev_a].host, hb = c->devices[dev_b].host;
    return ha == hb || c->hosts[ha].inbound || c->hosts[hb].inbound;
}

/* ---- printing --------------------------------------------------------- */

/* "20 Mbps, 40 ms" */
static char *link_text(double bw, double lat, char *buf, size_t size)
{
    char b[32], t[32];
    snprintf(buf, size, "%s, %s", units_format(bw, UNIT_BANDWIDTH, b, sizeof b),
             units_format(lat, UNIT_TIME, t, sizeof t));
    return buf;
}

void cluster_print_summary(const cluster *c, FILE *out)
{
    char a[64], m[64];
    fprintf(out, "cluster %s (%s): %d region%s, %d host%s, %d device%s, %d link%s\n", c->name, c->file, c->n_regions,
            c->n_regions == 1 ? "" : "s", c->n_hosts, c->n_hosts == 1 ? "" : "s", c->n_devices,
            c->n_devices == 1 ? "" : "s", c->n_links, c->n_links == 1 ? "" : "s");
    for (int r = 0; r < c->n_regions; r++) {
        const cluster_region *rg = &c->regions[r];
        fprintf(out, "region %s: %s between its hosts\n", rg->name, link_text(rg->bandwidth, rg->latency, a, sizeof a));
        for (int h = 0; h < c->n_hosts; h++) {
            const cluster_host *ho = &c->hosts[h];
            if (ho->region != r)
                continue;
            fprintf(out, "  host %s: %s%s%s:%d path %s, %s inside\n", ho->name, ho->user, ho->user[0] ? "@" : "",
                    ho->address, ho->port, ho->path, link_text(ho->link_bandwidth, ho->link_latency, a, sizeof a));
            for (int d = 0; d < c->n_devices; d++) {
                const cluster_device *dv = &c->devices[d];
                if (dv->host != h)
                    continue;
                fprintf(out, "    device %s: %s%s%s, peak", dv->name, dv->kind == DEVICE_CUDA ? "cuda" : "cpu",
                        dv->arch[0] ? " " : "", dv->arch);
                for (int k = 0, first = 1; k < PEAK_COUNT; k++)
                    if (dv->peak_flops[k] > 0) {
                        fprintf(out, "%s %s %s", first ? "" : ",", cluster_peak_name((peak_kind)k),
                                units_format(dv->peak_flops[k], UNIT_FLOPS, a, sizeof a));
                        first = 0;
                    }
                fprintf(out, ", memory %s at %.4g GB/s, %d thread%s",
                        units_format(dv->memory_bytes, UNIT_SIZE, m, sizeof m), dv->memory_bandwidth / 1e9, dv->threads,
                        dv->threads == 1 ? "" : "s");
                if (dv->slowdown != 1.0)
                    fprintf(out, ", slowdown %gx", dv->slowdown);
                fputc('\n', out);
            }
        }
    }

    int host_links = 0;
    for (int i = 0; i < c->n_links; i++)
        host_links += c->links[i].between_hosts;
    if (host_links) {
        fprintf(out, "links between hosts:\n");
        for (int i = 0; i < c->n_links; i++)
            if (c->links[i].between_hosts)
                fprintf(out, "  %s <-> %s: %s\n", c->links[i].from, c->links[i].to,
                        link_text(c->links[i].bandwidth, c->links[i].latency, a, sizeof a));
    }

    /* The matrix: the diagonal is the region's own bandwidth, "-" no link. */
    int width = 6;
    for (int r = 0; r < c->n_regions; r++) {
        int n = (int)strlen(c->regions[r].name);
        width = n > width ? n : width;
        for (int s = 0; s < c->n_regions; s++) {
            const cluster_link *l = r == s ? NULL : find_link(c, 0, r, s);
            if (r == s)
                n = (int)strlen(link_text(c->regions[r].bandwidth, c->regions[r].latency, a, sizeof a));
            else
                n = l ? (int)strlen(link_text(l->bandwidth, l->latency, a, sizeof a)) : 1;
            width = n > width ? n : width;
        }
    }
    fprintf(out, "region links (bandwidth, latency; the diagonal is inside the region):\n");
    fprintf(out, "  %-*s", width, "");
    for (int s = 0; s < c->n_regions; s++)
        fprintf(out, "  %-*s", s + 1 < c->n_regions ? width : 0, c->regions[s].name);
    fputc('\n', out);
    for (int r = 0; r < c->n_regions; r++) {
        fprintf(out, "  %-*s", width, c->regions[r].name);
        for (int s = 0; s < c->n_regions; s++) {
            const cluster_link *l = r == s ? NULL : find_link(c, 0, r, s);
            const char *cell = r == s ? link_text(c->regions[r].bandwidth, c->regions[r].latency, a, sizeof a)
                               : l    ? link_text(l->bandwidth, l->latency, a, sizeof a)
                                      : "-";
            fprintf(out, "  %-*s", s + 1 < c->n_regions ? width : 0, cell);
        }
        fputc('\n', out);
    }
}
