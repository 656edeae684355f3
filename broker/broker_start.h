/* broker_start.h: the members' programs, started and stopped: a device's
 * program of this epoch (here, or on its host over ssh: broker_remote.h),
 * a standby's agent. */
#ifndef FUSION_BROKER_START_H
#define FUSION_BROKER_START_H

#include "broker_state.h"

/* fork and exec argv, its output appended to log; the child's pid, or -1. */
pid_t broker_spawn(const char *log, char *const *argv);
/* A device's arguments in this epoch, after its program: the run's (as
 * the broker was given them), the broker's (--broker, --epoch, ...), and
 * every device's address as --peer; not --save nor --resume (paths where
 * the program runs).  argv[n] is NULL. */
typedef struct {
    char epoch[32], every[32], timeout[32], ports[32];
    char peers[MAX_MEMBERS][400];
    char *argv[MAX_ARGS + 2 * MAX_MEMBERS + 16];
    int n;
} device_args;
void broker_device_args(broker *b, device_args *a);
/* Starts member m's program in this epoch (resume: a checkpoint folder or ""). */
int broker_start_device(broker *b, member *m, const char *resume);
/* A standby's agent (fusionc standby here; on its host, a bundle of its kind with --standby). */
int broker_start_standby(broker *b, member *m);
/* Signal m's process; on a host (--over-ssh), stop its program there too. */
void broker_signal_member(broker *b, member *m, int sig);
/* Every member still running, signalled. */
void broker_stop_all(broker *b, int sig);

#endif
