/* transport_open.c: a link's socket and its opening (transport.h):
 * nanomsg's options, the plain handshake (a number, to spot a TCP
 * self-connect) and the sealed one (comm/seal.h), the retries, and
 * fu_link_open / _listen / _connect.  The frames and the loop are
 * transport.c's. */
#include "comm/transport_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nanomsg/nn.h>
#include <nanomsg/pair.h>
#include <nanomsg/tcp.h>
#include <sodium.h>

/* ---- setup ------------------------------------------------------------- */

/* glibc adapts its mmap threshold upwards (and the trim threshold to twice
 * that) each time a mapped block is freed, up to 32 MiB (64 MiB); this sets
 * them there at once, for the whole process, so that frame buffers are
 * reused instead of being mapped or trimmed and faulted in again.  A
 * process that chose its own thresholds (GLIBC_TUNABLES or MALLOC_*_
 * variables) keeps them.  The cost: each malloc arena may keep up to 64 MiB
 * of freed memory instead of returning it to the kernel. */
static void tune_malloc(void)
{
#ifdef __GLIBC__
    const char *tunables = getenv("GLIBC_TUNABLES");
    if ((tunables && strstr(tunables, "glibc.malloc.")) || getenv("MALLOC_MMAP_THRESHOLD_") ||
        getenv("MALLOC_TRIM_THRESHOLD_"))
        return;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

/* Drops the socket and everything read or queued on it (a self-connected
 * attempt, below). */
static void reset_link(fu_link *l)
{
    l->dst = NULL;
    while (l->head)
        link_free_pending(l, link_dequeue(l));
    while (l->ctl_head) {
        control *c = l->ctl_head;
        l->ctl_head = c->next;
        nn_freemsg(c->msg);
        free(c);
    }
    l->ctl_tail = NULL;
    link_reset_out(l);
    link_drop_incoming(l);
    l->n_acked = l->n_control_waiting = 0;
    if (l->sock >= 0)
        nn_close(l->sock);
    l->sock = -1;
    l->sealed = 0;
    l->sealed_slot = NULL;
    l->broken[0] = '\0';
    memset(&l->seal, 0, sizeof l->seal);
}

/* A fresh NN_PAIR socket, bound to or connecting to url; 0, or -1 with err
 * and errno. */
static int open_socket(fu_link *l, const char *url, int listen, char *err, size_t n)
{
    l->sock = nn_socket(AF_SP, NN_PAIR);
    if (l->sock < 0) {
        int e = nn_errno();
        fail(err, n, "link to %s: nn_socket: %s", l->peer, nn_strerror(e));
        errno = e;
        return -1;
    }
    int unlimited = -1, reconnect_ms = 20;
    /* Socket buffers above nanomsg's 128 KiB default, for big tensors; the
     * effect is not measured apart yet (bench/bench_transport.c). */
    int buf = 4 << 20;
    /* A sealed link bounds what one message may claim to be (a frame and its
     * seal): a huge length prefix from a stranger closes that connection
     * instead of allocating what it says. */
    int frame_max = FU_WIRE_FRAME + FU_WIRE_HEADER + FU_SEAL_OVERHEAD;
    if (l->auth)
        nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &frame_max, sizeof frame_max);
    else
        nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &unlimited, sizeof unlimited);
    nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_RECONNECT_IVL, &reconnect_ms, sizeof reconnect_ms);
    nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_SNDBUF, &buf, sizeof buf);
    nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_RCVBUF, &buf, sizeof buf);
    /* Small messages (acks, heartbeats, a scalar) must leave at once:
     * Nagle's algorithm against the peer's delayed ack costs 40 ms each. */
    int nodelay = 1;
    nn_setsockopt(l->sock, NN_TCP, NN_TCP_NODELAY, &nodelay, sizeof nodelay);
    size_t rsz = sizeof l->rcvfd, ssz = sizeof l->sndfd;
    if (nn_getsockopt(l->sock, NN_SOL_SOCKET, NN_RCVFD, &l->rcvfd, &rsz) < 0 ||
        nn_getsockopt(l->sock, NN_SOL_SOCKET, NN_SNDFD, &l->sndfd, &ssz) < 0) {
        int e = nn_errno();
        fail(err, n, "link to %s: nanomsg descriptors: %s", l->peer, nn_strerror(e));
        errno = e;
        return -1;
    }
    int rc = listen ? nn_bind(l->sock, url) : nn_connect(l->sock, url);
    if (rc < 0) {
        int e = nn_errno();
        fail(err, n, "link to %s: cannot %s %s: %s", l->peer, listen ? "listen on" : "connect to", url, nn_strerror(e));
        errno = e; /* EADDRINUSE: the caller may pick another port */
        return -1;
    }
    return 0;
}

/* Whether the connection that carries this attempt's handshake is gone, so
 * that the attempt must start again on a fresh socket.
 *  - Connecting: our hello went out on the first connection; nanomsg makes
 *    a lost one again by itself, in milliseconds, and our hello is gone
 *    with it.  A connection counts as broken once TCP connected, so this
 *    also catches one the listener refused at its SP header.
 *  - Listening, before our hello is out: nothing of ours can be lost, and
 *    a connection that comes and goes (a stranger, a peer starting again)
 *    needs no fresh socket.  Closing the port then would kill the peer's
 *    next connection, already on its way: the two ends could chase each
 *    other's restarts until the deadline.
 *  - Listening, after our hello: the connection that brought the peer's
 *    hello is our only one (NN_PAIR takes one at a time).
 * CURRENT_CONNECTIONS counts a connection only once its SP header is
 * exchanged, while ACCEPTED and ESTABLISHED count it at TCP connect: "had
 * one, none now" is true in between too, so it cannot mean "closed". */
static int handshake_connection_lost(fu_link *l, int listen, int first)
{
    if (!listen)
        return nn_get_statistic(l->sock, NN_STAT_BROKEN_CONNECTIONS) > 0 ||
               nn_get_statistic(l->sock, NN_STAT_ESTABLISHED_CONNECTIONS) > 1;
    return !first && nn_get_statistic(l->sock, NN_STAT_CURRENT_CONNECTIONS) == 0;
}

/* The next hello (MSG_HANDSHAKE) of a sealed handshake, taken off the
 * queue; NULL with *rc: 2 refused (why: a frame that does not open, an
 * error, or, listening, a connection silent for HS_SILENT_MS), 3 the
 * connection closed during the handshake (whatever of ours it took, a
 * fresh socket must start again: a stranger who connects, takes our hello
 * and leaves must not leave the right peer a handshake half done), -1
 * the deadline or cancel_fd (errno). */
#define HS_SILENT_MS 5000
static pending *next_hello(fu_link *l, int listen, int first, int64_t deadline, int cancel_fd, int *rc, char *why,
                           size_t n)
{
    int64_t connected_since = 0;
    for (;;) {
        for (pending *p = l->head, *prev = NULL; p; prev = p, p = p->next) {
            /* Garbage before the peer's hello is a stranger's or a stale
             * connection's: start again; after it, a refusal. */
            if (p->is_error) {
                snprintf(why, n, "%s", p->error);
                *rc = first ? 3 : 2;
                return NULL;
            }
            if (p->info.kind != MSG_HANDSHAKE)
                continue;
            if (prev)
                prev->next = p->next;
            else
                l->head = p->next;
            if (l->tail == p)
                l->tail = prev;
            return p;
        }
        int64_t limit = deadline;
        if (handshake_connection_lost(l, listen, first)) {
            snprintf(why, n, "the connection closed during the handshake");
            *rc = 3;
            return NULL;
        }
        if (limit > now_ms() + 200)
            limit = now_ms() + 200; /* to look at the connections again */
        if (listen) {               /* a stranger that connects and says nothing must not hold the port */
            if (nn_get_statistic(l->sock, NN_STAT_CURRENT_CONNECTIONS) > 0) {
                if (!connected_since)
                    connected_since = now_ms();
                if (now_ms() - connected_since >= HS_SILENT_MS) {
                    snprintf(why, n, "a connection sent no handshake within %d ms", HS_SILENT_MS);
                    *rc = 2;
                    return NULL;
                }
            } else
                connected_since = 0;
        }
        int r = link_pump(l, limit, cancel_fd, why, n);
        if (r > 0)
            continue;
        if (r < 0) {
            *rc = 2;
            return NULL;
        }
        int64_t t = now_ms();
        if (t >= deadline) {
            errno = ETIMEDOUT;
            *rc = -1;
            snprintf(why, n, "no handshake within the time allowed");
            return NULL;
        }
        if (t < limit && cancel_fd >= 0 && poll(&(struct pollfd){ .fd = cancel_fd, .events = POLLIN }, 1, 0) > 0) {
            errno = ECANCELED;
            *rc = -1;
            snprintf(why, n, "cancelled");
            return NULL;
        }
    }
}

/* A sealed handshake on l's socket (seal.h): 0 sealed and confirmed; 1 a
 * TCP self-connect; 2 refused at the hello (why: the peer's own claims:
 * another build, epoch or name); 3 the connection closed half-way; 4
 * refused at the confirmation (another secret, or the two ends' hellos of
 * different attempts: a connection that came and went in between); -1
 * timed out or cancelled (errno). */
static int sealed_handshake(fu_link *l, int listen, int64_t deadline, int cancel_fd, char *why, size_t n)
{
    fu_hs hs;
    fu_hs_start(&hs, l->auth, l->peer);
    wire_header w = { .info = { .kind = MSG_HANDSHAKE, .length = FU_HS_BYTES }, .seq = l->next_seq++ };
    void *m = link_build_frame(l, &w, hs.hello, 0); /* plain: no keys yet */
    if (!m) {
        snprintf(why, n, "out of memory");
        return 2;
    }
    /* The connector speaks first; the listener answers the hello it got,
     * on the connection it came by (a stranger's connection, come and
     * gone, never takes the listener's hello). */
    if (!listen)
        link_queue_control(l, m);
    int rc = 2;
    pending *p = next_hello(l, listen, 1, deadline, cancel_fd, &rc, why, n);
    if (listen && p)
        link_queue_control(l, m);
    else if (listen)
        nn_freemsg(m);
    if (!p) {
        sodium_memzero(hs.sk, sizeof hs.sk);
        return rc;
    }
    if (fu_hs_is_own(&hs, p->data, (size_t)p->info.length)) {
        sodium_memzero(hs.sk, sizeof hs.sk);
        link_free_pending(l, p);
        return 1;
    }
    /* Our hello must be on the wire before anything sealed follows it; and
     * nothing more may be read before the keys are in (the peer's sealed
     * confirmation may already be on its way): send only. */
    while (l->ctl_head && now_ms() < deadline) {
        if (link_send_some(l, why, n) != 0)
            return 2;
        if (l->ctl_head)
            poll(&(struct pollfd){ .fd = l->sndfd, .events = POLLIN }, 1, 10);
    }
    uint8_t transcript[32];
    fu_seal keys;
    int ok =
        fu_hs_finish(&hs, l->auth, l->peer, p->data, (size_t)p->info.length, listen, &keys, transcript, why, n) == 0;
    link_free_pending(l, p);
    if (!ok || l->ctl_head) {
        if (ok)
            snprintf(why, n, "the hello could not be sent");
        return 2;
    }
    l->seal = keys;
    l->sealed = 1;
    sodium_memzero(&keys, sizeof keys);
    /* The confirmation: the transcript, sealed; the peer's opens only under
     * the same secret and the same two hellos. */
    w = (wire_header){ .info = { .kind = MSG_HANDSHAKE, .length = sizeof transcript }, .seq = l->next_seq++ };
    if (!(m = link_build_frame(l, &w, transcript, 0))) {
        snprintf(why, n, "out of memory");
        return 2;
    }
    link_queue_control(l, m);
    if (!(p = next_hello(l, listen, 0, deadline, cancel_fd, &rc, why, n))) {
        if (rc == 2 && strstr(why, "does not authenticate"))
            snprintf(why, n, "the peer does not hold this run's secret (its confirmation does not open)");
        return rc == 2 ? 4 : rc;
    }
    ok = p->info.length == sizeof transcript && memcmp(p->data, transcript, sizeof transcript) == 0;
    link_free_pending(l, p);
    if (!ok) {
        snprintf(why, n, "the peer's confirmation does not match the handshake");
        return 4;
    }
    link_flush_control(l, deadline);
    return 0;
}

fu_link *fu_link_open(const char *url, int listen, const char *peer_name, int timeout_ms, int cancel_fd, char *err,
                      size_t n)
{
    return fu_link_open_sealed(url, listen, peer_name, timeout_ms, cancel_fd, NULL, err, n);
}

fu_link *fu_link_open_sealed(const char *url, int listen, const char *peer_name, int timeout_ms, int cancel_fd,
                             const fu_link_auth *auth, char *err, size_t n)
{
    static pthread_once_t tuned = PTHREAD_ONCE_INIT;
    pthread_once(&tuned, tune_malloc);
    fu_link *l = calloc(1, sizeof *l);
    if (!l) {
        fail(err, n, "link to %s: out of memory", peer_name);
        errno = ENOMEM;
        return NULL;
    }
    snprintf(l->peer, sizeof l->peer, "%s", peer_name);
    snprintf(l->url, sizeof l->url, "%s", url);
    l->auth = auth;
    if (auth && fu_seal_init() != 0) {
        fail(err, n, "link to %s: libsodium did not start", peer_name);
        free(l);
        errno = EIO;
        return NULL;
    }
    l->sock = -1;
    l->timeout_ms = timeout_ms;
    l->next_seq = 1;
    l->last_heard_ms = now_ms();
    l->hash = XXH3_createState();
    if (!l->hash) {
        fail(err, n, "link to %s: out of memory", l->peer);
        fu_link_close(l);
        errno = ENOMEM;
        return NULL;
    }
    /* The handshake carries a number of this link's own: a connect to a
     * loopback port nobody listens on can connect the socket to itself (TCP
     * self-connect, when the port is in the ephemeral range), and then what
     * comes back is our own handshake.  Such an attempt is dropped (which
     * frees the port for the real peer) and the connect starts over. */
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t seeds[3] = { (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec, (uint64_t)(uintptr_t)l,
                          (uint64_t)now_ms() };
    uint8_t nonce[8];
    put64(nonce, XXH3_64bits(seeds, sizeof seeds));
    int64_t deadline = now_ms() + timeout_ms;
    char why[200], refused[240] = "", restarted[240] = "";
    int refusals = 0, restarts = 0;
    for (;;) {
        if (open_socket(l, url, listen, err, n) != 0) {
            int e = errno;
            fu_link_close(l);
            errno = e;
            return NULL;
        }
        if (auth) {
            int rc = sealed_handshake(l, listen, deadline, cancel_fd, why, sizeof why);
            if (rc == 0)
                return l;
            /* Listening, a refusal leaves the port open for the right peer;
             * connecting, a confirmation that failed is tried again on a
             * fresh socket (it may be a race, not a wrong secret), the
             * last reason kept for the deadline.  Said for the first three
             * and then every fiftieth. */
            if (rc == 4 || (rc == 2 && listen)) {
                if (++refusals <= 3 || refusals % 50 == 0)
                    fprintf(stderr, "fusion: link with %s on %s: %s: %s\n", l->peer, url,
                            listen ? "refused a connection" : "the handshake failed, trying again", why);
                snprintf(refused, sizeof refused, "%s", why);
                if (!listen)
                    usleep(100 * 1000);
            }
            if (rc == 3) {
                restarts++;
                snprintf(restarted, sizeof restarted, "%s", why);
            }
            if (rc == 1 || rc == 3 || rc == 4 || (rc == 2 && listen)) {
                reset_link(l);
                continue;
            }
            int e = rc == 2 ? EPROTO : errno;
            if (rc == -1 && refused[0] && e == ETIMEDOUT) {
                fail(err, n,
                     "handshake with %s at %s: no peer completed it within %d ms; the last one was refused: "
                     "%s",
                     l->peer, url, timeout_ms, refused);
                e = EPROTO;
            } else if (rc == -1 && restarts && e == ETIMEDOUT) {
                /* Connections came, but none lasted the handshake: say so
                 * (not "did not connect"), with how often and why. */
                fail(err, n,
                     "handshake with %s at %s: no peer completed it within %d ms; it started again %d "
                     "time%s, the last because %s",
                     l->peer, url, timeout_ms, restarts, restarts == 1 ? "" : "s", restarted);
                e = EPROTO;
            } else {
                fail(err, n, "handshake with %s at %s: %s%s", l->peer, url, why, rc == 2 ? ": refused" : "");
            }
            fu_link_close(l);
            errno = e;
            return NULL;
        }
        /* Handshake: each side sends one (acked) and reads the other's; a
         * peer speaking another wire version is rejected by decode. */
        fu_msg_info hs = { .kind = MSG_HANDSHAKE, .length = sizeof nonce };
        if (link_send_wait(l, &hs, nonce, deadline, timeout_ms, cancel_fd, why, sizeof why) != 0) {
            int e = errno;
            fail(err, n, "handshake with %s at %s: %s", l->peer, url, why);
            fu_link_close(l);
            errno = e;
            return NULL;
        }
        /* The peer's handshake may already be queued (it arrived during our
         * send); anything else that came first stays queued for recv. */
        int self = 0;
        while (!self) {
            for (pending *p = l->head, *prev = NULL; p; prev = p, p = p->next) {
                if (p->is_error) {
                    fail(err, n, "handshake with %s at %s: %s", l->peer, url, p->error);
                    fu_link_close(l);
                    errno = EPROTO;
                    return NULL;
                }
                if (p->info.kind != MSG_HANDSHAKE)
                    continue;
                self = p->info.length == sizeof nonce && memcmp(p->data, nonce, sizeof nonce) == 0;
                if (self)
                    break;
                if (prev)
                    prev->next = p->next;
                else
                    l->head = p->next;
                if (l->tail == p)
                    l->tail = prev;
                link_free_pending(l, p);
                link_flush_control(l, deadline);
                return l;
            }
            if (self)
                break;
            int rc = link_pump(l, deadline, cancel_fd, why, sizeof why);
            if (rc > 0)
                continue;
            int e = rc < 0 ? EIO : now_ms() < deadline ? ECANCELED : ETIMEDOUT;
            if (e == ETIMEDOUT)
                fail(why, sizeof why, "no message from %s within %d ms: peer dead or stalled", l->peer, timeout_ms);
            else if (e == ECANCELED)
                fail(why, sizeof why, "cancelled");
            fail(err, n, "handshake with %s at %s: %s", l->peer, url, why);
            fu_link_close(l);
            errno = e;
            return NULL;
        }
        reset_link(l); /* connected to itself: drop the socket, try again */
    }
}

fu_link *fu_link_listen(const char *url, const char *peer_name, int timeout_ms, char *err, size_t n)
{
    return fu_link_open(url, 1, peer_name, timeout_ms, -1, err, n);
}

fu_link *fu_link_connect(const char *url, const char *peer_name, int timeout_ms, char *err, size_t n)
{
    return fu_link_open(url, 0, peer_name, timeout_ms, -1, err, n);
}
