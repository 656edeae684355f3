/* feedback.h: the error feedback a device program keeps outside its arena,
 * as named float arrays, so that checkpoints carry it:
 *   - AdaTopK's residual on a compressed send (comm.c, feedback=1);
 *   - the quantised all-reduce's, at both ends of its exchange
 *     (quant_allreduce.h; comm.c without the overlap, overlap.c with it).
 * Without them a resumed run would start every feedback at zero and go on
 * otherwise than the run it continues.
 *
 * Names in the checkpoint (F32, rank 1):
 *   fusion.feedback.send.<message id>        [n]          the residual
 *   fusion.feedback.allreduce.<tag>.mine     [n]          what round 1 dropped
 *   fusion.feedback.allreduce.<tag>.owned    [n / R + 1]  what round 2 dropped
 * Only a resume of the same compile takes them back: another plan's
 * message ids and buckets mean other tensors.
 *
 * A list either points at live arrays (to save them) or owns copies (read
 * from a checkpoint, handed to rt_comm_restore_feedback). */
#ifndef FUSION_RT_FEEDBACK_H
#define FUSION_RT_FEEDBACK_H

#include <stdint.h>

#define RT_FEEDBACK_PREFIX "fusion.feedback."

typedef struct {
    char name[96];
    float *data;
    int64_t n;
} rt_feedback_array;

typedef struct {
    rt_feedback_array *a;
    int n, cap;
    int owns; /* 1: data are the list's, freed with it */
} rt_feedback_arrays;

/* Appends (name, data[n]); 0, or -1 out of memory. */
int rt_feedback_add(rt_feedback_arrays *l, const char *name, float *data, int64_t n);
/* dst[n] := the array of that name in l, if l has one of n floats: 1
 * copied, 0 none there (dst untouched).  One of another length is a
 * checkpoint of something else: said on stderr, dst untouched, 0. */
int rt_feedback_restore(const rt_feedback_arrays *l, const char *name, float *dst, int64_t n);
void rt_feedback_arrays_free(rt_feedback_arrays *l);

#endif
