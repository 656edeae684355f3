/* broker_again.h: a broker started on an OUT that holds a run already:
 * one still running (taken over) or one that ended (resumed, or archived
 * with --fresh).  broker_again.c says how. */
#ifndef FUSION_BROKER_AGAIN_H
#define FUSION_BROKER_AGAIN_H

#include "broker_state.h"

/* The run that ended in OUT, resumed from its newest complete checkpoint
 * (state: how it ended).  0, or -1 (said). */
int broker_resume_run(broker *b, const char *state);
/* A run in progress, taken over from the database.  0, or -1. */
int broker_take_over(broker *b);
/* OUT's run (broker.db, checkpoints) moved to OUT/archive/run-N (its path
 * into archived).  0, or -1 with err. */
int broker_archive_run(const char *out, char *archived, size_t size, char *err, size_t n);

#endif
