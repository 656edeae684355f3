/* transport.c: fu_link over nanomsg (NN_PAIR, tcp).  See transport.h for the
 * wire format and the delivery contract.
 *
 * Everything runs through one loop, pump(): send what the socket takes
 * (control messages first, then the next frame of the data message being
 * sent), read and verify what arrived (acking completed messages), and
 * otherwise sleep in poll() on nanomsg's readiness descriptors.  The
 * blocking calls (fu_link_send, fu_link_recv, the handshake) are that loop
 * with a deadline; fu_link_poll is one turn of it with an event out.
 *
 * nanomsg facts this file leans on:
 *  - NN_RCVMAXSIZE defaults to 1 MiB and a larger message is dropped without
 *    a word; it is set to -1 (no limit).
 *  - NN_LINGER does nothing, and nn_send returns once the message is queued
 *    to the pipe, not once it arrived: hence the ack.
 *  - An NN_PAIR socket holds one outgoing and one incoming message in its
 *    pipe; nn_send(NN_DONTWAIT) fails with EAGAIN until the previous one is
 *    written, and leaves an NN_MSG buffer with the caller when it fails.
 *    Sending without ever blocking, and reading whenever something arrived,
 *    is what keeps two sides that both send large tensors from waiting on
 *    each other.
 *  - NN_SNDFD / NN_RCVFD are descriptors that poll() reports readable while
 *    the socket can send / has a message.
 *  - nn_send/nn_recv with NN_MSG hand buffers over instead of copying them:
 *    the sender builds header + payload in one nn_allocmsg buffer per frame,
 *    the receiver verifies the buffer nanomsg read into and copies once.
 *  - nanomsg allocates a buffer per message it receives (in its worker
 *    thread's malloc arena) and frees each buffer it sent.  At glibc's
 *    default thresholds that churn hands memory back to the kernel and
 *    faults it in afresh all the time: a buffer above the mmap threshold
 *    is mapped and unmapped per message, and a heap whose free top grows
 *    past the trim threshold is trimmed.  Page faults, not copies, were
 *    most of the cost of a 64 MiB tensor (bench/bench_transport.c).  So
 *    the first link pins both thresholds (tune_malloc) and messages travel
 *    as frames of FU_WIRE_FRAME bytes, which stay in cache between the
 *    socket and the copy.
 */
#include "comm/transport.h"
#include "comm/seal.h"
#include "comm/wire_util.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nanomsg/nn.h>
#include <nanomsg/pair.h>
#include <nanomsg/tcp.h>
#include <sodium.h>
#include <xxhash.h>

/* Copying and checksumming go block by block, so the checksum reads bytes
 * the copy just brought into cache. */
#define COPY_BLOCK (128u << 10)

/* A message (or an error) waiting for fu_link_recv / fu_link_poll: read
 * while waiting for something else, already verified and acked.  A message
 * that failed verification is queued as its error text, so the next recv
 * reports it instead of it vanishing. */
typedef struct pending {
    struct pending *next;
    fu_msg_info     info;
    uint8_t        *data;         /* info.length bytes (malloc'd, or the user's buffer: see dst) */
    uint64_t        deliver_ns;
    int             is_error;
    char            error[200];
} pending;

/* An outgoing control message (ack, heartbeat, abort): one whole frame. */
typedef struct control {
    struct control *next;
    void           *msg;          /* nanomsg buffer */
} control;

enum { OUT_IDLE, OUT_SENDING, OUT_WAIT_ACK };

struct fu_link {
    int      sock, rcvfd, sndfd;
    /* Sealing (seal.h), when opened with a run secret: frames are sealed
     * from the confirmation on, each as it is handed to the socket (the
     * counter is the order on the wire); sealed_slot is a frame sealed but
     * not yet taken by the socket, which must go next. */
    const fu_link_auth *auth;
    fu_seal  seal;
    int      sealed;
    void   **sealed_slot;
    char     url[256];
    uint64_t dropped;             /* frames refused (did not open): the link closes at the first */
    char     broken[240];         /* why it closed: every later call fails with it */
    int      timeout_ms;
    uint64_t next_seq;            /* seq of the next message we send; starts at 1 */
    char     peer[64];
    XXH3_state_t *hash;
    int64_t  last_heard_ms;
    unsigned happened;            /* bumped whenever a caller may want to look (see pump) */

    pending *head, *tail;         /* complete messages and errors, in arrival order */
    control *ctl_head, *ctl_tail; /* control frames to send before the next data frame */

    /* The data message being sent. */
    struct {
        int            state;     /* OUT_* */
        int            report;    /* fu_link_post: report the ack as an event */
        fu_msg_info    info;
        const uint8_t *payload;   /* borrowed from the caller until acked */
        uint64_t       seq, deliver_ns;
        uint32_t       next_frame, frames;
        void          *ready;     /* next frame, built but not yet taken by the socket */
    } out;

    /* The data message being received, frame by frame. */
    struct {
        int         active;
        fu_msg_info info;
        uint64_t    seq, deliver_ns;
        uint32_t    next_frame, frames;
        uint8_t    *data;
        int         data_is_dst;
        uint64_t    skip_seq;     /* a dropped message whose later frames are dropped silently */
    } in;

    /* fu_link_recv's buffer, while it waits: the next message that fits is
     * assembled there directly instead of in a buffer of its own. */
    uint8_t *dst;
    uint64_t dst_capacity;

    /* Acks of fu_link_post / fu_link_post_control to report. */
    uint64_t acked[16];
    int      n_acked;
    uint64_t control_waiting[8];  /* acked control posts not acked yet */
    int      n_control_waiting;
};

/* ---- wire header ------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

enum { OFF_MAGIC = 0, OFF_VERSION = 4, OFF_KIND = 6, OFF_STEP = 8, OFF_MB = 16, OFF_TENSOR = 20,
       OFF_CODEC = 24, OFF_FRAME = 28, OFF_LENGTH = 32, OFF_SEQ = 40, OFF_CHECKSUM = 48, OFF_DELIVER = 56 };

typedef struct {
    fu_msg_info info;
    uint64_t    seq, deliver_ns;
    uint32_t    frame;
} wire_header;

static uint64_t frames_of(uint64_t length) {
    return length == 0 ? 1 : length / FU_WIRE_FRAME + (length % FU_WIRE_FRAME != 0);
}

/* Payload bytes frame `frame` of a `length`-byte message carries. */
static size_t frame_bytes(uint64_t length, uint32_t frame) {
    uint64_t off = (uint64_t)frame * FU_WIRE_FRAME;
    if (off >= length) return 0;
    return (size_t)(length - off < FU_WIRE_FRAME ? length - off : FU_WIRE_FRAME);
}

/* Writes the header fields (checksum zero) and returns the checksum seed. */
static uint64_t put_header(uint8_t *buf, const wire_header *w) {
    memset(buf, 0, FU_WIRE_HEADER);
    put32(buf + OFF_MAGIC, FU_WIRE_MAGIC);
    put16(buf + OFF_VERSION, FU_WIRE_VERSION);
    put16(buf + OFF_KIND, (uint16_t)w->info.kind);
    put64(buf + OFF_STEP, (uint64_t)w->info.step);
    put32(buf + OFF_MB, (uint32_t)w->info.micro_batch);
    put32(buf + OFF_TENSOR, (uint32_t)w->info.tensor);
    put32(buf + OFF_CODEC, (uint32_t)w->info.codec);
    put32(buf + OFF_FRAME, w->frame);
    put64(buf + OFF_LENGTH, w->info.length);
    put64(buf + OFF_SEQ, w->seq);
    put64(buf + OFF_DELIVER, w->deliver_ns);
    return XXH3_64bits(buf, FU_WIRE_HEADER);
}

/* The checksum seed of a received header: its hash with the checksum zeroed. */
static uint64_t header_seed(const uint8_t *header) {
    uint8_t h[FU_WIRE_HEADER];
    memcpy(h, header, sizeof h);
    put64(h + OFF_CHECKSUM, 0);
    return XXH3_64bits(h, sizeof h);
}

/* XXH3_64bits_withSeed(src, len, seed), copying src to dst on the way when
 * dst is not NULL (block by block, while the bytes are in cache). */
static uint64_t copy_and_hash(XXH3_state_t *st, uint8_t *dst, const uint8_t *src, size_t len, uint64_t seed) {
    if (len <= COPY_BLOCK) {
        if (dst && len) memcpy(dst, src, len);
        return XXH3_64bits_withSeed(src, len, seed);
    }
    XXH3_64bits_reset_withSeed(st, seed);
    for (size_t off = 0; off < len; off += COPY_BLOCK) {
        size_t k = len - off < COPY_BLOCK ? len - off : COPY_BLOCK;
        if (dst) memcpy(dst + off, src + off, k);
        XXH3_64bits_update(st, src + off, k);
    }
    return XXH3_64bits_digest(st);
}

/* One frame as a nanomsg buffer, its payload copied from payload + the
 * frame's offset; NULL when out of memory. */
static void *build_frame(fu_link *l, const wire_header *w, const uint8_t *payload, int defer) {
    size_t k = frame_bytes(w->info.length, w->frame);
    /* A sealed link's frame has room for the counter and the tag around it
     * (the handshake's hello, built before the keys, goes plain), and no
     * checksum: the tag authenticates it.  defer (a data frame, whose
     * payload the caller keeps until it is acked): the payload is not
     * copied here but sealed straight from the tensor into the frame as
     * it goes to the socket (send_some). */
    size_t pre = l->sealed ? FU_SEAL_PREFIX : 0, post = l->sealed ? FU_SEAL_TAG : 0;
    uint8_t *buf = nn_allocmsg(pre + FU_WIRE_HEADER + k + post, 0);
    if (!buf) return NULL;
    uint8_t *m = buf + pre;
    uint64_t seed = put_header(m, w);
    const uint8_t *src = payload ? payload + (uint64_t)w->frame * FU_WIRE_FRAME : NULL;
    if (!l->sealed)
        put64(m + OFF_CHECKSUM, copy_and_hash(l->hash, m + FU_WIRE_HEADER, src, k, seed));
    else if (!defer && src && k)
        memcpy(m + FU_WIRE_HEADER, src, k);
    return buf;
}

void *fu_link_encode(const fu_msg_info *info, const void *payload, uint64_t seq, size_t *len) {
    if (frames_of(info->length) != 1) return NULL;
    size_t total = FU_WIRE_HEADER + (size_t)info->length;
    uint8_t *buf = malloc(total);
    if (!buf) return NULL;
    wire_header w = {.info = *info, .seq = seq};
    uint64_t seed = put_header(buf, &w);
    if (info->length) memcpy(buf + FU_WIRE_HEADER, payload, (size_t)info->length);
    put64(buf + OFF_CHECKSUM, XXH3_64bits_withSeed(buf + FU_WIRE_HEADER, (size_t)info->length, seed));
    *len = total;
    return buf;
}

static int is_control(uint32_t kind) {
    return kind == MSG_ACK || kind == MSG_HEARTBEAT || kind == MSG_ABORT || kind == MSG_BYE;
}
static int needs_ack(uint32_t kind) { return kind != MSG_ACK && kind != MSG_HEARTBEAT; }

/* Checks a received frame's header and size (not its checksum); 0 and w
 * filled, or -1 and err. */
static int decode(const fu_link *l, const uint8_t *buf, size_t len, wire_header *w, char *err, size_t n) {
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
    fu_msg_info *info = &w->info;
    info->kind = get16(buf + OFF_KIND);
    info->step = (int64_t)get64(buf + OFF_STEP);
    info->micro_batch = (int32_t)get32(buf + OFF_MB);
    info->tensor = (int32_t)get32(buf + OFF_TENSOR);
    info->codec = (int32_t)get32(buf + OFF_CODEC);
    info->length = get64(buf + OFF_LENGTH);
    w->frame = get32(buf + OFF_FRAME);
    w->seq = get64(buf + OFF_SEQ);
    w->deliver_ns = get64(buf + OFF_DELIVER);
    uint64_t frames = frames_of(info->length);
    size_t got = len - FU_WIRE_HEADER;
    if (frames == 1 && w->frame == 0 && got != info->length) {
        fail(err, n, "message from %s: header says %" PRIu64 " payload bytes, %zu arrived (step %" PRId64
             ", tensor %" PRId32 "): dropped", l->peer, info->length, got, info->step, info->tensor);
        return -1;
    }
    if (w->frame >= frames || got != frame_bytes(info->length, w->frame)) {
        fail(err, n, "message from %s: frame %" PRIu32 " of a %" PRIu64 "-byte message carries %zu bytes (step %"
             PRId64 ", tensor %" PRId32 "): dropped", l->peer, w->frame, info->length, got, info->step,
             info->tensor);
        return -1;
    }
    return 0;
}

static int known_kind(uint32_t kind) { return kind >= MSG_HANDSHAKE && kind <= MSG_BYE; }

/* ---- queues ------------------------------------------------------------ */

static pending *enqueue(fu_link *l, const fu_msg_info *info, uint8_t *data, uint64_t deliver_ns) {
    pending *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->info = *info;
    p->data = data;
    p->deliver_ns = deliver_ns;
    if (l->tail) l->tail->next = p; else l->head = p;
    l->tail = p;
    l->happened++;
    return p;
}

static void enqueue_error(fu_link *l, const char *why) {
    fu_msg_info none = {0};
    pending *p = enqueue(l, &none, NULL, 0);
    if (!p) return;
    p->is_error = 1;
    snprintf(p->error, sizeof p->error, "%s", why);
}

static pending *dequeue(fu_link *l) {
    pending *p = l->head;
    if (!p) return NULL;
    l->head = p->next;
    if (!l->head) l->tail = NULL;
    return p;
}

static void free_pending(fu_link *l, pending *p) {
    if (p->data && p->data != l->dst) free(p->data);
    free(p);
}

static void queue_control(fu_link *l, void *msg) {
    control *c = calloc(1, sizeof *c);
    if (!c) { nn_freemsg(msg); return; }
    c->msg = msg;
    if (l->ctl_tail) l->ctl_tail->next = c; else l->ctl_head = c;
    l->ctl_tail = c;
}

static void queue_ack(fu_link *l, const fu_msg_info *of, uint64_t seq) {
    wire_header w = {.info = {.kind = MSG_ACK, .step = of->step, .micro_batch = of->micro_batch,
                              .tensor = of->tensor}, .seq = seq};
    void *m = build_frame(l, &w, NULL, 0);
    if (m) queue_control(l, m);   /* a lost ack shows as the sender's timeout */
}

static void report_ack(fu_link *l, uint64_t seq) {
    if (l->n_acked == (int)(sizeof l->acked / sizeof l->acked[0])) {   /* full: the oldest goes */
        memmove(l->acked, l->acked + 1, sizeof l->acked - sizeof l->acked[0]);
        l->n_acked--;
    }
    l->acked[l->n_acked++] = seq;
}

/* fu_link_recv is returning: nothing may point into its buffer any more. */
static void release_dst(fu_link *l) {
    if (!l->dst) return;
    uint8_t *dst = l->dst;
    l->dst = NULL;
    for (pending *p = l->head; p; p = p->next) {
        if (p->data != dst) continue;
        p->data = malloc(p->info.length ? (size_t)p->info.length : 1);
        if (p->data) { memcpy(p->data, dst, (size_t)p->info.length); continue; }
        p->is_error = 1;
        snprintf(p->error, sizeof p->error, "message from %s: cannot allocate %" PRIu64 " bytes (step %" PRId64
                 ", tensor %" PRId32 "): dropped", l->peer, p->info.length, p->info.step, p->info.tensor);
    }
    if (l->in.active && l->in.data_is_dst) {
        uint64_t have = (uint64_t)l->in.next_frame * FU_WIRE_FRAME;
        l->in.data = malloc((size_t)l->in.info.length);
        l->in.data_is_dst = 0;
        if (l->in.data) memcpy(l->in.data, dst, (size_t)(have < l->in.info.length ? have : l->in.info.length));
        else { l->in.active = 0; l->in.skip_seq = l->in.seq; }
    }
}

/* ---- receiving --------------------------------------------------------- */

static void drop_incoming(fu_link *l) {
    if (!l->in.active) return;
    if (!l->in.data_is_dst) free(l->in.data);
    l->in.data = NULL;
    l->in.active = 0;
    l->in.skip_seq = l->in.seq;
}

static void on_ack(fu_link *l, uint64_t seq) {
    if (l->out.state == OUT_WAIT_ACK && seq == l->out.seq) {
        l->out.state = OUT_IDLE;
        l->out.payload = NULL;
        if (l->out.report) report_ack(l, seq);
        l->happened++;
        return;
    }
    for (int i = 0; i < l->n_control_waiting; i++) {
        if (l->control_waiting[i] != seq) continue;
        l->control_waiting[i] = l->control_waiting[--l->n_control_waiting];
        report_ack(l, seq);
        l->happened++;
        return;
    }
    /* else stale: its send already gave up */
}

/* One frame from the socket: m, len plain bytes inside nanomsg buffer raw
 * (freed here; the same pointer on a link that is not sealed). */
static void on_frame(fu_link *l, void *raw, uint8_t *m, size_t len) {
    l->last_heard_ms = now_ms();
    wire_header w;
    char why[200];
    if (decode(l, m, len, &w, why, sizeof why) != 0) {
        nn_freemsg(raw);
        drop_incoming(l);
        enqueue_error(l, why);
        return;
    }
    const fu_msg_info *info = &w.info;
    const uint8_t *body = m + FU_WIRE_HEADER;
    size_t k = len - FU_WIRE_HEADER;
    uint64_t want = get64(m + OFF_CHECKSUM), seed = header_seed(m);

    if (w.frame > 0) {   /* the next frame of the message being assembled */
        if (!l->in.active || w.seq != l->in.seq || w.frame != l->in.next_frame ||
            info->length != l->in.info.length) {
            nn_freemsg(raw);
            if (w.seq == l->in.skip_seq) return;   /* the rest of a message already reported */
            drop_incoming(l);
            l->in.skip_seq = w.seq;
            fail(why, sizeof why, "message from %s: frame %" PRIu32 " of step %" PRId64 ", tensor %" PRId32
                 " out of order (earlier frames lost): dropped", l->peer, w.frame, info->step, info->tensor);
            enqueue_error(l, why);
            return;
        }
        uint8_t *to = l->in.data + (uint64_t)w.frame * FU_WIRE_FRAME;
        uint64_t sum = want;   /* a sealed frame opened: authenticated already */
        if (l->sealed) memcpy(to, body, k);
        else sum = copy_and_hash(l->hash, to, body, k, seed);
        nn_freemsg(raw);
        if (sum != want) {
            drop_incoming(l);
            fail(why, sizeof why, "message from %s: checksum mismatch (step %" PRId64 ", tensor %" PRId32
                 ", frame %" PRIu32 "): dropped", l->peer, info->step, info->tensor, w.frame);
            enqueue_error(l, why);
            return;
        }
    } else {
        /* A first frame: verified before anything is allocated for it. */
        if (!l->sealed && XXH3_64bits_withSeed(body, k, seed) != want) {
            nn_freemsg(raw);
            drop_incoming(l);
            fail(why, sizeof why, "message from %s: checksum mismatch (step %" PRId64 ", tensor %" PRId32
                 "): dropped", l->peer, info->step, info->tensor);
            enqueue_error(l, why);
            return;
        }
        if (!known_kind(info->kind)) {
            nn_freemsg(raw);
            drop_incoming(l);
            fail(why, sizeof why, "message from %s: unknown kind %" PRIu32 " (step %" PRId64 ", tensor %"
                 PRId32 "): dropped", l->peer, info->kind, info->step, info->tensor);
            enqueue_error(l, why);
            return;
        }
        if (is_control(info->kind)) {   /* may come between data frames: leaves them alone */
            if (info->kind == MSG_ACK) on_ack(l, w.seq);
            else if (info->kind == MSG_ABORT || info->kind == MSG_BYE) {
                uint8_t *copy = malloc(k + 1);
                if (copy) {
                    memcpy(copy, body, k);
                    copy[k] = 0;
                    enqueue(l, info, copy, 0);
                    queue_ack(l, info, w.seq);
                }
            }
            nn_freemsg(raw);
            return;
        }
        if (l->in.active) {
            fu_msg_info was = l->in.info;
            uint32_t missing = l->in.next_frame;
            drop_incoming(l);
            fail(why, sizeof why, "message from %s: step %" PRId64 ", tensor %" PRId32 " ended after frame %"
                 PRIu32 " of %" PRIu32 " (sender gave up?): dropped", l->peer, was.step, was.tensor, missing,
                 (uint32_t)frames_of(was.length));
            enqueue_error(l, why);
        }
        l->in.active = 1;
        l->in.info = *info;
        l->in.seq = w.seq;
        l->in.deliver_ns = w.deliver_ns;
        l->in.next_frame = 0;
        l->in.frames = (uint32_t)frames_of(info->length);
        l->in.data_is_dst = 0;
        l->in.data = NULL;
        if (l->dst && info->length <= l->dst_capacity && info->length > 0) {
            int busy = 0;   /* a queued message already sits in the buffer */
            for (pending *p = l->head; p; p = p->next) busy |= p->data == l->dst;
            if (!busy) { l->in.data = l->dst; l->in.data_is_dst = 1; }
        }
        if (!l->in.data && info->length > 0) {
            l->in.data = malloc((size_t)info->length);
            if (!l->in.data) {
                nn_freemsg(raw);
                l->in.active = 0;
                l->in.skip_seq = w.seq;
                fail(why, sizeof why, "message from %s: cannot allocate %" PRIu64 " bytes (step %" PRId64
                     ", tensor %" PRId32 "): dropped", l->peer, info->length, info->step, info->tensor);
                enqueue_error(l, why);
                return;
            }
        }
        if (k) memcpy(l->in.data, body, k);
        nn_freemsg(raw);
    }
    if (++l->in.next_frame < l->in.frames) return;
    /* Complete: verified bytes are delivered bytes. */
    l->in.active = 0;
    if (!(l->auth && l->in.info.kind == MSG_HANDSHAKE))   /* a sealed link's hellos go unacked */
        queue_ack(l, &l->in.info, l->in.seq);
    if (!enqueue(l, &l->in.info, l->in.data, l->in.deliver_ns) && !l->in.data_is_dst) free(l->in.data);
    l->in.data = NULL;
}

/* ---- the loop ---------------------------------------------------------- */

static int has_output(const fu_link *l) { return l->ctl_head || l->out.state == OUT_SENDING; }

/* Hands the socket what it takes now: control frames, then data frames.
 * 0, or -1 with err on a socket error. */
static int send_some(fu_link *l, char *err, size_t n) {
    for (;;) {
        void **msg;
        if (l->sealed_slot) msg = l->sealed_slot;   /* sealed already: its counter is next on the wire */
        else if (l->ctl_head) msg = &l->ctl_head->msg;
        else if (l->out.state == OUT_SENDING) {
            if (!l->out.ready) {
                wire_header w = {.info = l->out.info, .seq = l->out.seq, .deliver_ns = l->out.deliver_ns,
                                 .frame = l->out.next_frame};
                l->out.ready = build_frame(l, &w, l->out.payload, 1);
                if (!l->out.ready) {
                    fail(err, n, "send to %s: cannot allocate a %u-byte frame", l->peer, FU_WIRE_FRAME);
                    return -1;
                }
            }
            msg = &l->out.ready;
        } else return 0;
        if (l->sealed && !l->sealed_slot) {
            const uint8_t *h = (const uint8_t *)*msg + FU_SEAL_PREFIX;   /* the plain header */
            uint32_t frame = get32(h + OFF_FRAME);
            const uint8_t *src = msg == &l->out.ready && l->out.payload
                                     ? l->out.payload + (uint64_t)frame * FU_WIRE_FRAME : NULL;   /* NULL: in place */
            fu_seal_frame_split(&l->seal, *msg, FU_WIRE_HEADER, src, frame_bytes(get64(h + OFF_LENGTH), frame));
            l->sealed_slot = msg;
        }
        if (nn_send(l->sock, msg, NN_MSG, NN_DONTWAIT) < 0) {
            int e = nn_errno();
            if (e == EINTR) continue;
            if (e == EAGAIN) return 0;
            fail(err, n, "send to %s: %s", l->peer, nn_strerror(e));
            return -1;
        }
        l->sealed_slot = NULL;
        if (msg == &l->out.ready) {
            l->out.ready = NULL;
            if (++l->out.next_frame == l->out.frames) l->out.state = OUT_WAIT_ACK;
            /* Build the next frame now: copying it overlaps with the wire. */
        } else {
            control *c = l->ctl_head;
            l->ctl_head = c->next;
            if (!l->ctl_head) { l->ctl_tail = NULL; l->happened++; }   /* flush_control waits for this */
            free(c);
        }
    }
}

/* Reads what arrived, up to the first frame that gives a caller something
 * (a message, an ack, an error): reading no further than needed, as the
 * blocking calls always did, leaves later messages unacked in the socket
 * for whoever reads next.  0, or -1 with err on a socket error. */
static int recv_some(fu_link *l, char *err, size_t n) {
    unsigned seen = l->happened;
    for (int i = 0; i < 64 && l->happened == seen; i++) {
        void *m = NULL;
        int rc = nn_recv(l->sock, &m, NN_MSG, NN_DONTWAIT);
        if (rc < 0) {
            int e = nn_errno();
            if (e == EINTR) continue;
            if (e == EAGAIN) return 0;
            fail(err, n, "receiving from %s: %s", l->peer, nn_strerror(e));
            return -1;
        }
        uint8_t *plain = m;
        size_t plain_len = (size_t)rc;
        char why[200];
        if (l->sealed &&
            fu_open_frame_split(&l->seal, m, (size_t)rc, FU_WIRE_HEADER, &plain, &plain_len, why, sizeof why) != 0) {
            /* Nothing of it is used, and the link is closed: a peer that
             * cannot seal is no peer of this run. */
            nn_freemsg(m);
            l->dropped++;
            fail(err, n, "link with %s (%s): dropped a %d-byte frame: %s; the link is closed", l->peer, l->url, rc,
                 why);
            fprintf(stderr, "fusion: %s (%" PRIu64 " dropped)\n", err, l->dropped);
            snprintf(l->broken, sizeof l->broken, "%s", err);
            return -1;
        }
        on_frame(l, m, plain, plain_len);
        if (has_output(l) && send_some(l, err, n) != 0) return -1;   /* acks go out at once */
    }
    return 0;
}

/* Sends and receives until something a caller may want happened (1), the
 * deadline passed or wake_fd became readable (0), or a socket error (-1). */
static int pump(fu_link *l, int64_t deadline, int wake_fd, char *err, size_t n) {
    unsigned seen = l->happened;
    for (;;) {
        if (l->broken[0]) { fail(err, n, "%s", l->broken); return -1; }
        if (send_some(l, err, n) != 0 || recv_some(l, err, n) != 0) return -1;
        if (l->happened != seen) return 1;
        int64_t left = deadline - now_ms();
        if (left <= 0) return 0;
        struct pollfd fds[3] = {{.fd = l->rcvfd, .events = POLLIN}, {.fd = -1}, {.fd = -1}};
        if (has_output(l)) fds[1] = (struct pollfd){.fd = l->sndfd, .events = POLLIN};
        if (wake_fd >= 0) fds[2] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
        int rc = poll(fds, 3, left > 0x7fffffff ? 0x7fffffff : (int)left);
        if (rc < 0 && errno != EINTR) {
            fail(err, n, "link to %s: poll: %s", l->peer, strerror(errno));
            return -1;
        }
        if (rc > 0 && (fds[2].revents & (POLLIN | POLLHUP | POLLERR))) return 0;
    }
}

/* Waits (until deadline) for queued control frames, acks above all, to be
 * handed to the socket, so that a blocking call returns with its acks sent. */
static void flush_control(fu_link *l, int64_t deadline) {
    char why[200];
    while (l->ctl_head && pump(l, deadline, -1, why, sizeof why) > 0) {}
}

static void reset_out(fu_link *l) {
    if (l->out.ready) nn_freemsg(l->out.ready);
    memset(&l->out, 0, sizeof l->out);
}

static int start_post(fu_link *l, const fu_msg_info *info, const void *payload, uint64_t deliver_ns,
                      int report, uint64_t *seq, char *err, size_t n) {
    if (l->out.state != OUT_IDLE) {
        fail(err, n, "send to %s: message %" PRIu64 " not acked yet (one at a time)", l->peer, l->out.seq);
        return -1;
    }
    if (info->length && !payload) {
        fail(err, n, "send to %s: %" PRIu64 " bytes from a NULL payload", l->peer, info->length);
        return -1;
    }
    l->out.state = OUT_SENDING;
    l->out.report = report;
    l->out.info = *info;
    l->out.payload = payload;
    l->out.seq = l->next_seq++;
    l->out.deliver_ns = deliver_ns;
    l->out.next_frame = 0;
    l->out.frames = (uint32_t)frames_of(info->length);
    if (seq) *seq = l->out.seq;
    return 0;
}

/* fu_link_send with a deadline (timeout_ms: what messages quote) and a
 * cancel descriptor. */
static int send_wait(fu_link *l, const fu_msg_info *info, const void *payload, int64_t deadline, int timeout_ms,
                     int wake_fd, char *err, size_t n) {
    uint64_t seq;
    if (start_post(l, info, payload, 0, 0, &seq, err, n) != 0) return -1;
    /* Wait for our ack.  The peer may be sending too: its data messages are
     * verified, acked and queued for fu_link_recv. */
    while (l->out.state != OUT_IDLE) {
        int rc = pump(l, deadline, wake_fd, err, n);
        if (rc < 0) { reset_out(l); errno = EIO; return -1; }
        if (rc > 0) continue;
        if (now_ms() < deadline) {
            fail(err, n, "send to %s: cancelled", l->peer);
            reset_out(l);
            errno = ECANCELED;
            return -1;
        }
        if (l->out.state == OUT_SENDING)
            fail(err, n, "send to %s: not accepted within %d ms (step %" PRId64 ", tensor %" PRId32
                 "): peer not connected", l->peer, timeout_ms, info->step, info->tensor);
        else
            fail(err, n, "send to %s: no ack within %d ms (step %" PRId64 ", tensor %" PRId32
                 "): peer dead or stalled", l->peer, timeout_ms, info->step, info->tensor);
        reset_out(l);
        errno = ETIMEDOUT;
        return -1;
    }
    return 0;
}

int fu_link_send(fu_link *l, const fu_msg_info *info, const void *payload, char *err, size_t n) {
    return send_wait(l, info, payload, now_ms() + l->timeout_ms, l->timeout_ms, -1, err, n);
}

int fu_link_recv(fu_link *l, fu_msg_info *info, void *payload, uint64_t capacity, char *err, size_t n) {
    if (!l->head) {
        int64_t deadline = now_ms() + l->timeout_ms;
        l->dst = payload;
        l->dst_capacity = payload ? capacity : 0;
        while (!l->head) {
            int rc = pump(l, deadline, -1, err, n);
            if (rc < 0) { release_dst(l); return -1; }
            if (rc == 0) {
                release_dst(l);
                fail(err, n, "no message from %s within %d ms: peer dead or stalled", l->peer, l->timeout_ms);
                return -1;
            }
        }
    }
    pending *p = dequeue(l);
    int rc = 0;
    *info = p->info;
    if (p->is_error) {
        fail(err, n, "%s", p->error);
        rc = -1;
    } else if (p->info.length > capacity) {
        /* It is acked already: a buffer that is too small is the caller's
         * bug, reported, the message lost. */
        fail(err, n, "message from %s: %" PRIu64 " bytes do not fit the %" PRIu64 "-byte buffer (step %" PRId64
             ", tensor %" PRId32 "): dropped", l->peer, p->info.length, capacity, p->info.step, p->info.tensor);
        rc = -1;
    } else if (p->info.length && p->data != payload) {
        memcpy(payload, p->data, (size_t)p->info.length);
    }
    if (p->data == payload) p->data = NULL;   /* assembled in place */
    free_pending(l, p);
    release_dst(l);
    flush_control(l, now_ms() + l->timeout_ms);
    return rc;
}

int fu_link_post(fu_link *l, const fu_msg_info *info, const void *payload, uint64_t deliver_ns, uint64_t *seq,
                 char *err, size_t n) {
    if (start_post(l, info, payload, deliver_ns, 1, seq, err, n) != 0) return -1;
    return send_some(l, err, n);
}

int fu_link_post_control(fu_link *l, const fu_msg_info *info, const void *payload, uint64_t *seq,
                         char *err, size_t n) {
    if (info->kind != MSG_HEARTBEAT && info->kind != MSG_ABORT && info->kind != MSG_BYE) {
        fail(err, n, "send to %s: kind %" PRIu32 " is not a control message", l->peer, info->kind);
        return -1;
    }
    if (info->length > FU_WIRE_FRAME) {
        fail(err, n, "send to %s: a %" PRIu64 "-byte control message does not fit one frame", l->peer, info->length);
        return -1;
    }
    int acked = needs_ack(info->kind);
    if (acked && l->n_control_waiting == (int)(sizeof l->control_waiting / sizeof l->control_waiting[0])) {
        fail(err, n, "send to %s: too many control messages waiting for their ack", l->peer);
        return -1;
    }
    wire_header w = {.info = *info, .seq = l->next_seq++};
    void *m = build_frame(l, &w, payload, 0);
    if (!m) { fail(err, n, "send to %s: out of memory", l->peer); return -1; }
    queue_control(l, m);
    if (acked) l->control_waiting[l->n_control_waiting++] = w.seq;
    if (seq) *seq = w.seq;
    return send_some(l, err, n);
}

int fu_link_poll(fu_link *l, fu_event *ev, int timeout_ms, int wake_fd, char *err, size_t n) {
    memset(ev, 0, sizeof *ev);
    int64_t deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        if (l->n_acked) {
            ev->type = FU_EVENT_ACKED;
            ev->seq = l->acked[0];
            memmove(l->acked, l->acked + 1, (size_t)(--l->n_acked) * sizeof l->acked[0]);
            return 1;
        }
        if (l->head) {
            pending *p = dequeue(l);
            int rc = 1;
            if (p->is_error) {
                fail(err, n, "%s", p->error);
                rc = -1;
            } else {
                ev->type = FU_EVENT_MESSAGE;
                ev->info = p->info;
                ev->payload = p->data;
                ev->deliver_ns = p->deliver_ns;
                p->data = NULL;
            }
            free(p);
            return rc;
        }
        int rc = pump(l, deadline, wake_fd, err, n);
        if (rc <= 0) return rc;
    }
}

int64_t fu_link_last_heard_ms(const fu_link *l) { return l->last_heard_ms; }

int fu_link_send_raw(fu_link *l, const void *bytes, size_t len, char *err, size_t n) {
    void *m = nn_allocmsg(len, 0);
    if (!m) { fail(err, n, "send to %s: cannot allocate %zu bytes", l->peer, len); return -1; }
    memcpy(m, bytes, len);
    int v = l->timeout_ms;
    nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_SNDTIMEO, &v, sizeof v);
    for (;;) {
        if (nn_send(l->sock, &m, NN_MSG, 0) >= 0) return 0;
        if (nn_errno() == EINTR) continue;
        fail(err, n, "send to %s: %s", l->peer, nn_strerror(nn_errno()));
        nn_freemsg(m);
        return -1;
    }
}

const char *fu_link_peer(const fu_link *l) { return l->peer; }

void fu_link_close(fu_link *l) {
    if (!l) return;
    l->dst = NULL;
    while (l->head) free_pending(l, dequeue(l));
    while (l->ctl_head) {
        control *c = l->ctl_head;
        l->ctl_head = c->next;
        nn_freemsg(c->msg);
        free(c);
    }
    reset_out(l);
    if (l->in.active && !l->in.data_is_dst) free(l->in.data);
    if (l->sock >= 0) nn_close(l->sock);
    if (l->hash) XXH3_freeState(l->hash);
    free(l);
}

/* ---- setup ------------------------------------------------------------- */

/* glibc adapts its mmap threshold upwards (and the trim threshold to twice
 * that) each time a mapped block is freed, up to 32 MiB (64 MiB); this sets
 * them there at once, for the whole process, so that frame buffers are
 * reused instead of being mapped or trimmed and faulted in again.  A
 * process that chose its own thresholds (GLIBC_TUNABLES or MALLOC_*_
 * variables) keeps them.  The cost: each malloc arena may keep up to 64 MiB
 * of freed memory instead of returning it to the kernel. */
static void tune_malloc(void) {
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
static void reset_link(fu_link *l) {
    l->dst = NULL;
    while (l->head) free_pending(l, dequeue(l));
    while (l->ctl_head) {
        control *c = l->ctl_head;
        l->ctl_head = c->next;
        nn_freemsg(c->msg);
        free(c);
    }
    l->ctl_tail = NULL;
    reset_out(l);
    drop_incoming(l);
    l->n_acked = l->n_control_waiting = 0;
    if (l->sock >= 0) nn_close(l->sock);
    l->sock = -1;
    l->sealed = 0;
    l->sealed_slot = NULL;
    l->broken[0] = '\0';
    memset(&l->seal, 0, sizeof l->seal);
}

/* A fresh NN_PAIR socket, bound to or connecting to url; 0, or -1 with err
 * and errno. */
static int open_socket(fu_link *l, const char *url, int listen, char *err, size_t n) {
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
        fail(err, n, "link to %s: cannot %s %s: %s", l->peer, listen ? "listen on" : "connect to", url,
             nn_strerror(e));
        errno = e;   /* EADDRINUSE: the caller may pick another port */
        return -1;
    }
    return 0;
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
                           size_t n) {
    int64_t connected_since = 0;
    for (;;) {
        for (pending *p = l->head, *prev = NULL; p; prev = p, p = p->next) {
            /* Garbage before the peer's hello is a stranger's or a stale
             * connection's: start again; after it, a refusal. */
            if (p->is_error) { snprintf(why, n, "%s", p->error); *rc = first ? 3 : 2; return NULL; }
            if (p->info.kind != MSG_HANDSHAKE) continue;
            if (prev) prev->next = p->next; else l->head = p->next;
            if (l->tail == p) l->tail = prev;
            return p;
        }
        int64_t limit = deadline;
        uint64_t had = nn_get_statistic(l->sock, NN_STAT_ACCEPTED_CONNECTIONS) +
                       nn_get_statistic(l->sock, NN_STAT_ESTABLISHED_CONNECTIONS);
        if (had > 0 && nn_get_statistic(l->sock, NN_STAT_CURRENT_CONNECTIONS) == 0) {
            snprintf(why, n, "the connection closed during the handshake");
            *rc = 3;
            return NULL;
        }
        /* Connecting, nanomsg makes a lost connection again by itself, in
         * milliseconds: what we sent on the first is gone with it. */
        if (!listen && nn_get_statistic(l->sock, NN_STAT_ESTABLISHED_CONNECTIONS) > 1) {
            snprintf(why, n, "the connection was made again during the handshake");
            *rc = 3;
            return NULL;
        }
        if (limit > now_ms() + 200) limit = now_ms() + 200;   /* to look at the connections again */
        if (listen) {   /* a stranger that connects and says nothing must not hold the port */
            if (nn_get_statistic(l->sock, NN_STAT_CURRENT_CONNECTIONS) > 0) {
                if (!connected_since) connected_since = now_ms();
                if (now_ms() - connected_since >= HS_SILENT_MS) {
                    snprintf(why, n, "a connection sent no handshake within %d ms", HS_SILENT_MS);
                    *rc = 2;
                    return NULL;
                }
            } else connected_since = 0;
        }
        int r = pump(l, limit, cancel_fd, why, n);
        if (r > 0) continue;
        if (r < 0) { *rc = 2; return NULL; }
        int64_t t = now_ms();
        if (t >= deadline) { errno = ETIMEDOUT; *rc = -1; snprintf(why, n, "no handshake within the time allowed"); return NULL; }
        if (t < limit && cancel_fd >= 0 && poll(&(struct pollfd){.fd = cancel_fd, .events = POLLIN}, 1, 0) > 0) {
            errno = ECANCELED; *rc = -1; snprintf(why, n, "cancelled"); return NULL;
        }
    }
}

/* A sealed handshake on l's socket (seal.h): 0 sealed and confirmed; 1 a
 * TCP self-connect; 2 refused (why); 3 the connection closed half-way;
 * -1 timed out or cancelled (errno). */
static int sealed_handshake(fu_link *l, int listen, int64_t deadline, int cancel_fd, char *why, size_t n) {
    fu_hs hs;
    fu_hs_start(&hs, l->auth, l->peer);
    wire_header w = {.info = {.kind = MSG_HANDSHAKE, .length = FU_HS_BYTES}, .seq = l->next_seq++};
    void *m = build_frame(l, &w, hs.hello, 0);   /* plain: no keys yet */
    if (!m) { snprintf(why, n, "out of memory"); return 2; }
    /* The connector speaks first; the listener answers the hello it got,
     * on the connection it came by (a stranger's connection, come and
     * gone, never takes the listener's hello). */
    if (!listen) queue_control(l, m);
    int rc = 2;
    pending *p = next_hello(l, listen, 1, deadline, cancel_fd, &rc, why, n);
    if (listen && p) queue_control(l, m);
    else if (listen) nn_freemsg(m);
    if (!p) { sodium_memzero(hs.sk, sizeof hs.sk); return rc; }
    if (fu_hs_is_own(&hs, p->data, (size_t)p->info.length)) {
        sodium_memzero(hs.sk, sizeof hs.sk);
        free_pending(l, p);
        return 1;
    }
    /* Our hello must be on the wire before anything sealed follows it; and
     * nothing more may be read before the keys are in (the peer's sealed
     * confirmation may already be on its way): send only. */
    while (l->ctl_head && now_ms() < deadline) {
        if (send_some(l, why, n) != 0) return 2;
        if (l->ctl_head) poll(&(struct pollfd){.fd = l->sndfd, .events = POLLIN}, 1, 10);
    }
    uint8_t transcript[32];
    fu_seal keys;
    int ok = fu_hs_finish(&hs, l->auth, l->peer, p->data, (size_t)p->info.length, listen, &keys, transcript,
                          why, n) == 0;
    free_pending(l, p);
    if (!ok || l->ctl_head) { if (ok) snprintf(why, n, "the hello could not be sent"); return 2; }
    l->seal = keys;
    l->sealed = 1;
    sodium_memzero(&keys, sizeof keys);
    /* The confirmation: the transcript, sealed; the peer's opens only under
     * the same secret and the same two hellos. */
    w = (wire_header){.info = {.kind = MSG_HANDSHAKE, .length = sizeof transcript}, .seq = l->next_seq++};
    if (!(m = build_frame(l, &w, transcript, 0))) { snprintf(why, n, "out of memory"); return 2; }
    queue_control(l, m);
    if (!(p = next_hello(l, listen, 0, deadline, cancel_fd, &rc, why, n))) {
        if (rc == 2 && strstr(why, "does not authenticate"))
            snprintf(why, n, "the peer does not hold this run's secret (its confirmation does not open)");
        return rc;
    }
    ok = p->info.length == sizeof transcript && memcmp(p->data, transcript, sizeof transcript) == 0;
    free_pending(l, p);
    if (!ok) { snprintf(why, n, "the peer's confirmation does not match the handshake"); return 2; }
    flush_control(l, deadline);
    return 0;
}

fu_link *fu_link_open(const char *url, int listen, const char *peer_name, int timeout_ms, int cancel_fd,
                      char *err, size_t n) {
    return fu_link_open_sealed(url, listen, peer_name, timeout_ms, cancel_fd, NULL, err, n);
}

fu_link *fu_link_open_sealed(const char *url, int listen, const char *peer_name, int timeout_ms, int cancel_fd,
                             const fu_link_auth *auth, char *err, size_t n) {
    static pthread_once_t tuned = PTHREAD_ONCE_INIT;
    pthread_once(&tuned, tune_malloc);
    fu_link *l = calloc(1, sizeof *l);
    if (!l) { fail(err, n, "link to %s: out of memory", peer_name); errno = ENOMEM; return NULL; }
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
    uint64_t seeds[3] = {(uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec, (uint64_t)(uintptr_t)l,
                         (uint64_t)now_ms()};
    uint8_t nonce[8];
    put64(nonce, XXH3_64bits(seeds, sizeof seeds));
    int64_t deadline = now_ms() + timeout_ms;
    char why[200], refused[240] = "";
    for (;;) {
        if (open_socket(l, url, listen, err, n) != 0) {
            int e = errno;
            fu_link_close(l);
            errno = e;
            return NULL;
        }
        if (auth) {
            int rc = sealed_handshake(l, listen, deadline, cancel_fd, why, sizeof why);
            if (rc == 0) return l;
            if (rc == 2 && listen) {   /* a stranger, or a wrong peer: refused; the port stays open for the right one */
                fprintf(stderr, "fusion: link with %s on %s: refused a connection: %s\n", l->peer, url, why);
                snprintf(refused, sizeof refused, "%s", why);
            }
            if (rc == 1 || rc == 3 || (rc == 2 && listen)) { reset_link(l); continue; }
            int e = rc == 2 ? EPROTO : errno;
            if (rc == -1 && refused[0] && e == ETIMEDOUT) {
                fail(err, n, "handshake with %s at %s: no peer completed it within %d ms; the last one was refused: "
                     "%s", l->peer, url, timeout_ms, refused);
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
        fu_msg_info hs = {.kind = MSG_HANDSHAKE, .length = sizeof nonce};
        if (send_wait(l, &hs, nonce, deadline, timeout_ms, cancel_fd, why, sizeof why) != 0) {
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
                if (p->info.kind != MSG_HANDSHAKE) continue;
                self = p->info.length == sizeof nonce && memcmp(p->data, nonce, sizeof nonce) == 0;
                if (self) break;
                if (prev) prev->next = p->next; else l->head = p->next;
                if (l->tail == p) l->tail = prev;
                free_pending(l, p);
                flush_control(l, deadline);
                return l;
            }
            if (self) break;
            int rc = pump(l, deadline, cancel_fd, why, sizeof why);
            if (rc > 0) continue;
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
        reset_link(l);   /* connected to itself: drop the socket, try again */
    }
}

fu_link *fu_link_listen(const char *url, const char *peer_name, int timeout_ms, char *err, size_t n) {
    return fu_link_open(url, 1, peer_name, timeout_ms, -1, err, n);
}

fu_link *fu_link_connect(const char *url, const char *peer_name, int timeout_ms, char *err, size_t n) {
    return fu_link_open(url, 0, peer_name, timeout_ms, -1, err, n);
}
