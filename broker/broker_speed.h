/* broker_speed.h: stragglers.  Every device reports, with each step, the
 * seconds its compute took and the seconds its plan's estimator gave them
 * (broker_client.h).  A device whose ratio of the two is STRAGGLER_RATIO
 * or more times the fastest device's, for STRAGGLER_STEPS steps in a row,
 * is a straggler: its measured slowness (the mean of those steps' ratios,
 * times the cluster file's slowdown it had) goes into the cluster as its
 * slowdown, and a plan with it is weighed at the next complete checkpoint
 * (broker_plan.h, broker_replan_straggler).  Why against the fastest
 * device and not against 1: the estimator's error on a real machine is
 * the same for every device of a kind (it underrates small kernels), so a
 * run whose devices are all 1.3x "slow" has no straggler. */
#ifndef FUSION_BROKER_SPEED_H
#define FUSION_BROKER_SPEED_H
#include "broker_state.h"

#define STRAGGLER_RATIO 1.5
#define STRAGGLER_STEPS 20

/* Device m's step: compute and planned seconds.  Says so when m has just
 * become a straggler (b->straggler is then set). */
void broker_speed_step(broker *b, member *m, int64_t step, double compute, double planned);
/* The reporter's step line: its ms/step, into the ring. */
void broker_speed_line(broker *b, const char *line);
/* The mean of the reporter's recent step times (ms; 0: none yet). */
double broker_speed_step_ms(const broker *b);

#endif
