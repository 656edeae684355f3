/* deploy.h: `fusionc deploy OUT` (tools/deploy.c): copy each device's
 * bundle to its host over ssh, checked and made visible only when whole
 * (broker/remote_deploy.h, which the broker's new epochs use too). */
#ifndef FUSION_DEPLOY_H
#define FUSION_DEPLOY_H

#include "../runtime/cli_option.h"

/* Its options and --help. */
extern const cli_usage deploy_usage;

/* argv: the arguments after `deploy`.  The exit status: 0, 1 when a device
 * could not be deployed, 2 for a usage error. */
int deploy_main(int argc, char **argv);

#endif
