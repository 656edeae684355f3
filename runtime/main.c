/* main.c: the training loop of a device program (libfusion_rt_main).
 *
 * Linked with one device's generated host program (runtime/program.h), it:
 * reads the embedded manifest, allocates the arena, connects to its peers
 * (comm/comm.h), initialises the parameters from a seed, and runs steps.
 * A step of a device running replica r of stage s (of S), over M
 * micro-batches, in 1F1B order (PipeDream-Flush, Megatron's schedule):
 *
 *     min(S - s - 1, M) forwards, then alternately one forward and one
 *     backward until every forward is done, then the remaining backwards;
 *     then the optimizer (fusion_update) once.
 *
 * A forward loads micro-batch m's rows ((r*M + m) * b of the global batch:
 * the rows a one-device run of the whole batch sees) and runs
 * fusion_forward; if its backward does not come next, what the backward
 * will read is copied to a stash slot (the arena holds one micro-batch).
 * On a stage that recomputes (the schedule pass chose it, to keep more
 * micro-batches in flight over a slow link), the slot holds only what the
 * forward received and loaded, and the backward first runs the forward
 * again from it, its sends and recvs skipped (ctx->replay): the same ops
 * on the same inputs, so the same values, bit for bit.
 * A backward restores it, runs fusion_backward, and adds the parameters'
 * gradients into an accumulator; before the update the sum becomes the
 * mean over micro-batches, so the step's mathematics is the one-device
 * step's.  One line of progress goes to stdout and one JSON object to the
 * log; the device that computes the loss reports the step's mean loss
 * (averaged over replicas).  On any error the device tells its peers why
 * it stops (they stop too, naming it) and exits 1.  Checkpoints (--save, --resume) hold the params,
 * the optimizer state, the step and the seed, as safetensors: batches
 * depend only on (seed, step), so a resumed run continues bit for bit.
 *
 *   fusion-<device> --data FILE [--data FILE]... [--steps N] [--seed S] [--log FILE] [--threads N]
 *
 * Data (data.h): text read as bytes, or llm.c token shards (uint16 or
 * uint32 ids), checked when opened (ids against the vocabulary of the
 * embedding or cross_entropy the feeds go to); the model's
 * first two i32 inputs of shape (B,T) get, per row, T tokens from a
 * position drawn from (seed, step, row) and the same tokens shifted by one
 * (the next-token targets).  Batches depend only on (seed, step): a rerun,
 * or a resumed run, sees the same data.  With --val-data and --val-every,
 * every device runs the forward alone of fixed held-out batches after
 * every N steps (stepper_validate in stepper.c), the training untouched.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../ir/ir.h"
#include "cpu/half.h"
#include "cpu/kernels.h"
#include "data.h"
#include "loss_scale.h"
#include "program.h"
#include "safetensors.h"
#include "trace.h"
#include "comm/comm.h"
#include "comm/hub.h"
#include "comm/diloco.h"
#include "comm/overlap.h"
#include "comm/seal.h"
#include "broker_client.h"
#include "checkpoint.h"
#include "checkpoint_run.h"
#include "run_options.h"
#include "per_device_path.h"
#include "step_line.h"
#include "train_settings.h"
#include "stepper.h"
#include "checkpoint_store.h"
#include "device_program.h"
#include "generate.h"
#include "cuda/cuda.h"
#include "running_stats.h"

#include <xxhash.h>
#include "../ir/folders.h" /* FU_PATH_BYTES */

int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fusion: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static int64_t numel(const rt_tensor *t) { return rt_tensor_numel(t); }

/* Params and state from their init specs, each from its own stream of
 * (seed, hash of its name): a tensor gets the same values whichever device
 * holds it and whatever else that device holds.  frozen_only: the frozen
 * parameters alone (a resumed fine-tune's base).  A 16-bit tensor (a
 * frozen parameter under --frozen-dtype) gets the f32 values rounded. */
static void init_params(program *p, uint64_t seed, int frozen_only)
{
    enum { CHUNK = 4096 };
    float x[CHUNK];
    for (int32_t i = 0; i < p->manifest.n_tensors; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if ((ti->role != ROLE_PARAM && ti->role != ROLE_STATE) || (frozen_only && !ti->frozen))
            continue;
        char *to = p->arena + ti->t.offset;
        int bytes = half_dtype_bytes(ti->dtype);
        rt_rng r = rt_rng_seeded(seed, XXH3_64bits(ti->name, strlen(ti->name)), 0x1417);
        for (int64_t at = 0, n = numel(&ti->t); at < n; at += CHUNK) {
            int64_t len = n - at < CHUNK ? n - at : CHUNK;
            for (int64_t k = 0; k < len; k++) {
                switch (ti->init_kind) {
                case INIT_ONES:
                    x[k] = 1.0f;
                    break;
                case INIT_NORMAL:
                    x[k] = (float)(ti->init_a * rt_rng_normal(&r));
                    break;
                case INIT_UNIFORM:
                    x[k] = (float)(ti->init_a * (2.0 * rt_rng_uniform(&r) - 1.0));
                    break;
                default:
                    x[k] = 0.0f;
                    break;
                }
            }
            if (bytes == 2)
                half_from_f32(to + at * 2, x, len, ti->dtype);
            else
                memcpy(to + at * 4, x, (size_t)len * sizeof *x);
        }
    }
}

/* Copy the embedded tables out of the program (program.h). */
static int program_load(program *p)
{
    memcpy(&p->manifest, fusion_manifest_blob, sizeof p->manifest);
    const rt_manifest *m = &p->manifest;
    size_t placed = (size_t)m->n_stages * (size_t)m->n_replicas;
    p->tensors = malloc((size_t)m->n_tensors * sizeof *p->tensors + 1);
    p->stash = malloc((size_t)m->n_stash * sizeof *p->stash + 1);
    p->placement = malloc(placed * sizeof *p->placement + 1);
    p->peers = malloc((size_t)m->n_peers * sizeof *p->peers + 1);
    p->links = malloc((size_t)m->n_links * sizeof *p->links + 1);
    p->diloco = malloc((size_t)m->diloco.n_params * sizeof *p->diloco + 1);
    p->arena = aligned_alloc(64, ((size_t)m->arena_bytes + 63) / 64 * 64 + 64);
    if (!p->tensors || !p->stash || !p->placement || !p->peers || !p->links || !p->diloco || !p->arena)
        return fail("cannot allocate the %lld-byte arena", (long long)m->arena_bytes);
    memcpy(p->tensors, fusion_tensors_blob, (size_t)m->n_tensors * sizeof *p->tensors);
    memcpy(p->stash, fusion_stash_blob, (size_t)m->n_stash * sizeof *p->stash);
    memcpy(p->placement, fusion_placement_blob, placed * sizeof *p->placement);
    memcpy(p->peers, fusion_peers_blob, (size_t)m->n_peers * sizeof *p->peers);
    memcpy(p->links, fusion_links_blob, (size_t)m->n_links * sizeof *p->links);
    memcpy(p->diloco, fusion_diloco_blob, (size_t)m->diloco.n_params * sizeof *p->diloco);
    memset(p->arena, 0, (size_t)m->arena_bytes);
    return 0;
}

static void program_free(program *p)
{
    rt_cuda_close(p->cuda); /* first: it unpins the host arena */
    free(p->tensors);
    free(p->stash);
    free(p->placement);
    free(p->peers);
    free(p->links);
    free(p->diloco);
    free(p->arena);
}

/* ---- main -------------------------------------------------------------------- */

/* Report the error, tell the peers, and give main its exit status. */
static int stop(rt_comm *comm, const char *device, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int stop(rt_comm *comm, const char *device, const char *fmt, ...)
{
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fusion: error: %s: %s\n", device, why);
    fflush(stderr);
    if (comm)
        rt_comm_abort(comm, why);
    return 1;
}

/* Several devices share their arguments (launch-local.sh gives every
 * device the same): a file each program writes names its device then
 * (per_device_path.h). */
static void per_device_path(const program *p, const char *file, char *path, size_t size)
{
    if (file && p->manifest.n_stages * p->manifest.n_replicas > 1)
        per_device_path_of(file, p->manifest.device, path, size);
    else
        snprintf(path, size, "%s", file ? file : "");
}

static checkpoint_options checkpoints_of(const run_options *o, const rt_broker *broker)
{
    return (checkpoint_options){ .save_dir = o->save,
                                 .resume_dir = o->resume,
                                 .keep = (int)o->keep,
                                 .save_dtype = o->save_dtype,
                                 .brokered = broker != NULL };
}

/* The checkpoint of `step` (checkpoint_run.h): complete on every device or
 * none; under a broker, the part reported with its size and XXH3 (the
 * broker writes the MANIFEST).  live: a survivor's state after a lost peer,
 * into DIR/live-N/, for the broker alone. */
static int save_part(program *p, rt_comm *comm, int64_t step, uint64_t seed, const rt_loss_scaler *ls,
                     const rt_feedback_arrays *feedback, rt_broker *broker, const run_options *o, int live)
{
    checkpoint_options co = checkpoints_of(o, broker);
    char path[FU_PATH_BYTES + 704], live_dir[FU_PATH_BYTES + 304], why[1200];
    int64_t size;
    uint64_t hash;
    if (live) {
        char name[256];
        snprintf(live_dir, sizeof live_dir, "%s/live-%lld", o->save, (long long)step);
        checkpoint_part_name(p, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", live_dir, name);
        if ((mkdir(o->save, 0755) != 0 && errno != EEXIST) ||
            save_checkpoint(p, live_dir, step, seed, ls, o->save_dtype, feedback) ||
            ckpt_measure(path, &size, &hash, why, sizeof why))
            return fail("%s: cannot save the live state", live_dir);
    } else if (checkpoint_save(p, comm, &co, step, seed, ls, feedback, path, sizeof path, &size, &hash, why,
                               sizeof why)) {
        return fail("%s", why);
    }
    if (!broker)
        return 0;
    char crash[200];
    snprintf(crash, sizeof crash, "%s:%lld", p->manifest.device, (long long)step);
    if (o->crash_in_save && o->comm.epoch == 1 && strcmp(o->crash_in_save, crash) == 0) {
        /* The fault: the file half written and never reported, then the process gone. */
        if (truncate(path, size / 2) == 0)
            fprintf(stderr, "fusion: --inject-crash-in-save: %s cut to half, dying\n", path);
        fflush(stderr);
        raise(SIGKILL);
    }
    if (live) /* the stage it covers: the broker needs one part of every stage */
        rt_broker_report(broker, "part", "%lld %s %016llx live %d %d %lld", (long long)step, path,
                         (unsigned long long)hash, p->manifest.stage, p->manifest.n_stages, (long long)size);
    else
        rt_broker_report(broker, "part", "%lld %s %016llx size %lld", (long long)step, path, (unsigned long long)hash,
                         (long long)size);
    return 0;
}

/* A step failed because a peer was lost: under a broker, this device's
 * state of the last step it finished (nothing of the failed step has
 * touched the parameters: every message of a step comes before its
 * optimizer ops) goes to OUT/checkpoints/live-N/, so that the broker can
 * resume from the survivors' live state when they cover every stage. */
static void save_live_state(program *p, const run_options *o, int64_t finished, uint64_t seed, const rt_loss_scaler *ls,
                            rt_broker *broker, const char *why)
{
    if (!broker || !o->save || finished < 1 || p->manifest.diloco.sync == RT_SYNC_DILOCO ||
        !(strstr(why, "lost peer") || strstr(why, " stopped")))
        return;
    /* Only while the broker still counts this device: one stopped past the
     * peer timeout (SIGSTOP) and woken after the broker started the run
     * again without it wakes to lost peers too, and its part, dropped into
     * a live-N folder the new epoch resumes from, is a stray that every
     * later load refuses.  The broker's refusal ends the process in
     * rt_broker_confirm; a folder the broker already completed is left as
     * it is.  (A broker that does not answer may be restarting: the state
     * is written for the one that takes over.) */
    char manifest[FU_PATH_BYTES + 304];
    snprintf(manifest, sizeof manifest, "%s/live-%lld/MANIFEST", o->save, (long long)finished);
    if (rt_broker_confirm(broker, 5000) != 0)
        fprintf(stderr, "fusion: the broker did not confirm this device within 5 s; its state is saved for the one "
                        "that takes over\n");
    if (access(manifest, F_OK) == 0)
        return;
    /* Without the error feedback: the failed step may have changed part
     * of it, and the broker resumes on another plan, which starts its own
     * at zero. */
    if (save_part(p, NULL, finished, seed, ls, NULL, broker, o, 1) == 0)
        printf("fusion: a peer was lost: this device's state of step %lld saved for the broker\n", (long long)finished);
}

/* SIGINT, SIGTERM: the first is noted (stop_after acts on it at the end of
 * a step); a second stops the program at once. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    if (stop_signal)
        _exit(128 + sig);
    stop_signal = sig;
}

static void catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* --inject-slowdown DEVICE:K:F: from step K this device runs F times
 * slower than declared; a plan that knows it slower (its slowdown s, part
 * of every op's est_seconds) leaves F / s to pace.  1: as declared. */
static double slowed_from(const run_options *o, const rt_manifest *mf, int64_t step)
{
    if (!o->slow_device[0] || strcmp(o->slow_device, mf->device) != 0 || step < o->slow_step)
        return 1.0;
    double s = mf->slowdown > 1.0 ? mf->slowdown : 1.0;
    return o->slow_factor / s > 1.0 ? o->slow_factor / s : 1.0;
}

/* Whether `step` is the run's last because of a signal (*code := 130 or
 * 143): every device must finish the same step, however far apart they
 * are; the hubs agree on which (comm/hub.h).  A device without links stops
 * after this step.  -1: the agreement failed (err). */
static int stop_after(rt_comm *comm, int64_t step, int *code, char *err, size_t n)
{
    static int asked;
    int sig = stop_signal;
    if (!comm || !comm->hub) {
        *code = sig ? 128 + sig : 0;
        return sig != 0;
    }
    if (sig && !asked) {
        asked = 1;
        fu_hub_request_stop(comm->hub, 128 + sig);
    }
    return fu_hub_step_done(comm->hub, step, code, err, n);
}

/* The largest H of the DiLoCo sites: --steps counts that site's steps. */
static int64_t diloco_most_h(const rt_manifest *mf)
{
    int64_t most = 1;
    for (int32_t k = 0; k < mf->diloco.n_sites; k++)
        most = mf->diloco.site_steps[k] > most ? mf->diloco.site_steps[k] : most;
    return most;
}

/* --sync diloco: exchange the parameters this device holds with the ones
 * the sites agree on (and back), around a validation. */
static int swap_agreed(program *p, rt_diloco *outer, char *why, size_t n)
{
    if (p->cuda && rt_cuda_pull_state(p->cuda, p->arena, why, n))
        return -1;
    rt_diloco_swap_agreed(outer);
    if (p->cuda)
        rt_cuda_host_wrote(p->cuda);
    return 0;
}

/* The run's training settings: the ones compiled into this device's ops,
 * with its options over them (train_settings.h), said in one line; and
 * whether this device sums the gradient norm.  0, or 1 (said). */
static int settings_of_run(const program *p, const run_options *o, rt_train_settings *s, int *clip_here)
{
    const rt_op *ops = (const rt_op *)fusion_ops_blob;
    rt_train_settings_from_ops(ops, p->manifest.n_ops, s);
    *clip_here = 0;
    for (int32_t i = 0; i < p->manifest.n_ops; i++)
        *clip_here |= ops[i].op == OP_CLIP_SCALE;
    char why[400], line[400];
    if (rt_train_settings_apply(s, &o->train, o->steps, why, sizeof why))
        return fail("%s: %s", p->manifest.device, why);
    if (!s->has_optimizer)
        return 0;
    rt_train_settings_describe(s, line, sizeof line);
    printf("fusion: %s\n", line);
    if (s->schedule != RT_LR_CONSTANT && s->length < o->steps)
        printf("fusion: the schedule ends at step %lld, before the run's %lld: the rate stays at %g after it "
               "(--schedule-steps sets its length)\n",
               (long long)s->length, (long long)o->steps, s->min_lr);
    return 0;
}

static int train(program *p, const run_options *o, rt_comm *comm, rt_data *data, rt_data *val, train_images *images,
                 rt_broker *broker)
{
    const rt_manifest *mf = &p->manifest;
    /* --sync diloco: --steps counts the steps of the site with the largest
     * H; this site takes as many rounds of its own H. */
    run_options own = *o;
    int64_t run_steps = o->steps; /* the run's --steps: a DiLoCo site's checkpoint is named by it */
    if (mf->diloco.sync == RT_SYNC_DILOCO)
        own.steps = rt_diloco_site_steps(&mf->diloco, o->steps);
    o = &own;
    FILE *log = NULL;
    char log_path[FU_PATH_BYTES + 104];
    per_device_path(p, o->log, log_path, sizeof log_path);
    /* A resumed run adds to its log, so the run's curves keep its first
     * steps (steps redone after the checkpoint appear twice, the later
     * lines this run's). */
    if (o->log && !(log = fopen(log_path, o->resume ? "a" : "w")))
        return stop(comm, mf->device, "%s: cannot write the log: %s", log_path, strerror(errno));
    rt_trace *trace = NULL;
    if (o->trace) {
        char trace_path[FU_PATH_BYTES + 104], why[FU_PATH_BYTES + 304];
        per_device_path(p, o->trace, trace_path, sizeof trace_path);
        if (!(trace = rt_trace_open(trace_path, mf->device_index, mf->replica, mf->device, why, sizeof why))) {
            if (log)
                fclose(log);
            return stop(comm, mf->device, "%s", why);
        }
    }
    stepper st;
    int rc = stepper_init(&st, p, comm, data, images, o);
    st.val = val && val->n > 0 ? val : NULL;
    int validating = o->val_every > 0;
    if (rc == 0 && o->sample_every > 0 && (mf->logits < 0 || mf->n_stages != 1 || mf->n_replicas != 1 || p->cuda))
        rc = fail("%s: --sample-every: a program of one CPU device only (this one has %d stages x %d replicas%s)",
                  mf->device, (int)mf->n_stages, (int)mf->n_replicas, p->cuda ? ", on CUDA" : "");
    int64_t done = 0;
    uint64_t seed = o->seed;
    rt_loss_scaler scaler;
    rt_loss_scaler_init(&scaler, (float)o->loss_scale, o->loss_scale_window);
    checkpoint_state resumed = { .scaler = scaler };
    int from_checkpoint = 0;
    char why_start[1200];
    checkpoint_options co = checkpoints_of(o, broker);
    if (rc == 0 && checkpoint_start(p, comm, &co, &resumed, &from_checkpoint, why_start, sizeof why_start))
        rc = stop(comm, mf->device, "%s", why_start); /* the peers stop too, naming this device and why */
    else if (rc == 0 && from_checkpoint) {
        done = resumed.step, seed = resumed.seed, scaler = resumed.scaler;
        if (comm && resumed.feedback.n > 0) {
            printf("fusion: resumed with the error feedback the run saved (%d arrays)\n", resumed.feedback.n);
            rt_comm_restore_feedback(comm, &resumed.feedback);
        }
        if (o->seed_given && seed != o->seed)
            rc = fail("%s: the checkpoint was trained with --seed %llu, not %llu", o->resume, (unsigned long long)seed,
                      (unsigned long long)o->seed);
        else if (o->steps <= done)
            rc = fail("%s: the checkpoint is at step %lld and --steps is %lld: nothing to train (give --steps above "
                      "%lld)",
                      o->resume, (long long)done, (long long)o->steps, (long long)done);
    } else if (rc == 0) {
        init_params(p, o->seed, 0);
    }
    rt_feedback_arrays_free(&resumed.feedback);
    /* A resumed fine-tune: its base (the frozen parameters) is not in the
     * checkpoint: initialised and loaded again, then checked against what
     * the checkpoint recorded of it. */
    int32_t frozen = program_frozen_count(p);
    char why_frozen[600];
    if (rc == 0 && from_checkpoint && frozen > 0) {
        init_params(p, seed, 1);
        if (o->n_init > 0 && read_init_weights(p, o->init, o->n_init, 1))
            rc = 1;
        else if (checkpoint_check_frozen(p, resumed.frozen, why_frozen, sizeof why_frozen))
            rc = fail("%s: %s", o->resume ? o->resume : "the checkpoint", why_frozen);
    } else if (rc == 0 && o->n_init > 0 && read_init_weights(p, o->init, o->n_init, 0)) {
        rc = 1;
    }
    free(resumed.frozen);
    rt_diloco outer;
    memset(&outer, 0, sizeof outer);
    int diloco = mf->diloco.sync == RT_SYNC_DILOCO;
    char why_outer[512];
    /* --sync diloco: site 0's replica 0 chain validates the agreed parameters alone (stepper_validate). */
    int64_t site0_rows = mf->diloco.site_rows[0];
    int val_here = validating && (!diloco || (mf->diloco.site == 0 && mf->replica == 0));
    if (rc == 0 && diloco && validating && (site0_rows < 1 || mf->diloco.global_rows % site0_rows != 0))
        rc = fail("--val-data under --sync diloco: site 0 validates the global batch's %lld rows as passes of its own "
                  "%lld, which do not divide them; compile with a batch whose rows site 0's divide",
                  (long long)mf->diloco.global_rows, (long long)site0_rows);
    else if (rc == 0 && diloco && o->resume)
        rc = fail("--resume under --sync diloco is not supported: the outer optimizer's state (anchor, momentum, "
                  "error feedback) is not in the checkpoint; start again, or --init from the checkpoint's parameters");
    else if (rc == 0 && diloco && p->cuda && rt_cuda_pull_state(p->cuda, p->arena, why_outer, sizeof why_outer))
        rc = fail("%s", why_outer);
    else if (rc == 0 && diloco &&
             rt_diloco_init(&outer, mf, p->diloco, p->tensors, mf->n_tensors, p->arena, why_outer, sizeof why_outer))
        rc = fail("%s", why_outer);
    rt_train_settings settings;
    int clip_here = 0; /* this device sums the gradient norm (clip_scale): its lines report it */
    if (rc == 0 && settings_of_run(p, o, &settings, &clip_here))
        rc = 1;
    if (rc) {
        if (comm)
            rt_comm_abort(comm, "could not start (see its log)");
        stepper_free(&st);
        rt_diloco_free(&outer);
        if (log)
            fclose(log);
        rt_trace_close(trace);
        return 1;
    }
    run_options seeded = *o;
    seeded.seed = seed;
    st.o = &seeded;
    if (st.images) /* a resumed run's epochs are the checkpoint's seed's */
        st.images->seed = seed;
    /* An image classifier counts images. */
    int by_images = mf->images;
    int64_t tokens = mf->tokens_per_step > 0 ? mf->tokens_per_step : 1;
    const char *rate = by_images ? "img/s" : "tok/s";
    printf("fusion: model %s on device %s: stage %d of %d, replica %d of %d, %d micro-batch%s; %lld-byte arena, "
           "%d threads, %lld steps of %lld %s\n",
           mf->model, mf->device, mf->stage, mf->n_stages, mf->replica, mf->n_replicas, mf->micro_batches,
           mf->micro_batches == 1 ? "" : "es", (long long)mf->arena_bytes, o->threads, (long long)o->steps,
           (long long)tokens,
           o->inputs   ? "input values"
           : by_images ? "images"
                       : "tokens");
    if (mf->slowdown > 1.0)
        printf("fusion: emulating a device %.2f times slower (slowdown in the cluster file): each op is followed "
               "by a sleep\n",
               mf->slowdown);
    if (o->comm.emulate_links && mf->n_links > 0)
        printf("fusion: emulating the cluster file's links (bandwidth and latency) on this machine's network\n");
    if (o->emulate_devices)
        printf("fusion: emulating the cluster file's device speed: each op takes at least the workload estimator's "
               "time on it, waiting out the difference\n");
    if (diloco)
        printf("fusion: --sync diloco: site %d of %d trains rows %lld.. of the global batch; every %d steps the sites "
               "average their change and take an outer Nesterov step (lr %g, momentum %g), %s on the wire%s\n",
               mf->diloco.site, mf->diloco.n_sites, (long long)mf->diloco.row_offset, mf->diloco.local_steps,
               mf->diloco.outer_lr, mf->diloco.outer_momentum,
               mf->diloco.outer_bits == 8   ? "8-bit rows"
               : mf->diloco.outer_bits == 4 ? "4-bit rows"
                                            : "f32",
               mf->diloco.outer_delay ? ", applied one round late (the transfer overlaps the next round)" : "");
    rt_overlap_set_trace(st.overlap, trace);
    if (st.overlap)
        printf("fusion: %d gradient buckets averaged over the replicas %s\n", rt_overlap_buckets(st.overlap),
               o->no_overlap ? "after the backward (--no-overlap)" : "while the step's last backward runs");
    if (mf->loss_scaling)
        printf("fusion: fp16 with dynamic loss scaling: scale %g, doubled after %lld good steps, halved and the step "
               "skipped on an overflow\n",
               (double)scaler.scale, (long long)scaler.window);
    fflush(stdout);
    double paced = 0.0, stepping = 0.0; /* --emulate-devices: waited, and the steps' whole time */
    int stopped = 0;                    /* 130 or 143: stopped by a signal (stop_after) */
    int64_t stats_averaged = 0;         /* the step batch norm's running statistics were last averaged after */
    if (comm && comm->hub)
        fu_hub_set_step(comm->hub, diloco ? 1 : done + 1); /* diloco: in rounds (below); no resume */
    for (int64_t step = done + 1; step <= o->steps && rc == 0; step++) {
        if (o->link_device[0] && step == (o->link_step > done + 1 ? o->link_step : done + 1) && comm)
            rt_comm_set_link_bandwidth(comm, o->link_device, o->link_mbps * 1e6 / 8);
        rt_context ctx = { .step = step,
                           .comm = comm,
                           .slowdown = mf->slowdown,
                           .cuda = p->cuda,
                           .loss_scale = scaler.scale,
                           .skipped = scaler.skipped,
                           .inject_overflow = o->inject_overflow == step,
                           .emulate_devices = o->emulate_devices,
                           .pace_factor = slowed_from(o, mf, step),
                           .trace = trace,
                           .train = &settings,
                           .grad_norm = NAN };
        double t0 = rt_seconds_now();
        float loss = NAN;
        if (stepper_step(&st, &ctx, &loss) != 0) {
            save_live_state(p, o, step - 1, seed, &scaler, broker, ctx.msg);
            rc = stop(comm, mf->device, "step %lld: %s", (long long)step, ctx.msg);
            break;
        }
        if (o->dump_grads && step == done + 1) {
            char path[FU_PATH_BYTES + 104];
            per_device_path(p, o->dump_grads, path, sizeof path);
            if (write_tensors(p, path, role_bit(ROLE_GRADIENT) | role_bit(ROLE_INPUT) | LOSS_ROLE | RUNNING_ROLE, NULL,
                              ST_F32)) {
                rc = stop(comm, mf->device, "cannot write %s", path);
                break;
            }
        }
        ctx.micro_batch = -1;
        ctx.phase = PHASE_UPDATE;
        double update_t0 = trace ? rt_trace_clock() : 0.0;
        if (rt_overlap_finish(st.overlap, &ctx) != 0 || fusion_update(p->arena, &ctx) != 0 ||
            (comm && rt_comm_flush_bucket(comm, &ctx) != 0)) {
            save_live_state(p, o, step - 1, seed, &scaler, broker, ctx.msg);
            rc = stop(comm, mf->device, "step %lld: %s", (long long)step, ctx.msg);
            break;
        }
        rt_pace_settle(&ctx);
        stepper_trace(&ctx, "update", update_t0);
        char outer_line[400] = "";
        if (diloco && rt_diloco_due(&outer, step, o->steps)) {
            char why[512];
            if (p->cuda && rt_cuda_pull_state(p->cuda, p->arena, why, sizeof why)) {
                rc = stop(comm, mf->device, "step %lld: %s", (long long)step, why);
                break;
            }
            if (rt_diloco_round(&outer, comm, step, step == o->steps, &ctx, outer_line, sizeof outer_line)) {
                rc = stop(comm, mf->device, "step %lld: %s", (long long)step, ctx.msg);
                break;
            }
            if (p->cuda)
                rt_cuda_host_wrote(p->cuda);
        }
        double dt = rt_seconds_now() - t0;
        paced += ctx.paced;
        stepping += dt;
        /* AdaTopK: this step's compressed sends' densities, then the next step's;
         * step_extra_json: what the log line adds (densities, loss scale, links). */
        char rho[256] = "", step_extra_json[2048] = "";
        rt_comm_density_text(comm, rho, sizeof rho, 0);
        rt_comm_density_text(comm, step_extra_json, sizeof step_extra_json, 1);
        if (comm)
            rt_comm_adapt_density(comm, dt);
        /* --val-every: after every N steps and the last (dt is the training's alone). */
        float val_loss = NAN, val_acc = NAN;
        char val_text[64] = "", val_json[96] = "";
        if (val_here && (step % o->val_every == 0 || step == o->steps)) {
            char why[700];
            if (!diloco && running_stats_mean_over_replicas(p, comm, &ctx) != 0) {
                rc = stop(comm, mf->device, "step %lld: %s", (long long)step, ctx.msg);
                break;
            }
            stats_averaged = step;
            if (diloco && swap_agreed(p, &outer, why, sizeof why) != 0) {
                rc = stop(comm, mf->device, "step %lld: %s", (long long)step, why);
                break;
            }
            int validated = by_images ? stepper_validate_images(&st, &images->val_feed, &ctx, step, &val_loss, &val_acc,
                                                                why, sizeof why)
                                      : stepper_validate(&st, &ctx, step, &val_loss, why, sizeof why);
            if (diloco && validated == 0 && swap_agreed(p, &outer, why, sizeof why) != 0)
                validated = -1;
            if (validated != 0) {
                rc = stop(comm, mf->device, "step %lld: %s", (long long)step, why);
                break;
            }
            if (mf->loss >= 0 && by_images) {
                snprintf(val_text, sizeof val_text, "  val_loss %.6f  val_acc %.4f", (double)val_loss, (double)val_acc);
                snprintf(val_json, sizeof val_json, ", \"val_loss\": %.6f, \"val_acc\": %.6f", (double)val_loss,
                         (double)val_acc);
            } else if (mf->loss >= 0) {
                snprintf(val_text, sizeof val_text, "  val_loss %.6f", (double)val_loss);
                snprintf(val_json, sizeof val_json, ", \"val_loss\": %.6f", (double)val_loss);
            }
        }
        char scaled[160] = "";
        if (mf->loss_scaling) { /* the scale this step ran with, and whether it was skipped, in the log */
            size_t n = strlen(step_extra_json);
            snprintf(step_extra_json + n, sizeof step_extra_json - n, ", \"loss_scale\": %g, \"skipped\": %s",
                     (double)scaler.scale, ctx.overflowed ? "true" : "false");
        }
        if (mf->loss_scaling && rt_loss_scaler_update(&scaler, ctx.overflowed, scaled, sizeof scaled)) {
            printf("step %5lld: %s\n", (long long)step, scaled);
            if (scaler.scale < RT_LOSS_SCALE_MIN) {
                rc = stop(comm, mf->device, "step %lld: the loss scale fell below %g: training diverged",
                          (long long)step, (double)RT_LOSS_SCALE_MIN);
                break;
            }
        }
        if (mf->loss >= 0 && !isfinite(loss) && !(mf->loss_scaling && ctx.overflowed)) {
            rc = stop(comm, mf->device, "step %lld: the loss is %f: training diverged", (long long)step, (double)loss);
            break;
        }
        step_line figures = { .lr = settings.has_optimizer ? rt_train_lr(&settings, step) : NAN,
                              .grad_norm = clip_here ? ctx.grad_norm : NAN,
                              .tokens_seen = step * tokens,
                              .wall_time = step_line_wall_time(),
                              .eta_seconds = stepping / (double)(step - done) * (double)(o->steps - step) };
        char extra_text[160], extra_json[200];
        step_line_console(&figures, extra_text, sizeof extra_text);
        step_line_json(&figures, extra_json, sizeof extra_json);
        /* the line after "step N/M": printed, and the broker prints it as it is (an elastic run's lines
         * are a run's lines) */
        char line[1024];
        if (mf->loss >= 0)
            snprintf(line, sizeof line, "loss %.6f  %8.0f %s  %7.1f ms/step%s%s%s", (double)loss, (double)tokens / dt,
                     rate, dt * 1e3, extra_text, rho, val_text);
        else
            snprintf(line, sizeof line, "%8.0f %s  %7.1f ms/step%s%s", (double)tokens / dt, rate, dt * 1e3, extra_text,
                     rho);
        printf("step %5lld/%lld  %s\n", (long long)step, (long long)o->steps, line);
        if (outer_line[0])
            printf("step %5lld: %s\n", (long long)step, outer_line);
        if (o->sample_every > 0 && (step % o->sample_every == 0 || step == o->steps)) {
            char sample[4096], why_sample[600];
            if (stepper_sample(&st, &ctx, step, sample, sizeof sample, why_sample, sizeof why_sample) != 0) {
                rc = stop(comm, mf->device, "step %lld: %s", (long long)step, why_sample);
                break;
            }
            printf("step %5lld: sample: %s\n", (long long)step, sample);
        }
        fflush(stdout);
        if (log) { /* flushed each step: the log is read while training runs */
            size_t used = strlen(step_extra_json);
            rt_comm_links_json(comm, step_extra_json + used, sizeof step_extra_json - used);
            if (mf->loss >= 0)
                fprintf(log, "{\"step\": %lld, \"loss\": %.6f%s, \"tokens_per_s\": %.1f, \"ms\": %.3f%s%s}\n",
                        (long long)step, (double)loss, val_json, (double)tokens / dt, dt * 1e3, extra_json,
                        step_extra_json);
            else
                fprintf(log, "{\"step\": %lld, \"tokens_per_s\": %.1f, \"ms\": %.3f%s%s}\n", (long long)step,
                        (double)tokens / dt, dt * 1e3, extra_json, step_extra_json);
            fflush(log);
        }
        rt_broker_report(broker, "step", "%lld %.6f %.6f %.6f %.700s", (long long)step, (double)loss, ctx.compute,
                         ctx.planned, line);
        if (broker) { /* its links' traffic, for the broker's re-measuring (broker_links.h) */
            char links[900];
            rt_comm_links_report(comm, links, sizeof links);
            if (links[0])
                rt_broker_report(broker, "links", "%lld %.6f %s", (long long)step, dt, links);
        }
        /* Under --sync diloco the sites count their own steps (each its own
         * H): their common clock is the outer round, so a stop is agreed
         * in rounds, at a round's end. */
        char why_stop[512];
        int64_t H = diloco ? mf->diloco.local_steps : 1, round = (step + H - 1) / H;
        int last = !diloco || step % H == 0 || step == o->steps
                       ? stop_after(comm, round, &stopped, why_stop, sizeof why_stop)
                       : 0;
        if (last < 0) {
            rc = stop(comm, mf->device, "step %lld: stopping together: %s", (long long)step, why_stop);
            break;
        }
        /* Under --sync diloco the sites' common checkpoints are at the ends
         * of rounds: the run's end (named by the run's --steps) or a stop's
         * round (named by the steps of the site with the largest H). */
        if (o->save && ((!diloco && o->save_every > 0 && step % o->save_every == 0) || step == o->steps || last)) {
            double save_t0 = trace ? rt_trace_clock() : 0.0;
            rt_feedback_arrays feedback = { 0 }; /* the live arrays: the overlap's thread is idle now */
            if (comm && (rt_comm_list_feedback(comm, &feedback) || rt_overlap_list_feedback(st.overlap, &feedback)))
                rc = stop(comm, mf->device, "out of memory listing the error feedback for the checkpoint");
            else if (!diloco && stats_averaged != step && running_stats_mean_over_replicas(p, comm, &ctx))
                rc = stop(comm, mf->device, "step %lld: %s", (long long)step, ctx.msg);
            else if (save_part(p, comm,
                               !diloco            ? step
                               : step == o->steps ? run_steps
                                                  : round * diloco_most_h(mf),
                               seed, &scaler, &feedback, broker, o, 0))
                rc = stop(comm, mf->device,
                          "step %lld: the checkpoint failed (above); the last complete one is as it "
                          "was",
                          (long long)step);
            rt_feedback_arrays_free(&feedback);
            rt_trace_span(trace, 0, "checkpoint", "checkpoint", save_t0, trace ? rt_trace_clock() : 0.0, NULL);
        }
        if (last && rc == 0) {
            printf("fusion: stopped by %s after step %lld%s%s\n", stopped == 130 ? "SIGINT" : "SIGTERM",
                   (long long)step, o->save ? ": its checkpoint is in " : " (no --save: nothing saved)",
                   o->save ? o->save : "");
            break;
        }
    }
    if (rc == 0 && st.overlap) {
        int64_t early, handed;
        rt_overlap_counts(st.overlap, &early, &handed);
        printf("fusion: gradient buckets: %lld of %lld started while a backward ran; the updates waited %.3f s "
               "for them in all\n",
               (long long)early, (long long)handed, rt_overlap_waited(st.overlap));
    }
    if (rc == 0 && o->emulate_devices)
        printf("fusion: --emulate-devices waited %.3f s of the %.3f s the steps took (%.0f%%)\n", paced, stepping,
               stepping > 0 ? 100.0 * paced / stepping : 0.0);
    char why[512];
    if (rc == 0 && comm && rt_comm_flush(comm, why, sizeof why) != 0)
        rc = stop(comm, mf->device, "%s", why);
    if (log && fclose(log) != 0 && rc == 0)
        rc = fail("%s: cannot finish the log", log_path);
    if (rt_trace_close(trace) != 0 && rc == 0)
        rc = fail("%s: cannot finish the trace", o->trace);
    stepper_free(&st);
    rt_diloco_free(&outer);
    return rc == 0 && stopped ? stopped : rc;
}

/* The run secret (comm/seal.h): --key FILE, else run.key beside this program. */
static int load_secret(const char *key, uint8_t secret[FU_SECRET_BYTES], const char *device)
{
    char path[FU_PATH_BYTES + 104], why[FU_PATH_BYTES + 504], exe[FU_PATH_BYTES];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 0] = '\0';
    if (strrchr(exe, '/'))
        *strrchr(exe, '/') = '\0';
    if (key)
        snprintf(path, sizeof path, "%s", key);
    else
        snprintf(path, sizeof path, "%s/run.key", exe);
    if (fu_secret_load(path, secret, why, sizeof why) == 0)
        return 0;
    return fail("%s: %s (every link and the broker are sealed with the run's secret, which the compile writes "
                "beside the program and fusionc deploy copies, mode 0600): refusing to start",
                device, why);
}

/* An inference program: its own command line (generate.h), the program
 * loaded as for training, then the generation loop. */
static int inference_main(program *p, int argc, char **argv)
{
    rt_generate_options o = { .max_tokens = 64,
                              .temperature = 1.0,
                              .top_p = 1.0,
                              .seed = 1,
                              .threads = p->manifest.threads > 0 ? p->manifest.threads : 1 };
    int rc = rt_generate_options_parse(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    char why[512];
    if (p->manifest.backend == RT_BACKEND_CUDA && rt_cuda_open(&p->cuda, &p->manifest, why, sizeof why))
        return fail("%s: %s", p->manifest.device, why);
    if (program_load(p) ||
        (p->cuda && rt_cuda_attach_host_arena(p->cuda, p->arena, why, sizeof why) &&
         fail("%s: %s", p->manifest.device, why)) ||
        (p->cuda &&
         rt_cuda_set_host_tensors(p->cuda, p->tensors, p->manifest.n_tensors, p->stash, p->manifest.n_stash,
                                  p->manifest.n_stash_replay, p->manifest.output, p->manifest.prefill_output) &&
         fail("%s: out of memory", p->manifest.device))) {
        program_free(p);
        return 1;
    }
    kernel_threads_set(o.threads);
    /* Several stages: their links, sealed with the run's secret, as training's. */
    uint8_t secret[FU_SECRET_BYTES];
    rt_comm comm, *peers = NULL;
    rt_comm_options co = { .secret = secret };
    if (p->manifest.n_links > 0) {
        if (load_secret(NULL, secret, p->manifest.device)) {
            program_free(p);
            return 1;
        }
        if (rt_comm_open(&comm, &p->manifest, p->placement, p->peers, p->links, &co, why, sizeof why)) {
            program_free(p);
            return fail("%s: %s", p->manifest.device, why);
        }
        peers = &comm;
    }
    rc = o.serve ? rt_serve_worker(p, &o, peers) : rt_generate(p, &o, peers);
    if (peers)
        rt_comm_close(peers);
    program_free(p);
    return rc;
}

int main(int argc, char **argv)
{
    /* libgomp reads its wait policy only at start: idle OpenMP threads must
     * sleep, not spin against OpenBLAS (runtime/cpu/threads.c).  An
     * inference program's decoding step is a hundred short OpenMP regions
     * and no BLAS call (a single row's products are the kernels' own), and
     * waking a sleeping thread for each costs more than the region: its
     * threads spin a little (1,000 turns, a few microseconds) before they
     * sleep, too little to hold up the prompt step's sgemm.  Measured on 2
     * cores, a 72M Llama with bf16 weights decodes at 196 tok/s so, 106
     * asleep; spinning 20,000 turns took the f32 prompt from 1063 to 633
     * tok/s. */
    program p;
    memset(&p, 0, sizeof p);
    memcpy(&p.manifest, fusion_manifest_blob, sizeof p.manifest);
    if (!getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT")) {
        if (p.manifest.inference)
            setenv("GOMP_SPINCOUNT", "1000", 1);
        else
            setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);
    }
    if (p.manifest.inference) /* an inference program (fusionc compile --inference) */
        return inference_main(&p, argc, argv);
    run_options o = { .steps = 100,
                      .seed = 1,
                      .keep = CKPT_DEFAULT_KEEP,
                      .val_batches = 8,
                      .train = { .lr = NAN,
                                 .min_lr = NAN,
                                 .weight_decay = NAN,
                                 .grad_clip = NAN,
                                 .warmup = RT_UNSET,
                                 .schedule_steps = RT_UNSET,
                                 .schedule = RT_UNSET },
                      .threads = p.manifest.threads > 0 ? p.manifest.threads : 1 };
    int rc = run_options_parse(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    if (o.standby && !o.broker)
        return fail("--standby %s: a standby waits for a broker: give --broker URL", o.standby);
    if (o.standby) {
        uint8_t key[FU_SECRET_BYTES];
        return load_secret(o.key, key, o.standby) ? 1 : rt_broker_standby(o.broker, o.standby, key);
    }
    /* A CUDA device: the driver first, so a machine without one says so at
     * once (one line, exit 1), before the arena is allocated. */
    char cuda_why[512];
    if (p.manifest.backend == RT_BACKEND_CUDA && rt_cuda_open(&p.cuda, &p.manifest, cuda_why, sizeof cuda_why))
        return fail("%s: %s", p.manifest.device, cuda_why);
    if (program_load(&p) ||
        (p.cuda && rt_cuda_attach_host_arena(p.cuda, p.arena, cuda_why, sizeof cuda_why) &&
         fail("%s: %s", p.manifest.device, cuda_why)) ||
        (p.cuda &&
         rt_cuda_set_host_tensors(p.cuda, p.tensors, p.manifest.n_tensors, p.stash, p.manifest.n_stash,
                                  p.manifest.n_stash_replay, p.manifest.loss, -1) &&
         fail("%s: out of memory", p.manifest.device))) {
        program_free(&p);
        return 1;
    }
    kernel_threads_set(o.threads);

    /* Inputs: token batches from --data, or fixed tensors from --inputs. */
    rt_data data = { 0 }, val = { 0 };
    char why[512];
    int32_t tokens_at, targets_at, images_at, labels_at;
    program_find_feeds(&p, &tokens_at, &targets_at);
    train_images_find(&p, &images_at, &labels_at);
    train_images images = { .images_at = -1, .labels_at = -1 };
    if (o.inputs) {
        rc = read_file_tensors(&p, o.inputs, role_bit(ROLE_INPUT));
    } else if (p.manifest.images) {
        int64_t classes = labels_at >= 0 ? program_feed_vocabulary(&p, -1, labels_at) : 0;
        if (train_images_open(&images, &p, &o, classes, why, sizeof why))
            rc = fail("%s", why);
    } else if (tokens_at >= 0 || targets_at >= 0) {
        int64_t T = p.tensors[tokens_at >= 0 ? tokens_at : targets_at].t.dim[1];
        int64_t vocab = program_feed_vocabulary(&p, tokens_at, targets_at);
        for (int i = 0; i < o.n_data && rc == 0; i++)
            if (rt_data_load(&data, o.data[i], (rt_data_format)o.data_format, vocab, why, sizeof why))
                rc = fail("%s", why);
        if (rc == 0 && data.n < T + 2)
            rc = fail("%s: %lld tokens is too few for sequences of %lld", o.data[0], (long long)data.n, (long long)T);
        for (int i = 0; i < o.n_val_data && rc == 0; i++)
            if (rt_data_load(&val, o.val_data[i], (rt_data_format)o.data_format, vocab, why, sizeof why))
                rc = fail("%s", why);
        if (rc == 0 && o.n_val_data > 0 && val.n < T + 2)
            rc = fail("%s: %lld tokens is too few for sequences of %lld (--val-data)", o.val_data[0], (long long)val.n,
                      (long long)T);
    } else {
        /* A stage with no inputs of the model: the model's inputs are made elsewhere. */
        for (int32_t i = 0; i < p.manifest.n_tensors && rc == 0; i++)
            if (p.tensors[i].role == ROLE_INPUT && p.tensors[i].init_kind != INIT_DROPOUT) /* masks: the stepper's */
                rc = fail("the data loader feeds only two i32 inputs of shape (B,T) (tokens, targets); '%s' needs "
                          "--inputs FILE",
                          p.tensors[i].name);
    }
    uint8_t secret[FU_SECRET_BYTES];
    if (rc == 0 && (p.manifest.n_links > 0 || o.broker)) {
        rc = load_secret(o.key, secret, p.manifest.device);
        o.comm.secret = secret;
        /* What sealing costs is measured against plain links (bench/): both
         * ends must be started so, and each says so. */
        const char *plain = getenv("FUSION_UNSEALED_LINKS");
        if (rc == 0 && plain && strcmp(plain, "1") == 0 && p.manifest.n_links > 0) {
            fprintf(stderr,
                    "fusion: warning: %s: FUSION_UNSEALED_LINKS=1: its links are NOT sealed (for measuring "
                    "what sealing costs only)\n",
                    p.manifest.device);
            o.comm.secret = NULL;
        }
    }
    /* The links' and the broker client's threads start with the signals blocked: a signal is the
     * main thread's, never an interrupted poll in a thread. */
    sigset_t stops, before;
    sigemptyset(&stops);
    sigaddset(&stops, SIGINT);
    sigaddset(&stops, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stops, &before);
    catch_stop_signals();
    rt_broker *broker = NULL;
    if (rc == 0 && o.broker &&
        rt_broker_open(&broker, o.broker, p.manifest.device, o.comm.epoch, secret, why, sizeof why))
        rc = fail("%s: %s", p.manifest.device, why);
    rt_comm comm;
    rt_comm *peers = NULL;
    if (rc == 0 && p.manifest.n_links > 0) {
        if (rt_comm_open(&comm, &p.manifest, p.placement, p.peers, p.links, &o.comm, why, sizeof why))
            rc = fail("%s: %s", p.manifest.device, why);
        else
            peers = &comm;
    }
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    if (rc == 0)
        rc = train(&p, &o, peers, &data, &val, &images, broker);
    if (peers)
        rt_comm_close(peers);
    const char *refused = rt_broker_close(broker, rc, 5000);
    if (refused)
        rc = fail("%s: refused by the broker: %s", p.manifest.device, refused);
    rt_broker_free(broker);
    rt_data_free(&data);
    rt_data_free(&val);
    train_images_close(&images);
    program_free(&p);
    return rc;
}
