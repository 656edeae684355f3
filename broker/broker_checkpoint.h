/* broker_checkpoint.h: checkpoints the broker makes whole.  Devices save
 * their parts and report them; a step's checkpoint is whole when every
 * device of the epoch has its part in, and the broker then writes its
 * MANIFEST (runtime/checkpoint_store.h), which a resume checks.  After a
 * loss the survivors' live parts (their state of the last step they
 * finished) become a checkpoint when they cover every stage; parts
 * written while no broker ran are adopted from the files. */
#ifndef FUSION_BROKER_CHECKPOINT_H
#define FUSION_BROKER_CHECKPOINT_H

#include "broker_state.h"

/* dir's MANIFEST from "part <file> <xxh3>" lines (broker_db_parts_text),
 * each part's size read from the file.  0, or -1 with err set. */
int broker_write_manifest(const char *dir, int64_t step, const char *lines, char *err, size_t n);
/* A part recorded: the checkpoint of step whole yet?  When it is, and is
 * the newest, b->weigh_step says so (the run loop weighs joiners at it). */
void broker_check_complete(broker *b, int64_t step);
/* A survivor's live part of step (its stage of n_stages). */
void broker_add_live(broker *b, int64_t step, int stage, int n_stages, const char *file, const char *xxh3);
/* The survivors' live parts: the latest step past the last complete
 * checkpoint whose parts cover every stage becomes one. */
void broker_use_live_state(broker *b);
/* Whether member m's part of the run's last step is in OUT/checkpoints:
 * it finished, though no broker heard it say so. */
int broker_wrote_last_part(broker *b, const member *m);
/* Steps whose parts were all written while no broker heard of them, made
 * complete from the files (local runs). */
void broker_adopt_parts(broker *b);
/* The survivors' live state saved while no broker ran, made a checkpoint
 * when it covers every stage (local runs). */
void broker_adopt_live(broker *b);

/* Where a part a device reported as `file` (its path on its own host:
 * .../<folder>/<name>) goes here: OUT/checkpoints/<folder>/<name>, the
 * folder made.  0, or -1 (said). */
int broker_part_here(broker *b, const member *m, const char *file, char *here, size_t n);
/* A part copied here into tmp (from a host, or a provider's upload): its
 * XXH3 checked against its device's word, renamed to file, recorded.  0,
 * or -1 (refused and said; tmp removed). */
int broker_take_part(broker *b, const char *tmp, const char *file, const char *device, int64_t step, const char *xxh3,
                     int live, int stage, int n_stages);
#endif
