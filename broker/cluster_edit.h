/* cluster_edit.h: the run's cluster file changed by what the broker
 * learnt: a provider's device added, so the planner can weigh it
 * (broker_provider.c); a straggler's speed; a link's measured bandwidth.
 *
 * The provider gets a region of its own, "provider-NAME", holding one host
 * NAME at the address it reported, holding its device NAME, standby="true"
 * (so `fusionc compile --with NAME` takes it in); the region is joined to
 * every other region by a link of the bandwidth and latency the provider
 * measured to the broker; the host is inbound="false" when the broker
 * could not connect to it (inbound 0: its links are opened from it, and
 * it has no path to another such host, cluster.h).  Why that link for
 * every region: the provider measured one path, the one to the broker's
 * host; the devices it will talk to sit in the run's regions, which the
 * broker's host is near or in.  (A run's traffic re-measures it:
 * broker_links.h.) */
#ifndef FUSION_BROKER_CLUSTER_EDIT_H
#define FUSION_BROKER_CLUSTER_EDIT_H
#include <stddef.h>

#include "../frontend/cluster.h"

/* A device attribute the provider stated, as the cluster file writes it. */
typedef struct {
    const char *name, *value;
} provider_attr;

/* from (a cluster file) with the provider's region, host and device added,
 * written atomically to to (a bad figure from a provider is refused here:
 * the file would not load).
 * attrs: its device's attributes (kind, arch, peaks, memory, ...), each
 * name one of cluster.xsd's device attributes.  0, or -1 with err. */
int cluster_add_provider(const char *from, const char *to, const char *name, const char *address, int inbound,
                         const char *link_bandwidth, const char *link_latency, const provider_attr *attrs, int n_attrs,
                         cluster *out, char *err, size_t n);

/* from with device `device`'s slowdown attribute set to slowdown (its
 * measured speed: this many times slower than its peaks say), written to
 * to.  0, or -1 with err. */
int cluster_set_slowdown(const char *from, const char *to, const char *device, double slowdown, cluster *out, char *err,
                         size_t n);

/* from with the link between hosts host_a and host_b set to bandwidth
 * (bytes/s; its latency, for a link the file did not have: seconds), as
 * measured from a run's traffic (broker_links.h), written to to: the
 * hosts' <link>, added when the file joined them through their region; a
 * host's link-bandwidth when the two are one.  0, or -1 with err. */
int cluster_set_link(const char *from, const char *to, const char *host_a, const char *host_b, double bandwidth,
                     double latency, cluster *out, char *err, size_t n);

#endif
