/* trace.h: the run's timeline in the Chrome trace-event format (--trace FILE),
 * which Perfetto (ui.perfetto.dev) and chrome://tracing open.
 *
 * One JSON array of events, one event a line:
 *
 *   [
 *   {"ph":"M","name":"process_name","pid":2,"args":{"name":"cpu-b0"}}
 *   ,{"ph":"X","cat":"forward","name":"h.0.attn","pid":2,"tid":0,"ts":1732550000123456.0,"dur":812.5,"args":{...}}
 *   ,{"ph":"s","cat":"message","name":"message","id":"3:0:0:7","pid":2,"tid":0,"ts":...}
 *   ]
 *
 * pid is the device's index in the cluster, so that the files of several
 * devices merge into one (launch-local.sh does: every line after the first
 * of each, re-joined); tid 0 is the thread that runs the ops, 1 the gradient
 * buckets' all-reduce thread.  Times are microseconds of CLOCK_REALTIME, one
 * axis for every process on a machine (on several hosts, as close as their
 * clocks agree).  A message is a flow from its send to its receive, both
 * ends naming it by the same id, "step:micro-batch:lane:tensor".  Writes are buffered
 * and serialised by a mutex; a device that dies leaves a file without its
 * closing bracket, which both viewers still read.
 */
#ifndef FUSION_RT_TRACE_H
#define FUSION_RT_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct rt_trace rt_trace;

/* Open (truncate) path and name the process; lane: the device's replica,
 * which the devices it exchanges activations with share (a message's id
 * names it).  NULL with msg set on failure. */
rt_trace *rt_trace_open(const char *path, int32_t pid, int32_t lane, const char *process_name, char *msg,
                        size_t msg_size);
/* Close the array and the file: 0, or -1 when any write failed. NULL: 0. */
int rt_trace_close(rt_trace *t);
/* Several processes in one file (fusionc simulate's devices): name
 * another, and make it the one the next events belong to (with its lane). */
void rt_trace_process(rt_trace *t, int32_t pid, const char *name);
void rt_trace_use(rt_trace *t, int32_t pid, int32_t lane);
/* Microseconds of CLOCK_REALTIME. */
double rt_trace_clock(void);
/* A thread's name in the viewer. */
void rt_trace_thread(rt_trace *t, int32_t tid, const char *name);
/* A span [t0, t1] (microseconds); args: the text of a JSON object, or NULL. */
void rt_trace_span(rt_trace *t, int32_t tid, const char *cat, const char *name, double t0, double t1, const char *args);
/* One end of a message's flow at time ts, inside a span of the same thread:
 * begin 1 at the send, 0 at the receive.  Both ends name it alike: the
 * tensor it carries (the comm pass's number, one per edge) in step `step`,
 * micro-batch m (-1: the update's), on the trace's lane. */
void rt_trace_flow(rt_trace *t, int32_t tid, int begin, int64_t step, int32_t m, int64_t tensor, double ts);

/* One file from several devices' traces (each one event a line, as written
 * here): every event of every part, in order, under a temporary name, then
 * renamed to out.  0, or -1 with msg naming the file that failed. */
int rt_trace_merge(const char *out, const char *const *parts, int n, char *msg, size_t msg_size);

#endif
