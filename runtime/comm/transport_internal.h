/* transport_internal.h: what the two halves of the transport share
 * (internal to runtime/comm): transport.c (frames, queues, the loop) and
 * transport_open.c (the socket, the handshakes, fu_link_open).  Not an
 * interface: see transport.h. */
#ifndef FUSION_TRANSPORT_INTERNAL_H
#define FUSION_TRANSPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>

#include "comm/seal.h"
#include "le_bytes.h"
#include "comm/transport.h"
#include "comm/wire_util.h"

/* A message (or an error) waiting for fu_link_recv / fu_link_poll: read
 * while waiting for something else, already verified and acked.  A message
 * that failed verification is queued as its error text, so the next recv
 * reports it instead of it vanishing. */
typedef struct pending {
    struct pending *next;
    fu_msg_info info;
    uint8_t *data; /* info.length bytes (malloc'd, or the user's buffer: see dst) */
    uint64_t deliver_ns;
    int is_error;
    char error[200];
} pending;

/* An outgoing control message (ack, heartbeat, abort): one whole frame. */
typedef struct control {
    struct control *next;
    void *msg; /* nanomsg buffer */
} control;

enum { OUT_IDLE, OUT_SENDING, OUT_WAIT_ACK };

struct fu_link {
    int sock, rcvfd, sndfd;
    /* Sealing (seal.h), when opened with a run secret: frames are sealed
     * from the confirmation on, each as it is handed to the socket (the
     * counter is the order on the wire); sealed_slot is a frame sealed but
     * not yet taken by the socket, which must go next. */
    const fu_link_auth *auth;
    fu_seal seal;
    int sealed;
    void **sealed_slot;
    char url[256];
    uint64_t dropped; /* frames refused (did not open): the link closes at the first */
    char broken[240]; /* why it closed: every later call fails with it */
    int timeout_ms;
    uint64_t next_seq; /* seq of the next message we send; starts at 1 */
    char peer[64];
    XXH3_state_t *hash;
    int64_t last_heard_ms;
    unsigned happened; /* bumped whenever a caller may want to look (see pump) */

    pending *head, *tail;         /* complete messages and errors, in arrival order */
    control *ctl_head, *ctl_tail; /* control frames to send before the next data frame */

    /* The data message being sent. */
    struct {
        int state;  /* OUT_* */
        int report; /* fu_link_post: report the ack as an event */
        fu_msg_info info;
        const uint8_t *payload; /* borrowed from the caller until acked */
        uint64_t seq, deliver_ns;
        uint32_t next_frame, frames;
        void *ready; /* next frame, built but not yet taken by the socket */
    } out;

    /* The data message being received, frame by frame. */
    struct {
        int active;
        fu_msg_info info;
        uint64_t seq, deliver_ns;
        uint32_t next_frame, frames;
        uint8_t *data;
        int data_is_dst;
        uint64_t skip_seq; /* a dropped message whose later frames are dropped silently */
    } in;

    /* fu_link_recv's buffer, while it waits: the next message that fits is
     * assembled there directly instead of in a buffer of its own. */
    uint8_t *dst;
    uint64_t dst_capacity;

    /* Acks of fu_link_post / fu_link_post_control to report. */
    uint64_t acked[16];
    int n_acked;
    uint64_t control_waiting[8]; /* acked control posts not acked yet */
    int n_control_waiting;
};

static inline void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

enum {
    OFF_MAGIC = 0,
    OFF_VERSION = 4,
    OFF_KIND = 6,
    OFF_STEP = 8,
    OFF_MB = 16,
    OFF_TENSOR = 20,
    OFF_CODEC = 24,
    OFF_FRAME = 28,
    OFF_LENGTH = 32,
    OFF_SEQ = 40,
    OFF_CHECKSUM = 48,
    OFF_DELIVER = 56
};

typedef struct {
    fu_msg_info info;
    uint64_t seq, deliver_ns;
    uint32_t frame;
} wire_header;

/* transport.c */
size_t link_frame_bytes(uint64_t length, uint32_t frame);
void *link_build_frame(fu_link *l, const wire_header *w, const uint8_t *payload, int defer);
void link_queue_control(fu_link *l, void *msg);
pending *link_dequeue(fu_link *l);
void link_free_pending(fu_link *l, pending *p);
void link_drop_incoming(fu_link *l);
void link_reset_out(fu_link *l);
int link_send_some(fu_link *l, char *err, size_t n);
int link_pump(fu_link *l, int64_t deadline, int wake_fd, char *err, size_t n);
void link_flush_control(fu_link *l, int64_t deadline);
int link_send_wait(fu_link *l, const fu_msg_info *info, const void *payload, int64_t deadline, int timeout_ms,
                   int wake_fd, char *err, size_t n);

#endif
