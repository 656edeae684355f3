/* step_line.c: the extra figures of a step's line (step_line.h). */
#include "step_line.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

/* 45 -> "45s", 185 -> "3m05s", 7300 -> "2h01m". */
static void duration(double seconds, char *out, size_t n)
{
    long long s = (long long)(seconds + 0.5);
    if (s < 60)
        snprintf(out, n, "%llds", s);
    else if (s < 3600)
        snprintf(out, n, "%lldm%02llds", s / 60, s % 60);
    else
        snprintf(out, n, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
}

void step_line_console(const step_line *s, char *out, size_t n)
{
    int k = 0;
    out[0] = '\0';
    if (!isnan(s->lr))
        k += snprintf(out + k, n - (size_t)k, "  lr %.2e", s->lr);
    if (k >= 0 && (size_t)k < n && !isnan(s->grad_norm))
        k += snprintf(out + k, n - (size_t)k, "  gnorm %.3g", s->grad_norm);
    if (k >= 0 && (size_t)k < n && s->eta_seconds >= 0) {
        char left[32];
        duration(s->eta_seconds, left, sizeof left);
        snprintf(out + k, n - (size_t)k, "  eta %s", left);
    }
}

void step_line_json(const step_line *s, char *out, size_t n)
{
    int k = 0;
    out[0] = '\0';
    if (!isnan(s->lr))
        k += snprintf(out + k, n - (size_t)k, ", \"lr\": %.9g", s->lr);
    if (k >= 0 && (size_t)k < n && !isnan(s->grad_norm))
        k += isfinite(s->grad_norm) ? snprintf(out + k, n - (size_t)k, ", \"grad_norm\": %.9g", s->grad_norm)
                                    : snprintf(out + k, n - (size_t)k, ", \"grad_norm\": null");
    if (k >= 0 && (size_t)k < n)
        snprintf(out + k, n - (size_t)k, ", \"tokens\": %lld, \"time\": %.3f", (long long)s->tokens_seen, s->wall_time);
}

double step_line_wall_time(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
