/* hub.c: fu_hub, a device's links each driven by an I/O thread.  See hub.h
 * for what it promises.
 *
 * Threads and locks: one mutex and one condition variable per hub.  The
 * main thread appends to outboxes and takes from inboxes under the mutex
 * and waits on the condition; each I/O thread owns its fu_link outright
 * (never touched under the mutex), takes the head of its outbox, appends to
 * its inbox, and broadcasts after every change.  The main thread wakes an
 * I/O thread sleeping in poll() through a pipe (the link's wake descriptor).
 *
 * An outbox message stays at the head of its outbox until acked: the I/O
 * thread reads its payload without the lock while the main thread only
 * appends behind it, so the outbox byte count is what is really held.
 *
 * Stopping together (fu_hub_request_stop, fu_hub_step_done; the rule is
 * stop_table.h's): the table lives under the hub's mutex.  Whoever learns
 * of a request first (the main thread asking, an I/O thread reading
 * MSG_STOP) enters this device's entry, the step the main thread is in
 * (h->cur_step, which fu_hub_step_done moves under the same mutex), so the
 * entry is never below a step the main thread has begun.  Each link
 * remembers the table version its peer was last sent; its I/O thread posts
 * the table (a control frame, ahead of data not yet on the wire) whenever
 * the hub's is newer, and every change wakes every I/O thread, so the
 * table floods the run hop by hop without any main thread's help.  A table
 * that changes nothing is not passed on: the flood ends.
 */
#define _GNU_SOURCE /* pipe2; before any system header */
#include "comm/hub.h"
#include "le_bytes.h"
#include "comm/wire_util.h"
#include "comm/stop_table.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ABORT_MS     1000         /* how long abort and close wait for the peers' acks, in all */
#define HEARTBEAT_MS 1000         /* an idle link's heartbeat, at most timeout_ms / 4 */
#define HELLO_BYTES  (8 + 64 + 8) /* build id, name, epoch */

typedef struct hub_msg {
    struct hub_msg *next;
    fu_msg_info info;
    uint8_t *payload;    /* info.length bytes, malloc'd (NULL when 0) */
    uint64_t deliver_ns; /* CLOCK_REALTIME; 0 = at once */
} hub_msg;

typedef struct {
    fu_hub *hub;
    fu_hub_link_spec spec;
    pthread_t thread;
    int started;
    int wake[2];       /* pipe: anyone → this link's I/O thread */
    fu_link *link;     /* the I/O thread's; closed by fu_hub_close */
    fu_link_auth auth; /* the sealed handshake's (hub->opt.secret set) */
    /* Under hub->mu: */
    hub_msg *out_head, *out_tail; /* not yet acked, in order; the head may be on the wire */
    uint64_t out_bytes;
    hub_msg *in_head, *in_tail; /* arrived, not yet received */
    int ready;                  /* hello exchanged */
    int finished;               /* the I/O thread left its loop */
    int no_abort;               /* dead, refused, or stopped itself: no MSG_ABORT to it */
    int peer_closed;            /* it said bye: nothing more comes from it */
    uint64_t told;              /* the stop table's version last sent to the peer */
    uint64_t bytes_sent, messages_sent;
    double busy_seconds;
    double bandwidth; /* shaped: bytes/s now (the spec's, or fu_hub_set_bandwidth's) */
} hub_link;

struct fu_hub {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* any change the main thread may wait for */
    fu_hub_options opt;
    char self[64];
    int n;
    hub_link *links;
    int failed; /* error says why; every call fails from now on */
    char error[512];
    int aborting; /* the I/O threads send MSG_ABORT carrying why */
    char why[512];
    int64_t abort_start_ms;
    int stopping;     /* fu_hub_close: say bye (unless failed) and leave */
    stop_table stop;  /* who must finish which step before all stop */
    int64_t cur_step; /* the step the main thread is in (fu_hub_step_done) */
};

static int64_t realtime_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void wake(hub_link *k)
{
    if (k->wake[1] >= 0) {
        ssize_t rc = write(k->wake[1], "w", 1); /* full pipe: a wake-up is pending anyway */
        (void)rc;
    }
}

static void drain(hub_link *k)
{
    char buf[64];
    while (read(k->wake[0], buf, sizeof buf) > 0) {
    }
}

static void wake_all(fu_hub *h)
{
    for (int i = 0; i < h->n; i++)
        wake(&h->links[i]);
}

#define HUB_WAIT_NOTICE_MS 10000 /* how often a device waiting for its peers says so */

/* "cpu-a1 (at 10.0.0.2, to connect to port 29501 here)" for a link this end
 * listens on, "cpu-a1 (at tcp://10.0.0.2:29501)" for one it connects on:
 * the peer's name and where it should be, for a message. */
static void describe_peer(const fu_hub_link_spec *s, char *out, size_t n)
{
    const char *port = strrchr(s->url, ':');
    if (s->listen)
        snprintf(out, n, "%.63s (at %.199s, to connect to port %.15s here)", s->name, s->address[0] ? s->address : "?",
                 port ? port + 1 : s->url);
    else
        snprintf(out, n, "%.63s (at %.255s)", s->name, s->url);
}

/* Waits on the hub's condition until until_ms (monotonic); mutex held. */
static void wait_until(fu_hub *h, int64_t until_ms)
{
    int64_t left = until_ms - now_ms();
    if (left <= 0)
        return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += left / 1000;
    t.tv_nsec += (left % 1000) * 1000000;
    if (t.tv_nsec >= 1000000000) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&h->cv, &h->mu, &t);
}

/* The hub's first failure: every call fails with text from now on, and the
 * I/O threads tell every live peer (MSG_ABORT carrying the text). */
static void hub_fail(fu_hub *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hub_fail(fu_hub *h, const char *fmt, ...)
{
    pthread_mutex_lock(&h->mu);
    if (!h->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(h->error, sizeof h->error, fmt, ap);
        va_end(ap);
        snprintf(h->why, sizeof h->why, "%s", h->error);
        h->failed = 1;
        h->aborting = 1;
        h->abort_start_ms = now_ms();
    }
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    wake_all(h);
}

static void set_flag(fu_hub *h, int *flag)
{
    pthread_mutex_lock(&h->mu);
    *flag = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static void append(hub_msg **head, hub_msg **tail, hub_msg *m)
{
    m->next = NULL;
    if (*tail)
        (*tail)->next = m;
    else
        *head = m;
    *tail = m;
}

static void free_list(hub_msg *m)
{
    while (m) {
        hub_msg *next = m->next;
        free(m->payload);
        free(m);
        m = next;
    }
}

/* This device's entry, once a stop is asked for; mutex held. */
static void enter_self(fu_hub *h)
{
    if (h->stop.code)
        stop_table_enter(&h->stop, h->opt.self_index, h->cur_step, 0);
}
/* A data message from the peer: into the inbox (payload ownership passes). */
static void deliver(hub_link *k, const fu_event *ev)
{
    hub_msg *m = calloc(1, sizeof *m);
    if (!m) {
        free(ev->payload);
        hub_fail(k->hub, "message from %s: out of memory (step %" PRId64 ", tensor %" PRId32 ")", k->spec.name,
                 ev->info.step, ev->info.tensor);
        return;
    }
    m->info = ev->info;
    m->payload = ev->payload;
    m->deliver_ns = ev->deliver_ns;
    fu_hub *h = k->hub;
    pthread_mutex_lock(&h->mu);
    append(&k->in_head, &k->in_tail, m);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* A control message from the peer; 1 when this link's thread should stop. */
static int on_control(hub_link *k, fu_event *ev)
{
    fu_hub *h = k->hub;
    int stop = 0;
    if (ev->info.kind == MSG_ABORT) {
        pthread_mutex_lock(&h->mu);
        k->no_abort = 1; /* it stopped already */
        pthread_mutex_unlock(&h->mu);
        hub_fail(h, "peer %s stopped: %s", k->spec.name,
                 ev->payload && ((char *)ev->payload)[0] ? (char *)ev->payload : "(no reason given)");
        stop = 1;
    } else if (ev->info.kind == MSG_BYE) {
        pthread_mutex_lock(&h->mu);
        k->no_abort = 1;
        k->peer_closed = 1;
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        stop = 1;
    } else if (ev->info.kind == MSG_STOP) {
        /* Recorded now, before this thread reads on: a data message that
         * followed it on the wire reaches the inbox only after this. */
        pthread_mutex_lock(&h->mu);
        int changed = ev->payload ? stop_table_merge(&h->stop, ev->payload, ev->info.length) : -1;
        if (changed > 0) {
            enter_self(h);
            pthread_cond_broadcast(&h->cv);
        }
        pthread_mutex_unlock(&h->mu);
        if (changed < 0)
            hub_fail(h,
                     "stop request from %s: %" PRIu64 " bytes, not a table of %d devices: the programs disagree "
                     "on the protocol",
                     k->spec.name, ev->info.length, h->stop.n);
        else if (changed)
            wake_all(h); /* the other links pass it on at once */
    }
    free(ev->payload);
    ev->payload = NULL;
    return stop;
}

/* ---- the I/O thread ---------------------------------------------------- */

/* Exchanges hellos: both ends send theirs (acked) and check the other's
 * build id.  0, or -1 with the hub failed (or stopping). */
static int hello(hub_link *k, fu_link *l)
{
    fu_hub *h = k->hub;
    uint8_t mine[HELLO_BYTES] = { 0 };
    put64(mine, h->opt.build_id);
    snprintf((char *)mine + 8, 64, "%s", h->self);
    put64(mine + 72, (uint64_t)h->opt.epoch);
    fu_msg_info hi = { .kind = MSG_HELLO, .length = sizeof mine };
    char err[300];
    uint64_t seq;
    if (fu_link_post(l, &hi, mine, 0, &seq, err, sizeof err) != 0) {
        hub_fail(h, "hello to peer %s (%s): %s", k->spec.name, k->spec.url, err);
        return -1;
    }
    int acked = 0, heard = 0;
    uint64_t theirs = 0, their_epoch = 0;
    int64_t deadline = now_ms() + h->opt.timeout_ms;
    /* Decide only once both hellos are through (or at the deadline), so
     * that a refused peer has read ours and refuses us too. */
    while (!(acked && heard)) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            break;
        fu_event ev;
        int rc = fu_link_poll(l, &ev, (int)left, k->wake[0], err, sizeof err);
        if (rc < 0) {
            hub_fail(h, "hello from peer %s (%s): %s", k->spec.name, k->spec.url, err);
            return -1;
        }
        if (rc == 0) {
            drain(k);
            pthread_mutex_lock(&h->mu);
            int quit = h->stopping || h->failed;
            pthread_mutex_unlock(&h->mu);
            if (quit)
                return -1;
            continue;
        }
        if (ev.type == FU_EVENT_ACKED && ev.seq == seq)
            acked = 1;
        if (ev.type != FU_EVENT_MESSAGE)
            continue;
        if (ev.info.kind == MSG_HELLO) {
            if (ev.info.length == HELLO_BYTES)
                theirs = get64(ev.payload), their_epoch = get64(ev.payload + 72);
            heard = 1;
            free(ev.payload);
        } else if (ev.info.kind == MSG_ABORT || ev.info.kind == MSG_BYE || ev.info.kind == MSG_STOP) {
            if (on_control(k, &ev)) {
                hub_fail(h, "peer %s (%s) left during the hello", k->spec.name, k->spec.url);
                return -1;
            }
        } else if (ev.info.kind == MSG_HANDSHAKE) {
            free(ev.payload);
        } else {
            deliver(k, &ev); /* it finished its open first and started sending */
        }
    }
    if (heard && theirs != h->opt.build_id) {
        pthread_mutex_lock(&h->mu);
        k->no_abort = 1;
        pthread_mutex_unlock(&h->mu);
        hub_fail(h,
                 "peer %s runs another compile (build %016" PRIx64 ", this program is build %016" PRIx64 "): refused",
                 k->spec.name, theirs, h->opt.build_id);
        return -1;
    }
    if (heard && their_epoch != (uint64_t)h->opt.epoch) {
        pthread_mutex_lock(&h->mu);
        k->no_abort = 1;
        pthread_mutex_unlock(&h->mu);
        hub_fail(h,
                 "peer %s is of the run's epoch %" PRIu64 ", this device of epoch %" PRId64 " (the broker "
                 "started the run again without one of them): refused",
                 k->spec.name, their_epoch, h->opt.epoch);
        return -1;
    }
    if (!heard || !acked) {
        hub_fail(h, "peer %s (%s) connected but did not complete the hello within %d ms", k->spec.name, k->spec.url,
                 h->opt.timeout_ms);
        return -1;
    }
    return 0;
}

/* The link's life after the hello: send the outbox (shaped), receive into
 * the inbox, heartbeat, watch for silence; on failure tell the peer why,
 * on close say bye. */
static void run(hub_link *k, fu_link *l)
{
    fu_hub *h = k->hub;
    const double latency = k->spec.latency;
    const int shaped = k->spec.bandwidth > 0 || latency > 0;
    const int timeout = h->opt.timeout_ms;
    int heartbeat_ms = timeout / 4 < HEARTBEAT_MS ? timeout / 4 : HEARTBEAT_MS;
    if (heartbeat_ms < 10)
        heartbeat_ms = 10;
    int64_t last_sent = now_ms();
    hub_msg *inflight = NULL; /* the outbox head, posted, not yet acked */
    uint64_t inflight_seq = 0;
    int64_t inflight_start = 0, inflight_free = 0; /* realtime ns: its serialization */
    int64_t wire_free_ns = 0;                      /* when the emulated wire is free again */
    int closing = 0;                               /* 1: bye or abort posted, waiting for its ack */
    uint64_t closing_seq = 0;
    int64_t closing_deadline = 0;
    char err[300];

    for (;;) {
        drain(k);
        int64_t now = now_ms(), rt = realtime_ns();
        pthread_mutex_lock(&h->mu);
        int stopping = h->stopping, failed = h->failed, aborting = h->aborting, no_abort = k->no_abort;
        double bandwidth = k->bandwidth;
        char why[sizeof h->why];
        if (aborting && !closing)
            memcpy(why, h->why, sizeof why);
        int64_t abort_start = h->abort_start_ms;
        hub_msg *next = !failed && !stopping && !inflight ? k->out_head : NULL;
        /* In the same critical section as next: a data message queued after
         * a proposal was learned finds it here, and goes out behind it. */
        uint8_t *tell = NULL;
        size_t tell_bytes = 0;
        if (!failed && !closing && h->stop.code && h->stop.version > k->told &&
            (tell = malloc(tell_bytes = stop_table_bytes(&h->stop))) != NULL) {
            stop_table_encode(&h->stop, tell);
            k->told = h->stop.version;
        }
        pthread_mutex_unlock(&h->mu);

        if (tell) {
            /* Unacked, like a heartbeat: an ack would change nothing.  The
             * link is ordered and loses nothing without failing (a broken
             * socket, or a sealed frame that does not open, fails the hub,
             * and the abort reaches every device anyway), and no I/O thread
             * could wait for the ack without holding up its data.  Acked
             * control posts also take one of a few slots until acked: a
             * burst of proposals could fill them and fail a healthy link. */
            fu_msg_info m = { .kind = MSG_STOP, .length = tell_bytes };
            int posted = fu_link_post_control(l, &m, tell, NULL, err, sizeof err);
            free(tell);
            if (posted != 0) {
                hub_fail(h, "%s", err);
                continue;
            }
            last_sent = now;
        }

        if (!closing && (aborting || stopping)) {
            if (no_abort || (stopping && failed && !aborting))
                break;
            /* Abort: tell the peer why.  Close (not failed): say bye, so
             * that its silence from now on is not taken for a death. */
            fu_msg_info m = { .kind = aborting ? MSG_ABORT : MSG_BYE };
            if (aborting)
                m.length = strlen(why) + 1;
            if (fu_link_post_control(l, &m, aborting ? why : NULL, &closing_seq, err, sizeof err) != 0)
                break;
            closing = 1;
            closing_deadline = (aborting ? abort_start : now) + ABORT_MS;
        }
        if (closing && now >= closing_deadline)
            break;

        int64_t wait = 200;
        if (next) {
            int64_t start = rt > wire_free_ns ? rt : wire_free_ns;
            if (start - rt > 500000) { /* the emulated wire is busy with the previous message */
                int64_t ms = (start - rt + 999999) / 1000000;
                if (ms < wait)
                    wait = ms;
            } else {
                int64_t serialize = bandwidth > 0 ? (int64_t)((double)next->info.length / bandwidth * 1e9) : 0;
                uint64_t deliver = shaped ? (uint64_t)(start + serialize + (int64_t)(latency * 1e9)) : 0;
                if (fu_link_post(l, &next->info, next->payload, deliver, &inflight_seq, err, sizeof err) != 0) {
                    hub_fail(h, "%s", err);
                    continue;
                }
                inflight = next;
                inflight_start = start;
                inflight_free = wire_free_ns = start + serialize;
                last_sent = now;
            }
        }
        if (!closing && now - last_sent >= heartbeat_ms) {
            fu_msg_info hb = { .kind = MSG_HEARTBEAT };
            if (fu_link_post_control(l, &hb, NULL, NULL, err, sizeof err) != 0) {
                hub_fail(h, "%s", err);
                continue;
            }
            last_sent = now;
        }
        if (!closing) {
            int64_t hb_left = heartbeat_ms - (now - last_sent);
            int64_t dead_left = fu_link_last_heard_ms(l) + timeout - now + 1;
            if (hb_left < wait)
                wait = hb_left;
            if (dead_left < wait)
                wait = dead_left;
        } else if (closing_deadline - now < wait) {
            wait = closing_deadline - now;
        }
        if (wait < 0)
            wait = 0;

        fu_event ev;
        int rc = fu_link_poll(l, &ev, (int)wait, k->wake[0], err, sizeof err);
        if (rc < 0) {
            /* A corrupt message or a broken socket: the peer is not told. */
            pthread_mutex_lock(&h->mu);
            k->no_abort = 1;
            pthread_mutex_unlock(&h->mu);
            hub_fail(h, "%s", err);
            break;
        }
        if (rc > 0 && ev.type == FU_EVENT_ACKED) {
            if (inflight && ev.seq == inflight_seq) {
                int64_t end = realtime_ns();
                if (end < inflight_free)
                    end = inflight_free;
                pthread_mutex_lock(&h->mu);
                k->out_head = inflight->next;
                if (!k->out_head)
                    k->out_tail = NULL;
                k->out_bytes -= inflight->info.length;
                k->bytes_sent += inflight->info.length;
                k->messages_sent++;
                k->busy_seconds += (double)(end - inflight_start) * 1e-9;
                pthread_cond_broadcast(&h->cv);
                pthread_mutex_unlock(&h->mu);
                free(inflight->payload);
                free(inflight);
                inflight = NULL;
            } else if (closing && ev.seq == closing_seq) {
                break;
            }
        } else if (rc > 0 && ev.type == FU_EVENT_MESSAGE) {
            if (ev.info.kind == MSG_ABORT || ev.info.kind == MSG_BYE || ev.info.kind == MSG_STOP) {
                if (on_control(k, &ev))
                    break;
            } else if (ev.info.kind == MSG_HELLO || ev.info.kind == MSG_HANDSHAKE) {
                free(ev.payload);
            } else {
                deliver(k, &ev);
            }
        }
        if (!closing && now_ms() - fu_link_last_heard_ms(l) > timeout) {
            pthread_mutex_lock(&h->mu);
            k->no_abort = 1;
            pthread_mutex_unlock(&h->mu);
            hub_fail(h, "lost peer %s: nothing received for %d ms (killed, crashed or cut off)", k->spec.name, timeout);
            break;
        }
    }
}

static void *link_main(void *arg)
{
    hub_link *k = arg;
    fu_hub *h = k->hub;
    char err[300];
    k->auth =
        (fu_link_auth){ .secret = h->opt.secret, .self = h->self, .build_id = h->opt.build_id, .epoch = h->opt.epoch };
    fu_link *l = fu_link_open_sealed(k->spec.url, k->spec.listen, k->spec.name, h->opt.connect_timeout_ms, k->wake[0],
                                     h->opt.secret ? &k->auth : NULL, err, sizeof err);
    if (!l) {
        int e = errno;
        char who[400]; /* describe_peer: at most 63 + 199 + 15 + 40 bytes */
        describe_peer(&k->spec, who, sizeof who);
        if (e == ETIMEDOUT)
            hub_fail(h, "peer %s did not connect within %d ms", who, h->opt.connect_timeout_ms);
        else if (e != ECANCELED)
            hub_fail(h, "peer %s (%s): %s", k->spec.name, k->spec.url, err);
        pthread_mutex_lock(&h->mu);
        k->no_abort = 1;
        pthread_mutex_unlock(&h->mu);
    } else {
        k->link = l; /* read by fu_hub_close only after joining this thread */
        if (hello(k, l) == 0) {
            set_flag(h, &k->ready);
            run(k, l);
        }
    }
    set_flag(h, &k->finished);
    return NULL;
}

/* ---- the main thread's side -------------------------------------------- */

static hub_link *find(fu_hub *h, int32_t peer, char *err, size_t n)
{
    for (int i = 0; i < h->n; i++)
        if (h->links[i].spec.peer == peer)
            return &h->links[i];
    fail(err, n, "no link to device %" PRId32 " on this device (%s)", peer, h->self);
    return NULL;
}

/* Waits (up to about ABORT_MS after the abort began) for every I/O thread
 * to have told its peer or given up. */
static void wait_for_threads(fu_hub *h, int64_t deadline)
{
    pthread_mutex_lock(&h->mu);
    for (;;) {
        int running = 0;
        for (int i = 0; i < h->n; i++)
            running += h->links[i].started && !h->links[i].finished;
        if (!running || now_ms() >= deadline)
            break;
        wait_until(h, deadline);
    }
    pthread_mutex_unlock(&h->mu);
}

fu_hub *fu_hub_open(const fu_hub_link_spec *links, int n_links, const fu_hub_options *o, char *err, size_t n)
{
    if (n_links < 0 || (n_links > 0 && !links) || !o) {
        fail(err, n, "fu_hub_open: no links or no options");
        return NULL;
    }
    fu_hub *h = calloc(1, sizeof *h);
    hub_link *ks = calloc(n_links > 0 ? (size_t)n_links : 1, sizeof *ks);
    if (!h || !ks) {
        free(h);
        free(ks);
        fail(err, n, "fu_hub_open: out of memory");
        return NULL;
    }
    h->opt = *o;
    if (h->opt.timeout_ms <= 0)
        h->opt.timeout_ms = 10000;
    if (h->opt.connect_timeout_ms <= 0)
        h->opt.connect_timeout_ms = 60000;
    if (h->opt.stall_timeout_ms <= 0)
        h->opt.stall_timeout_ms = 600000;
    snprintf(h->self, sizeof h->self, "%s", o->self_name ? o->self_name : "?");
    h->opt.self_name = h->self;
    h->n = n_links;
    h->links = ks;
    /* The run's devices, whose entries a stop waits for: the caller's list,
     * or (none given) this device and its peers. */
    int32_t n_dev = o->n_devices, self = o->self_index;
    uint8_t *own = NULL;
    if (n_dev <= 0) {
        n_dev = self + 1;
        for (int i = 0; i < n_links; i++)
            if (links[i].peer + 1 > n_dev)
                n_dev = links[i].peer + 1;
        if ((own = calloc((size_t)n_dev + 1, 1)) != NULL) {
            if (self >= 0)
                own[self] = 1;
            for (int i = 0; i < n_links; i++)
                if (links[i].peer >= 0)
                    own[links[i].peer] = 1;
        }
    }
    int table = stop_table_init(&h->stop, n_dev, o->n_devices > 0 ? o->members : own);
    free(own);
    if (table != 0) {
        free(ks);
        stop_table_free(&h->stop);
        free(h);
        fail(err, n, "fu_hub_open: out of memory");
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&h->mu, NULL);
    for (int i = 0; i < n_links; i++) {
        ks[i].hub = h;
        ks[i].spec = links[i];
        ks[i].bandwidth = links[i].bandwidth;
        ks[i].spec.name[sizeof ks[i].spec.name - 1] = 0;
        ks[i].spec.url[sizeof ks[i].spec.url - 1] = 0;
        ks[i].wake[0] = ks[i].wake[1] = -1;
    }
    for (int i = 0; i < n_links; i++) {
        hub_link *k = &ks[i];
        for (int j = 0; j < i; j++) {
            if (ks[j].spec.peer == k->spec.peer) {
                fail(err, n, "fu_hub_open: two links to device %" PRId32 " (%s)", k->spec.peer, k->spec.name);
                fu_hub_close(h);
                return NULL;
            }
        }
        if (pipe2(k->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
            k->wake[0] = k->wake[1] = -1;
            fail(err, n, "fu_hub_open: pipe: %s", strerror(errno));
            fu_hub_close(h);
            return NULL;
        }
    }
    for (int i = 0; i < n_links; i++) {
        if (pthread_create(&ks[i].thread, NULL, link_main, &ks[i]) != 0) {
            hub_fail(h, "fu_hub_open: cannot start a thread for peer %s", ks[i].spec.name);
            break;
        }
        ks[i].started = 1;
    }
    /* Every I/O thread ends its open within connect_timeout_ms plus its
     * hello within timeout_ms; the guard only keeps this wait finite. */
    int64_t start = now_ms(), guard = start + h->opt.connect_timeout_ms + h->opt.timeout_ms + 5000;
    int64_t notice = start + HUB_WAIT_NOTICE_MS; /* a device waiting for its peers says for whom */
    pthread_mutex_lock(&h->mu);
    for (;;) {
        int ready = 0;
        for (int i = 0; i < n_links; i++)
            ready += ks[i].ready;
        if (h->failed || ready == n_links)
            break;
        if (now_ms() >= notice) {
            char waiting[512] = "";
            for (int i = 0, shown = 0; i < n_links; i++) {
                char who[400]; /* describe_peer: at most 63 + 199 + 15 + 40 bytes */
                if (ks[i].ready || shown++ >= 4)
                    continue;
                describe_peer(&ks[i].spec, who, sizeof who);
                snprintf(waiting + strlen(waiting), sizeof waiting - strlen(waiting), "%s%s", shown > 1 ? ", " : "",
                         who);
            }
            printf("fusion: %s: waiting %lld s for %s%s (gives up after %d s)\n", h->self,
                   (long long)((now_ms() - start) / 1000), waiting, n_links - ready > 4 ? " and more" : "",
                   h->opt.connect_timeout_ms / 1000);
            fflush(stdout);
            notice += HUB_WAIT_NOTICE_MS;
        }
        if (now_ms() < guard && notice < guard) {
            wait_until(h, notice);
            continue;
        }
        if (now_ms() >= guard) {
            pthread_mutex_unlock(&h->mu);
            hub_fail(h, "fu_hub_open: the links did not open within %d ms",
                     h->opt.connect_timeout_ms + h->opt.timeout_ms + 5000);
            pthread_mutex_lock(&h->mu);
            break;
        }
        wait_until(h, guard);
    }
    int failed = h->failed;
    if (failed)
        fail(err, n, "%s", h->error);
    int64_t abort_deadline = h->abort_start_ms + ABORT_MS;
    pthread_mutex_unlock(&h->mu);
    if (failed) {
        wait_for_threads(h, abort_deadline); /* the ready links tell their peers */
        fu_hub_close(h);
        return NULL;
    }
    return h;
}

int fu_hub_send(fu_hub *h, int32_t peer, const fu_msg_info *info, const void *payload, char *err, size_t n)
{
    hub_link *k = find(h, peer, err, n);
    if (!k)
        return -1;
    if (info->kind != MSG_ACTIVATION && info->kind != MSG_GRADIENT) {
        fail(err, n, "send to %s: kind %" PRIu32 " is not a data kind", k->spec.name, info->kind);
        return -1;
    }
    if (info->length && !payload) {
        fail(err, n, "send to %s: %" PRIu64 " bytes from a NULL payload", k->spec.name, info->length);
        return -1;
    }
    int64_t stall = now_ms() + h->opt.stall_timeout_ms;
    pthread_mutex_lock(&h->mu);
    /* Bounded outbox: wait for the link to drain below the bound. */
    while (!h->failed && !k->peer_closed && k->out_bytes > 0 && k->out_bytes + info->length > FU_HUB_OUTBOX_BYTES &&
           now_ms() < stall)
        wait_until(h, stall);
    int rc = 0;
    if (h->failed) {
        fail(err, n, "%s", h->error);
        rc = -1;
    } else if (k->peer_closed) {
        fail(err, n, "send to %s (step %" PRId64 ", tensor %" PRId32 "): the peer closed its end", k->spec.name,
             info->step, info->tensor);
        rc = -1;
    } else if (k->out_bytes > 0 && k->out_bytes + info->length > FU_HUB_OUTBOX_BYTES) {
        fail(err, n, "send to %s (step %" PRId64 ", tensor %" PRId32 "): %" PRIu64 " bytes still queued after %d ms",
             k->spec.name, info->step, info->tensor, k->out_bytes, h->opt.stall_timeout_ms);
        rc = -1;
    }
    pthread_mutex_unlock(&h->mu);
    if (rc)
        return rc;
    hub_msg *m = calloc(1, sizeof *m);
    uint8_t *copy = info->length ? malloc((size_t)info->length) : NULL;
    if (!m || (info->length && !copy)) {
        free(m);
        free(copy);
        fail(err, n, "send to %s: cannot allocate %" PRIu64 " bytes", k->spec.name, info->length);
        return -1;
    }
    if (info->length)
        memcpy(copy, payload, (size_t)info->length);
    m->info = *info;
    m->payload = copy;
    pthread_mutex_lock(&h->mu);
    append(&k->out_head, &k->out_tail, m);
    k->out_bytes += info->length;
    pthread_mutex_unlock(&h->mu);
    wake(k);
    return 0;
}

static int same_message(const fu_msg_info *a, const fu_msg_info *b)
{
    return a->kind == b->kind && a->step == b->step && a->micro_batch == b->micro_batch && a->tensor == b->tensor;
}

/* fu_hub_recv (got NULL: the length must be want->length) and
 * fu_hub_recv_upto (any length up to capacity, stored in *got). */
static int hub_recv(fu_hub *h, int32_t peer, const fu_msg_info *want, void *payload, uint64_t capacity, uint64_t *got,
                    char *err, size_t n)
{
    hub_link *k = find(h, peer, err, n);
    if (!k)
        return -1;
    if (!got && want->length > capacity) {
        fail(err, n,
             "receive from %s: %" PRIu64 " bytes asked for a %" PRIu64 "-byte buffer (step %" PRId64 ", tensor %" PRId32
             ")",
             k->spec.name, want->length, capacity, want->step, want->tensor);
        return -1;
    }
    int64_t stall = now_ms() + h->opt.stall_timeout_ms;
    hub_msg *m = NULL;
    int rc = 0;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        if (h->failed) {
            fail(err, n, "%s", h->error);
            rc = -1;
            break;
        }
        hub_msg *prev = NULL;
        for (m = k->in_head; m && !same_message(&m->info, want); prev = m, m = m->next) {
        }
        if (m) {
            int64_t early = (int64_t)m->deliver_ns - realtime_ns();
            if (early <= 0) { /* due: take it */
                if (prev)
                    prev->next = m->next;
                else
                    k->in_head = m->next;
                if (k->in_tail == m)
                    k->in_tail = prev;
                break;
            }
            /* Shaped: visible at its stamp. */
            int64_t until = now_ms() + (early + 999999) / 1000000;
            wait_until(h, until < stall ? until : stall);
            m = NULL;
            continue;
        }
        if (k->peer_closed) {
            fail(err, n,
                 "receive from %s (step %" PRId64 ", micro-batch %" PRId32 ", tensor %" PRId32
                 "): the peer closed its end without sending it",
                 k->spec.name, want->step, want->micro_batch, want->tensor);
            rc = -1;
            break;
        }
        if (now_ms() >= stall) {
            fail(err, n,
                 "no message from %s (step %" PRId64 ", micro-batch %" PRId32 ", tensor %" PRId32
                 ") within %d ms, and the peer is alive: the programs disagree on the schedule?",
                 k->spec.name, want->step, want->micro_batch, want->tensor, h->opt.stall_timeout_ms);
            rc = -1;
            break;
        }
        wait_until(h, stall);
    }
    pthread_mutex_unlock(&h->mu);
    if (!m)
        return rc;
    if (got ? m->info.length > capacity : m->info.length != want->length) {
        fail(err, n,
             "message from %s (step %" PRId64 ", micro-batch %" PRId32 ", tensor %" PRId32 "): %" PRIu64
             " bytes, expected %s%" PRIu64,
             k->spec.name, want->step, want->micro_batch, want->tensor, m->info.length, got ? "at most " : "",
             got ? capacity : want->length);
        rc = -1;
    } else {
        if (m->info.length)
            memcpy(payload, m->payload, (size_t)m->info.length);
        if (got)
            *got = m->info.length;
    }
    free(m->payload);
    free(m);
    return rc;
}

int fu_hub_recv(fu_hub *h, int32_t peer, const fu_msg_info *want, void *payload, uint64_t capacity, char *err, size_t n)
{
    return hub_recv(h, peer, want, payload, capacity, NULL, err, n);
}

int fu_hub_recv_upto(fu_hub *h, int32_t peer, const fu_msg_info *want, void *payload, uint64_t capacity,
                     uint64_t *length, char *err, size_t n)
{
    return hub_recv(h, peer, want, payload, capacity, length, err, n);
}

int fu_hub_flush(fu_hub *h, char *err, size_t n)
{
    int64_t stall = now_ms() + h->opt.stall_timeout_ms;
    int rc = 0;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        if (h->failed) {
            fail(err, n, "%s", h->error);
            rc = -1;
            break;
        }
        hub_link *busy = NULL;
        for (int i = 0; i < h->n && !busy; i++)
            if (h->links[i].out_head)
                busy = &h->links[i];
        if (!busy)
            break;
        if (busy->peer_closed) {
            fail(err, n,
                 "send to %s (step %" PRId64 ", tensor %" PRId32 "): the peer closed its end before "
                 "acknowledging it",
                 busy->spec.name, busy->out_head->info.step, busy->out_head->info.tensor);
            rc = -1;
            break;
        }
        if (now_ms() >= stall) {
            fail(err, n,
                 "flush: %s has not acknowledged step %" PRId64 ", tensor %" PRId32 " within %d ms, and "
                 "the peer is alive",
                 busy->spec.name, busy->out_head->info.step, busy->out_head->info.tensor, h->opt.stall_timeout_ms);
            rc = -1;
            break;
        }
        wait_until(h, stall);
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

void fu_hub_request_stop(fu_hub *h, int code)
{
    pthread_mutex_lock(&h->mu);
    stop_table_enter(&h->stop, -1, 0, code);
    enter_self(h);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    wake_all(h); /* each I/O thread posts the table ahead of its unsent data */
}

void fu_hub_set_step(fu_hub *h, int64_t step)
{
    pthread_mutex_lock(&h->mu);
    h->cur_step = step;
    pthread_mutex_unlock(&h->mu);
}

int fu_hub_step_done(fu_hub *h, int64_t step, int *code, char *err, size_t n)
{
    pthread_mutex_lock(&h->mu);
    int64_t deadline = now_ms() + h->opt.stall_timeout_ms;
    while (h->stop.code && h->stop.missing > 0 && !h->failed && now_ms() < deadline)
        wait_until(h, deadline);
    int rc = 0;
    if (h->stop.code && h->stop.missing > 0) {
        fail(err, n, "%s", h->failed ? h->error : "a stop was asked for, and not every device answered in time");
        rc = -1;
    } else if (h->stop.code && step >= stop_table_last(&h->stop)) {
        *code = stop_table_code(&h->stop); /* the entries', the same on every device */
        rc = 1;
    } else {
        h->cur_step = step + 1; /* committed: an entry made from now on is at least step + 1 */
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

void fu_hub_abort(fu_hub *h, const char *why)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    if (!h->failed) {
        snprintf(h->error, sizeof h->error, "aborted: %s", why ? why : "(no reason given)");
        snprintf(h->why, sizeof h->why, "%s", why ? why : "");
        h->failed = 1;
        h->aborting = 1;
        h->abort_start_ms = now_ms();
    }
    int64_t deadline = h->abort_start_ms + ABORT_MS + 100;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    wake_all(h);
    wait_for_threads(h, deadline);
}

void fu_hub_close(fu_hub *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stopping = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    wake_all(h);
    /* The threads say bye (or finish telling their abort): bounded by
     * ABORT_MS each, at once. */
    for (int i = 0; i < h->n; i++) {
        hub_link *k = &h->links[i];
        if (k->started)
            pthread_join(k->thread, NULL);
    }
    for (int i = 0; i < h->n; i++) {
        hub_link *k = &h->links[i];
        fu_link_close(k->link);
        free_list(k->out_head);
        free_list(k->in_head);
        if (k->wake[0] >= 0)
            close(k->wake[0]);
        if (k->wake[1] >= 0)
            close(k->wake[1]);
    }
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    stop_table_free(&h->stop);
    free(h->links);
    free(h);
}

int fu_hub_stats(const fu_hub *h, int32_t peer, fu_hub_link_stats *s)
{
    fu_hub *mh = (fu_hub *)h; /* the mutex changes, the hub does not */
    hub_link *k = find(mh, peer, NULL, 0);
    if (!k)
        return -1;
    pthread_mutex_lock(&mh->mu);
    s->bytes = k->bytes_sent;
    s->messages = k->messages_sent;
    s->busy_seconds = k->busy_seconds;
    pthread_mutex_unlock(&mh->mu);
    return 0;
}

int fu_hub_set_bandwidth(fu_hub *h, int32_t peer, double bandwidth)
{
    hub_link *k = find(h, peer, NULL, 0);
    if (!k || !(k->spec.bandwidth > 0 || k->spec.latency > 0) || !(bandwidth > 0))
        return -1;
    pthread_mutex_lock(&h->mu);
    k->bandwidth = bandwidth;
    pthread_mutex_unlock(&h->mu);
    return 0;
}
