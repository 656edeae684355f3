/* broker_db.c: the broker's state in SQLite (broker_db.h). */
#include "broker_db.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char schema[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=FULL;"
    "CREATE TABLE IF NOT EXISTS run(key TEXT PRIMARY KEY, value TEXT);"
    "CREATE TABLE IF NOT EXISTS members(epoch INTEGER, device TEXT, role TEXT, bundle_device TEXT, address TEXT,"
    " pid INTEGER, status TEXT, host TEXT, PRIMARY KEY(epoch, device));"
    "CREATE TABLE IF NOT EXISTS parts(step INTEGER, device TEXT, epoch INTEGER, file TEXT, xxh3 TEXT,"
    " PRIMARY KEY(step, device));"
    "CREATE TABLE IF NOT EXISTS checkpoints(step INTEGER PRIMARY KEY, epoch INTEGER, dir TEXT);"
    "CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, t REAL, epoch INTEGER, kind TEXT, device TEXT,"
    " text TEXT);"
    "CREATE TABLE IF NOT EXISTS invites(id INTEGER PRIMARY KEY, revoked INTEGER NOT NULL DEFAULT 0);";

int broker_db_open(sqlite3 **db, const char *path, char *err, int n)
{
    char *why = NULL;
    if (sqlite3_open(path, db) != SQLITE_OK || sqlite3_busy_timeout(*db, 5000) != SQLITE_OK ||
        sqlite3_exec(*db, schema, NULL, NULL, &why) != SQLITE_OK) {
        snprintf(err, (size_t)n, "%s: %s", path, why ? why : sqlite3_errmsg(*db));
        sqlite3_free(why);
        sqlite3_close(*db);
        *db = NULL;
        return -1;
    }
    return 0;
}

void broker_db_close(sqlite3 *db) { sqlite3_close(db); }

/* A statement with text and integer parameters ("t" text, "i" int64, in order), run to done. */
static int run_sql(sqlite3 *db, const char *sql, const char *types, const void *const *args)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    for (int i = 0; types[i]; i++) {
        if (types[i] == 't')
            sqlite3_bind_text(st, i + 1, (const char *)args[i], -1, SQLITE_TRANSIENT);
        else
            sqlite3_bind_int64(st, i + 1, *(const int64_t *)args[i]);
    }
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : -1;
}

int broker_db_get(sqlite3 *db, const char *key, char *value, int n)
{
    sqlite3_stmt *st;
    int rc = -1;
    if (sqlite3_prepare_v2(db, "SELECT value FROM run WHERE key = ?", -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW) {
        snprintf(value, (size_t)n, "%s", (const char *)sqlite3_column_text(st, 0));
        rc = 0;
    }
    sqlite3_finalize(st);
    return rc;
}

int broker_db_set(sqlite3 *db, const char *key, const char *value)
{
    const void *args[] = { key, value };
    return run_sql(db, "INSERT OR REPLACE INTO run(key, value) VALUES(?, ?)", "tt", args);
}

int broker_db_member(sqlite3 *db, int64_t epoch, const broker_member *m)
{
    const void *args[] = { &epoch, m->device, m->role, m->bundle_device, m->address, &m->pid, m->status, m->host };
    return run_sql(db, "INSERT OR REPLACE INTO members VALUES(?, ?, ?, ?, ?, ?, ?, ?)", "ittttitt", args);
}

int broker_db_members(sqlite3 *db, int64_t epoch, broker_member *out, int max)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT device, role, bundle_device, address, pid, status, host FROM members "
                           "WHERE epoch = ? ORDER BY rowid",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(st, 1, epoch);
    int n = 0;
    while (n < max && sqlite3_step(st) == SQLITE_ROW) {
        broker_member *m = &out[n++];
        memset(m, 0, sizeof *m);
        snprintf(m->device, sizeof m->device, "%s", (const char *)sqlite3_column_text(st, 0));
        snprintf(m->role, sizeof m->role, "%s", (const char *)sqlite3_column_text(st, 1));
        snprintf(m->bundle_device, sizeof m->bundle_device, "%s", (const char *)sqlite3_column_text(st, 2));
        snprintf(m->address, sizeof m->address, "%s", (const char *)sqlite3_column_text(st, 3));
        m->pid = sqlite3_column_int64(st, 4);
        snprintf(m->status, sizeof m->status, "%s", (const char *)sqlite3_column_text(st, 5));
        const unsigned char *host = sqlite3_column_text(st, 6);
        snprintf(m->host, sizeof m->host, "%s", host ? (const char *)host : "");
    }
    sqlite3_finalize(st);
    return n;
}

int broker_db_part(sqlite3 *db, int64_t step, const char *device, int64_t epoch, const char *file, const char *xxh3)
{
    const void *args[] = { &step, device, &epoch, file, xxh3 };
    return run_sql(db, "INSERT OR REPLACE INTO parts VALUES(?, ?, ?, ?, ?)", "ititt", args) ? -1 : 0;
}

/* Each of devices[] that reported a part of step, through fn(file, xxh3). */
static int each_part(sqlite3 *db, int64_t step, const char *const *devices, int n_devices,
                     void (*fn)(void *, const char *, const char *), void *user)
{
    int count = 0;
    for (int k = 0; k < n_devices; k++) {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, "SELECT file, xxh3 FROM parts WHERE step = ? AND device = ?", -1, &st, NULL) !=
            SQLITE_OK)
            return -1;
        sqlite3_bind_int64(st, 1, step);
        sqlite3_bind_text(st, 2, devices[k], -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW) {
            count++;
            if (fn)
                fn(user, (const char *)sqlite3_column_text(st, 0), (const char *)sqlite3_column_text(st, 1));
        }
        sqlite3_finalize(st);
    }
    return count;
}

int broker_db_parts_in(sqlite3 *db, int64_t step, const char *const *devices, int n_devices)
{
    return each_part(db, step, devices, n_devices, NULL, NULL);
}

typedef struct {
    char *text;
    int n, at;
} text_buf;

static void add_line(void *user, const char *file, const char *xxh3)
{
    text_buf *b = user;
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    if (b->at < b->n)
        b->at += snprintf(b->text + b->at, (size_t)(b->n - b->at), "part %s %s\n", base, xxh3);
}

int broker_db_parts_text(sqlite3 *db, int64_t step, const char *const *devices, int n_devices, char *text, int n)
{
    text_buf b = { text, n, 0 };
    text[0] = '\0';
    return each_part(db, step, devices, n_devices, add_line, &b) < 0 || b.at >= n ? -1 : 0;
}

int broker_db_complete(sqlite3 *db, int64_t step, int64_t epoch, const char *dir)
{
    const void *args[] = { &step, &epoch, dir };
    return run_sql(db, "INSERT OR REPLACE INTO checkpoints VALUES(?, ?, ?)", "iit", args);
}

int64_t broker_db_last_complete(sqlite3 *db, char *dir, int n)
{
    sqlite3_stmt *st;
    int64_t step = 0;
    dir[0] = '\0';
    if (sqlite3_prepare_v2(db, "SELECT step, dir FROM checkpoints ORDER BY step DESC LIMIT 1", -1, &st, NULL) !=
        SQLITE_OK)
        return 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        step = sqlite3_column_int64(st, 0);
        snprintf(dir, (size_t)n, "%s", (const char *)sqlite3_column_text(st, 1));
    }
    sqlite3_finalize(st);
    return step;
}

int broker_db_reset(sqlite3 *db)
{
    return sqlite3_exec(db,
                        "DELETE FROM run; DELETE FROM members; DELETE FROM parts; DELETE FROM checkpoints;"
                        "DELETE FROM events;",
                        NULL, NULL, NULL) == SQLITE_OK
               ? 0
               : -1;
}

int broker_db_event(sqlite3 *db, int64_t epoch, const char *kind, const char *device, const char *text)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    double now = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "INSERT INTO events(t, epoch, kind, device, text) VALUES(?, ?, ?, ?, ?)", -1, &st,
                           NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_double(st, 1, now);
    sqlite3_bind_int64(st, 2, epoch);
    sqlite3_bind_text(st, 3, kind, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, device ? device : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, text, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

int64_t broker_db_invite(sqlite3 *db, int64_t id)
{
    const void *args[] = { &id };
    if (id > 0)
        return run_sql(db, "INSERT OR IGNORE INTO invites(id) VALUES (?)", "i", args) == 0 ? id : -1;
    if (sqlite3_exec(db, "INSERT INTO invites(revoked) VALUES (0)", NULL, NULL, NULL) != SQLITE_OK)
        return -1;
    return sqlite3_last_insert_rowid(db);
}

int broker_db_invite_state(sqlite3 *db, int64_t id)
{
    sqlite3_stmt *st;
    int state = -1;
    if (sqlite3_prepare_v2(db, "SELECT revoked FROM invites WHERE id = ?", -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_int64(st, 1, id);
    if (sqlite3_step(st) == SQLITE_ROW)
        state = sqlite3_column_int(st, 0) ? 0 : 1;
    sqlite3_finalize(st);
    return state;
}

int broker_db_invite_revoke(sqlite3 *db, int64_t id)
{
    if (broker_db_invite_state(db, id) < 0)
        return -1;
    const void *args[] = { &id };
    return run_sql(db, "UPDATE invites SET revoked = 1 WHERE id = ?", "i", args);
}
