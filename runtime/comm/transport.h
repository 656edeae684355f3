/* transport.h: one connected neighbour (a "link") over which a device sends
 * and receives tensors, with a versioned, checksummed header on every message
 * and an acknowledgement for every message that must not be lost.
 *
 * This is the only interface the runtime uses for the wire (DESIGN.md §4):
 * today it is nanomsg over tcp, one NN_PAIR socket per neighbour; another
 * transport replaces transport.c, not its callers.  It is deliberately not a
 * collective library (no all-reduce, no routing): one link, one peer.
 *
 * Use:
 *
 *     char err[256];
 *     fu_link *l = fu_link_connect("tcp://10.0.0.2:5555", "gpu1", 5000, err, sizeof err);
 *     if (!l) { fprintf(stderr, "%s\n", err); return -1; }
 *     fu_msg_info m = {.kind = MSG_ACTIVATION, .step = 3, .micro_batch = 0,
 *                      .tensor = 7, .codec = FU_CODEC_RAW_F32, .length = n * sizeof(float)};
 *     if (fu_link_send(l, &m, x, err, sizeof err) != 0) ...   // returns once the peer acked
 *     ...
 *     fu_msg_info got;
 *     if (fu_link_recv(l, &got, dx, capacity, err, sizeof err) != 0) ...
 *     fu_link_close(l);
 *
 * One side listens (binds), the other connects; both then exchange a
 * MSG_HANDSHAKE (which checks the protocol version) before the constructor
 * returns, so both must start within timeout_ms of each other.  Device
 * programs open every link sealed (fu_link_open_sealed, below, and
 * comm/seal.h): the handshake then proves the run secret, and every later
 * frame is sealed; the plain form serves the transport's own tests and
 * benchmarks.  Its payload
 * is a random number of the sending link's: a connect to a loopback port
 * that nobody listens on can connect to itself (TCP self-connect), which
 * shows as receiving one's own number, and is dropped and retried.
 *
 * Wire format: a message travels as one or more frames; a frame is one
 * nanomsg message, a 64-byte header, little-endian, then its payload bytes.
 *
 *     offset size field
 *      0      4   magic        "FUSN" (FU_WIRE_MAGIC)
 *      4      2   version      FU_WIRE_VERSION
 *      6      2   kind         fu_msg_kind
 *      8      8   step         int64
 *     16      4   micro_batch  int32
 *     20      4   tensor       int32
 *     24      4   codec        int32 (FU_CODEC_RAW_F32 = 0)
 *     28      4   frame        uint32, this frame's index in its message, from 0
 *     32      8   length       uint64, payload bytes of the whole message
 *     40      8   seq          uint64, sender's message number; an ack echoes it
 *     48      8   checksum     XXH3_64bits(frame payload, seed = XXH3_64bits(header with checksum zeroed))
 *     56      8   deliver_ns   uint64, CLOCK_REALTIME ns before which the receiver's
 *                              user must not see the message (link shaping, hub.h); 0 = at once
 *
 * Frames: a message of `length` bytes goes as ceil(length / FU_WIRE_FRAME)
 * frames (one when length is 0); frame i carries payload bytes
 * [i * FU_WIRE_FRAME, min(length, (i + 1) * FU_WIRE_FRAME)).  Large tensors
 * are framed because nanomsg allocates a buffer per message, and buffers of
 * tens of MiB cost fresh pages every time; small frames stay in reused,
 * cached memory and let copying overlap with the wire (transport.c says
 * more, bench/bench_transport.c measures it).  The first link opened also
 * pins glibc's malloc thresholds for the process (transport.c, tune_malloc).
 * The frames of one message are sent back to back; only control messages
 * (ack, heartbeat, abort, bye, stop: one frame each) may come between them.  The receiver
 * checks every frame and acks once, after the last.  Version 1 had no frames
 * and no deliver_ns (both fields were reserved, zero).
 *
 * Delivery: fu_link_send returns 0 only after the peer's fu_link_recv (or
 * any of its calls that read the socket) verified the message and sent back a
 * MSG_ACK echoing its seq, within timeout_ms; otherwise it fails naming the
 * peer.  A message with a bad magic, version, length or checksum is never
 * delivered and never acked: recv returns -1 with
 *     "message from gpu1: checksum mismatch (step 3, tensor 7): dropped"
 * and the next recv reads the next message.  A peer that sends nothing for
 * timeout_ms makes recv fail ("no message from gpu1 within 5000 ms: peer dead
 * or stalled"); nothing waits forever.
 *
 * Both sides may send at the same time: a data message that arrives while
 * send waits for its ack is verified, acked and queued for the next recv.
 * A send that fails may still have been delivered (the ack was lost): a
 * caller that retries must tolerate a duplicate.
 *
 * Errors are values: every function returns NULL or -1 and writes a one-line
 * message into err (n bytes).  A fu_link is not thread-safe: one thread uses
 * it at a time.
 *
 * Driving a link without blocking (what runtime/comm/hub.c does from one I/O
 * thread per link): fu_link_post starts sending a data message and returns;
 * fu_link_poll moves bytes both ways for up to timeout_ms and reports one
 * event at a time (a message arrived, a post was acked), acking what
 * arrives as it goes; fu_link_post_control sends a one-frame message (a
 * heartbeat, an abort) ahead of the data frames still to go.
 */
#ifndef FUSION_TRANSPORT_H
#define FUSION_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/seal.h"

#define FU_WIRE_MAGIC     0x4E535546u /* "FUSN" read as little-endian bytes */
#define FU_WIRE_VERSION   2
#define FU_WIRE_HEADER    64           /* bytes before a frame's payload */
#define FU_WIRE_FRAME     (512u << 10) /* payload bytes per frame (the last may be shorter) */
#define FU_CODEC_RAW_F32  0
#define FU_CODEC_RAW_F16  3 /* 1 and 2: comm/topk.h, comm/quant.h */
#define FU_CODEC_RAW_BF16 4

typedef struct fu_link fu_link; /* one connected neighbour */

typedef enum {
    MSG_HANDSHAKE = 1,
    MSG_ACTIVATION,
    MSG_GRADIENT,
    MSG_ACK,
    MSG_HELLO,     /* hub: build id and device name, once per link after the handshake */
    MSG_HEARTBEAT, /* hub: "still here" on an idle link; control, never acked */
    MSG_ABORT,     /* hub: the sender stops; payload: why, as text; control, acked */
    MSG_BYE,       /* hub: the sender closes its end cleanly; control, acked */
    MSG_STOP,      /* hub: what the sender knows of a stop request (SIGINT, SIGTERM): the
                        table of comm/stop_table.h; control, never acked (hub.c) */
} fu_msg_kind;

typedef struct {
    uint32_t kind; /* fu_msg_kind */
    int64_t step;
    int32_t micro_batch;
    int32_t tensor;  /* tensor id, agreed by the two programs at compile time */
    int32_t codec;   /* FU_CODEC_RAW_F32 */
    uint64_t length; /* payload bytes */
} fu_msg_info;

/* Bind to url ("tcp://127.0.0.1:5555") and wait up to timeout_ms for the
 * peer's handshake.  peer_name is only used in messages.  timeout_ms also
 * bounds every later send (until acked) and recv. */
fu_link *fu_link_listen(const char *url, const char *peer_name, int timeout_ms, char *err, size_t n);
/* Connect to url (nanomsg retries until the peer listens) and handshake. */
fu_link *fu_link_connect(const char *url, const char *peer_name, int timeout_ms, char *err, size_t n);
/* Either of the two (listen != 0: bind), giving up early with errno
 * ECANCELED when cancel_fd (a pipe's read end; -1 for none) becomes
 * readable.  On failure errno tells timeouts (ETIMEDOUT) from the rest. */
fu_link *fu_link_open(const char *url, int listen, const char *peer_name, int timeout_ms, int cancel_fd, char *err,
                      size_t n);

/* fu_link_open with a sealed handshake (comm/seal.h) when auth is not NULL:
 * both ends prove they hold the run secret and agree on the build id,
 * both names and the epoch, and every frame after it is sealed (AEAD
 * under per-connection keys, counter nonces).  A frame that does not open
 * is dropped, counted, logged (stderr) and closes the link: every later
 * call fails with that reason.  Listening, a connection that is refused
 * (or sends no handshake within 5 s) is dropped and the port listens on
 * for the right peer until timeout_ms; connecting, a refusal fails at
 * once (errno EPROTO).  auth must outlive the link. */
fu_link *fu_link_open_sealed(const char *url, int listen, const char *peer_name, int timeout_ms, int cancel_fd,
                             const fu_link_auth *auth, char *err, size_t n);

/* Send info + payload (info->length bytes) and wait for the ack. */
int fu_link_send(fu_link *l, const fu_msg_info *info, const void *payload, char *err, size_t n);
/* Receive the next verified data message into payload (capacity bytes) and
 * ack it.  A message longer than capacity is an error, dropped (acked).
 * After an error the payload's contents are unspecified. */
int fu_link_recv(fu_link *l, fu_msg_info *info, void *payload, uint64_t capacity, char *err, size_t n);
void fu_link_close(fu_link *l);

/* ---- without blocking ------------------------------------------------- */

typedef enum {
    FU_EVENT_NONE = 0,
    FU_EVENT_MESSAGE, /* a verified message arrived (and was acked if it needs one);
                                heartbeats are not reported (see fu_link_last_heard_ms) */
    FU_EVENT_ACKED,   /* the peer acked the post numbered seq */
} fu_event_type;

typedef struct {
    fu_event_type type;
    fu_msg_info info;    /* MESSAGE */
    void *payload;       /* MESSAGE: info.length bytes, malloc'd (NULL when 0): the caller frees it */
    uint64_t deliver_ns; /* MESSAGE: the sender's deliver_ns stamp, 0 = at once */
    uint64_t seq;        /* ACKED */
} fu_event;

/* Starts sending a data message (one at a time: -1 while an earlier post is
 * not acked yet) and returns its seq.  The payload is read as frames go out
 * and must stay valid until FU_EVENT_ACKED for that seq, or the link's end. */
int fu_link_post(fu_link *l, const fu_msg_info *info, const void *payload, uint64_t deliver_ns, uint64_t *seq,
                 char *err, size_t n);
/* Queues a one-frame control message (MSG_HEARTBEAT or MSG_STOP, unacked;
 * MSG_ABORT or MSG_BYE, acked: FU_EVENT_ACKED with *seq) ahead of any data
 * frame still to go; the payload is copied.  Abort, bye and stop arrive as
 * FU_EVENT_MESSAGE in wire order with the data messages around them. */
int fu_link_post_control(fu_link *l, const fu_msg_info *info, const void *payload, uint64_t *seq, char *err, size_t n);
/* Sends and receives for up to timeout_ms (0: what can be done now) and
 * returns 1 with the first event, 0 when there was none by then or wake_fd
 * (-1: none) became readable (the caller drains it), -1 on a dropped
 * (corrupt, unexpected) message or a socket error. */
int fu_link_poll(fu_link *l, fu_event *ev, int timeout_ms, int wake_fd, char *err, size_t n);
/* CLOCK_MONOTONIC milliseconds when the last frame of any kind arrived
 * (the handshake counts): what a liveness check compares against. */
int64_t fu_link_last_heard_ms(const fu_link *l);

/* Tests: the wire bytes fu_link_send would send for a one-frame message
 * (header + payload, malloc'd, *len set; seq as given; NULL when the payload
 * needs more than one frame), and a send of arbitrary bytes that does not
 * wait for an ack, to inject corruption. */
void *fu_link_encode(const fu_msg_info *info, const void *payload, uint64_t seq, size_t *len);
int fu_link_send_raw(fu_link *l, const void *bytes, size_t len, char *err, size_t n);

/* The error-message name of the peer; for callers' own messages. */
const char *fu_link_peer(const fu_link *l);

#endif
