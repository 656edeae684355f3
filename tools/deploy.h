/* deploy.h: `fusionc deploy OUT` (tools/deploy.c): copy each device's
 * bundle to its host over ssh, checked and made visible only when whole. */
#ifndef FUSION_DEPLOY_H
#define FUSION_DEPLOY_H

#include "../runtime/cli_option.h"

/* Its options and --help. */
extern const cli_usage deploy_usage;

/* argv: the arguments after `deploy`.  The exit status: 0, 1 when a device
 * could not be deployed, 2 for a usage error. */
int deploy_main(int argc, char **argv);

#include "remote.h"
/* d's bundle (plan->out_dir/<d->device>) to d's host, checked and linked
 * into place as above; *copied: whether it was copied (else it was there).
 * 0, or -1 with err naming the device, the host and what failed. */
int deploy_device(const remote_plan *plan, const remote_device *d, const char *copier, int *copied,
                  struct diag *err);

#endif
