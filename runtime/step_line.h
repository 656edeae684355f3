/* step_line.h: what a training step's line says beyond its loss and speed,
 * on the console and in the --log JSONL: the learning rate, the global
 * gradient norm, the tokens seen, the wall-clock time and, on the
 * console, the time left at this run's pace. */
#ifndef FUSION_RT_STEP_LINE_H
#define FUSION_RT_STEP_LINE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double lr;           /* this step's learning rate; NaN: no optimizer      */
    double grad_norm;    /* the global gradient norm; NaN: not on this device */
    int64_t tokens_seen; /* the global batch's tokens up to this step         */
    double wall_time;    /* seconds since the Unix epoch (CLOCK_REALTIME)     */
    double eta_seconds;  /* the steps left at this run's mean step time; < 0: unknown */
} step_line;

/* "  lr 6.00e-04  gnorm 1.234  eta 1m05s" (what is known of it). */
void step_line_console(const step_line *s, char *out, size_t n);

/* ", \"lr\": 0.0006, \"grad_norm\": 1.234, \"tokens\": 40960, \"time\": 1795700000.123" */
void step_line_json(const step_line *s, char *out, size_t n);

/* Seconds since the Unix epoch. */
double step_line_wall_time(void);

#endif
