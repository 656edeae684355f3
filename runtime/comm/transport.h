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
 * returns, so both must start within timeout_ms of each other.
 *
 * Wire format: a 64-byte header, little-endian, then `length` payload bytes.
 *
 *     offset size field
 *      0      4   magic        "FUSN" (FU_WIRE_MAGIC)
 *      4      2   version      FU_WIRE_VERSION
 *      6      2   kind         fu_msg_kind
 *      8      8   step         int64
 *     16      4   micro_batch  int32
 *     20      4   tensor       int32
 *     24      4   codec        int32 (FU_CODEC_RAW_F32 = 0)
 *     28      4   reserved     0
 *     32      8   length       uint64, payload bytes
 *     40      8   seq          uint64, sender's message number; an ack echoes it
 *     48      8   checksum     XXH3_64bits(payload, seed = XXH3_64bits(header with checksum zeroed))
 *     56      8   reserved     0
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
 */
#ifndef FUSION_TRANSPORT_H
#define FUSION_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#define FU_WIRE_MAGIC    0x4E535546u   /* "FUSN" read as little-endian bytes */
#define FU_WIRE_VERSION  1
#define FU_WIRE_HEADER   64            /* bytes before the payload */
#define FU_CODEC_RAW_F32 0

typedef struct fu_link fu_link;   /* one connected neighbour */

typedef enum {
    MSG_HANDSHAKE = 1,
    MSG_ACTIVATION,
    MSG_GRADIENT,
    MSG_ACK,
} fu_msg_kind;

typedef struct {
    uint32_t kind;          /* fu_msg_kind */
    int64_t  step;
    int32_t  micro_batch;
    int32_t  tensor;        /* tensor id, agreed by the two programs at compile time */
    int32_t  codec;         /* FU_CODEC_RAW_F32 */
    uint64_t length;        /* payload bytes */
} fu_msg_info;

/* Bind to url ("tcp://127.0.0.1:5555") and wait up to timeout_ms for the
 * peer's handshake.  peer_name is only used in messages.  timeout_ms also
 * bounds every later send (until acked) and recv. */
fu_link *fu_link_listen(const char *url, const char *peer_name, int timeout_ms, char *err, size_t n);
/* Connect to url (nanomsg retries until the peer listens) and handshake. */
fu_link *fu_link_connect(const char *url, const char *peer_name, int timeout_ms, char *err, size_t n);

/* Send info + payload (info->length bytes) and wait for the ack. */
int fu_link_send(fu_link *l, const fu_msg_info *info, const void *payload, char *err, size_t n);
/* Receive the next verified data message into payload (capacity bytes) and
 * ack it.  A message longer than capacity is an error, dropped unacked. */
int fu_link_recv(fu_link *l, fu_msg_info *info, void *payload, uint64_t capacity, char *err, size_t n);
void fu_link_close(fu_link *l);

/* Tests: the wire bytes fu_link_send would send for this message (header +
 * payload, malloc'd, *len set; seq as given), and a send of arbitrary bytes
 * that does not wait for an ack, to inject corruption. */
void *fu_link_encode(const fu_msg_info *info, const void *payload, uint64_t seq, size_t *len);
int   fu_link_send_raw(fu_link *l, const void *bytes, size_t len, char *err, size_t n);

/* The error-message name of the peer; for callers' own messages. */
const char *fu_link_peer(const fu_link *l);

#endif
