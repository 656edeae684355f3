/* plan_idle.h: the devices a plan leaves out, named with the reason in
 * numbers (plan and compile print it under the plan). */
#ifndef FUSION_TOOLS_PLAN_IDLE_H
#define FUSION_TOOLS_PLAN_IDLE_H

#include <stdio.h>

#include "options.h"
#include "placed.h"

/* When m's plan leaves devices of its cluster out: a line naming them and
 * the link they would use, and the best plan found that uses every device
 * (its step against this one's, what limits it, what would help).
 * Returns how many are idle. */
int plan_explain_idle(FILE *out, const options *o, const placed_model *m);

#endif
