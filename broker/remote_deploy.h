/* remote_deploy.h: a device's bundle to its host over ssh, checked file by
 * file there and made visible only when whole (remote_deploy.c says how);
 * `fusionc deploy` (tools/deploy.c) and the broker's new epochs
 * (broker_remote.c) use it. */
#ifndef FUSION_BROKER_REMOTE_DEPLOY_H
#define FUSION_BROKER_REMOTE_DEPLOY_H

#include "remote.h"

/* d's bundle (plan->out_dir/<d->device>) to d's host, checked and linked
 * into place; copier: "rsync", "scp" or NULL (rsync when both ends have
 * it); *copied: whether it was copied (else it was there).  0, or -1 with
 * err naming the device, the host and what failed. */
int deploy_device(const remote_plan *plan, const remote_device *d, const char *copier, int *copied, struct diag *err);

#endif
