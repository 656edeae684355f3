/* broker_internal.h: the broker's state, shared by its two files:
 * broker.c (the run: processes, requests, who is lost) and broker_plan.c
 * (what follows a loss or a join: the standby, a new plan, the live
 * state, the next epoch).  Not an interface: see broker.h. */
#ifndef FUSION_TOOLS_BROKER_INTERNAL_H
#define FUSION_TOOLS_BROKER_INTERNAL_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "../frontend/cluster.h"
#include "../runtime/checkpoint_store.h"
#include "broker_db.h"
#include "remote.h"

#define MAX_MEMBERS   256
#define MAX_ARGS      256
#define JOIN_GAIN     0.10    /* a device that joins is taken in when the plan with it is
                                 at least this much faster (the 10%)           */
#define PORT_STRIDE   200     /* an epoch's devices listen on port base + epoch x this: a
                                 stopped device of an older epoch may still hold its ports */

typedef struct {
    broker_member m;
    int     child;            /* spawned by this process: waitpid reaps it          */
    double  heard;            /* when it last said anything (monotonic seconds)     */
    int     ended;            /* 0 running; 1 exited or found gone                  */
    int     lost;             /* lost: killed, or silent past the timeout           */
    int     joining;          /* a standby that registered itself mid-run: weighed at
                                 the next complete checkpoint                        */
    char    why[512];         /* how it ended                                        */
} member;

typedef struct {
    const char *out;
    char     bundles[4400];   /* this epoch's bundles: OUT, or OUT/epoch-N          */
    char     url[300];
    int      sock;
    sqlite3 *db;
    cluster  c;               /* OUT/cluster.xml: kinds, standbys, addresses        */
    int64_t  epoch, steps;
    int      save_every, port_base, max_recoveries, recoveries;
    int      keep;             /* --keep: complete checkpoints kept in OUT/checkpoints */
    double   peer_timeout;
    char    *args[MAX_ARGS];  /* the devices' own arguments                          */
    int      n_args;
    member   mem[MAX_MEMBERS];
    int      n;
    char     reporter[128];
    char     left_out[64][128];   /* devices re-planned away, all epochs             */
    int      n_left_out;
    char     joined[64][128];     /* standbys taken in by a new plan                  */
    int      n_joined;
    int      switching;       /* a new plan with a joiner: the devices stop, not lost */
    char     next_bundles[4400];  /* its bundles                                       */
    int      standby_agents;  /* 1: start an agent for every standby; 0: they register themselves */
    double   lost_heard;      /* the lost device's last word: the recovery's clock start */
    int64_t  last_complete;   /* the last checkpoint found whole                     */
    /* Live parts: a survivor's state of the last step it finished, saved
     * when a peer was lost (this epoch's; they make a checkpoint when
     * they cover every stage). */
    struct { int64_t step; int stage, n_stages; char file[4096], xxh3[32]; } live[MAX_MEMBERS];
    int      n_live;
    int      recovering;
    char     exe[PATH_MAX];
    /* --over-ssh (fusionc launch --elastic): every member on its cluster
     * host, started over ssh; parts fetched here as they are reported. */
    int         remote;
    remote_plan hosts;        /* ssh options; its devices unused                   */
    const char *address;      /* where the hosts reach this broker (--address)     */
    struct { pid_t pid; int64_t step; char device[128], tmp[4700], file[4600], xxh3[32]; int live, stage, n_stages; }
                fetch[MAX_MEMBERS];
    int         n_fetch;
    uint8_t     secret[32];   /* OUT/run.key: every request and reply sealed           */
    int64_t     dropped;      /* requests that did not open, or were replays           */
    struct { char device[128]; uint64_t last; } stamps[2 * MAX_MEMBERS];   /* the last stamp taken from each */
    int         n_stamps;
} broker;

double  now_s(void);
/* Prints "broker: [epoch E] TEXT" and logs it as an event of `kind`. */
void    say(broker *b, const char *kind, const char *device, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
member *find_member(broker *b, const char *device);
void    save_member(broker *b, member *m);
/* fork and exec argv, its output appended to log; the child's pid, or -1. */
pid_t   spawn(const char *log, char *const *argv);
/* Starts member m's program in this epoch (resume: a checkpoint folder or ""). */
int     start_device(broker *b, member *m, const char *resume);
/* The members of a bundle folder's plan (its deploy.txt); standbys not taken in stay. */
int     read_plan(broker *b, const char *bundles);
/* A standby's agent; the cluster file's standbys as members (broker.c). */
int     start_standby(broker *b, member *m);
void    add_standbys(broker *b);
/* An earlier run in OUT (broker_again.c): resumed from its newest complete
 * checkpoint (state: how it ended), or archived (--fresh) into
 * OUT/archive/run-N (its path into archived).  0, or -1 (said / err). */
int     resume_run(broker *b, const char *state);
/* A broker started again on a run in progress (broker_again.c): see there.  0, or -1. */
int     take_over(broker *b);
/* Whether member m's part of the run's last step is in OUT/checkpoints:
 * it finished, though no broker heard it say so. */
int     wrote_last_part(broker *b, const member *m);
int     broker_archive_run(const char *out, char *archived, size_t size, char *err, size_t n);
void    stop_all(broker *b, int sig);
/* Signal m's process; on a host (--over-ssh), stop its program there too. */
void    signal_member(broker *b, member *m, int sig);

/* broker_remote.c: the members on their hosts, over ssh (b->remote). */
/* The address the hosts reach this broker at (--address, else the one this
 * machine routes to the first host from) into b->url.  0, or -1. */
int   broker_remote_setup(broker *b, int port);
/* Member m's program (args, then --save/--resume on its host), or a standby's agent. */
pid_t broker_remote_start(broker *b, member *m, char *const *args, int n_args, const char *resume, const char *log);
pid_t broker_remote_standby(broker *b, member *m, const char *log);
/* A part m reported, fetched here in the background; recorded when whole. */
void  broker_remote_fetch(broker *b, member *m, int64_t step, const char *file, const char *xxh3, int live, int stage,
                          int n_stages);
/* 1 when pid was a fetch (then finished: recorded, or said why not). */
int   broker_remote_reaped(broker *b, pid_t pid, int status);
/* Every device's bundle (this epoch's) and the checkpoint to resume from on its host.  0, or -1. */
int   broker_remote_prepare(broker *b, const char *resume);
/* Member m's program stopped on its host. */
void  broker_remote_stop(broker *b, member *m);
/* A part recorded: the checkpoint of step whole yet? (broker.c) */
void  check_complete(broker *b, int64_t step);
/* dir's MANIFEST from "part <file> <xxh3>" lines (broker.c).  0, or -1. */
int   write_manifest(const char *dir, int64_t step, const char *lines, char *err, size_t n);
void  add_live(broker *b, int64_t step, int stage, int n_stages, const char *file, const char *xxh3);

/* broker_plan.c */
/* A device that joined: taken in when the plan with it is JOIN_GAIN faster. */
void    weigh_joiner(broker *b, member *j, int64_t step);
/* After a loss: a standby or a new plan, the checkpoint, every device started. */
int     recover(broker *b);
/* After a join: the new plan's epoch, once the devices have stopped. */
int     switch_plan(broker *b);

#endif
