/* broker_plan.h: what the broker does after a loss or a join: a standby
 * in the lost device's place or a new plan (fusionc compile again), the
 * checkpoint to resume from, the next epoch's start. */
#ifndef FUSION_BROKER_PLAN_H
#define FUSION_BROKER_PLAN_H

#include "broker_state.h"

/* A device that joined: taken in when the plan with it is JOIN_GAIN faster. */
void broker_weigh_joiner(broker *b, member *j, int64_t step);
/* A straggler found (b->straggler, broker_speed.h): its measured speed
 * written into the run's cluster (OUT/measured/), and a plan with it taken
 * when it is JOIN_GAIN faster than the steps measured now. */
void broker_replan_straggler(broker *b, int64_t step);
/* A drifted link found (b->drift_from, broker_links.h): its measured
 * bandwidth written into the run's cluster, and a plan with it taken when
 * it is JOIN_GAIN faster than the steps measured now. */
void broker_replan_link(broker *b, int64_t step);
/* After a loss: a standby or a new plan, the checkpoint, every device started.  0, or -1. */
int broker_recover(broker *b);
/* After a join: the new plan's epoch, once the devices have stopped.  0, or -1. */
int broker_switch_plan(broker *b);

#endif
