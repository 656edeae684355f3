/* bench_frontend: how long the frontend and the shapes pass take on GPT-2 XL
 * shapes (dim 1600, 25 heads) at 12, 24, 48 and 96 layers, and how much
 * memory the graph keeps; the anchor is the 1 s budget for GPT-2 XL, and
 * growth is compared with linear (96 layers / 12 layers = 8x).  Also the
 * whole pipeline (autodiff, optimizer, memory plan) for the same models.
 *
 * One line a figure: what, value, unit, anchor, ratio.
 * Usage: bench_frontend [models/gpt2.xml]
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../frontend/model.h"
#include "../passes/passes.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Load and run the passes up to last_pass (NULL: all); returns seconds,
 * fills the heap the graph keeps. */
static double load_once(const char *path, int layers, const char *last_pass, size_t *kept_bytes, int *n_nodes)
{
    char text[32];
    snprintf(text, sizeof text, "%d", layers);
    model_setting sets[] = { { "layers", text, NULL }, { "dim", "1600", NULL }, { "heads", "25", NULL } };
    struct diag err = { 0 };
    ir_graph g;
    size_t before = mallinfo2().uordblks;
    double t0 = now();
    pass_options until = { .last_pass = last_pass };
    if (model_load(path, sets, 3, &g, &err) || pass_run_pipeline(&g, &until, &err)) {
        diag_print(&err);
        exit(1);
    }
    double t = now() - t0;
    if (kept_bytes)
        *kept_bytes = mallinfo2().uordblks - before;
    if (n_nodes)
        *n_nodes = g.n_nodes;
    ir_graph_free(&g);
    return t;
}

/* Peak resident memory of a fresh process that loads the model once. */
static long peak_rss_kib(const char *path, int layers)
{
    pid_t pid = fork();
    if (pid == 0) {
        load_once(path, layers, "shapes", NULL, NULL);
        _exit(0);
    }
    int status;
    struct rusage ru;
    if (pid < 0 || wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return -1;
    return ru.ru_maxrss;
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : FUSION_SOURCE_DIR "/models/gpt2.xml";
    const int layer_counts[] = { 12, 24, 48, 96 };
    double median[4];
    size_t kept[4];
    printf("%-44s %12s %-6s %-26s %s\n", "what", "value", "unit", "anchor", "ratio");
    for (int i = 0; i < 4; i++) {
        double t[9];
        int nodes = 0;
        for (int r = 0; r < 9; r++)
            t[r] = load_once(path, layer_counts[i], "shapes", &kept[i], &nodes);
        qsort(t, 9, sizeof t[0], compare_double);
        median[i] = t[4];
        long rss = peak_rss_kib(path, layer_counts[i]);
        char what[64];
        snprintf(what, sizeof what, "frontend+shapes gpt2-xl-width layers=%d", layer_counts[i]);
        printf("%-44s %12.2f %-6s %-26s %.4f\n", what, median[i] * 1e3, "ms", "1000 ms budget (XL)", median[i] / 1.0);
        snprintf(what, sizeof what, "  ops layers=%d", layer_counts[i]);
        printf("%-44s %12d %-6s %-26s %s\n", what, nodes, "ops", "-", "-");
        snprintf(what, sizeof what, "  graph heap layers=%d", layer_counts[i]);
        printf("%-44s %12.2f %-6s %-26s %s\n", what, (double)kept[i] / 1048576.0, "MiB", "-", "-");
        snprintf(what, sizeof what, "  peak RSS layers=%d", layer_counts[i]);
        printf("%-44s %12.2f %-6s %-26s %s\n", what, (double)rss / 1024.0, "MiB", "-", "-");
    }
    printf("%-44s %12.2f %-6s %-26s %.3f\n", "time growth 96/12 layers", median[3] / median[0], "x", "8x (linear)",
           median[3] / median[0] / 8.0);
    printf("%-44s %12.2f %-6s %-26s %.3f\n", "graph heap growth 96/12 layers", (double)kept[3] / (double)kept[0], "x",
           "8x (linear)", (double)kept[3] / (double)kept[0] / 8.0);
    double whole[4];
    for (int i = 0; i < 4; i++) {
        double t[5];
        int nodes = 0;
        for (int r = 0; r < 5; r++)
            t[r] = load_once(path, layer_counts[i], NULL, NULL, &nodes);
        qsort(t, 5, sizeof t[0], compare_double);
        whole[i] = t[2];
        char what[64];
        snprintf(what, sizeof what, "whole pipeline layers=%d (%d ops)", layer_counts[i], nodes);
        printf("%-44s %12.2f %-6s %-26s %.4f\n", what, whole[i] * 1e3, "ms", "1000 ms budget (XL)", whole[i]);
    }
    return median[2] <= 1.0 ? 0 : 1; /* GPT-2 XL (48 layers) within its budget */
}
