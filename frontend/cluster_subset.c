/* cluster_subset.c: one site of a cluster as a cluster of its own (see
 * cluster.h), for the baselines a plan is judged against: what that site
 * would do alone. */
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "../ir/diag.h"

int cluster_subset(const cluster *c, int index, int by_host, cluster *out)
{
    memset(out, 0, sizeof *out);
    if (index < 0 || index >= (by_host ? c->n_hosts : c->n_regions))
        return -1;
    int region = by_host ? c->hosts[index].region : index;
    int *host_map = malloc(((size_t)c->n_hosts + 1) * sizeof *host_map);
    out->regions = calloc(1, sizeof *out->regions);
    out->hosts = calloc((size_t)c->n_hosts + 1, sizeof *out->hosts);
    out->devices = calloc((size_t)c->n_devices + 1, sizeof *out->devices);
    out->links = calloc((size_t)c->n_links + 1, sizeof *out->links);
    if (!host_map || !out->regions || !out->hosts || !out->devices || !out->links) {
        free(host_map);
        cluster_free(out);
        return -1;
    }
    snprintf(out->name, sizeof out->name, "%s", by_host ? c->hosts[index].name : c->regions[region].name);
    snprintf(out->file, sizeof out->file, "%s", c->file);
    out->regions[0] = c->regions[region];
    out->n_regions = 1;
    for (int h = 0; h < c->n_hosts; h++) {
        int in = by_host ? h == index : c->hosts[h].region == region;
        host_map[h] = in ? out->n_hosts : -1;
        if (in) {
            out->hosts[out->n_hosts] = c->hosts[h];
            out->hosts[out->n_hosts++].region = 0;
        }
    }
    for (int d = 0; d < c->n_devices; d++)
        if (host_map[c->devices[d].host] >= 0) {
            out->devices[out->n_devices] = c->devices[d];
            out->devices[out->n_devices++].host = host_map[c->devices[d].host];
        }
    /* Explicit links between two of its hosts stay; region links are moot. */
    for (int l = 0; l < c->n_links; l++) {
        const cluster_link *k = &c->links[l];
        if (k->between_hosts && host_map[k->a] >= 0 && host_map[k->b] >= 0) {
            out->links[out->n_links] = *k;
            out->links[out->n_links].a = host_map[k->a];
            out->links[out->n_links++].b = host_map[k->b];
        }
    }
    free(host_map);
    return 0;
}

/* *out = c's regions, hosts, links and standbys copied, and room for
 * extra_devices more devices than c has; its devices left for the caller. */
static int copy_parts(const cluster *c, int extra_devices, cluster *out, struct diag *err)
{
    *out = *c;
    out->regions = malloc(((size_t)c->n_regions + 1) * sizeof *out->regions);
    out->hosts = malloc(((size_t)c->n_hosts + 1) * sizeof *out->hosts);
    out->devices = malloc(((size_t)c->n_devices + (size_t)extra_devices + 1) * sizeof *out->devices);
    out->links = malloc(((size_t)c->n_links + 1) * sizeof *out->links);
    out->standbys = malloc(((size_t)c->n_standbys + 1) * sizeof *out->standbys);
    if (!out->regions || !out->hosts || !out->devices || !out->links || !out->standbys) {
        cluster_free(out);
        return diag_set(err, c->file, 0, "out of memory");
    }
    memcpy(out->regions, c->regions, (size_t)c->n_regions * sizeof *out->regions);
    memcpy(out->hosts, c->hosts, (size_t)c->n_hosts * sizeof *out->hosts);
    memcpy(out->links, c->links, (size_t)c->n_links * sizeof *out->links);
    memcpy(out->standbys, c->standbys, (size_t)c->n_standbys * sizeof *out->standbys);
    return 0;
}

int cluster_without(const cluster *c, const char *const *names, int n, cluster *out, struct diag *err)
{
    memset(out, 0, sizeof *out);
    for (int k = 0; k < n; k++)
        if (cluster_find_device(c, names[k]) < 0)
            return diag_set(err, c->file, 0, "cluster '%s' has no device '%s' to leave out", c->name, names[k]);
    if (copy_parts(c, 0, out, err))
        return -1;
    out->n_devices = 0;
    for (int d = 0; d < c->n_devices; d++) {
        int gone = 0;
        for (int k = 0; k < n && !gone; k++)
            gone = strcmp(c->devices[d].name, names[k]) == 0;
        if (!gone)
            out->devices[out->n_devices++] = c->devices[d];
    }
    if (out->n_devices == 0) {
        cluster_free(out);
        return diag_set(err, c->file, 0, "cluster '%s' has no device left without the %d left out", c->name, n);
    }
    return 0;
}

int cluster_with(const cluster *c, const char *const *names, int n, cluster *out, struct diag *err)
{
    memset(out, 0, sizeof *out);
    if (copy_parts(c, c->n_standbys, out, err))
        return -1;
    memcpy(out->devices, c->devices, (size_t)c->n_devices * sizeof *out->devices);
    out->n_standbys = 0;
    for (int s = 0; s < c->n_standbys; s++) {
        int join = 0;
        for (int k = 0; k < n && !join; k++)
            join = strcmp(c->standbys[s].name, names[k]) == 0;
        if (join) {
            out->devices[out->n_devices] = c->standbys[s];
            out->devices[out->n_devices++].standby = 0;
        } else {
            out->standbys[out->n_standbys++] = c->standbys[s];
        }
    }
    for (int k = 0; k < n; k++)
        if (cluster_find_device(out, names[k]) < 0) {
            cluster_free(out);
            return diag_set(err, c->file, 0, "cluster '%s' has no standby '%s' to take in", c->name, names[k]);
        }
    return 0;
}

int cluster_sites(const cluster *c, int *by_host)
{
    *by_host = c->n_regions <= 1;
    return c->n_regions > 1 ? c->n_regions : c->n_hosts > 1 ? c->n_hosts : 0;
}
