/* view.h: what a picture of the graph shows (`fusionc dump --format dot`
 * or `--format html`): repeated blocks collapsed or not, and one stage's
 * ops or all. */
#ifndef FUSION_IR_VIEW_H
#define FUSION_IR_VIEW_H

#include <stdio.h>

#include "ir.h"

typedef struct ir_view_options_s {
    int expand;                      /* 1: every op; 0: each repeated block (blocks.h) drawn once a phase and device */
    int32_t stage;                   /* >= 0: only this stage's ops (--stage N, or --device NAME's stage) */
    const char *const *device_names; /* [n_device_names]: legend and labels; NULL: "device k" */
    int32_t n_device_names;
} ir_view_options;

/* The defaults: blocks collapsed, every stage. */
ir_view_options ir_view_defaults(void);

/* Graphviz (dot.c). 0, or -1 when a write failed. */
int ir_graph_print_dot_view(const ir_graph *g, const ir_view_options *o, FILE *out);

/* One self-contained HTML page (html.c): the graph as JSON, laid out and
 * drawn by its inline script; blocks expand and collapse on a click, ops
 * are searched by name, a side panel shows the selected op.  o->expand
 * starts with every block expanded.  0, or -1 when a write failed. */
int ir_graph_print_html(const ir_graph *g, const ir_view_options *o, FILE *out);

#endif
