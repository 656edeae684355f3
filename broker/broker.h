/* broker.h: the run's broker, which `fusionc broker` runs (tools/broker.c
 * reads its command line into a broker_options).
 *
 * `fusionc broker OUT [options] DEVICE-ARGS...` runs the compile in OUT on
 * this machine (or --over-ssh on its hosts) and keeps it running when
 * devices vanish:
 *   - it starts every device of the plan (OUT/deploy.txt) with DEVICE-ARGS
 *     and --broker (its address), --epoch, --save OUT/checkpoints
 *     --save-every K, and a standby agent (fusionc standby) for each
 *     standby="true" device of the cluster file; devices register, report
 *     each step and each checkpoint part, and heartbeat;
 *   - a checkpoint is complete when every device's part of its step is in:
 *     the broker then writes OUT/checkpoints/step-N/COMPLETE (each part
 *     and its XXH3), which a resume checks;
 *   - a device is lost when its process dies by a signal or it is silent
 *     past the peer timeout (the others then stop by themselves, naming
 *     it); the broker starts a new epoch: a standby of the same kind takes
 *     the lost device's place (the lost device's program, at the
 *     standby's address), or, with none, the plan is made again without
 *     the lost devices (fusionc compile ... --without, into
 *     OUT/epoch-N/); every device resumes from the last complete
 *     checkpoint.  A device of an older epoch is refused by the broker and
 *     by its peers (the epoch is in their hello);
 *   - its state (epoch, members, parts, checkpoints, events) is in SQLite,
 *     OUT/broker.db: a broker started again on the same OUT while the
 *     devices run takes them over.
 * It prints the reporter's steps and every event, and exits 0 when every
 * device of the last epoch finished.
 */
#ifndef FUSION_BROKER_BROKER_H
#define FUSION_BROKER_BROKER_H

#include <stdint.h>

#define BROKER_MAX_ARGS 256

/* What `fusionc broker` was given (its --help says what each is). */
typedef struct {
    const char *out; /* OUT, the compile's folder                         */
    int port, port_base, save_every, keep, max_recoveries, ssh_timeout;
    double peer_timeout;
    int fresh, over_ssh;
    int standby_agents; /* 1: all, 0: none                                    */
    const char *ssh_config, *address;
    char *args[BROKER_MAX_ARGS]; /* the devices' own arguments, as given       */
    int n_args;
    int64_t steps; /* theirs: --steps N                                  */
} broker_options;

/* The run in o->out, with o's options: started, resumed or taken over,
 * and kept going until it ends.  The exit status: 0 when every device of
 * the last epoch finished, 1 when the run failed, 130 when interrupted. */
int broker_run(const broker_options *o);

/* OUT/compile.args: what `fusionc compile` was given (the model's absolute
 * path first, then every option but -o), for a re-plan.  0, or -1. */
int broker_write_compile_args(const char *out, int argc, char **argv, const char *model, const char *cluster);

#endif
