/* broker_state.h: the broker's state, the one struct every broker file
 * works on, and the few things they all do with it: the clock, saying
 * what happened (printed and logged in the database), the member table.
 * The bottom of the broker's files: it calls none of the others.
 *
 *   broker.c             the run loop: requests, who is lost, what follows
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
} member;

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
} broker;

/* Monotonic seconds. */
double broker_now(void);
/* Prints "broker: [epoch E] TEXT" and logs it as an event of `kind`. */
void broker_say(broker *b, const char *kind, const char *device, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
member *broker_find_member(broker *b, const char *device);
/* m's row of this epoch in the database. */
void broker_save_member(broker *b, member *m);
/* The members of a bundle folder's plan (its deploy.txt), at their cluster
 * addresses; standbys not taken in stay.  0, or -1 (said). */
int broker_read_plan(broker *b, const char *bundles);
/* The cluster file's standbys as members. */
void broker_add_standbys(broker *b);

#endif
