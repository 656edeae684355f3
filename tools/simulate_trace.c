/* simulate_trace.c: `fusionc simulate --trace FILE`, the simulated steps in
 * the Chrome trace-event format that the device programs write with
 * --trace (runtime/trace.h), so that Perfetto opens the two side by side.
 *
 * Each device is a process (pid: its index in the cluster, as the device
 * programs use), with on thread 0 the spans the programs draw around a
 * micro-batch ("forward 3", "backward 3", "update", category micro-batch)
 * and the all-reduce; on thread 2 each message it sends ("to DEV", while
 * its bytes leave) and receives ("from DEV", the same bytes a latency
 * later), the two joined by a flow.  Time starts at 0 (the programs':
 * the wall clock), in microseconds.
 */
#include "simulate.h"

#include <stdio.h>

#include "../ir/diag.h"
#include "../ir/folders.h"
#include "../runtime/trace.h"

int simulate_write_trace(const sim_result *r, const cluster *c, const char *path, struct diag *err)
{
    if (folders_make_for_file(path, err))
        return -1;
    char why[FU_PATH_BYTES + 304];
    rt_trace *t = rt_trace_open(path, r->n_workers ? r->device[0] : 0, 0,
                                r->n_workers ? c->devices[r->device[0]].name : c->name, why, sizeof why);
    if (!t)
        return diag_set(err, path, 0, "%s", why);
    for (int32_t w = 1; w < r->n_workers; w++)
        rt_trace_process(t, r->device[w], c->devices[r->device[w]].name);
    for (int32_t w = 0; w < r->n_workers; w++) {
        rt_trace_use(t, r->device[w], 0);
        rt_trace_thread(t, 0, "ops");
        rt_trace_thread(t, 2, "messages (simulated)");
    }
    const double us = 1e6;
    for (int32_t i = 0; i < r->n_boxes; i++) {
        const sim_box *b = &r->boxes[i];
        char name[64], args[64];
        if (b->kind == SIM_FORWARD || b->kind == SIM_BACKWARD)
            snprintf(name, sizeof name, "%s %d", b->kind == SIM_FORWARD ? "forward" : "backward", (int)b->micro_batch);
        else
            snprintf(name, sizeof name, "%s", b->kind == SIM_UPDATE ? "update" : "allreduce");
        snprintf(args, sizeof args, "{\"step\":%d}", (int)b->step + 1);
        rt_trace_use(t, r->device[b->worker], 0);
        rt_trace_span(t, 0, b->kind == SIM_ALLREDUCE ? "allreduce" : "micro-batch", name, b->start * us, b->end * us,
                      args);
    }
    for (int32_t i = 0; i < r->n_transfers; i++) {
        const sim_transfer *x = &r->transfers[i];
        const sim_link *k = &r->links[x->link];
        char name[160], args[96];
        snprintf(args, sizeof args, "{\"step\":%d,\"micro_batch\":%d,\"bytes\":%.0f}", (int)x->step + 1,
                 (int)x->micro_batch, x->bytes);
        /* lane: the link; tensor: the transfer's number, so every message has its own flow */
        rt_trace_use(t, k->from, x->link);
        snprintf(name, sizeof name, "to %s", c->devices[k->to].name);
        rt_trace_span(t, 2, "send", name, x->start * us, x->end * us, args);
        rt_trace_flow(t, 2, 1, x->step + 1, x->micro_batch, i, x->start * us);
        rt_trace_use(t, k->to, x->link);
        snprintf(name, sizeof name, "from %s", c->devices[k->from].name);
        double arrive = (x->start + k->latency) * us, done = (x->end + k->latency) * us;
        rt_trace_span(t, 2, "recv", name, arrive, done, args);
        rt_trace_flow(t, 2, 0, x->step + 1, x->micro_batch, i, done - 0.001 * (done - arrive));
    }
    if (rt_trace_close(t))
        return diag_set(err, path, 0, "cannot write the trace");
    return 0;
}
