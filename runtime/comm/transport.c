/* transport.c: fu_link over nanomsg (NN_PAIR, tcp).  See transport.h for the
 * wire format and the delivery contract.
 *
 * nanomsg facts this file leans on:
 *  - NN_RCVMAXSIZE defaults to 1 MiB and a larger message is dropped without
 *    a word; it is set to -1 (no limit).
 *  - NN_LINGER does nothing, and nn_send returns once the message is queued
 *    to the pipe, not once it arrived: hence the ack.
 *  - nn_send/nn_recv with NN_MSG hand buffers over instead of copying them:
 *    the sender builds header + payload in one nn_allocmsg buffer, the
 *    receiver verifies the buffer nanomsg read into and copies once.
 */
#include "comm/transport.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nanomsg/nn.h>
#include <nanomsg/pair.h>
#include <xxhash.h>

/* A message read while waiting for something else (an ack, a handshake):
 * already verified and acked, waiting for fu_link_recv.  A message that
 * failed verification there is queued as its error text (msg == NULL), so
 * the next recv reports it instead of it vanishing. */
typedef struct pending {
    struct pending *next;
    void           *msg;      /* nanomsg buffer (header + payload), or NULL */
    fu_msg_info     info;
    char            error[200];
} pending;

struct fu_link {
    int      sock;
    int      timeout_ms;
    uint64_t next_seq;        /* seq of the next message we send; starts at 1 */
    pending *head, *tail;
    char     peer[64];
};

static void fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t n, const char *fmt, ...) {
    if (!err || n == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

static int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* ---- wire header ------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

enum { OFF_MAGIC = 0, OFF_VERSION = 4, OFF_KIND = 6, OFF_STEP = 8, OFF_MB = 16, OFF_TENSOR = 20,
       OFF_CODEC = 24, OFF_LENGTH = 32, OFF_SEQ = 40, OFF_CHECKSUM = 48 };

/* The checksum covers the header (its checksum field zeroed) and the payload. */
static uint64_t wire_checksum(const uint8_t *header, const void *payload, uint64_t length) {
    uint8_t h[FU_WIRE_HEADER];
    memcpy(h, header, sizeof h);
    put64(h + OFF_CHECKSUM, 0);
    return XXH3_64bits_withSeed(payload, (size_t)length, XXH3_64bits(h, sizeof h));
}

/* Fills the header at buf; the payload must already follow it. */
static void encode_header(uint8_t *buf, const fu_msg_info *info, uint64_t seq) {
    memset(buf, 0, FU_WIRE_HEADER);
    put32(buf + OFF_MAGIC, FU_WIRE_MAGIC);
    put16(buf + OFF_VERSION, FU_WIRE_VERSION);
    put16(buf + OFF_KIND, (uint16_t)info->kind);
    put64(buf + OFF_STEP, (uint64_t)info->step);
    put32(buf + OFF_MB, (uint32_t)info->micro_batch);
    put32(buf + OFF_TENSOR, (uint32_t)info->tensor);
    put32(buf + OFF_CODEC, (uint32_t)info->codec);
    put64(buf + OFF_LENGTH, info->length);
    put64(buf + OFF_SEQ, seq);
    put64(buf + OFF_CHECKSUM, wire_checksum(buf, buf + FU_WIRE_HEADER, info->length));
}

void *fu_link_encode(const fu_msg_info *info, const void *payload, uint64_t seq, size_t *len) {
    size_t total = FU_WIRE_HEADER + (size_t)info->length;
    uint8_t *buf = malloc(total);
    if (!buf) return NULL;
    if (info->length) memcpy(buf + FU_WIRE_HEADER, payload, (size_t)info->length);
    encode_header(buf, info, seq);
    *len = total;
    return buf;
}

/* Checks a received message; 0 and info/seq filled, or -1 and err. */
static int decode(const fu_link *l, const uint8_t *buf, size_t len, fu_msg_info *info, uint64_t *seq,
                  char *err, size_t n) {
    if (len < FU_WIRE_HEADER) {
        fail(err, n, "message from %s: %zu bytes, shorter than the %d-byte header: dropped", l->peer, len,
             FU_WIRE_HEADER);
        return -1;
    }
    uint32_t magic = get32(buf + OFF_MAGIC);
    if (magic != FU_WIRE_MAGIC) {
        fail(err, n, "message from %s: bad magic 0x%08" PRIx32 " (expected 0x%08x): dropped", l->peer, magic,
             FU_WIRE_MAGIC);
        return -1;
    }
    unsigned version = get16(buf + OFF_VERSION);
    if (version != FU_WIRE_VERSION) {
        fail(err, n, "message from %s: wire version %u, this build speaks %d: dropped", l->peer, version,
             FU_WIRE_VERSION);
        return -1;
    }
    info->kind = get16(buf + OFF_KIND);
    info->step = (int64_t)get64(buf + OFF_STEP);
    info->micro_batch = (int32_t)get32(buf + OFF_MB);
    info->tensor = (int32_t)get32(buf + OFF_TENSOR);
    info->codec = (int32_t)get32(buf + OFF_CODEC);
    info->length = get64(buf + OFF_LENGTH);
    *seq = get64(buf + OFF_SEQ);
    if (info->length != len - FU_WIRE_HEADER) {
        fail(err, n, "message from %s: header says %" PRIu64 " payload bytes, %zu arrived (step %" PRId64
             ", tensor %" PRId32 "): dropped", l->peer, info->length, len - FU_WIRE_HEADER, info->step,
             info->tensor);
        return -1;
    }
    if (get64(buf + OFF_CHECKSUM) != wire_checksum(buf, buf + FU_WIRE_HEADER, info->length)) {
        fail(err, n, "message from %s: checksum mismatch (step %" PRId64 ", tensor %" PRId32 "): dropped",
             l->peer, info->step, info->tensor);
        return -1;
    }
    if (info->kind < MSG_HANDSHAKE || info->kind > MSG_ACK) {
        fail(err, n, "message from %s: unknown kind %" PRIu32 " (step %" PRId64 ", tensor %" PRId32 "): dropped",
             l->peer, info->kind, info->step, info->tensor);
        return -1;
    }
    return 0;
}

/* ---- socket I/O -------------------------------------------------------- */

static int set_timeout(int sock, int option, int64_t ms) {
    int v = ms < 0 ? 0 : ms > 0x7fffffff ? 0x7fffffff : (int)ms;
    return nn_setsockopt(sock, NN_SOL_SOCKET, option, &v, sizeof v);
}

/* Sends the nanomsg buffer msg (ownership passes on success and failure). */
static int send_buffer(fu_link *l, void *msg, int64_t deadline) {
    set_timeout(l->sock, NN_SNDTIMEO, deadline - now_ms());
    for (;;) {
        int rc = nn_send(l->sock, &msg, NN_MSG, 0);
        if (rc >= 0) return 0;
        if (nn_errno() == EINTR) continue;
        int e = nn_errno();
        nn_freemsg(msg);
        errno = e;
        return -1;
    }
}

/* Reads one message until deadline: its length, or -1 with errno. */
static int64_t read_buffer(fu_link *l, void **msg, int64_t deadline) {
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) { errno = ETIMEDOUT; return -1; }
        set_timeout(l->sock, NN_RCVTIMEO, left);
        int rc = nn_recv(l->sock, msg, NN_MSG, 0);
        if (rc >= 0) return rc;
        int e = nn_errno();
        if (e == EINTR) continue;
        errno = e == EAGAIN ? ETIMEDOUT : e;
        return -1;
    }
}

static int send_ack(fu_link *l, const fu_msg_info *of, uint64_t seq) {
    void *m = nn_allocmsg(FU_WIRE_HEADER, 0);
    if (!m) return -1;
    fu_msg_info a = {.kind = MSG_ACK, .step = of->step, .micro_batch = of->micro_batch, .tensor = of->tensor};
    encode_header(m, &a, seq);
    return send_buffer(l, m, now_ms() + l->timeout_ms);
}

static void enqueue(fu_link *l, void *msg, const fu_msg_info *info, const char *error) {
    pending *p = calloc(1, sizeof *p);
    if (!p) { if (msg) nn_freemsg(msg); return; }
    p->msg = msg;
    if (info) p->info = *info;
    if (error) snprintf(p->error, sizeof p->error, "%s", error);
    if (l->tail) l->tail->next = p; else l->head = p;
    l->tail = p;
}

/* Reads until a data message (any kind but ack; kind == want if want != 0)
 * arrives, or deadline.  On 0 *msg is the verified, acked buffer. */
static int read_data(fu_link *l, int64_t deadline, uint32_t want, void **msg, fu_msg_info *info,
                     char *err, size_t n) {
    for (;;) {
        void *m = NULL;
        int64_t len = read_buffer(l, &m, deadline);
        if (len < 0) {
            if (errno == ETIMEDOUT)
                fail(err, n, "no message from %s within %d ms: peer dead or stalled", l->peer, l->timeout_ms);
            else
                fail(err, n, "receiving from %s: %s", l->peer, nn_strerror(errno));
            return -1;
        }
        uint64_t seq;
        if (decode(l, m, (size_t)len, info, &seq, err, n) != 0) { nn_freemsg(m); return -1; }
        if (info->kind == MSG_ACK) { nn_freemsg(m); continue; }   /* stale: its send already gave up */
        send_ack(l, info, seq);   /* a lost ack shows as the sender's timeout */
        if (want && info->kind != want) { enqueue(l, m, info, NULL); continue; }
        *msg = m;
        return 0;
    }
}

int fu_link_send(fu_link *l, const fu_msg_info *info, const void *payload, char *err, size_t n) {
    int64_t deadline = now_ms() + l->timeout_ms;
    uint64_t seq = l->next_seq++;
    void *m = nn_allocmsg(FU_WIRE_HEADER + (size_t)info->length, 0);
    if (!m) {
        fail(err, n, "send to %s: cannot allocate %" PRIu64 " bytes", l->peer, info->length);
        return -1;
    }
    if (info->length) memcpy((uint8_t *)m + FU_WIRE_HEADER, payload, (size_t)info->length);
    encode_header(m, info, seq);
    if (send_buffer(l, m, deadline) != 0) {
        if (errno == ETIMEDOUT || errno == EAGAIN)
            fail(err, n, "send to %s: not accepted within %d ms (step %" PRId64 ", tensor %" PRId32
                 "): peer not connected", l->peer, l->timeout_ms, info->step, info->tensor);
        else
            fail(err, n, "send to %s: %s", l->peer, nn_strerror(errno));
        return -1;
    }
    /* Wait for our ack.  The peer may be sending too: its data messages are
     * verified, acked and queued for fu_link_recv. */
    for (;;) {
        void *r = NULL;
        int64_t len = read_buffer(l, &r, deadline);
        if (len < 0) {
            if (errno == ETIMEDOUT)
                fail(err, n, "send to %s: no ack within %d ms (step %" PRId64 ", tensor %" PRId32
                     "): peer dead or stalled", l->peer, l->timeout_ms, info->step, info->tensor);
            else
                fail(err, n, "send to %s: waiting for ack: %s", l->peer, nn_strerror(errno));
            return -1;
        }
        fu_msg_info got;
        uint64_t got_seq;
        char why[200];
        if (decode(l, r, (size_t)len, &got, &got_seq, why, sizeof why) != 0) {
            nn_freemsg(r);
            enqueue(l, NULL, NULL, why);
            continue;
        }
        if (got.kind == MSG_ACK) {
            nn_freemsg(r);
            if (got_seq == seq) return 0;
            continue;                         /* ack of an earlier, timed-out send */
        }
        send_ack(l, &got, got_seq);
        enqueue(l, r, &got, NULL);
    }
}

int fu_link_recv(fu_link *l, fu_msg_info *info, void *payload, uint64_t capacity, char *err, size_t n) {
    void *m = NULL;
    if (l->head) {
        pending *p = l->head;
        l->head = p->next;
        if (!l->head) l->tail = NULL;
        m = p->msg;
        *info = p->info;
        if (!m) fail(err, n, "%s", p->error);
        free(p);
        if (!m) return -1;
    } else if (read_data(l, now_ms() + l->timeout_ms, 0, &m, info, err, n) != 0) {
        return -1;
    }
    /* It is acked already: verified bytes are delivered bytes.  A buffer that
     * is too small is the caller's bug, reported, the message lost. */
    if (info->length > capacity) {
        fail(err, n, "message from %s: %" PRIu64 " bytes do not fit the %" PRIu64 "-byte buffer (step %" PRId64
             ", tensor %" PRId32 "): dropped", l->peer, info->length, capacity, info->step, info->tensor);
        nn_freemsg(m);
        return -1;
    }
    if (info->length) memcpy(payload, (uint8_t *)m + FU_WIRE_HEADER, (size_t)info->length);
    nn_freemsg(m);
    return 0;
}

int fu_link_send_raw(fu_link *l, const void *bytes, size_t len, char *err, size_t n) {
    void *m = nn_allocmsg(len, 0);
    if (!m) { fail(err, n, "send to %s: cannot allocate %zu bytes", l->peer, len); return -1; }
    memcpy(m, bytes, len);
    if (send_buffer(l, m, now_ms() + l->timeout_ms) != 0) {
        fail(err, n, "send to %s: %s", l->peer, nn_strerror(errno));
        return -1;
    }
    return 0;
}

const char *fu_link_peer(const fu_link *l) { return l->peer; }

void fu_link_close(fu_link *l) {
    if (!l) return;
    while (l->head) {
        pending *p = l->head;
        l->head = p->next;
        if (p->msg) nn_freemsg(p->msg);
        free(p);
    }
    nn_close(l->sock);
    free(l);
}

/* ---- setup ------------------------------------------------------------- */

static fu_link *open_link(const char *url, const char *peer_name, int timeout_ms, int server,
                          char *err, size_t n) {
    fu_link *l = calloc(1, sizeof *l);
    if (!l) { fail(err, n, "link to %s: out of memory", peer_name); return NULL; }
    snprintf(l->peer, sizeof l->peer, "%s", peer_name);
    l->timeout_ms = timeout_ms;
    l->next_seq = 1;
    l->sock = nn_socket(AF_SP, NN_PAIR);
    if (l->sock < 0) {
        fail(err, n, "link to %s: nn_socket: %s", l->peer, nn_strerror(nn_errno()));
        free(l);
        return NULL;
    }
    int unlimited = -1, reconnect_ms = 20;
    /* Socket buffers above nanomsg's 128 KiB default, for big tensors; the
     * effect is not measured apart yet (bench/bench_transport.c). */
    int buf = 4 << 20;
    nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &unlimited, sizeof unlimited);
    nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_RECONNECT_IVL, &reconnect_ms, sizeof reconnect_ms);
    nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_SNDBUF, &buf, sizeof buf);
    nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_RCVBUF, &buf, sizeof buf);
    set_timeout(l->sock, NN_SNDTIMEO, timeout_ms);
    set_timeout(l->sock, NN_RCVTIMEO, timeout_ms);
    int rc = server ? nn_bind(l->sock, url) : nn_connect(l->sock, url);
    if (rc < 0) {
        int e = nn_errno();
        fail(err, n, "link to %s: cannot %s %s: %s", l->peer, server ? "listen on" : "connect to", url,
             nn_strerror(e));
        nn_close(l->sock);
        free(l);
        errno = e;   /* EADDRINUSE: the caller may pick another port */
        return NULL;
    }
    /* Handshake: each side sends one (acked) and reads the other's; a peer
     * speaking another wire version is rejected by decode. */
    fu_msg_info hs = {.kind = MSG_HANDSHAKE};
    char why[200];
    if (fu_link_send(l, &hs, NULL, why, sizeof why) != 0) {
        fail(err, n, "handshake with %s at %s: %s", l->peer, url, why);
        goto bad;
    }
    /* The peer's handshake may already be queued (it arrived during our send). */
    for (pending *p = l->head, *prev = NULL; p; prev = p, p = p->next) {
        if (p->msg && p->info.kind == MSG_HANDSHAKE) {
            if (prev) prev->next = p->next; else l->head = p->next;
            if (l->tail == p) l->tail = prev;
            nn_freemsg(p->msg);
            free(p);
            return l;
        }
    }
    void *m = NULL;
    fu_msg_info got;
    if (read_data(l, now_ms() + timeout_ms, MSG_HANDSHAKE, &m, &got, why, sizeof why) != 0) {
        fail(err, n, "handshake with %s at %s: %s", l->peer, url, why);
        goto bad;
    }
    nn_freemsg(m);
    return l;
bad:
    fu_link_close(l);
    errno = ETIMEDOUT;
    return NULL;
}

fu_link *fu_link_listen(const char *url, const char *peer_name, int timeout_ms, char *err, size_t n) {
    return open_link(url, peer_name, timeout_ms, 1, err, n);
}

fu_link *fu_link_connect(const char *url, const char *peer_name, int timeout_ms, char *err, size_t n) {
    return open_link(url, peer_name, timeout_ms, 0, err, n);
}
