/* model_input.h: what fusionc's commands read a model from: a model XML
 * (built by the frontend with --set) or the IR's text form. */
#ifndef FUSION_TOOLS_MODEL_INPUT_H
#define FUSION_TOOLS_MODEL_INPUT_H

#include <stddef.h>

#include "../ir/ir.h"
#include "options.h"

typedef enum { INPUT_MODEL, INPUT_CLUSTER, INPUT_IR } input_kind;

/* Which document buf[0, len) (read from path) is: text IR is a .fir file
 * or starts with "fusion-ir" (after blank and '#' comment lines); XML
 * documents are told apart by their root element.  0, or -1 with err. */
int model_input_classify(const char *path, const char *buf, size_t len, input_kind *kind, struct diag *err);

/* A model XML or text IR into g (the frontend only, no passes).  0, or -1 with err. */
int model_input_load(const char *path, const options *o, ir_graph *g, struct diag *err);

#endif
