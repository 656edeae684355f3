/* broker_state.h: the broker's state, the one struct every broker file
 * works on, and the few things they all do with it: the clock, saying
 * what happened (printed and logged in the database), the member table.
 * The bottom of the broker's files: it calls none of the others.
 *
 *   broker.c             the run loop: requests, who is lost, what follows
 *   broker_provider.c    providers that join with an invite (fusionc provide)
 *   broker_speed.c       each device's compute against its plan's: stragglers
 *   broker_links.c       each link's traffic against its plan's: drifted links
 *   broker_plan.c        after a loss or a join: a standby, a new plan
 *   broker_again.c       a broker started again on an OUT that holds a run
 *   broker_start.c       the members' programs started and stopped
 *   broker_remote.c      ... on their hosts, over ssh (--over-ssh)
 *   broker_checkpoint.c  checkpoints made whole from the parts reported
 *   broker_state.c       this
 *   broker_db.c          the state in SQLite, so a broker started again picks it up
 * each calling only those below it.  Not an interface: see broker.h. */
#ifndef FUSION_BROKER_STATE_H
#define FUSION_BROKER_STATE_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "../frontend/cluster.h"
#include "broker_db.h"
#include "remote.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

#define MAX_MEMBERS 256
#define MAX_ARGS    256
#define JOIN_GAIN \
    0.10 /* a device that joins is taken in when the plan with it is
                                 at least this much faster (the issue's 10%)           */
#define PORT_STRIDE \
    200 /* an epoch's devices listen on port base + epoch x this: a
                                 stopped device of an older epoch may still hold its ports */

typedef struct {
    broker_member m;
    int child;     /* spawned by this process: waitpid reaps it          */
    double heard;  /* when it last said anything (monotonic seconds)     */
    int ended;     /* 0 running; 1 exited or found gone                  */
    int lost;      /* lost: killed, or silent past the timeout           */
    int joining;   /* a standby that registered itself mid-run: weighed at
                                 the next complete checkpoint                        */
    char why[512]; /* how it ended                                        */
    /* A program a provider's agent runs (fusionc provide), not this broker:
     * the agent asks for its orders (broker_provider.c). */
    char agent[128];   /* the provider's name; "" for the broker's own      */
    int64_t run_epoch; /* its program is to start in this epoch (0: not)    */
    int fetched;       /* the agent has taken its program and arguments     */
    int kill_sig;      /* the agent is to send its program this signal      */
    /* Its speed (broker_speed.c): the last step's compute over the plan's,
     * and how many steps in a row it ran STRAGGLER_RATIO slower than the
     * fastest device (their mean slowness in slow_sum / slow_steps). */
    double ratio;
    int64_t ratio_step, step_epoch; /* (the step last reported, and its epoch) */
    int slow_steps, flagged;
    double slow_sum;
    int agent_ended;            /* the agent said its program ended, with this wait  */
    int agent_status;           /*   status (watch in broker.c takes it as a child's) */
    char resume[FU_PATH_BYTES]; /* the checkpoint it resumes from ("": none)         */
} member;

/* A link's traffic as its sender reports it (broker_links.c): the steps
 * in a row it drifted, and their sums. */
typedef struct {
    char from[128], to[128]; /* the plan's device names */
    int64_t epoch, step;     /* (this epoch's; the step last taken) */
    int steps, flagged;
    double bytes_sum, net_busy_sum; /* bytes, and seconds on the wire less round trips */
    double busy_sum, planned_sum;
} link_watch;
#define MAX_WATCH 512

#define MAX_PROVIDERS 64
#define MAX_UPLOADS   64

/* A provider that offered its device with an invite. */
typedef struct {
    char name[128], kind[16], arch[32], address[256];
    uint32_t invite;
    double heard; /* its agent's last request (monotonic seconds)        */
    int gone;     /* declared lost, or left: its orders are "stop"         */
    int told;     /* it was answered "stop"                               */
} provider;

/* A checkpoint part a provider's program wrote, asked of its agent. */
typedef struct {
    int id, asked;
    char agent[128], device[128], xxh3[32];
    char remote[FU_PATH_BYTES];     /* the part's path on the provider's machine */
    char file[FU_PATH_BYTES + 504]; /* where it goes here                        */
    char tmp[FU_PATH_BYTES + 604];
    int64_t step, got;
    int live, stage, n_stages;
} upload;

typedef struct {
    const char *out;
    char bundles[FU_PATH_BYTES + 304]; /* this epoch's bundles: OUT, or OUT/epoch-N          */
    char url[300];
    int sock;
    sqlite3 *db;
    cluster c; /* OUT/cluster.xml: kinds, standbys, addresses        */
    int64_t epoch, steps;
    int save_every, port_base, max_recoveries, recoveries;
    int keep; /* --keep: complete checkpoints kept in OUT/checkpoints */
    double peer_timeout;
    char *args[MAX_ARGS]; /* the devices' own arguments                          */
    int n_args;
    member mem[MAX_MEMBERS];
    int n;
    char reporter[128];
    char left_out[64][128]; /* devices re-planned away, all epochs             */
    int n_left_out;
    char joined[64][128]; /* standbys taken in by a new plan                  */
    int n_joined;
    int switching;                          /* a new plan with a joiner: the devices stop, not lost */
    char next_bundles[FU_PATH_BYTES + 304]; /* its bundles                                       */
    int standby_agents;                     /* 1: start an agent for every standby; 0: they register themselves */
    double lost_heard;                      /* the lost device's last word: the recovery's clock start */
    int64_t last_complete;                  /* the last checkpoint found whole                     */
    int64_t weigh_step;                     /* a checkpoint came whole: the joiners are weighed at it
                                 by the run loop (broker.c), 0 when none is due       */
    /* Live parts: a survivor's state of the last step it finished, saved
     * when a peer was lost (this epoch's; they make a checkpoint when
     * they cover every stage). */
    struct {
        int64_t step;
        int stage, n_stages;
        char file[FU_PATH_BYTES], xxh3[32];
    } live[MAX_MEMBERS];
    int n_live;
    int recovering;
    char exe[PATH_MAX];
    /* --over-ssh (fusionc launch --elastic): every member on its cluster
     * host, started over ssh; parts fetched here as they are reported. */
    int remote;
    remote_plan hosts;   /* ssh options; its devices unused                   */
    const char *address; /* where the hosts reach this broker (--address)     */
    struct {
        pid_t pid;
        int64_t step;
        char device[128], tmp[FU_PATH_BYTES + 604], file[FU_PATH_BYTES + 504], xxh3[32];
        int live, stage, n_stages;
    } fetch[MAX_MEMBERS];
    int n_fetch;
    uint8_t secret[32]; /* OUT/run.key: every request and reply sealed           */
    int64_t dropped;    /* requests that did not open, or were replays           */
    struct {
        char device[128];
        uint64_t last;
    } stamps[2 * MAX_MEMBERS]; /* the last stamp taken from each */
    int n_stamps;
    /* Providers (broker_provider.c). */
    provider prov[MAX_PROVIDERS];
    int n_prov;
    upload up[MAX_UPLOADS];
    int n_up, up_ids;
    char cluster_path[FU_PATH_BYTES + 304]; /* OUT/cluster.xml; OUT/providers/cluster.xml once one offered */
    int finished;                           /* the run is over: the providers are told to stop          */
    /* A straggler found (broker_speed.c): re-planned with its measured
     * speed at the next complete checkpoint (broker_plan.c). */
    char straggler[128];
    double straggler_slowdown; /* its new slowdown: measured, times the one it had */
    /* A drifted link found (broker_links.c): its hosts and measured
     * bandwidth, re-planned with at the next complete checkpoint. */
    link_watch watch[MAX_WATCH];
    int n_watch;
    char drift_from[128], drift_to[128];
    double drift_bandwidth, drift_latency; /* bytes/s measured; s (the link's, kept) */
    double step_ms[16];                    /* the reporter's last step times (a ring)          */
    int n_step_ms;
    double next_estimate_ms;  /* the plan switched to: its estimated step         */
    double check_estimate_ms; /* ... checked against its steps 5-20              */
} broker;

/* A request's stamp (broker_client.h) from the sender named by text's
 * second word: above the last taken from it, and within a minute of this
 * clock; else a replay: 0. */
int broker_fresh(broker *b, const char *text, uint64_t stamp);
/* Monotonic seconds. */
double broker_now(void);
/* Prints "broker: [epoch E] TEXT" and logs it as an event of `kind`. */
void broker_say(broker *b, const char *kind, const char *device, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A request dropped or refused, counted (b->dropped): 1 when it is to be
 * said, the first ten and then every hundredth (a stranger's flood must
 * not fill the log). */
int broker_count_dropped(broker *b);
member *broker_find_member(broker *b, const char *device);
/* m's row of this epoch in the database. */
void broker_save_member(broker *b, member *m);
/* The run's cluster becomes c (b takes it), read from path: the file the
 * re-plans compile with, remembered in the database for a broker started
 * again. */
void broker_use_cluster(broker *b, cluster *c, const char *path);
/* At the start: the run's cluster file is OUT/cluster.xml, or the one a
 * broker of this run wrote last (providers joined, a straggler's speed). */
void broker_load_run_cluster(broker *b);
/* The members of a bundle folder's plan (its deploy.txt), at their cluster
 * addresses; standbys not taken in stay.  0, or -1 (said). */
int broker_read_plan(broker *b, const char *bundles);
/* The cluster file's standbys as members. */
void broker_add_standbys(broker *b);

#endif
