/* fence_model.c: what the fence pass's cost model knows before it looks at
 * any candidate (fence_cost.h): the graph's forward ops in order, each op's
 * time on each kind of device, what crosses each cut, and the cluster's
 * links as a matrix.  fence_cost.c prices candidates from these tables.
 *
 * Sizes, for the planner's reader: n = forward ops, V = values, N = devices.
 *   time, time_fwd, update   [n_rows][n + 1] prefix sums (n_rows <= N:
 *                            devices whose op times are all equal share a row)
 *   cut_fwd, cut_bwd, cut_param, cut_frozen   [n]   per cut position
 *   cut_start/cut_vals       CSR, the values crossing each cut (sum over
 *                            values of the positions they live across)
 *   read_start/read_pos      CSR, the forward positions reading each value
 *   link_bw, link_lat        [N * N]
 * Built once a fence pass; 1,024 devices and GPT-2's 600 ops take a few
 * tens of milliseconds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/name_map.h"
#include "../ir/ops.h"
#include "fence_cost.h"

static int is_forward(const ir_node *n) { return n->phase == PHASE_FORWARD || n->phase == PHASE_NONE; }

/* The forward op a backward op differentiates ("<forward>.backward"). */
static int32_t forward_of_backward(const ir_graph *g, const name_map *nodes, int32_t n)
{
    if ((unsigned)g->nodes[n].op >= OP_COUNT || op_table[g->nodes[n].op].forward_of == OP_COUNT)
        return -1;
    const char *name = ir_node_name(g, n);
    size_t len = strlen(name), suffix = strlen(".backward");
    if (len <= suffix || strcmp(name + len - suffix, ".backward") != 0 || len - suffix >= 512)
        return -1;
    char base[512];
    memcpy(base, name, len - suffix);
    base[len - suffix] = '\0';
    int64_t f;
    return name_map_get(nodes, base, &f) ? (int32_t)f : -1;
}

void fence_model_free(fence_model *m)
{
    free(m->fwd);
    free(m->fwd_pos);
    free(m->owner);
    free(m->row_of);
    free(m->time);
    free(m->time_fwd);
    free(m->update);
    free(m->launch);
    free(m->n_ops);
    free(m->n_ops_fwd);
    free(m->param_bytes);
    free(m->frozen_bytes);
    free(m->act_bytes);
    free(m->cut_fwd);
    free(m->cut_bwd);
    free(m->cut_param);
    free(m->cut_frozen);
    free(m->cut_start);
    free(m->cut_vals);
    free(m->read_start);
    free(m->read_pos);
    free(m->layer_ops);
    free(m->first_fwd);
    free(m->link_bw);
    free(m->link_lat);
    memset(m, 0, sizeof *m);
}

int fence_is_float(ir_dtype dt) { return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16; }

void fence_link_of(const fence_model *m, int32_t a, int32_t b, double *bw, double *lat)
{
    if (m->link_bw) {
        size_t i = (size_t)a * (size_t)m->n_devices + (size_t)b;
        *bw = m->link_bw[i];
        *lat = m->link_lat[i];
    } else if (m->c && m->c->n_devices > 0) {
        cluster_link_between(m->c, a, b, bw, lat);
    } else {
        *bw = INFINITY, *lat = 0.0;
    }
}

/* Every pair's link, once.  cluster_link_between scans the cluster's link
 * list, and the search asks for links millions of times, so they become a
 * matrix.  Two devices on different hosts, neither host named by a
 * host-to-host link and both accepting connections, are joined by their
 * regions' link: one lookup per pair of regions serves them all; every
 * other pair is looked up itself. */
static int build_links(fence_model *m)
{
    const cluster *c = m->c;
    int32_t N = m->n_devices, H = c->n_hosts, G = c->n_regions;
    size_t NN = (size_t)N * (size_t)N, GG = (size_t)G * (size_t)G;
    m->link_bw = malloc(NN * sizeof *m->link_bw);
    m->link_lat = malloc(NN * sizeof *m->link_lat);
    char *host_linked = calloc((size_t)H + 1, 1);
    double *rbw = malloc((GG + 1) * sizeof *rbw), *rlat = malloc((GG + 1) * sizeof *rlat);
    int rc = -1;
    if (!m->link_bw || !m->link_lat || !host_linked || !rbw || !rlat)
        goto done;
    for (int i = 0; i < c->n_links; i++)
        if (c->links[i].between_hosts) {
            host_linked[c->links[i].a] = 1;
            host_linked[c->links[i].b] = 1;
        }
    for (int32_t h = 0; h < H; h++) /* a host behind NAT: no path to another such (cluster.h) */
        host_linked[h] |= !c->hosts[h].inbound;
    /* A region pair's link, from two devices on different hosts; the one
     * pair that has none (a region of one host with itself) is never read. */
    for (int32_t a = 0; a < G; a++)
        for (int32_t b = 0; b < G; b++) {
            size_t i = (size_t)a * (size_t)G + (size_t)b;
            rbw[i] = 0.0, rlat[i] = INFINITY;
            int32_t da = -1, db = -1;
            for (int32_t d = 0; d < N && (da < 0 || db < 0); d++) {
                int32_t r = c->hosts[c->devices[d].host].region;
                if (!c->hosts[c->devices[d].host].inbound)
                    continue; /* (looked up per pair, above) */
                if (r == a && da < 0 && (db < 0 || c->devices[d].host != c->devices[db].host))
                    da = d;
                else if (r == b && db < 0 && (da < 0 || c->devices[d].host != c->devices[da].host))
                    db = d;
            }
            if (da >= 0 && db >= 0 && da != db)
                cluster_link_between(c, da, db, &rbw[i], &rlat[i]);
        }
    for (int32_t a = 0; a < N; a++)
        for (int32_t b = 0; b < N; b++) {
            size_t i = (size_t)a * (size_t)N + (size_t)b;
            int32_t ha = c->devices[a].host, hb = c->devices[b].host;
            if (a == b || ha == hb || host_linked[ha] || host_linked[hb]) {
                cluster_link_between(c, a, b, &m->link_bw[i], &m->link_lat[i]);
            } else {
                size_t r = (size_t)c->hosts[ha].region * (size_t)G + (size_t)c->hosts[hb].region;
                m->link_bw[i] = rbw[r];
                m->link_lat[i] = rlat[r];
            }
        }
    rc = 0;
done:
    free(host_linked);
    free(rbw);
    free(rlat);
    return rc;
}

/* Devices whose op times are all equal share a row of the time tables: a
 * stage of R alike replicas then costs one lookup, not R. */
static int share_rows(fence_model *m)
{
    size_t row = (size_t)m->n_fwd + 1;
    int32_t n_rows = 0;
    for (int32_t d = 0; d < m->n_devices; d++) {
        const double *t = m->time + (size_t)d * row, *tf = m->time_fwd + (size_t)d * row,
                     *u = m->update + (size_t)d * row;
        int32_t same = -1;
        for (int32_t k = 0; k < n_rows && same < 0; k++) {
            const double *t2 = m->time + (size_t)k * row;
            if (t2[row - 1] == t[row - 1] && memcmp(t2, t, row * sizeof *t) == 0 &&
                memcmp(m->time_fwd + (size_t)k * row, tf, row * sizeof *tf) == 0 &&
                memcmp(m->update + (size_t)k * row, u, row * sizeof *u) == 0 && m->launch[k] == m->launch[d])
                same = k;
        }
        if (same < 0) {
            same = n_rows++;
            memmove(m->time + (size_t)same * row, t, row * sizeof *t);
            memmove(m->time_fwd + (size_t)same * row, tf, row * sizeof *tf);
            memmove(m->update + (size_t)same * row, u, row * sizeof *u);
            m->launch[same] = m->launch[d];
        }
        m->row_of[d] = same;
    }
    m->n_rows = n_rows;
    return 0;
}

/* Forward positions reading each value, after the one that makes (or first
 * reads) it: CSR over values, ascending, each position once. */
static int build_readers(fence_model *m)
{
    const ir_graph *g = m->g;
    int32_t V = g->n_values;
    m->read_start = calloc((size_t)V + 2, sizeof *m->read_start);
    if (!m->read_start)
        return -1;
    for (int pass = 0; pass < 2; pass++) {
        int32_t *fill = pass ? calloc((size_t)V + 1, sizeof *fill) : NULL;
        if (pass && !fill)
            return -1;
        for (int32_t k = 0; k < m->n_fwd; k++) {
            const ir_node *node = &g->nodes[m->fwd[k]];
            for (int i = 0; i < node->n_in; i++) {
                int32_t v = node->in[i], dup = 0;
                for (int j = 0; j < i; j++)
                    dup |= node->in[j] == v;
                if (dup || m->first_fwd[v] >= k)
                    continue;
                if (pass)
                    m->read_pos[m->read_start[v] + fill[v]++] = k;
                else
                    m->read_start[v + 1]++;
            }
        }
        if (!pass) {
            for (int32_t v = 0; v < V; v++)
                m->read_start[v + 1] += m->read_start[v];
            m->read_pos = malloc(((size_t)m->read_start[V] + 1) * sizeof *m->read_pos);
            if (!m->read_pos)
                return -1;
        }
        free(fill);
    }
    return 0;
}

int fence_model_build(fence_model *m, const ir_graph *g, const cluster *c, struct diag *err)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    m->c = c;
    m->n_devices = c && c->n_devices > 0 ? c->n_devices : 1;
    m->devices = c && c->n_devices > 0 ? c->devices : estimate_default_device();
    int32_t n = g->n_nodes, V = g->n_values;
    m->fwd = malloc(((size_t)n + 1) * sizeof *m->fwd);
    m->fwd_pos = malloc(((size_t)n + 1) * sizeof *m->fwd_pos);
    m->owner = malloc(((size_t)n + 1) * sizeof *m->owner);
    m->row_of = malloc(((size_t)m->n_devices + 1) * sizeof *m->row_of);
    name_map *names = name_map_new();
    int32_t *first_fwd = m->first_fwd = malloc(((size_t)V + 1) * sizeof *first_fwd);
    int32_t *last_fwd = malloc(((size_t)V + 1) * sizeof *last_fwd);
    int rc = -1;
    if (!m->fwd || !m->fwd_pos || !m->owner || !m->row_of || !names || !first_fwd || !last_fwd)
        goto done;
    for (int32_t i = 0; i < n; i++) {
        m->fwd_pos[i] = m->owner[i] = -1;
        if (name_map_add(names, ir_node_name(g, i), i) < 0)
            goto done;
        if (is_forward(&g->nodes[i])) {
            m->fwd_pos[i] = m->n_fwd;
            m->owner[i] = m->n_fwd;
            m->fwd[m->n_fwd++] = i;
        }
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t f = forward_of_backward(g, names, i);
        if (f >= 0 && m->fwd_pos[f] >= 0)
            m->owner[i] = m->fwd_pos[f];
    }
    size_t row = (size_t)m->n_fwd + 1;
    m->time = calloc(row * (size_t)m->n_devices, sizeof *m->time);
    m->time_fwd = calloc(row * (size_t)m->n_devices, sizeof *m->time_fwd);
    m->update = calloc(row * (size_t)m->n_devices, sizeof *m->update);
    m->param_bytes = calloc(row, sizeof *m->param_bytes);
    m->frozen_bytes = calloc(row, sizeof *m->frozen_bytes);
    m->act_bytes = calloc(row, sizeof *m->act_bytes);
    m->cut_fwd = calloc(row, sizeof *m->cut_fwd);
    m->cut_bwd = calloc(row, sizeof *m->cut_bwd);
    m->cut_param = calloc(row, sizeof *m->cut_param);
    m->cut_frozen = calloc(row, sizeof *m->cut_frozen);
    m->cut_start = calloc(row + 1, sizeof *m->cut_start);
    m->layer_ops = calloc(row, sizeof *m->layer_ops);
    m->launch = calloc((size_t)m->n_devices + 1, sizeof *m->launch);
    m->n_ops = calloc(row, sizeof *m->n_ops);
    m->n_ops_fwd = calloc(row, sizeof *m->n_ops_fwd);
    if (!m->launch || !m->n_ops || !m->n_ops_fwd)
        goto done;
    if (!m->time || !m->time_fwd || !m->update || !m->param_bytes || !m->frozen_bytes || !m->act_bytes || !m->cut_fwd ||
        !m->cut_bwd || !m->cut_param || !m->cut_frozen || !m->cut_start || !m->layer_ops)
        goto done;

    /* Where each value is first made or read, and last read, among forward ops. */
    for (int32_t v = 0; v < V; v++)
        first_fwd[v] = last_fwd[v] = -1;
    for (int32_t k = 0; k < m->n_fwd; k++) {
        const ir_node *node = &g->nodes[m->fwd[k]];
        for (int i = 0; i < node->n_in; i++) {
            int32_t v = node->in[i];
            if (first_fwd[v] < 0)
                first_fwd[v] = k;
            last_fwd[v] = k;
        }
        for (int i = 0; i < node->n_out; i++)
            first_fwd[node->out[i]] = k;
    }
    /* What a micro-batch leaves for its backward: the forward outputs a
     * backward op reads (memory_stash_values' stash, by op). */
    {
        char *by_backward = calloc((size_t)V + 1, 1);
        if (!by_backward)
            goto done;
        for (int32_t i = 0; i < n; i++)
            if (g->nodes[i].phase == PHASE_BACKWARD)
                for (int k = 0; k < g->nodes[i].n_in; k++)
                    by_backward[g->nodes[i].in[k]] |= op_reads_input(&g->nodes[i], k);
        for (int32_t k = 0; k < m->n_fwd; k++) {
            const ir_node *node = &g->nodes[m->fwd[k]];
            for (int i = 0; i < node->n_out; i++)
                if (by_backward[node->out[i]])
                    m->act_bytes[k + 1] += (double)ir_value_bytes(g, node->out[i]);
        }
        free(by_backward);
    }
    /* Params each forward op owns (its first reader), and its layer count. */
    for (int32_t v = 0; v < V; v++)
        if (g->values[v].role == ROLE_PARAM && first_fwd[v] >= 0)
            (g->values[v].frozen ? m->frozen_bytes : m->param_bytes)[first_fwd[v] + 1] += (double)ir_value_bytes(g, v);
    for (int32_t k = 0; k < m->n_fwd; k++) {
        const ir_node *node = &g->nodes[m->fwd[k]];
        int has_param = 0;
        for (int i = 0; i < node->n_in; i++)
            has_param |= g->values[node->in[i]].role == ROLE_PARAM && first_fwd[node->in[i]] == k;
        m->layer_ops[k + 1] = m->layer_ops[k] + has_param;
        m->param_bytes[k + 1] += m->param_bytes[k];
        m->frozen_bytes[k + 1] += m->frozen_bytes[k];
        m->act_bytes[k + 1] += m->act_bytes[k];
    }
    /* What crosses the cut after position k: values made (or first read) at
     * or before k and read after it.  An activation or input crosses each
     * micro-batch, its gradient back (integers, token ids, have none); a
     * parameter crosses once a step, its gradient back once a step (the
     * comm pass's `once` and `accumulate`). */
    double *diff_f = m->cut_fwd, *diff_b = m->cut_bwd, *diff_p = m->cut_param, *diff_z = m->cut_frozen;
    for (int32_t v = 0; v < V; v++) {
        if (first_fwd[v] < 0 || last_fwd[v] <= first_fwd[v] || g->values[v].role == ROLE_STATE)
            continue;
        double bytes = (double)ir_value_bytes(g, v);
        m->cut_start[first_fwd[v] + 1]++;
        m->cut_start[last_fwd[v] + 1]--;
        if (g->values[v].role == ROLE_PARAM) {
            diff_p[first_fwd[v]] += bytes;
            diff_p[last_fwd[v]] -= bytes;
            if (g->values[v].frozen) {
                diff_z[first_fwd[v]] += bytes;
                diff_z[last_fwd[v]] -= bytes;
            }
            continue;
        }
        diff_f[first_fwd[v]] += bytes;
        diff_f[last_fwd[v]] -= bytes;
        if (fence_is_float(g->values[v].dtype) && g->values[v].role != ROLE_INPUT) {
            diff_b[first_fwd[v]] += bytes;
            diff_b[last_fwd[v]] -= bytes;
        }
    }
    for (int32_t k = 1; k < m->n_fwd; k++) {
        diff_f[k] += diff_f[k - 1];
        diff_b[k] += diff_b[k - 1];
        diff_p[k] += diff_p[k - 1];
        diff_z[k] += diff_z[k - 1];
    }
    /* The crossing values themselves, per cut (the compressed cost prices
     * each tensor alone): counts first, then prefix offsets, then fill. */
    for (int32_t k = 1; k <= m->n_fwd; k++)
        m->cut_start[k] += m->cut_start[k - 1]; /* here: how many cross the cut after k - 1 */
    {
        int32_t total = 0;
        for (int32_t k = 0; k < m->n_fwd; k++) {
            int32_t count = m->cut_start[k + 1];
            m->cut_start[k] = total;
            total += count;
        }
        m->cut_start[m->n_fwd] = total;
        m->cut_vals = malloc(((size_t)total + 1) * sizeof *m->cut_vals);
        int32_t *fill = calloc(row, sizeof *fill);
        if (!m->cut_vals || !fill) {
            free(fill);
            goto done;
        }
        for (int32_t v = 0; v < V; v++) {
            if (first_fwd[v] < 0 || last_fwd[v] <= first_fwd[v] || g->values[v].role == ROLE_STATE)
                continue;
            for (int32_t k = first_fwd[v]; k < last_fwd[v]; k++)
                m->cut_vals[m->cut_start[k] + fill[k]++] = v;
        }
        free(fill);
    }
    if (build_readers(m))
        goto done;
    for (int32_t v = 0; v < V; v++)
        if (g->values[v].role == ROLE_PARAM && m->read_start[v + 1] > m->read_start[v])
            m->shared_bytes += (double)ir_value_bytes(g, v);
    for (int32_t v = 0; v < V; v++) {
        if (first_fwd[v] < 0 || last_fwd[v] <= first_fwd[v] || g->values[v].role == ROLE_STATE)
            continue;
        double *most = g->values[v].role == ROLE_PARAM ? &m->max_cut_param : &m->max_cut_tensor;
        *most = fmax(*most, (double)ir_value_bytes(g, v));
    }
    /* How many ops each forward position's time sums (the same on every device). */
    for (int32_t i = 0; i < n; i++)
        if (g->nodes[i].phase != PHASE_UPDATE && m->owner[i] >= 0 && (unsigned)g->nodes[i].op < OP_COUNT) {
            m->n_ops[m->owner[i] + 1]++;
            m->n_ops_fwd[m->owner[i] + 1] += is_forward(&g->nodes[i]);
        }
    for (int32_t k = 0; k < m->n_fwd; k++) {
        m->n_ops[k + 1] += m->n_ops[k];
        m->n_ops_fwd[k + 1] += m->n_ops_fwd[k];
    }
    /* Per device: each forward op's time plus its backward ops', and the
     * optimizer's time for the params it owns. */
    for (int32_t d = 0; d < m->n_devices; d++) {
        m->launch[d] = estimate_launch_seconds(&m->devices[d]);
        double *t = m->time + (size_t)d * row, *u = m->update + (size_t)d * row;
        double *tf = m->time_fwd + (size_t)d * row;
        for (int32_t i = 0; i < n; i++) {
            const ir_node *node = &g->nodes[i];
            double s = estimate_node_seconds(g, i, &m->devices[d]);
            if (node->phase == PHASE_UPDATE) {
                int32_t owner = -1;
                for (int k = 0; k < node->n_in && owner < 0; k++)
                    if (g->values[node->in[k]].role == ROLE_PARAM)
                        owner = first_fwd[node->in[k]];
                if (owner >= 0)
                    u[owner + 1] += s;
            } else if (m->owner[i] >= 0) {
                t[m->owner[i] + 1] += s;
                if (is_forward(node))
                    tf[m->owner[i] + 1] += s;
            }
        }
        for (int32_t k = 0; k < m->n_fwd; k++) {
            t[k + 1] += t[k];
            tf[k + 1] += tf[k];
            u[k + 1] += u[k];
        }
    }
    if (share_rows(m) || (c && c->n_devices > 0 && build_links(m)))
        goto done;
    for (int32_t v = 0; v < V && m->batch == 0; v++)
        if (g->values[v].role == ROLE_INPUT && g->values[v].shape.rank > 0)
            m->batch = g->values[v].shape.dim[0];
    for (int32_t i = 0; i < n; i++)
        m->clip |= g->nodes[i].op == OP_CLIP_SCALE;
    rc = 0;
done:
    name_map_free(names);
    free(last_fwd);
    if (rc)
        diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0, "out of memory planning the placement");
    return rc;
}
