/* checkpoint_run.h: the checkpoints of a run, as its devices make them
 * together: which step a resume starts from, and a save that is complete
 * on every device or on none.
 *
 * Saving step N (checkpoint_save): every device writes its part into
 * DIR/step-N/ (atomic, fsynced: checkpoint.h), measures it (size, XXH3),
 * and the devices exchange those reports over their own links
 * (rt_comm_allgather: up a tree and back down).  Once a device holds every
 * report, every part is durable, so it writes the step's MANIFEST, moves
 * DIR/latest, and removes complete steps beyond the --keep newest
 * (checkpoint_store.h).  A device that fails to write (no space, an I/O
 * error) stops the run naming the cause, so no device writes the MANIFEST
 * and the previous complete step stays as it was; a device killed mid-save
 * leaves its peers stopped naming it, the same way.  Under a broker the
 * devices report their parts to it instead, and it writes the MANIFEST.
 *
 * Starting (checkpoint_start), after the links are open, before step 1:
 *   - the --save folder's litter (checkpoint_store.h) is removed, and a
 *     fresh run refuses a folder that holds another run's checkpoints;
 *   - with --resume, each device finds the newest complete step whose parts
 *     it reads verify (saying why it passes over a newer one), the devices
 *     take the oldest of those (one device's newest may be another's one
 *     before, when a kill came between two devices' MANIFESTs), and load it.
 *   Both end in an exchange every device takes part in, so no device saves
 *   into a folder another is still cleaning, and none runs from another
 *   step than its peers.
 * --resume DIR may also name a step folder itself (DIR/step-N): that step
 * only.
 */
#ifndef FUSION_RT_CHECKPOINT_RUN_H
#define FUSION_RT_CHECKPOINT_RUN_H

#include <stdint.h>

#include "checkpoint.h"
#include "comm/comm.h"

typedef struct {
    const char *save_dir;   /* --save DIR, or NULL                                        */
    const char *resume_dir; /* --resume DIR, or NULL                                      */
    int keep;               /* --keep K: complete steps kept (>= 1)                       */
    st_dtype save_dtype;    /* --save-dtype                                               */
    int brokered;           /* under a broker: it collects the parts, cleans and prunes   */
} checkpoint_options;

/* See the top.  comm: NULL for a device without links.  *resumed := 1 and
 * *state filled when a checkpoint was loaded.  0, or -1 with err set. */
int checkpoint_start(program *p, rt_comm *comm, const checkpoint_options *o, checkpoint_state *state, int *resumed,
                     char *err, size_t n);

/* This device's part of step `step`, and (not brokered) the step made
 * complete with every other device's: see the top.  *part_path := the
 * part's file and *size, *xxh3 its measure (what a broker is told).
 * 0, or -1 with err set. */
int checkpoint_save(program *p, rt_comm *comm, const checkpoint_options *o, int64_t step, uint64_t seed,
                    const rt_loss_scaler *ls, const rt_feedback_arrays *feedback, char *part_path, size_t path_size,
                    int64_t *size, uint64_t *xxh3, char *err, size_t n);

#endif
