/* broker_links.h: a run's links, re-measured from its traffic.  With each
 * step every device reports, per peer it sent to, the bytes, the seconds
 * its link was busy with them, the seconds the compiled link takes for
 * them, and the bandwidth the traffic shows (broker_client.h's "links",
 * rt_comm_links_report).  A link that carries LINK_DRIFT times less or
 * more than its cluster file declares, for LINK_STEPS steps in a row in
 * which that mattered (its busy time LINK_SHARE of the step or more away
 * from its planned time), has drifted: its measured bandwidth (the mean of those steps')
 * goes into the run's cluster as the two hosts' link, and a plan with it
 * is weighed at the next complete checkpoint (broker_plan.h,
 * broker_replan_measured), as a straggler's speed is.
 *
 * Why "mattered": a link a few milliseconds off its plan cannot change
 * the plan, and over loopback (every test, every single-machine run) a
 * message's time is mostly the processes' own: on a loaded machine a
 * 10 Gbps loopback link read 585 Mbps, 9.0 ms busy a step against 2.2
 * planned in a 56 ms step (12%), before the rule asked for 25%; why only
 * bandwidth: a link's messages queue behind one another (hub.h), so its
 * latency shows in its traffic only as part of each message's time, and
 * `fusionc probe` measures it apart.  A link no plan uses carries nothing
 * and is not re-measured. */
#ifndef FUSION_BROKER_LINKS_H
#define FUSION_BROKER_LINKS_H
#include "broker_state.h"

#define LINK_DRIFT 1.5
#define LINK_STEPS 20
#define LINK_SHARE 0.25

/* Device m's "links STEP WALL TRAFFIC" report (its rest after the epoch).
 * Says so when a link has just drifted (b->drift set). */
void broker_links_report(broker *b, member *m, const char *rest);

#endif
