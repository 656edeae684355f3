/* report.c: `fusionc report LOG... [-o DIR]`, the metrics people look at,
 * from the JSONL step logs the device programs write (--log FILE):
 *
 *   {"step": 3, "loss": 5.41, "tokens_per_s": 9598.7, "ms": 26.67,
 *    "links": {"cpu-b1": {"bytes": 281860, "busy_ms": 2.9}}}
 *
 * ("val_loss": the held-out loss, after the steps that validated:
 * --val-every; "val_acc": an image classifier's top-1 accuracy on it.)
 * DIR/loss.png (each log's loss a step, and its val_loss as points
 * joined), DIR/accuracy.png (val_acc, when a log has it),
 * DIR/throughput.png (tokens/s; an image classifier's count images),
 * DIR/links.png (each link's MiB a step, and the share of the step its
 * wire was busy), drawn by gnuplot from DIR/N.dat, and a text summary on
 * standard output.  Several logs are several curves: the devices of one
 * run (the reporter has the loss), or runs to compare.  Logs are parsed
 * with cJSON (Debian: libcjson-dev), one object a line.
 */
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../ir/diag.h"
#include "../ir/folders.h"

#define MAX_LINKS 16

typedef struct {
    const char *path, *label;
    int64_t *step;
    double *loss, *val_loss, *val_acc, *tps, *ms; /* val_*: NAN on a step that did not validate */
    double *bytes, *busy_ms;                      /* [n][MAX_LINKS] */
    char link[MAX_LINKS][64];
    int n_links, has_loss, has_val, has_acc;
    int64_t n, cap;
} step_log;

static double number(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static int link_index(step_log *l, const char *name)
{
    for (int k = 0; k < l->n_links; k++)
        if (strcmp(l->link[k], name) == 0)
            return k;
    if (l->n_links == MAX_LINKS)
        return -1;
    snprintf(l->link[l->n_links], sizeof l->link[0], "%s", name);
    return l->n_links++;
}

static int grow(step_log *l)
{
    if (l->n < l->cap)
        return 0;
    int64_t cap = l->cap ? 2 * l->cap : 256;
    void *p[8] = { realloc(l->step, (size_t)cap * sizeof *l->step),
                   realloc(l->loss, (size_t)cap * sizeof *l->loss),
                   realloc(l->tps, (size_t)cap * sizeof *l->tps),
                   realloc(l->ms, (size_t)cap * sizeof *l->ms),
                   realloc(l->bytes, (size_t)cap * MAX_LINKS * sizeof *l->bytes),
                   realloc(l->busy_ms, (size_t)cap * MAX_LINKS * sizeof *l->busy_ms),
                   realloc(l->val_loss, (size_t)cap * sizeof *l->val_loss),
                   realloc(l->val_acc, (size_t)cap * sizeof *l->val_acc) };
    if (p[0])
        l->step = p[0];
    if (p[1])
        l->loss = p[1];
    if (p[2])
        l->tps = p[2];
    if (p[3])
        l->ms = p[3];
    if (p[4])
        l->bytes = p[4];
    if (p[5])
        l->busy_ms = p[5];
    if (p[6])
        l->val_loss = p[6];
    if (p[7])
        l->val_acc = p[7];
    for (int i = 0; i < 8; i++)
        if (!p[i])
            return -1;
    l->cap = cap;
    return 0;
}

/* One log; its lines must each be a step object.  0, or -1 with err. */
static int read_log(step_log *l, struct diag *err)
{
    FILE *f = fopen(l->path, "r");
    if (!f)
        return diag_set(err, l->path, 0, "cannot open the log: %s", strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int rc = 0, number_of_line = 0;
    while (rc == 0 && getline(&line, &cap, f) > 0) {
        number_of_line++;
        if (strspn(line, " \t\r\n") == strlen(line))
            continue;
        cJSON *o = cJSON_Parse(line);
        double step = o ? number(o, "step") : NAN;
        if (!cJSON_IsObject(o) || !(step >= 1)) {
            rc = diag_set(err, l->path, number_of_line, "expected a step object ({\"step\": N, ...}), found: %.60s",
                          line);
            cJSON_Delete(o);
            break;
        }
        if (grow(l)) {
            rc = diag_set(err, l->path, number_of_line, "out of memory");
            cJSON_Delete(o);
            break;
        }
        int64_t i = l->n++;
        l->step[i] = (int64_t)step;
        l->loss[i] = number(o, "loss");
        l->val_loss[i] = number(o, "val_loss");
        l->has_val |= !isnan(l->val_loss[i]);
        l->val_acc[i] = number(o, "val_acc");
        l->has_acc |= !isnan(l->val_acc[i]);
        l->tps[i] = number(o, "tokens_per_s");
        l->ms[i] = number(o, "ms");
        l->has_loss |= !isnan(l->loss[i]);
        for (int k = 0; k < MAX_LINKS; k++)
            l->bytes[i * MAX_LINKS + k] = l->busy_ms[i * MAX_LINKS + k] = NAN;
        const cJSON *links = cJSON_GetObjectItemCaseSensitive(o, "links"), *peer;
        cJSON_ArrayForEach(peer, links)
        {
            int k = peer->string ? link_index(l, peer->string) : -1;
            if (k < 0)
                continue;
            l->bytes[i * MAX_LINKS + k] = number(peer, "bytes");
            l->busy_ms[i * MAX_LINKS + k] = number(peer, "busy_ms");
        }
        cJSON_Delete(o);
    }
    free(line);
    fclose(f);
    if (rc == 0 && l->n == 0)
        rc = diag_set(err, l->path, 0, "no steps in the log (is it a device program's --log file?)");
    return rc;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of the finite values of v[0..n) (NAN when none). */
static double median(const double *v, int64_t n)
{
    double *s = malloc(((size_t)n + 1) * sizeof *s);
    int64_t m = 0;
    for (int64_t i = 0; s && i < n; i++)
        if (isfinite(v[i]))
            s[m++] = v[i];
    double r = NAN;
    if (m > 0) {
        qsort(s, (size_t)m, sizeof *s, compare_doubles);
        r = m % 2 ? s[m / 2] : 0.5 * (s[m / 2 - 1] + s[m / 2]);
    }
    free(s);
    return r;
}

static void summarise(const step_log *l)
{
    printf("%s: %lld steps (%lld to %lld)", l->label, (long long)l->n, (long long)l->step[0],
           (long long)l->step[l->n - 1]);
    if (l->has_loss) {
        double lo = INFINITY, tail = 0.0;
        int64_t n_tail = 0;
        for (int64_t i = 0; i < l->n; i++)
            lo = l->loss[i] < lo ? l->loss[i] : lo;
        for (int64_t i = l->n > 10 ? l->n - 10 : 0; i < l->n; i++)
            if (isfinite(l->loss[i]))
                tail += l->loss[i], n_tail++;
        printf("; loss %.4f first, %.4f last, %.4f lowest, %.4f the mean of the last %lld", l->loss[0],
               l->loss[l->n - 1], lo, n_tail ? tail / (double)n_tail : NAN, (long long)n_tail);
    }
    if (l->has_val) {
        double lo = INFINITY, first = NAN, last = NAN;
        int64_t n_val = 0, lo_step = 0;
        for (int64_t i = 0; i < l->n; i++) {
            if (isnan(l->val_loss[i]))
                continue;
            first = n_val++ ? first : l->val_loss[i];
            last = l->val_loss[i];
            if (l->val_loss[i] < lo)
                lo = l->val_loss[i], lo_step = l->step[i];
        }
        printf("; val_loss %.4f first, %.4f last, %.4f lowest (step %lld), %lld validations", first, last, lo,
               (long long)lo_step, (long long)n_val);
    }
    if (l->has_acc) {
        double hi = -INFINITY, last = NAN;
        int64_t hi_step = 0;
        for (int64_t i = 0; i < l->n; i++)
            if (!isnan(l->val_acc[i])) {
                last = l->val_acc[i];
                if (last > hi)
                    hi = last, hi_step = l->step[i];
            }
        printf("; val_acc %.4f last, %.4f best (step %lld)", last, hi, (long long)hi_step);
    }
    printf("; median %.0f tokens/s, %.1f ms a step\n", median(l->tps, l->n), median(l->ms, l->n));
    for (int k = 0; k < l->n_links; k++) {
        double bytes = 0.0, busy = 0.0, ms = 0.0;
        for (int64_t i = 0; i < l->n; i++) {
            double b = l->bytes[i * MAX_LINKS + k], t = l->busy_ms[i * MAX_LINKS + k];
            if (isfinite(b) && isfinite(t))
                bytes += b, busy += t, ms += isfinite(l->ms[i]) ? l->ms[i] : 0.0;
        }
        printf("  link to %s: %.3f MiB a step, busy %.1f%% of the steps' time\n", l->link[k],
               bytes / (double)l->n / (1024.0 * 1024.0), ms > 0 ? 100.0 * busy / ms : 0.0);
    }
}

/* DIR/<i>.dat: step loss tokens/s ms val_loss val_acc, then per link MiB and busy share (%). */
static int write_data(const step_log *l, const char *dir, int i, struct diag *err)
{
    char path[FU_PATH_BYTES + 104];
    snprintf(path, sizeof path, "%s/%d.dat", dir, i);
    FILE *f = fopen(path, "w");
    if (!f)
        return diag_set(err, path, 0, "cannot write: %s", strerror(errno));
    fprintf(f, "# %s: step loss tokens_per_s ms val_loss val_acc", l->path);
    for (int k = 0; k < l->n_links; k++)
        fprintf(f, " mib:%s busy%%:%s", l->link[k], l->link[k]);
    fputc('\n', f);
    for (int64_t s = 0; s < l->n; s++) {
        fprintf(f, "%lld %.6g %.6g %.6g %.6g %.6g", (long long)l->step[s], l->loss[s], l->tps[s], l->ms[s],
                l->val_loss[s], l->val_acc[s]);
        for (int k = 0; k < l->n_links; k++) {
            double b = l->bytes[s * MAX_LINKS + k], t = l->busy_ms[s * MAX_LINKS + k];
            fprintf(f, " %.6g %.6g", b / (1024.0 * 1024.0), l->ms[s] > 0 ? 100.0 * t / l->ms[s] : NAN);
        }
        fputc('\n', f);
    }
    return fclose(f) == 0 ? 0 : diag_set(err, path, 0, "cannot write");
}

/* The gnuplot script for the three plots; labels from each log's name. */
static int write_script(const step_log *logs, int n, const char *dir, const char *script, struct diag *err)
{
    FILE *f = fopen(script, "w");
    if (!f)
        return diag_set(err, script, 0, "cannot write: %s", strerror(errno));
    fprintf(f, "set terminal png size 960,540\nset grid\nset key outside right\nset datafile missing 'nan'\n"
               "set xlabel 'step'\n");
    int with_loss = 0, with_links = 0;
    for (int i = 0; i < n; i++)
        with_loss |= logs[i].has_loss, with_links |= logs[i].n_links > 0;
    if (with_loss) {
        fprintf(f, "set output '%s/loss.png'\nset title 'loss'\nset ylabel 'loss (nats a token)'\nplot ", dir);
        for (int i = 0, first = 1; i < n; i++)
            if (logs[i].has_loss)
                fprintf(f, "%s'%s/%d.dat' using 1:2 with lines title '%s'", first ? "" : ", ", dir, i, logs[i].label),
                    first = 0;
        for (int i = 0; i < n; i++) /* the validations: points, joined (the steps between have none) */
            if (logs[i].has_val)
                fprintf(f, ", '%s/%d.dat' using 1:5 with linespoints title '%s, validation'", dir, i, logs[i].label);
        fputc('\n', f);
    }
    int with_acc = 0;
    for (int i = 0; i < n; i++)
        with_acc |= logs[i].has_acc;
    if (with_acc) {
        fprintf(f, "set output '%s/accuracy.png'\nset title 'held-out accuracy'\nset ylabel 'top-1 accuracy'\nplot ",
                dir);
        for (int i = 0, first = 1; i < n; i++)
            if (logs[i].has_acc)
                fprintf(f, "%s'%s/%d.dat' using 1:6 with linespoints title '%s'", first ? "" : ", ", dir, i,
                        logs[i].label),
                    first = 0;
        fputc('\n', f);
    }
    fprintf(f, "set output '%s/throughput.png'\nset title 'throughput'\nset ylabel 'tokens a second'\nplot ", dir);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s'%s/%d.dat' using 1:3 with lines title '%s'", i ? ", " : "", dir, i, logs[i].label);
    fputc('\n', f);
    if (with_links) {
        /* each panel its own title: a title set before stays (the two were both 'throughput') */
        fprintf(f,
                "set output '%s/links.png'\nset multiplot layout 2,1 title 'links'\nset title 'sent a step'\n"
                "set ylabel 'MiB a step'\nplot ",
                dir);
        for (int i = 0, first = 1; i < n; i++)
            for (int k = 0; k < logs[i].n_links; k++, first = 0)
                fprintf(f, "%s'%s/%d.dat' using 1:%d with lines title '%s to %s'", first ? "" : ", ", dir, i, 7 + 2 * k,
                        logs[i].label, logs[i].link[k]);
        fprintf(f, "\nset title 'time busy sending'\nset ylabel 'busy (%% of the step)'\nplot ");
        for (int i = 0, first = 1; i < n; i++)
            for (int k = 0; k < logs[i].n_links; k++, first = 0)
                fprintf(f, "%s'%s/%d.dat' using 1:%d with lines title '%s to %s'", first ? "" : ", ", dir, i, 8 + 2 * k,
                        logs[i].label, logs[i].link[k]);
        fprintf(f, "\nunset multiplot\n");
    }
    return fclose(f) == 0 ? 0 : diag_set(err, script, 0, "cannot write");
}

static int run_gnuplot(const char *script, struct diag *err)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) < 0)
        return diag_set(err, script, 0, "cannot run gnuplot: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        return diag_set(err, script, 0, "gnuplot is not installed (scripts/install-deps.sh installs gnuplot-nox)");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return diag_set(err, script, 0, "gnuplot failed (exit %d) on this script",
                        WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}

typedef struct {
    const char *dir;
} report_options;

static const cli_option report_options_table[] = {
    { .name = "-o",
      .metavar = "DIR",
      CLI_NONEMPTY(report_options, dir),
      .expects = "a folder",
      .help = "where the plots go (default: report; made if missing)" },
};

const cli_usage report_usage = {
    "usage: fusionc report LOG... [-o DIR]\n"
    "\n"
    "Reads the JSONL step logs that the device programs write with --log FILE (one\n"
    "a device: train.<device>.jsonl; or logs of several runs to compare) and writes, with\n"
    "gnuplot, DIR/loss.png (the loss a step, and the validation loss where the\n"
    "log has it: --val-every), DIR/accuracy.png (an image classifier's held-out top-1\n"
    "accuracy, where the log has it), DIR/throughput.png (tokens a second)\n"
    "and DIR/links.png (each link's MiB a step and how much of the step its wire was\n"
    "busy), with the data beside them (DIR/N.dat); prints a summary of each log.\n",
    report_options_table,
    NULL,
    1,
    8,
    NULL
};

/* "fusionc report: <fmt with arg>" and the usage on standard error; 2. */
static int usage_fail(const char *fmt, const char *arg)
{
    return cli_usage_fail(&report_usage, "fusionc report", fmt, arg);
}

int report_main(int argc, char **argv)
{
    report_options o = { .dir = "report" };
    const char *paths[64];
    int n = 0;
    char why[512];
    for (int i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            cli_usage_print(stdout, &report_usage);
            return 0;
        }
        int took = cli_take(&report_usage, argc, argv, &i, &o, why, sizeof why);
        if (took < 0)
            return usage_fail("%s", why);
        if (took > 0)
            continue;
        if (argv[i][0] == '-')
            return usage_fail("unknown option '%s'", argv[i]);
        if (n == 64)
            return usage_fail("at most 64 logs; found more at '%s'", argv[i]);
        paths[n++] = argv[i];
    }
    if (n == 0)
        return usage_fail("%s", "expected a LOG (a device program's --log file)");
    const char *dir = o.dir;
    step_log logs[64];
    memset(logs, 0, sizeof logs);
    struct diag err = { 0 };
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        logs[i].path = paths[i];
        const char *slash = strrchr(paths[i], '/');
        logs[i].label = slash ? slash + 1 : paths[i];
        rc = read_log(&logs[i], &err);
    }
    for (int i = 0; i < n && rc == 0; i++)
        summarise(&logs[i]);
    char script[FU_PATH_BYTES + 104];
    snprintf(script, sizeof script, "%s/plots.gnuplot", dir);
    for (int i = 0; i < n && rc == 0; i++)
        rc = (i == 0 && folders_make(dir, &err)) || write_data(&logs[i], dir, i, &err);
    if (rc == 0)
        rc = write_script(logs, n, dir, script, &err) || run_gnuplot(script, &err);
    int with_loss = 0, with_links = 0, with_acc = 0;
    for (int i = 0; i < n; i++)
        with_loss |= logs[i].has_loss, with_links |= logs[i].n_links > 0, with_acc |= logs[i].has_acc;
    if (rc == 0)
        printf("report: %s%sthroughput.png%s in %s/\n", with_loss ? "loss.png, " : "", with_acc ? "accuracy.png, " : "",
               with_links ? ", links.png" : "", dir);
    if (rc)
        diag_print(&err);
    for (int i = 0; i < n; i++) {
        free(logs[i].step), free(logs[i].loss), free(logs[i].val_loss), free(logs[i].val_acc), free(logs[i].tps),
            free(logs[i].ms);
        free(logs[i].bytes), free(logs[i].busy_ms);
    }
    return rc ? 1 : 0;
}
