/* passes.h: the compiler's fixed, named pass pipeline.
 *
 * Passes are data: pass_pipeline[] lists them in the order they run.  After
 * each one the verifier runs; a failure names the pass and the node (with
 * its XML file:line).  "frontend" is not a pass but names the graph as the
 * frontend built it, so `--after frontend` shows the IR before any pass.
 *
 * Today's pipeline:  shapes, autodiff, optimizer, memory.  The design's
 * other passes (estimate, fence, comm, compress, schedule) join the list as
 * they are written.
 */
#ifndef FUSION_PASSES_H
#define FUSION_PASSES_H

#include <stdio.h>

#include "../ir/ir.h"

typedef int (*pass_fn)(ir_graph *g, struct diag *err);

typedef struct {
    const char *name;
    const char *doc;    /* one line, for --help */
    pass_fn     run;
} pass;

extern const pass pass_pipeline[];
extern const int  pass_count;

typedef struct {
    const char *dump_after;   /* NULL, "frontend" or a pass name            */
    FILE       *dump_out;     /* where to print the IR after that pass      */
    int         dump_dot;     /* print Graphviz instead of the text form    */
    int         stop_after;   /* stop the pipeline after dump_after         */
    const char *last_pass;    /* NULL, or run no pass after this one        */
} pass_options;

/* Is `name` "frontend" or a pass?  (For option checking before any work.) */
int pass_name_known(const char *name);
/* "frontend, shapes, ..." for messages. */
const char *pass_names(void);

int pass_run_pipeline(ir_graph *g, const pass_options *opt, struct diag *err);

/* ---- the passes ---- */
int pass_shapes(ir_graph *g, struct diag *err);
int pass_autodiff(ir_graph *g, struct diag *err);
int pass_optimizer(ir_graph *g, struct diag *err);
int pass_memory(ir_graph *g, struct diag *err);

/* ---- analyses (read-only) ---- */
typedef struct {
    int64_t n_ops;
    int64_t params;            /* elements of role param                  */
    int64_t param_bytes;
    int64_t batch;             /* samples per step: leading dim of the first input */
    double  flops_forward;     /* per step                                */
    double  flops_backward;    /* per step, all gradients                 */
    int64_t activation_bytes;  /* all forward activations of one step     */
    int64_t input_bytes;       /* one step's inputs                       */
    int64_t state_bytes;       /* optimizer state (AdamW moments)         */
    int64_t arena_bytes;       /* device 0's planned arena: the peak of one step, all included */
} model_stats;

/* Needs shapes (run after the shapes pass). */
int model_stats_compute(const ir_graph *g, model_stats *s, struct diag *err);

/* The peak bytes of a device's arena as the memory pass planned it (values
 * and scratch; 0 before the pass, -1 when out of memory). */
int64_t memory_arena_bytes(const ir_graph *g, int32_t device);

#endif
