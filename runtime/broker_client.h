/* broker_client.h: a device program's line to the run's broker
 * (fusionc broker, broker/broker.c), given by --broker URL.
 *
 * The device registers when it starts, then reports each finished step,
 * each checkpoint part it wrote (its file's XXH3, so the broker can mark a
 * checkpoint whole and a resume can check it) and its end; between reports
 * it sends a heartbeat every second.  Every request is one text line
 *     <verb> <device> <epoch> [<args>]       hello PID | beat |
 *                                            step N LOSS COMPUTE PLANNED LINE |
 *                                            links N WALL TRAFFIC |
 *                                            part STEP FILE XXH3 | bye STATUS
 * (COMPUTE: the step's seconds in ops other than messages; PLANNED: the
 * estimator's seconds for them, rt_context's compute and planned; LINE:
 * the device's step line; WALL: the step's seconds; TRAFFIC: what each
 * link carried in it, rt_comm_links_report)
 * over a nanomsg REQ socket, answered "ok" or "refused <why>" (a device of
 * an epoch that is over: the broker declared it lost and started the run
 * again without it).
 *
 * Training never waits for the broker: reports go through a queue that a
 * thread of the client sends in order, each retried until answered (the
 * broker may be restarting: it keeps its state in SQLite); only the last
 * report, at the end, waits a bounded time.  A refusal is kept, and the
 * device stops at its next step boundary, saying why (rt_broker_refused),
 * or at once when it had been stopped past the refusal (SIGSTOP). */
#ifndef FUSION_RT_BROKER_CLIENT_H
#define FUSION_RT_BROKER_CLIENT_H

#include <stddef.h>
#include <stdint.h>

typedef struct rt_broker rt_broker;

/* Starts the client's thread and queues the hello.  secret: the run's
 * (FU_SECRET_BYTES, copied).  0, or -1 with err. */
int rt_broker_open(rt_broker **out, const char *url, const char *device, int64_t epoch, const uint8_t *secret,
                   char *err, size_t n);

/* Queues "<verb> <device> <epoch> <args>" (args printf-style). */
void rt_broker_report(rt_broker *b, const char *verb, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Queues a heartbeat and waits up to wait_ms until it (and every report
 * before it) is answered: 0 when the broker took it, -1 when it did not
 * answer in time.  A refusal ends the process from the client's thread, as
 * any refusal does, so a caller that gets 0 is still of the run's epoch:
 * what it writes next into the run's folders is wanted (a device woken
 * from SIGSTOP after the broker started the run again without it must
 * not drop its state into them). */
int rt_broker_confirm(rt_broker *b, int wait_ms);

/* The broker's reason when it refused this device, else NULL. */
const char *rt_broker_refused(rt_broker *b);

/* Queues "bye STATUS", waits up to wait_ms for the queue to be sent, and
 * stops the thread.  Returns the refusal, if the broker refused (the
 * caller prints it), else NULL; the string lives until rt_broker_free. */
const char *rt_broker_close(rt_broker *b, int status, int wait_ms);
void rt_broker_free(rt_broker *b);

/* A standby's agent: "standby NAME 0" every second until the broker
 * answers "stop" (it is used, or the run ended: exit status 0) or has not
 * answered for 600 s (1). */
int rt_broker_standby(const char *url, const char *name, const uint8_t *secret);

/* Sealing (comm/seal.h boxes under the run secret): a request is
 *     box("broker request", "<stamp> <text>")
 * where stamp is CLOCK_REALTIME in microseconds, strictly growing per
 * client (rt_broker_stamp), so the broker can refuse a replay (a stamp not
 * above the last it took from that device, or more than a minute off its
 * clock); the reply is box("broker reply", text) with the request's nonce
 * as associated data, so only the answer to this request opens.
 * rt_broker_exchange sends text on a REQ socket and returns the reply's
 * length (in reply, NUL-terminated), -1 with no answer, -2 when the reply
 * does not open. */
uint64_t rt_broker_stamp(uint64_t *last);
int rt_broker_exchange(int sock, const uint8_t *secret, uint64_t *last, const char *text, char *reply, size_t cap);

#endif
