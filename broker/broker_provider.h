/* broker_provider.h: providers that join a run with an invite (fusionc
 * provide, tools/provide.c; invite.h has the invite and the frames).
 *
 * A provider's agent speaks first, always (it may sit behind a router):
 *   offer NAME k=v...      its device as measured (kind, arch, machine,
 *                          peaks, memory, bandwidth, threads), its address
 *                          and its link to the broker: checked against the
 *                          kinds the run's bundles are for, added to the
 *                          run's cluster as a standby (cluster_edit.h)
 *                          and weighed at the next complete checkpoint, as
 *                          a standby that registers mid-run is
 *   wait NAME              every half second: its orders, one a request:
 *                          stop, kill SIG, run EPOCH, put ID FILE, ok, pool
 *   plan NAME EPOCH        what to run: "device D", "file REL SIZE XXH3"
 *                          (its bundle folder, bundle/..., and the checkpoint
 *                          it resumes from, resume/...), "arg X" lines
 *   get NAME EPOCH REL AT  a file's bytes from AT: "ok SIZE LEN\n" + bytes
 *   put NAME ID AT SIZE    a checkpoint part its program wrote, + bytes
 *   ended NAME EPOCH ST    its program ended with wait status ST
 *   ping, probe NAME       answered "ok": its link measured
 * The broker never connects to a provider's agent.  While it offers, the
 * provider listens on a TCP port it names (inbound-port=P), and the broker
 * tries to connect there: a provider it reaches takes connections from
 * its program's peers, at the address it reported; one it does not
 * (behind NAT, a firewall) is written into the cluster inbound="false",
 * so each of its program's links is opened from it, and the planner never
 * links it with another such device (cluster.h: no path).  There is no
 * relay. */
#ifndef FUSION_BROKER_PROVIDER_H
#define FUSION_BROKER_PROVIDER_H
#include <stddef.h>
#include <stdint.h>

#include "broker_state.h"

#define PROVIDER_CHUNK (512 << 10) /* bytes of a file a get or put carries */

/* OUT/invite.key: invite 1 of this run (recorded in broker.db), for the
 * broker at b->url (or --address).  0, or -1 (said). */
int broker_provider_invite(broker *b);
/* A provider's request frame (invite.h) answered: *reply (malloc'd,
 * *reply_len bytes) is sealed, or a refusal in clear. */
void broker_provider_request(broker *b, const uint8_t *frame, size_t len, uint8_t **reply, size_t *reply_len);
/* A part that m, a provider's program, reported: asked of its agent. */
void broker_provider_part(broker *b, member *m, int64_t step, const char *file, const char *xxh3, int live, int stage,
                          int n_stages);
/* Providers whose agents have not yet been told that the run is over. */
int broker_provider_untold(const broker *b);

#endif
