/* fuzz_frontend.c: a libFuzzer target for everything fusionc reads.
 *
 * Each input is fed, whole, to the three readers:
 *   1. model_load_memory (model XML); on success the pass pipeline and
 *      model_stats_compute, then the round trip of step 2 on the result;
 *   2. ir_graph_parse (text IR); on success print -> parse -> print, which
 *      must be byte-identical (ir.h promises it), else abort();
 *   3. cluster_load_memory (cluster XML).
 * A reader that fails must fill its error record with a one-line message;
 * anything else found here (a sanitizer report, a leak, an abort) is a bug.
 *
 * What it deliberately is not: a check of messages or line numbers (that is
 * tests/test_bad_inputs.sh), nor of --set (hyper-parameters come from the
 * file only).
 *
 * Run: fuzz_frontend -dict=tests/fuzz/xml.dict CORPUS_DIR   (ctest runs it
 * for 60 s as fuzz_frontend_60s, seeded from models/, clusters/, tests/bad/
 * and tests/fuzz/seeds/).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../frontend/cluster.h"
#include "../../frontend/model.h"
#include "../../passes/passes.h"

/* A failed reader must say something, on one line: an empty or multi-line
 * message aborts.  A message without a file name (the CLI then prints
 * ":0: error: ...") aborts only with FUSION_FUZZ_STRICT=1 in the environment,
 * so that one known class of finding does not hide the others. */
static void check_diag(const char *who, const struct diag *err)
{
    static int strict = -1;
    if (strict < 0) {
        const char *e = getenv("FUSION_FUZZ_STRICT");
        strict = e && e[0] == '1';
    }
    int bad = err->msg[0] == '\0' || strchr(err->msg, '\n') != NULL || (strict && err->file[0] == '\0');
    if (bad) {
        fprintf(stderr, "fuzz_frontend: %s failed with a bad message: file '%s' line %d msg '%s'\n", who, err->file,
                err->line, err->msg);
        abort();
    }
}

/* The text form of g, malloc'ed, in *text / *len; 0 or -1. */
static int print_to_memory(const ir_graph *g, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    FILE *f = open_memstream(text, len);
    if (!f)
        return -1;
    int rc = ir_graph_print(g, f);
    if (fclose(f) != 0)
        rc = -1;
    if (rc != 0) {
        free(*text);
        *text = NULL;
    }
    return rc;
}

/* print(g), parse it, print again: the two texts must be the same bytes.
 * `what` says where g came from, for the abort message. */
static void check_round_trip(const ir_graph *g, const char *what)
{
    char *first = NULL, *second = NULL;
    size_t first_len = 0, second_len = 0;
    if (print_to_memory(g, &first, &first_len) != 0)
        return; /* out of memory: not a finding */
    ir_graph back;
    struct diag err = { 0 };
    if (ir_graph_parse(first, first_len, "<printed>", &back, &err) != 0) {
        fprintf(stderr, "fuzz_frontend: the printed IR of %s does not parse back: %s:%d: %s\n--- printed:\n%.*s\n",
                what, err.file, err.line, err.msg, (int)first_len, first);
        abort();
    }
    if (print_to_memory(&back, &second, &second_len) == 0 &&
        (second_len != first_len || memcmp(first, second, first_len) != 0)) {
        fprintf(stderr,
                "fuzz_frontend: print(parse(print(g))) differs from print(g) for %s\n"
                "--- first:\n%.*s\n--- second:\n%.*s\n",
                what, (int)first_len, first, (int)second_len, second);
        abort();
    }
    ir_graph_free(&back);
    free(first);
    free(second);
}

static void fuzz_model(const char *data, size_t size)
{
    ir_graph g;
    struct diag err = { 0 };
    if (model_load_memory(data, size, "fuzz.xml", NULL, 0, &g, &err) != 0) {
        check_diag("model_load_memory", &err);
        ir_graph_free(&g); /* left initialised and empty: must be safe */
        return;
    }
    model_stats s;
    if (pass_run_pipeline(&g, NULL, &err) != 0) {
        check_diag("pass_run_pipeline", &err);
    } else {
        if (model_stats_compute(&g, &s, &err) != 0)
            check_diag("model_stats_compute", &err);
        check_round_trip(&g, "a model read from XML, after the passes");
    }
    ir_graph_free(&g);
}

static void fuzz_ir(const char *data, size_t size)
{
    ir_graph g;
    struct diag err = { 0 };
    if (ir_graph_parse(data, size, "fuzz.fir", &g, &err) != 0) {
        check_diag("ir_graph_parse", &err);
        ir_graph_free(&g);
        return;
    }
    check_round_trip(&g, "a parsed text IR");
    /* The passes must also cope with whatever the parser accepts. */
    struct diag perr = { 0 };
    model_stats s;
    if (pass_run_pipeline(&g, NULL, &perr) != 0)
        check_diag("pass_run_pipeline on text IR", &perr);
    else if (model_stats_compute(&g, &s, &perr) != 0)
        check_diag("model_stats_compute on text IR", &perr);
    ir_graph_free(&g);
}

static void fuzz_cluster(const char *data, size_t size)
{
    if (size > INT32_MAX)
        return;
    cluster c;
    struct diag err = { 0 };
    if (cluster_load_memory(data, (int)size, "fuzz-cluster.xml", &c, &err) != 0)
        check_diag("cluster_load_memory", &err);
    cluster_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so ASan sees any read past the end. */
    char *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    if (size)
        memcpy(copy, data, size);
    fuzz_model(copy, size);
    fuzz_ir(copy, size);
    fuzz_cluster(copy, size);
    free(copy);
    return 0;
}
