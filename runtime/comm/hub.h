/* hub.h: a device's communication hub: every link of one device program,
 * each driven by its own I/O thread, behind calls that do not wait for the
 * wire.
 *
 * A fu_link (transport.h) sends one message at a time and blocks until the
 * peer acks; a device talks to several peers and must keep computing while
 * its tensors travel.  The hub gives it:
 *
 *   - asynchronous sends: fu_hub_send copies the payload into the link's
 *     outbox and returns; the link's I/O thread sends the outbox in order,
 *     one acked message after the other;
 *   - matched receives: fu_hub_recv waits for the message with exactly the
 *     (kind, step, micro_batch, tensor) asked for, whatever order messages
 *     arrive in (an inbox per link);
 *   - liveness: an idle link carries a heartbeat (MSG_HEARTBEAT) every
 *     min(1 s, timeout_ms / 4); a link from which nothing at all arrived
 *     for timeout_ms is dead (nanomsg does not report a peer that was
 *     killed: its socket just goes quiet);
 *   - failure that spreads: the first failure of any link (a dead peer, a
 *     corrupt message, a peer's abort) fails the hub, and its I/O threads
 *     at once send MSG_ABORT with that text to every other live peer, whose
 *     hubs fail with "peer <this device> stopped: <text>" and pass it on.
 *     So when one device of a chain dies, every other device fails within
 *     about timeout_ms, naming the device that died, even while its main
 *     thread is busy computing;
 *   - a stop that every device agrees on (below): on a signal, each device
 *     of a run finishes the same step, saves and exits;
 *   - link shaping, to emulate a slow WAN link on loopback (below).
 *
 * Use (the device's main thread; the hub's own threads are internal):
 *
 *     fu_hub_link_spec links[2] = {
 *         {.peer = 0, .name = "cpu-a0", .url = "tcp://127.0.0.1:29500", .listen = 0},
 *         {.peer = 2, .name = "cpu-a2", .url = "tcp://127.0.0.1:29501", .listen = 1,
 *          .bandwidth = 12.5e6, .latency = 0.030},        // 100 Mbit/s, 30 ms
 *     };
 *     fu_hub_options o = {.self_name = "cpu-a1", .build_id = manifest.build_id};
 *     fu_hub *h = fu_hub_open(links, 2, &o, err, sizeof err);    // waits for both peers
 *     if (!h) { fprintf(stderr, "%s\n", err); return 1; }
 *     fu_msg_info x = {.kind = MSG_ACTIVATION, .step = s, .micro_batch = mb, .tensor = 7,
 *                      .codec = FU_CODEC_RAW_F32, .length = bytes};
 *     if (fu_hub_recv(h, 0, &x, in, bytes, err, sizeof err) != 0) goto fail;   // from cpu-a0
 *     ... compute ...
 *     if (fu_hub_send(h, 2, &x, out, err, sizeof err) != 0) goto fail;         // to cpu-a2
 *     ...
 *     if (fu_hub_flush(h, err, sizeof err) != 0) goto fail;   // every send acked
 *     fu_hub_close(h);
 *     return 0;
 * fail:
 *     fu_hub_abort(h, err);   // tells the peers why, within about a second
 *     fu_hub_close(h);
 *     return 1;
 *
 * Opening: every link is bound or connected in parallel, then the two ends
 * exchange a hello (MSG_HELLO: build id and device name).  A peer whose
 * build id differs is refused on both ends:
 *     "peer cpu-a1 runs another compile (build 1a2b..., this program is build 3c4d...): refused"
 * and one that does not show within connect_timeout_ms fails the open:
 *     "peer cpu-a1 (tcp://127.0.0.1:29501) did not connect within 60000 ms"
 *
 * Sending: the payload is copied; sends on one link arrive in the order
 * made.  More than FU_HUB_OUTBOX_BYTES queued on one link makes the caller
 * wait for the link to drain (a fast producer cannot exhaust memory; a
 * single message larger than that is still taken when the outbox is empty).
 * fu_hub_flush waits until every send of every link was acked.
 *
 * Receiving: messages from a link that were not asked for yet wait in its
 * inbox (unbounded: the peer's outbox bound limits it to what the peer's
 * program sends ahead).  A message whose length differs from want->length
 * is an error (the two programs disagree about a tensor).
 *
 * Failure: every call returns -1 with a one-line message in err (n bytes)
 * once the hub has failed, and the first failure's text is what every
 * later call reports:
 *     "lost peer cpu-b0: nothing received for 10000 ms (killed, crashed or cut off)"
 *     "peer cpu-b0 stopped: <its reason>"
 *     "aborted: <why>"                      (this program's fu_hub_abort)
 * No call waits forever: a wait on a dead peer ends within timeout_ms, and
 * any wait on a live peer ends after stall_timeout_ms ("... within N ms:
 * the programs disagree on the schedule?").  Library code never exits.
 *
 * Stopping together (SIGINT, SIGTERM): every device of the run must finish
 * the same step and stop.  Devices need not be near each other: a stage
 * that only sends can run many steps ahead.  So the hubs flood a table
 * (comm/stop_table.h): each device that learns of the request enters the
 * step it is in (it cannot stop before finishing it), and the run stops
 * after the largest entry.  The main thread:
 *
 *     fu_hub_set_step(h, first_step);
 *     for (step = first_step;; step++) {
 *         ... the step ...
 *         if (got_signal && !asked) { fu_hub_request_stop(h, 130); asked = 1; }
 *         int code, r = fu_hub_step_done(h, step, &code, err, sizeof err);
 *         if (r < 0) goto fail;
 *         if (r == 1) { save(step); flush; close; return code; }   // every device stops after this step
 *     }
 *
 * fu_hub_step_done returns at once while no stop is asked for; once one
 * is, it waits until every device's entry is in (the tables travel with
 * the I/O threads, so within the links' latency) and says whether `step`
 * is the last.  The table (MSG_STOP) goes to every live peer ahead of data
 * not yet on the wire and is passed on at once by each hub it changes.
 * A request is not a failure: data, flush and close go on as before.
 *
 * Link shaping (bandwidth > 0 or latency > 0 in a link's spec) applies to
 * what this end sends on that link.  The I/O thread treats the link as one
 * wire of `bandwidth` bytes/s: a message occupies it for length / bandwidth
 * seconds after the previous one left (messages serialize), and is stamped
 * (the header's deliver_ns) with the moment it must be delivered: when its
 * serialization started, plus length / bandwidth, plus latency.  The real
 * bytes move at loopback speed and are acked at once; the receiving hub
 * keeps a message invisible to fu_hub_recv until its stamp.  Latency thus
 * never blocks the sender: several messages can be in flight within one
 * latency window.  Stamps are CLOCK_REALTIME: shaping assumes both ends run
 * on one machine (one clock), which is what it is for.  fu_hub_stats
 * reports, per link, the payload bytes acked and the seconds the link was
 * busy sending them (the shaped time when shaped), so measured throughput
 * is bytes / busy.
 *
 * Thread safety: one thread (the device's main thread) makes every call on
 * a hub.
 */
#ifndef FUSION_HUB_H
#define FUSION_HUB_H

#include <stddef.h>
#include <stdint.h>

#include "comm/transport.h"

#define FU_HUB_OUTBOX_BYTES (256ull << 20) /* per link, before fu_hub_send waits */

typedef struct fu_hub fu_hub;

typedef struct {
    int32_t peer;      /* the peer's device index (the caller's numbering)              */
    char name[64];     /* the peer's device name, for messages                          */
    char url[256];     /* "tcp://127.0.0.1:29501": bound if listen, else connected to   */
    char address[200]; /* the peer's host, for messages ("127.0.0.1"; "" unknown)   */
    int listen;
    double bandwidth; /* bytes/s to emulate on what this end sends; 0 = unshaped       */
    double latency;   /* seconds to emulate; 0 = none                                  */
} fu_hub_link_spec;

typedef struct {
    const char *self_name;  /* this device's name, sent in the hello                     */
    uint64_t build_id;      /* both ends must have the same, else refused at the hello   */
    int64_t epoch;          /* the run's epoch (fusionc broker: it grows with every change
                                       of the members); both ends must have the same, else refused */
    int timeout_ms;         /* dead-peer timeout; 0 = 10000                              */
    int connect_timeout_ms; /* how long to wait for every peer at open; 0 = 60000        */
    int stall_timeout_ms;   /* longest wait on a live peer (recv, flush, a full outbox);
                                       0 = 600000                                                 */
    const uint8_t *secret;  /* the run secret (FU_SECRET_BYTES, seal.h): every link sealed;
                                       NULL: plain links (tests and benchmarks of the wire only)  */
    int32_t self_index;     /* this device's index (the links' peer numbering)           */
    int32_t n_devices;      /* members[n_devices]: 1 for each device of the run, whose   */
    const uint8_t *members; /* entry a stop waits for; n_devices 0: this one and its peers */
} fu_hub_options;

/* Connects every link and exchanges hellos; NULL and err on failure (the
 * links already opened are closed again). */
fu_hub *fu_hub_open(const fu_hub_link_spec *links, int n_links, const fu_hub_options *o, char *err, size_t n);

/* Queues info + payload (info->length bytes, copied) for `peer`. */
int fu_hub_send(fu_hub *h, int32_t peer, const fu_msg_info *info, const void *payload, char *err, size_t n);
/* Waits for the message from `peer` matching want's kind, step, micro_batch
 * and tensor, checks its length is want->length (<= capacity) and copies it
 * into payload. */
int fu_hub_recv(fu_hub *h, int32_t peer, const fu_msg_info *want, void *payload, uint64_t capacity, char *err,
                size_t n);
/* The same for a message whose length the sender chose (a top-k tensor
 * whose density the sender adapts): any length up to capacity is taken,
 * and stored in *length; a longer one is an error. */
int fu_hub_recv_upto(fu_hub *h, int32_t peer, const fu_msg_info *want, void *payload, uint64_t capacity,
                     uint64_t *length, char *err, size_t n);
/* Waits until every queued send is acked. */
int fu_hub_flush(fu_hub *h, char *err, size_t n);

/* Stopping together (above).  request_stop: this device asks (code: the
 * exit code, 130 or 143; every device exits with the same one, the lowest
 * its entries hold).  set_step: the step the main thread starts with.
 * step_done, at the end of each step: 0 go on, 1 stop after this step
 * (*code set), -1 failed (err; the hub failed, or not every device
 * answered within the stall timeout). */
void fu_hub_request_stop(fu_hub *h, int code);
void fu_hub_set_step(fu_hub *h, int64_t step);
int fu_hub_step_done(fu_hub *h, int64_t step, int *code, char *err, size_t n);

/* Fails the hub with why (if it has not failed already) and tells every
 * live peer (MSG_ABORT carrying the failure's text), waiting about a second
 * at most for their acks.  Call it before exiting non-zero. */
void fu_hub_abort(fu_hub *h, const char *why);
/* Stops the I/O threads and frees everything; NULL is fine. */
void fu_hub_close(fu_hub *h);

/* For `peer`, since the hub opened: the data messages sent and acked,
 * their payload bytes, and the seconds the link was busy sending them:
 * shaped, each message's serialization (length / bandwidth); unshaped,
 * from its post to its ack (its bytes on the wire plus a round trip).
 * -1 for an unknown peer. */
typedef struct {
    uint64_t bytes, messages;
    double busy_seconds;
} fu_hub_link_stats;
int fu_hub_stats(const fu_hub *h, int32_t peer, fu_hub_link_stats *s);

/* A shaped link's bandwidth (bytes/s) from its next message on: a link
 * that drifts from what the cluster file declares (tests of the broker's
 * re-measuring, --inject-link-mbps).  -1 for an unknown or unshaped link. */
int fu_hub_set_bandwidth(fu_hub *h, int32_t peer, double bandwidth);

#endif
