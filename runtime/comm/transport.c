/* transport.c: fu_link over nanomsg (NN_PAIR, tcp).  See transport.h for the
 * wire format and the delivery contract.  This file: frames, queues and
 * the loop; the socket and the handshakes: transport_open.c.  On a sealed
 * link (comm/seal.h) each frame is sealed as it is handed to the socket
 * (link_send_some: the counter is the order on the wire) and opened as it
 * is read (recv_some), before anything else looks at it.
 *
 * Everything runs through one loop, link_pump(): send what the socket takes
 * (control messages first, then the next frame of the data message being
 * sent), read and verify what arrived (acking completed messages), and
 * otherwise sleep in poll() on nanomsg's readiness descriptors.  The
 * blocking calls (fu_link_send, fu_link_recv, the handshake) are that loop
 * with a deadline; fu_link_poll is one turn of it with an event out.
 *
 * nanomsg facts this file leans on:
 *  - NN_RCVMAXSIZE defaults to 1 MiB and a larger message is dropped without
 *    a word; it is set to -1 (no limit) on a plain link, and to one sealed
 *    frame on a sealed one (a stranger's length prefix is not believed).
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
#include "comm/transport_internal.h"
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

/* ---- wire header ------------------------------------------------------- */

static uint64_t frames_of(uint64_t length)
{
    return length == 0 ? 1 : length / FU_WIRE_FRAME + (length % FU_WIRE_FRAME != 0);
}

/* Payload bytes frame `frame` of a `length`-byte message carries. */
size_t link_frame_bytes(uint64_t length, uint32_t frame)
{
    uint64_t off = (uint64_t)frame * FU_WIRE_FRAME;
    if (off >= length)
        return 0;
    return (size_t)(length - off < FU_WIRE_FRAME ? length - off : FU_WIRE_FRAME);
}

/* Writes the header fields (checksum zero) and returns the checksum seed. */
static uint64_t put_header(uint8_t *buf, const wire_header *w)
{
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
static uint64_t header_seed(const uint8_t *header)
{
    uint8_t h[FU_WIRE_HEADER];
    memcpy(h, header, sizeof h);
    put64(h + OFF_CHECKSUM, 0);
    return XXH3_64bits(h, sizeof h);
}

/* XXH3_64bits_withSeed(src, len, seed), copying src to dst on the way when
 * dst is not NULL (block by block, while the bytes are in cache). */
static uint64_t copy_and_hash(XXH3_state_t *st, uint8_t *dst, const uint8_t *src, size_t len, uint64_t seed)
{
    if (len <= COPY_BLOCK) {
        if (dst && len)
            memcpy(dst, src, len);
        return XXH3_64bits_withSeed(src, len, seed);
    }
    XXH3_64bits_reset_withSeed(st, seed);
    for (size_t off = 0; off < len; off += COPY_BLOCK) {
        size_t k = len - off < COPY_BLOCK ? len - off : COPY_BLOCK;
        if (dst)
            memcpy(dst + off, src + off, k);
        XXH3_64bits_update(st, src + off, k);
    }
    return XXH3_64bits_digest(st);
}

/* One frame as a nanomsg buffer, its payload copied from payload + the
 * frame's offset; NULL when out of memory. */
void *link_build_frame(fu_link *l, const wire_header *w, const uint8_t *payload, int defer)
{
    size_t k = link_frame_bytes(w->info.length, w->frame);
    /* A sealed link's frame has room for the counter and the tag around it
     * (the handshake's hello, built before the keys, goes plain), and no
     * checksum: the tag authenticates it.  defer (a data frame, whose
     * payload the caller keeps until it is acked): the payload is not
     * copied here but sealed straight from the tensor into the frame as
     * it goes to the socket (link_send_some). */
    size_t pre = l->sealed ? FU_SEAL_PREFIX : 0, post = l->sealed ? FU_SEAL_TAG : 0;
    uint8_t *buf = nn_allocmsg(pre + FU_WIRE_HEADER + k + post, 0);
    if (!buf)
        return NULL;
    uint8_t *m = buf + pre;
    uint64_t seed = put_header(m, w);
    const uint8_t *src = payload ? payload + (uint64_t)w->frame * FU_WIRE_FRAME : NULL;
    if (!l->sealed)
        put64(m + OFF_CHECKSUM, copy_and_hash(l->hash, m + FU_WIRE_HEADER, src, k, seed));
    else if (!defer && src && k)
        memcpy(m + FU_WIRE_HEADER, src, k);
    return buf;
}

void *fu_link_encode(const fu_msg_info *info, const void *payload, uint64_t seq, size_t *len)
{
    if (frames_of(info->length) != 1)
        return NULL;
    size_t total = FU_WIRE_HEADER + (size_t)info->length;
    uint8_t *buf = malloc(total);
    if (!buf)
        return NULL;
    wire_header w = { .info = *info, .seq = seq };
    uint64_t seed = put_header(buf, &w);
    if (info->length)
        memcpy(buf + FU_WIRE_HEADER, payload, (size_t)info->length);
    put64(buf + OFF_CHECKSUM, XXH3_64bits_withSeed(buf + FU_WIRE_HEADER, (size_t)info->length, seed));
    *len = total;
    return buf;
}

static int is_control(uint32_t kind)
{
    return kind == MSG_ACK || kind == MSG_HEARTBEAT || kind == MSG_ABORT || kind == MSG_BYE || kind == MSG_STOP;
}
static int needs_ack(uint32_t kind) { return kind != MSG_ACK && kind != MSG_HEARTBEAT && kind != MSG_STOP; }

/* Checks a received frame's header and size (not its checksum); 0 and w
 * filled, or -1 and err. */
static int decode(const fu_link *l, const uint8_t *buf, size_t len, wire_header *w, char *err, size_t n)
{
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
        fail(err, n,
             "message from %s: header says %" PRIu64 " payload bytes, %zu arrived (step %" PRId64 ", tensor %" PRId32
             "): dropped",
             l->peer, info->length, got, info->step, info->tensor);
        return -1;
    }
    if (w->frame >= frames || got != link_frame_bytes(info->length, w->frame)) {
        fail(err, n,
             "message from %s: frame %" PRIu32 " of a %" PRIu64 "-byte message carries %zu bytes (step %" PRId64
             ", tensor %" PRId32 "): dropped",
             l->peer, w->frame, info->length, got, info->step, info->tensor);
        return -1;
    }
    return 0;
}

static int known_kind(uint32_t kind) { return kind >= MSG_HANDSHAKE && kind <= MSG_STOP; }

/* ---- queues ------------------------------------------------------------ */

static pending *enqueue(fu_link *l, const fu_msg_info *info, uint8_t *data, uint64_t deliver_ns)
{
    pending *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->info = *info;
    p->data = data;
    p->deliver_ns = deliver_ns;
    if (l->tail)
        l->tail->next = p;
    else
        l->head = p;
    l->tail = p;
    l->happened++;
    return p;
}

static void enqueue_error(fu_link *l, const char *why)
{
    fu_msg_info none = { 0 };
    pending *p = enqueue(l, &none, NULL, 0);
    if (!p)
        return;
    p->is_error = 1;
    snprintf(p->error, sizeof p->error, "%s", why);
}

pending *link_dequeue(fu_link *l)
{
    pending *p = l->head;
    if (!p)
        return NULL;
    l->head = p->next;
    if (!l->head)
        l->tail = NULL;
    return p;
}

void link_free_pending(fu_link *l, pending *p)
{
    if (p->data && p->data != l->dst)
        free(p->data);
    free(p);
}

void link_queue_control(fu_link *l, void *msg)
{
    control *c = calloc(1, sizeof *c);
    if (!c) {
        nn_freemsg(msg);
        return;
    }
    c->msg = msg;
    if (l->ctl_tail)
        l->ctl_tail->next = c;
    else
        l->ctl_head = c;
    l->ctl_tail = c;
}

static void queue_ack(fu_link *l, const fu_msg_info *of, uint64_t seq)
{
    wire_header w = {
        .info = { .kind = MSG_ACK, .step = of->step, .micro_batch = of->micro_batch, .tensor = of->tensor }, .seq = seq
    };
    void *m = link_build_frame(l, &w, NULL, 0);
    if (m)
        link_queue_control(l, m); /* a lost ack shows as the sender's timeout */
}

static void report_ack(fu_link *l, uint64_t seq)
{
    if (l->n_acked == (int)(sizeof l->acked / sizeof l->acked[0])) { /* full: the oldest goes */
        memmove(l->acked, l->acked + 1, sizeof l->acked - sizeof l->acked[0]);
        l->n_acked--;
    }
    l->acked[l->n_acked++] = seq;
}

/* fu_link_recv is returning: nothing may point into its buffer any more. */
static void release_dst(fu_link *l)
{
    if (!l->dst)
        return;
    uint8_t *dst = l->dst;
    l->dst = NULL;
    for (pending *p = l->head; p; p = p->next) {
        if (p->data != dst)
            continue;
        p->data = malloc(p->info.length ? (size_t)p->info.length : 1);
        if (p->data) {
            memcpy(p->data, dst, (size_t)p->info.length);
            continue;
        }
        p->is_error = 1;
        snprintf(p->error, sizeof p->error,
                 "message from %s: cannot allocate %" PRIu64 " bytes (step %" PRId64 ", tensor %" PRId32 "): dropped",
                 l->peer, p->info.length, p->info.step, p->info.tensor);
    }
    if (l->in.active && l->in.data_is_dst) {
        uint64_t have = (uint64_t)l->in.next_frame * FU_WIRE_FRAME;
        l->in.data = malloc((size_t)l->in.info.length);
        l->in.data_is_dst = 0;
        if (l->in.data)
            memcpy(l->in.data, dst, (size_t)(have < l->in.info.length ? have : l->in.info.length));
        else {
            l->in.active = 0;
            l->in.skip_seq = l->in.seq;
        }
    }
}

/* ---- receiving --------------------------------------------------------- */

void link_drop_incoming(fu_link *l)
{
    if (!l->in.active)
        return;
    if (!l->in.data_is_dst)
        free(l->in.data);
    l->in.data = NULL;
    l->in.active = 0;
    l->in.skip_seq = l->in.seq;
}

static void on_ack(fu_link *l, uint64_t seq)
{
    if (l->out.state == OUT_WAIT_ACK && seq == l->out.seq) {
        l->out.state = OUT_IDLE;
        l->out.payload = NULL;
        if (l->out.report)
            report_ack(l, seq);
        l->happened++;
        return;
    }
    for (int i = 0; i < l->n_control_waiting; i++) {
        if (l->control_waiting[i] != seq)
            continue;
        l->control_waiting[i] = l->control_waiting[--l->n_control_waiting];
        report_ack(l, seq);
        l->happened++;
        return;
    }
    /* else stale: its send already gave up */
}

/* One frame from the socket: m, len plain bytes inside nanomsg buffer raw
 * (freed here; the same pointer on a link that is not sealed). */
static void on_frame(fu_link *l, void *raw, uint8_t *m, size_t len)
{
    l->last_heard_ms = now_ms();
    wire_header w;
    char why[200];
    if (decode(l, m, len, &w, why, sizeof why) != 0) {
        nn_freemsg(raw);
        link_drop_incoming(l);
        enqueue_error(l, why);
        return;
    }
    const fu_msg_info *info = &w.info;
    const uint8_t *body = m + FU_WIRE_HEADER;
    size_t k = len - FU_WIRE_HEADER;
    uint64_t want = get64(m + OFF_CHECKSUM), seed = header_seed(m);

    if (w.frame > 0) { /* the next frame of the message being assembled */
        if (!l->in.active || w.seq != l->in.seq || w.frame != l->in.next_frame || info->length != l->in.info.length) {
            nn_freemsg(raw);
            if (w.seq == l->in.skip_seq)
                return; /* the rest of a message already reported */
            link_drop_incoming(l);
            l->in.skip_seq = w.seq;
            fail(why, sizeof why,
                 "message from %s: frame %" PRIu32 " of step %" PRId64 ", tensor %" PRId32
                 " out of order (earlier frames lost): dropped",
                 l->peer, w.frame, info->step, info->tensor);
            enqueue_error(l, why);
            return;
        }
        uint8_t *to = l->in.data + (uint64_t)w.frame * FU_WIRE_FRAME;
        uint64_t sum = want; /* a sealed frame opened: authenticated already */
        if (l->sealed)
            memcpy(to, body, k);
        else
            sum = copy_and_hash(l->hash, to, body, k, seed);
        nn_freemsg(raw);
        if (sum != want) {
            link_drop_incoming(l);
            fail(why, sizeof why,
                 "message from %s: checksum mismatch (step %" PRId64 ", tensor %" PRId32 ", frame %" PRIu32
                 "): dropped",
                 l->peer, info->step, info->tensor, w.frame);
            enqueue_error(l, why);
            return;
        }
    } else {
        /* A first frame: verified before anything is allocated for it. */
        if (!l->sealed && XXH3_64bits_withSeed(body, k, seed) != want) {
            nn_freemsg(raw);
            link_drop_incoming(l);
            fail(why, sizeof why, "message from %s: checksum mismatch (step %" PRId64 ", tensor %" PRId32 "): dropped",
                 l->peer, info->step, info->tensor);
            enqueue_error(l, why);
            return;
        }
        if (!known_kind(info->kind)) {
            nn_freemsg(raw);
            link_drop_incoming(l);
            fail(why, sizeof why,
                 "message from %s: unknown kind %" PRIu32 " (step %" PRId64 ", tensor %" PRId32 "): dropped", l->peer,
                 info->kind, info->step, info->tensor);
            enqueue_error(l, why);
            return;
        }
        if (is_control(info->kind)) { /* may come between data frames: leaves them alone */
            if (info->kind == MSG_ACK)
                on_ack(l, w.seq);
            else if (info->kind == MSG_ABORT || info->kind == MSG_BYE || info->kind == MSG_STOP) {
                /* Queued with the data messages, in wire order: a stop is
                 * seen before any data message that followed it. */
                uint8_t *copy = malloc(k + 1);
                if (copy) {
                    memcpy(copy, body, k);
                    copy[k] = 0;
                    enqueue(l, info, copy, 0);
                    if (needs_ack(info->kind))
                        queue_ack(l, info, w.seq);
                } else if (info->kind == MSG_STOP) { /* never lost without a word */
                    fail(why, sizeof why, "message from %s: out of memory for a stop proposal: dropped", l->peer);
                    enqueue_error(l, why);
                }
            }
            nn_freemsg(raw);
            return;
        }
        if (l->in.active) {
            fu_msg_info was = l->in.info;
            uint32_t missing = l->in.next_frame;
            link_drop_incoming(l);
            fail(why, sizeof why,
                 "message from %s: step %" PRId64 ", tensor %" PRId32 " ended after frame %" PRIu32 " of %" PRIu32
                 " (sender gave up?): dropped",
                 l->peer, was.step, was.tensor, missing, (uint32_t)frames_of(was.length));
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
            int busy = 0; /* a queued message already sits in the buffer */
            for (pending *p = l->head; p; p = p->next)
                busy |= p->data == l->dst;
            if (!busy) {
                l->in.data = l->dst;
                l->in.data_is_dst = 1;
            }
        }
        if (!l->in.data && info->length > 0) {
            l->in.data = malloc((size_t)info->length);
            if (!l->in.data) {
                nn_freemsg(raw);
                l->in.active = 0;
                l->in.skip_seq = w.seq;
                fail(why, sizeof why,
                     "message from %s: cannot allocate %" PRIu64 " bytes (step %" PRId64 ", tensor %" PRId32
                     "): dropped",
                     l->peer, info->length, info->step, info->tensor);
                enqueue_error(l, why);
                return;
            }
        }
        if (k)
            memcpy(l->in.data, body, k);
        nn_freemsg(raw);
    }
    if (++l->in.next_frame < l->in.frames)
        return;
    /* Complete: verified bytes are delivered bytes. */
    l->in.active = 0;
    if (!(l->auth && l->in.info.kind == MSG_HANDSHAKE)) /* a sealed link's hellos go unacked */
        queue_ack(l, &l->in.info, l->in.seq);
    if (!enqueue(l, &l->in.info, l->in.data, l->in.deliver_ns) && !l->in.data_is_dst)
        free(l->in.data);
    l->in.data = NULL;
}

/* ---- the loop ---------------------------------------------------------- */

static int has_output(const fu_link *l) { return l->ctl_head || l->out.state == OUT_SENDING; }

/* Hands the socket what it takes now: control frames, then data frames.
 * 0, or -1 with err on a socket error. */
int link_send_some(fu_link *l, char *err, size_t n)
{
    for (;;) {
        void **msg;
        if (l->sealed_slot)
            msg = l->sealed_slot; /* sealed already: its counter is next on the wire */
        else if (l->ctl_head)
            msg = &l->ctl_head->msg;
        else if (l->out.state == OUT_SENDING) {
            if (!l->out.ready) {
                wire_header w = {
                    .info = l->out.info, .seq = l->out.seq, .deliver_ns = l->out.deliver_ns, .frame = l->out.next_frame
                };
                l->out.ready = link_build_frame(l, &w, l->out.payload, 1);
                if (!l->out.ready) {
                    fail(err, n, "send to %s: cannot allocate a %u-byte frame", l->peer, FU_WIRE_FRAME);
                    return -1;
                }
            }
            msg = &l->out.ready;
        } else
            return 0;
        if (l->sealed && !l->sealed_slot) {
            const uint8_t *h = (const uint8_t *)*msg + FU_SEAL_PREFIX; /* the plain header */
            uint32_t frame = get32(h + OFF_FRAME);
            const uint8_t *src = msg == &l->out.ready && l->out.payload
                                     ? l->out.payload + (uint64_t)frame * FU_WIRE_FRAME
                                     : NULL; /* NULL: in place */
            fu_seal_frame_split(&l->seal, *msg, FU_WIRE_HEADER, src, link_frame_bytes(get64(h + OFF_LENGTH), frame));
            l->sealed_slot = msg;
        }
        if (nn_send(l->sock, msg, NN_MSG, NN_DONTWAIT) < 0) {
            int e = nn_errno();
            if (e == EINTR)
                continue;
            if (e == EAGAIN)
                return 0;
            fail(err, n, "send to %s: %s", l->peer, nn_strerror(e));
            return -1;
        }
        l->sealed_slot = NULL;
        if (msg == &l->out.ready) {
            l->out.ready = NULL;
            if (++l->out.next_frame == l->out.frames)
                l->out.state = OUT_WAIT_ACK;
            /* Build the next frame now: copying it overlaps with the wire. */
        } else {
            control *c = l->ctl_head;
            l->ctl_head = c->next;
            if (!l->ctl_head) {
                l->ctl_tail = NULL;
                l->happened++;
            } /* link_flush_control waits for this */
            free(c);
        }
    }
}

/* Reads what arrived, up to the first frame that gives a caller something
 * (a message, an ack, an error): reading no further than needed, as the
 * blocking calls always did, leaves later messages unacked in the socket
 * for whoever reads next.  0, or -1 with err on a socket error. */
static int recv_some(fu_link *l, char *err, size_t n)
{
    unsigned seen = l->happened;
    for (int i = 0; i < 64 && l->happened == seen; i++) {
        void *m = NULL;
        int rc = nn_recv(l->sock, &m, NN_MSG, NN_DONTWAIT);
        if (rc < 0) {
            int e = nn_errno();
            if (e == EINTR)
                continue;
            if (e == EAGAIN)
                return 0;
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
        if (has_output(l) && link_send_some(l, err, n) != 0)
            return -1; /* acks go out at once */
    }
    return 0;
}

/* Sends and receives until something a caller may want happened (1), the
 * deadline passed or wake_fd became readable (0), or a socket error (-1). */
int link_pump(fu_link *l, int64_t deadline, int wake_fd, char *err, size_t n)
{
    unsigned seen = l->happened;
    for (;;) {
        if (l->broken[0]) {
            fail(err, n, "%s", l->broken);
            return -1;
        }
        if (link_send_some(l, err, n) != 0 || recv_some(l, err, n) != 0)
            return -1;
        if (l->happened != seen)
            return 1;
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return 0;
        struct pollfd fds[3] = { { .fd = l->rcvfd, .events = POLLIN }, { .fd = -1 }, { .fd = -1 } };
        if (has_output(l))
            fds[1] = (struct pollfd){ .fd = l->sndfd, .events = POLLIN };
        if (wake_fd >= 0)
            fds[2] = (struct pollfd){ .fd = wake_fd, .events = POLLIN };
        int rc = poll(fds, 3, left > 0x7fffffff ? 0x7fffffff : (int)left);
        if (rc < 0 && errno != EINTR) {
            fail(err, n, "link to %s: poll: %s", l->peer, strerror(errno));
            return -1;
        }
        if (rc > 0 && (fds[2].revents & (POLLIN | POLLHUP | POLLERR)))
            return 0;
    }
}

/* Waits (until deadline) for queued control frames, acks above all, to be
 * handed to the socket, so that a blocking call returns with its acks sent. */
void link_flush_control(fu_link *l, int64_t deadline)
{
    char why[200];
    while (l->ctl_head && link_pump(l, deadline, -1, why, sizeof why) > 0) {
    }
}

void link_reset_out(fu_link *l)
{
    if (l->out.ready)
        nn_freemsg(l->out.ready);
    memset(&l->out, 0, sizeof l->out);
}

static int start_post(fu_link *l, const fu_msg_info *info, const void *payload, uint64_t deliver_ns, int report,
                      uint64_t *seq, char *err, size_t n)
{
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
    if (seq)
        *seq = l->out.seq;
    return 0;
}

/* fu_link_send with a deadline (timeout_ms: what messages quote) and a
 * cancel descriptor. */
int link_send_wait(fu_link *l, const fu_msg_info *info, const void *payload, int64_t deadline, int timeout_ms,
                   int wake_fd, char *err, size_t n)
{
    uint64_t seq;
    if (start_post(l, info, payload, 0, 0, &seq, err, n) != 0)
        return -1;
    /* Wait for our ack.  The peer may be sending too: its data messages are
     * verified, acked and queued for fu_link_recv. */
    while (l->out.state != OUT_IDLE) {
        int rc = link_pump(l, deadline, wake_fd, err, n);
        if (rc < 0) {
            link_reset_out(l);
            errno = EIO;
            return -1;
        }
        if (rc > 0)
            continue;
        if (now_ms() < deadline) {
            fail(err, n, "send to %s: cancelled", l->peer);
            link_reset_out(l);
            errno = ECANCELED;
            return -1;
        }
        if (l->out.state == OUT_SENDING)
            fail(err, n,
                 "send to %s: not accepted within %d ms (step %" PRId64 ", tensor %" PRId32 "): peer not connected",
                 l->peer, timeout_ms, info->step, info->tensor);
        else
            fail(err, n, "send to %s: no ack within %d ms (step %" PRId64 ", tensor %" PRId32 "): peer dead or stalled",
                 l->peer, timeout_ms, info->step, info->tensor);
        link_reset_out(l);
        errno = ETIMEDOUT;
        return -1;
    }
    return 0;
}

int fu_link_send(fu_link *l, const fu_msg_info *info, const void *payload, char *err, size_t n)
{
    return link_send_wait(l, info, payload, now_ms() + l->timeout_ms, l->timeout_ms, -1, err, n);
}

int fu_link_recv(fu_link *l, fu_msg_info *info, void *payload, uint64_t capacity, char *err, size_t n)
{
    if (!l->head) {
        int64_t deadline = now_ms() + l->timeout_ms;
        l->dst = payload;
        l->dst_capacity = payload ? capacity : 0;
        while (!l->head) {
            int rc = link_pump(l, deadline, -1, err, n);
            if (rc < 0) {
                release_dst(l);
                return -1;
            }
            if (rc == 0) {
                release_dst(l);
                fail(err, n, "no message from %s within %d ms: peer dead or stalled", l->peer, l->timeout_ms);
                return -1;
            }
        }
    }
    pending *p = link_dequeue(l);
    int rc = 0;
    *info = p->info;
    if (p->is_error) {
        fail(err, n, "%s", p->error);
        rc = -1;
    } else if (p->info.length > capacity) {
        /* It is acked already: a buffer that is too small is the caller's
         * bug, reported, the message lost. */
        fail(err, n,
             "message from %s: %" PRIu64 " bytes do not fit the %" PRIu64 "-byte buffer (step %" PRId64
             ", tensor %" PRId32 "): dropped",
             l->peer, p->info.length, capacity, p->info.step, p->info.tensor);
        rc = -1;
    } else if (p->info.length && p->data != payload) {
        memcpy(payload, p->data, (size_t)p->info.length);
    }
    if (p->data == payload)
        p->data = NULL; /* assembled in place */
    link_free_pending(l, p);
    release_dst(l);
    link_flush_control(l, now_ms() + l->timeout_ms);
    return rc;
}

int fu_link_post(fu_link *l, const fu_msg_info *info, const void *payload, uint64_t deliver_ns, uint64_t *seq,
                 char *err, size_t n)
{
    if (start_post(l, info, payload, deliver_ns, 1, seq, err, n) != 0)
        return -1;
    return link_send_some(l, err, n);
}

int fu_link_post_control(fu_link *l, const fu_msg_info *info, const void *payload, uint64_t *seq, char *err, size_t n)
{
    if (!is_control(info->kind) || info->kind == MSG_ACK) {
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
    wire_header w = { .info = *info, .seq = l->next_seq++ };
    void *m = link_build_frame(l, &w, payload, 0);
    if (!m) {
        fail(err, n, "send to %s: out of memory", l->peer);
        return -1;
    }
    link_queue_control(l, m);
    if (acked)
        l->control_waiting[l->n_control_waiting++] = w.seq;
    if (seq)
        *seq = w.seq;
    return link_send_some(l, err, n);
}

int fu_link_poll(fu_link *l, fu_event *ev, int timeout_ms, int wake_fd, char *err, size_t n)
{
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
            pending *p = link_dequeue(l);
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
        int rc = link_pump(l, deadline, wake_fd, err, n);
        if (rc <= 0)
            return rc;
    }
}

int64_t fu_link_last_heard_ms(const fu_link *l) { return l->last_heard_ms; }

int fu_link_send_raw(fu_link *l, const void *bytes, size_t len, char *err, size_t n)
{
    void *m = nn_allocmsg(len, 0);
    if (!m) {
        fail(err, n, "send to %s: cannot allocate %zu bytes", l->peer, len);
        return -1;
    }
    memcpy(m, bytes, len);
    int v = l->timeout_ms;
    nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_SNDTIMEO, &v, sizeof v);
    for (;;) {
        if (nn_send(l->sock, &m, NN_MSG, 0) >= 0)
            return 0;
        if (nn_errno() == EINTR)
            continue;
        fail(err, n, "send to %s: %s", l->peer, nn_strerror(nn_errno()));
        nn_freemsg(m);
        return -1;
    }
}

const char *fu_link_peer(const fu_link *l) { return l->peer; }

void fu_link_close(fu_link *l)
{
    if (!l)
        return;
    l->dst = NULL;
    while (l->head)
        link_free_pending(l, link_dequeue(l));
    while (l->ctl_head) {
        control *c = l->ctl_head;
        l->ctl_head = c->next;
        nn_freemsg(c->msg);
        free(c);
    }
    link_reset_out(l);
    if (l->in.active && !l->in.data_is_dst)
        free(l->in.data);
    if (l->sock >= 0)
        nn_close(l->sock);
    if (l->hash)
        XXH3_freeState(l->hash);
    free(l);
}
