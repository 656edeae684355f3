/* adapters.c: the `adapters` pass: which parameters train.
 *
 * --freeze PATTERN (repeatable; pass_options.freeze) marks every parameter
 * whose name matches the glob (fnmatch(3): `*` and `?` match any
 * character, dots included; `[...]` a set) frozen (ir_value.frozen): it is
 * loaded or initialised like any other and then never changes.  Autodiff
 * treats it as a constant (no gradient; a backward op computes none for it
 * and skips the products that would), the optimizer gives it no update and
 * no moments, the comm pass no all-reduce, and the memory plan, the
 * estimator and OP-Fence see the bytes and the work it no longer needs.
 *
 * A pattern that matches no parameter is an error listing some of the
 * model's parameter names: a typo must not silently train everything.
 * Runs after shapes, so the names are the model's as built.
 */
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"

/* "a, b, c, ... (N in all)": the first few parameter names, for a message. */
static void some_param_names(const ir_graph *g, char *buf, size_t n)
{
    int32_t shown = 0, total = 0;
    size_t at = 0;
    buf[0] = '\0';
    for (int32_t v = 0; v < g->n_values; v++) {
        if (g->values[v].role != ROLE_PARAM)
            continue;
        total++;
        if (shown < 6 && at < n) {
            int w = snprintf(buf + at, n - at, "%s%s", shown ? ", " : "", ir_value_name(g, v));
            at += w > 0 ? (size_t)w : 0;
            shown++;
        }
    }
    if (at < n)
        snprintf(buf + at, n - at, "%s (%d in all)", total > shown ? ", ..." : "", total);
}

int pass_adapters(ir_graph *g, const pass_options *opt, struct diag *err)
{
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    for (int32_t i = 0; opt && i < opt->n_freeze; i++) {
        int32_t matched = 0;
        for (int32_t v = 0; v < g->n_values; v++) {
            if (g->values[v].role != ROLE_PARAM || fnmatch(opt->freeze[i], ir_value_name(g, v), 0) != 0)
                continue;
            g->values[v].frozen = 1;
            matched++;
        }
        if (matched == 0) {
            char names[512];
            some_param_names(g, names, sizeof names);
            return diag_set(err, file, 0, "--freeze '%s' matches no parameter of the model; its parameters: %s",
                            opt->freeze[i], names);
        }
    }
    return 0;
}
