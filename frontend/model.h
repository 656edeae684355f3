/* model.h: model XML -> OP-DAG.
 *
 * Reads a model file (format: frontend/model.xsd), validates it against the
 * schema, substitutes hyper-parameters (defaults from the file, overridden by
 * `--set name=value`), expands repeat blocks and conditionals, resolves every
 * name, and returns the graph with its nodes in topological order and the
 * shapes of inputs and params filled in (activation shapes are the shapes
 * pass's work).  Every error names the file and line.
 *
 * Names inside a repeat instance get the prefix "<name>.<index>." (just
 * "<index>." for an unnamed repeat), so instance 3 of repeat "h" owns
 * "h.3.attn.w".  A name is looked up in the innermost instance first, then
 * outwards; an op may use a value defined further down the file (the graph
 * is sorted afterwards, and a cycle is reported with its path).
 */
#ifndef FUSION_MODEL_H
#define FUSION_MODEL_H

#include <stddef.h>

#include "../ir/ir.h"

/* Limits that turn a runaway model file into an error instead of an
 * out-of-memory: repeat counts, nesting, total ops. */
#define MODEL_MAX_REPEAT_COUNT 100000
#define MODEL_MAX_NESTING      16
#define MODEL_MAX_NODES        100000
#define MODEL_MAX_ELEMENTS     200000 /* XML elements visited, repeats expanded */
#define MODEL_MAX_VARS         64     /* repeat indices and <let>s in scope at once */

typedef struct {
    const char *name;  /* hyper-parameter name                        */
    const char *value; /* expression text, e.g. "24" or "6e-4"         */
    const char *from;  /* where it came from, for messages: NULL for --set,
                          else e.g. "config.json: num_key_value_heads" */
} model_setting;

int model_load(const char *path, const model_setting *sets, int n_sets, ir_graph *g, struct diag *err);
/* As model_load from a buffer; `path` names it in messages. */
int model_load_memory(const char *buf, size_t len, const char *path, const model_setting *sets, int n_sets, ir_graph *g,
                      struct diag *err);

/* Parse "name=value" (from --set) into a setting pointing into `text`'s
 * copy in buf.  Returns 0, or -1 if there is no '=' or the name is empty. */
int model_setting_parse(const char *text, char *buf, size_t size, model_setting *out);

#endif
