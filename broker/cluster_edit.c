/* cluster_edit.c: a provider's device added to the run's cluster file
 * (cluster_edit.h). */
#include "cluster_edit.h"

#include <libxml/tree.h>
#include <stdio.h>
#include <string.h>

#include "../frontend/cluster.h"
#include "../frontend/units.h"
#include "../frontend/xml_util.h"
#include "../runtime/atomic_file.h"

static xmlNodePtr child_element(xmlNodePtr parent, const char *name, const char *const *attrs, int n)
{
    xmlNodePtr e = xmlNewNode(NULL, (const xmlChar *)name);
    for (int i = 0; i + 1 < n; i += 2)
        xmlNewProp(e, (const xmlChar *)attrs[i], (const xmlChar *)attrs[i + 1]);
    if (parent)
        xmlAddChild(parent, e);
    return e;
}

/* doc written to `to` (atomically) when it loads as a cluster, into *out
 * (the caller's to cluster_free); doc freed. */
static int write_checked(xmlDocPtr doc, const char *to, cluster *out, char *err, size_t n)
{
    xmlChar *text = NULL;
    int len = 0;
    xmlDocDumpFormatMemory(doc, &text, &len, 1);
    xmlFreeDoc(doc);
    struct diag d = { 0 };
    cluster check;
    int rc = -1;
    if (!text) {
        snprintf(err, n, "%s: cannot write the cluster", to);
    } else if (cluster_load_memory((const char *)text, len, to, &check, &d) != 0) {
        snprintf(err, n, "not a valid cluster: %s", d.msg);
    } else if ((rc = atomic_write_file(to, text, (size_t)len, err, n)) == 0) {
        *out = check;
    } else {
        cluster_free(&check);
    }
    xmlFree(text);
    return rc;
}

int cluster_add_provider(const char *from, const char *to, const char *name, const char *address, int inbound,
                         const char *link_bandwidth, const char *link_latency, const provider_attr *attrs, int n_attrs,
                         cluster *out, char *err, size_t n)
{
    struct diag d = { 0 };
    xmlDocPtr doc = xml_read(from, NULL, 0, &d);
    if (!doc) {
        snprintf(err, n, "%s:%d: %s", d.file, d.line, d.msg);
        return -1;
    }
    xmlNodePtr root = xmlDocGetRootElement(doc), first_link = NULL;
    char region[160], regions[256][CLUSTER_NAME_MAX];
    int n_regions = 0;
    for (xmlNodePtr e = root ? root->children : NULL; e; e = e->next) {
        const char *tag = xml_element_name(e);
        if (tag && strcmp(tag, "link") == 0 && !first_link)
            first_link = e;
        xmlChar *rn = tag && strcmp(tag, "region") == 0 ? xmlGetProp(e, (const xmlChar *)"name") : NULL;
        if (rn && n_regions < 256)
            snprintf(regions[n_regions++], sizeof regions[0], "%s", (const char *)rn);
        xmlFree(rn);
    }
    snprintf(region, sizeof region, "provider-%s", name);
    const char *region_attrs[] = { "name", region, "bandwidth", link_bandwidth, "latency", link_latency };
    const char *host_attrs[] = { "name", name, "address", address, "inbound", "false" };
    xmlNodePtr r = child_element(NULL, "region", region_attrs, 6);
    xmlNodePtr h = child_element(r, "host", host_attrs, inbound ? 4 : 6);
    const char *device_attrs[] = { "name", name };
    xmlNodePtr dev = child_element(h, "device", device_attrs, 2);
    for (int i = 0; i < n_attrs; i++)
        xmlNewProp(dev, (const xmlChar *)attrs[i].name, (const xmlChar *)attrs[i].value);
    xmlNewProp(dev, (const xmlChar *)"standby", (const xmlChar *)"true");
    if (first_link)
        xmlAddPrevSibling(first_link, r);
    else
        xmlAddChild(root, r);
    for (int i = 0; i < n_regions; i++) {
        const char *link_attrs[] = { "from",      region,         "to",      regions[i],
                                     "bandwidth", link_bandwidth, "latency", link_latency };
        child_element(root, "link", link_attrs, 8);
    }
    return write_checked(doc, to, out, err, n);
}

int cluster_set_slowdown(const char *from, const char *to, const char *device, double slowdown, cluster *out, char *err,
                         size_t n)
{
    struct diag d = { 0 };
    xmlDocPtr doc = xml_read(from, NULL, 0, &d);
    if (!doc) {
        snprintf(err, n, "%s:%d: %s", d.file, d.line, d.msg);
        return -1;
    }
    xmlNodePtr found = NULL, root = xmlDocGetRootElement(doc);
    for (xmlNodePtr r = root ? root->children : NULL; r && !found; r = r->next)
        for (xmlNodePtr h = r->type == XML_ELEMENT_NODE ? r->children : NULL; h && !found; h = h->next)
            for (xmlNodePtr e = h->type == XML_ELEMENT_NODE ? h->children : NULL; e && !found; e = e->next) {
                xmlChar *name = e->type == XML_ELEMENT_NODE ? xmlGetProp(e, (const xmlChar *)"name") : NULL;
                if (name && strcmp((const char *)name, device) == 0)
                    found = e;
                xmlFree(name);
            }
    if (!found) {
        xmlFreeDoc(doc);
        snprintf(err, n, "%s: no device '%s'", from, device);
        return -1;
    }
    char value[32];
    snprintf(value, sizeof value, "%.2f", slowdown < 1.0 ? 1.0 : slowdown);
    xmlSetProp(found, (const xmlChar *)"slowdown", (const xmlChar *)value);
    return write_checked(doc, to, out, err, n);
}

/* Whether element e's attribute `attr` is value. */
static int attr_is(xmlNodePtr e, const char *attr, const char *value)
{
    xmlChar *v = xmlGetProp(e, (const xmlChar *)attr);
    int same = v && strcmp((const char *)v, value) == 0;
    xmlFree(v);
    return same;
}

int cluster_set_link(const char *from, const char *to, const char *host_a, const char *host_b, double bandwidth,
                     double latency, cluster *out, char *err, size_t n)
{
    struct diag d = { 0 };
    xmlDocPtr doc = xml_read(from, NULL, 0, &d);
    if (!doc) {
        snprintf(err, n, "%s:%d: %s", d.file, d.line, d.msg);
        return -1;
    }
    char bw[32], lat[32];
    units_attr(bandwidth, UNIT_BANDWIDTH, bw, sizeof bw);
    units_attr(latency, UNIT_TIME, lat, sizeof lat);
    xmlNodePtr root = xmlDocGetRootElement(doc), found = NULL;
    int same_host = strcmp(host_a, host_b) == 0;
    for (xmlNodePtr e = root ? root->children : NULL; e && !found; e = e->next) {
        const char *tag = xml_element_name(e);
        if (!tag)
            continue;
        if (same_host && strcmp(tag, "region") == 0) { /* the host's own link-bandwidth */
            for (xmlNodePtr h = e->children; h && !found; h = h->next)
                if (xml_element_name(h) && attr_is(h, "name", host_a))
                    found = h;
        } else if (!same_host && strcmp(tag, "link") == 0 &&
                   ((attr_is(e, "from", host_a) && attr_is(e, "to", host_b)) ||
                    (attr_is(e, "from", host_b) && attr_is(e, "to", host_a)))) {
            found = e;
        }
    }
    if (same_host && !found) {
        xmlFreeDoc(doc);
        snprintf(err, n, "%s: no host '%s'", from, host_a);
        return -1;
    }
    if (same_host) {
        xmlSetProp(found, (const xmlChar *)"link-bandwidth", (const xmlChar *)bw);
    } else if (found) {
        xmlSetProp(found, (const xmlChar *)"bandwidth", (const xmlChar *)bw);
    } else { /* the pair's own link, over the region's (cluster.h: a host-host link comes first) */
        const char *attrs[] = { "from", host_a, "to", host_b, "bandwidth", bw, "latency", lat };
        child_element(root, "link", attrs, 8);
    }
    return write_checked(doc, to, out, err, n);
}
