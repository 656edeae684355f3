/* broker_db.h: the broker's state in SQLite (OUT/broker.db), so that a
 * broker killed and started again picks up where it was.
 *
 *   run(key, value)                 epoch, bundles (the epoch's bundle folder),
 *                                   run_id, state ("running", "finished", "failed")
 *   members(epoch, device, role,    who runs in each epoch: role "device" (its
 *           bundle_device, address,  bundle_device's program, at address, on the
 *           pid, status, host)       cluster's host) or "standby"; status running,
 *                                    done, lost, failed
 *   parts(step, device, epoch,      every checkpoint part reported, with its XXH3
 *         file, xxh3)
 *   checkpoints(step, epoch, dir)   the complete ones (every part in)
 *   events(id, t, epoch, kind,      joined, lost, replaced, re-planned, resumed,
 *          device, text)            checkpoint, finished: the run's log
 *   invites(id, revoked)            the providers' invites (invite.h): kept
 *                                   across runs in the same OUT
 */
#ifndef FUSION_TOOLS_BROKER_DB_H
#define FUSION_TOOLS_BROKER_DB_H

#include <stdint.h>

typedef struct sqlite3 sqlite3;

typedef struct {
    char device[128];        /* the name the run knows it by           */
    char role[16];           /* "device" or "standby"                  */
    char bundle_device[128]; /* whose program it runs ("" standby)      */
    char address[256];
    int64_t pid;
    char status[16]; /* running, done, lost, failed, standby   */
    char host[128];  /* the cluster file's host it runs on     */
} broker_member;

/* Opens (creating) the database and its tables.  0, or -1 with err. */
int broker_db_open(sqlite3 **db, const char *path, char *err, int n);
void broker_db_close(sqlite3 *db);

/* run(key) as text into value (n bytes); 0 found, -1 absent. */
int broker_db_get(sqlite3 *db, const char *key, char *value, int n);
int broker_db_set(sqlite3 *db, const char *key, const char *value);

/* One member row of an epoch (insert or replace). */
int broker_db_member(sqlite3 *db, int64_t epoch, const broker_member *m);
/* The members of an epoch into out[max]; returns how many (-1 on error). */
int broker_db_members(sqlite3 *db, int64_t epoch, broker_member *out, int max);

/* A part of the checkpoint of `step`; returns how many parts of that step
 * the given devices have reported (-1 on error). */
int broker_db_part(sqlite3 *db, int64_t step, const char *device, int64_t epoch, const char *file, const char *xxh3);
int broker_db_parts_in(sqlite3 *db, int64_t step, const char *const *devices, int n_devices);
/* The parts of `step` as "part <basename> <xxh3>\n" lines into text (n bytes). */
int broker_db_parts_text(sqlite3 *db, int64_t step, const char *const *devices, int n_devices, char *text, int n);
int broker_db_complete(sqlite3 *db, int64_t step, int64_t epoch, const char *dir);
/* The last complete checkpoint: its step (0: none) and folder. */
int64_t broker_db_last_complete(sqlite3 *db, char *dir, int n);

/* A new run: no members, parts, checkpoints or events of an older one. */
int broker_db_reset(sqlite3 *db);

/* An event of the run's log (also printed by the caller). */
int broker_db_event(sqlite3 *db, int64_t epoch, const char *kind, const char *device, const char *text);

/* Invite id recorded (id > 0; kept as it was when there), or a new one
 * (id 0).  Its id, or -1. */
int64_t broker_db_invite(sqlite3 *db, int64_t id);
/* 1 valid, 0 revoked, -1 no such invite. */
int broker_db_invite_state(sqlite3 *db, int64_t id);
/* 0, or -1 when there is no such invite. */
int broker_db_invite_revoke(sqlite3 *db, int64_t id);
#endif
