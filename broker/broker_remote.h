/* broker_remote.h: the broker's members on their cluster hosts, over ssh
 * (`fusionc broker --over-ssh`; broker_remote.c says how). */
#ifndef FUSION_BROKER_REMOTE_H
#define FUSION_BROKER_REMOTE_H

#include "broker_state.h"

/* The address the hosts reach this broker at (--address, else the one this
 * machine routes to the first host from) into b->url.  0, or -1. */
int broker_remote_setup(broker *b, int port);
/* Member m's program (args, then --save/--resume on its host), or a standby's agent. */
pid_t broker_remote_start(broker *b, member *m, char *const *args, int n_args, const char *resume, const char *log);
pid_t broker_remote_standby(broker *b, member *m, const char *log);
/* A part m reported, fetched here in the background; recorded when whole. */
void broker_remote_fetch(broker *b, member *m, int64_t step, const char *file, const char *xxh3, int live, int stage,
                         int n_stages);
/* 1 when pid was a fetch (then finished: recorded, or said why not). */
int broker_remote_reaped(broker *b, pid_t pid, int status);
/* Every device's bundle (this epoch's) and the checkpoint to resume from on its host.  0, or -1. */
int broker_remote_prepare(broker *b, const char *resume);
/* Member m's program stopped on its host. */
void broker_remote_stop(broker *b, member *m);

#endif
