/* deploy.h: `fusionc deploy OUT` (tools/deploy.c): copy each device's
 * bundle to its host over ssh, checked and made visible only when whole. */
#ifndef FUSION_DEPLOY_H
#define FUSION_DEPLOY_H

/* argv: the arguments after `deploy`.  The exit status: 0, 1 when a device
 * could not be deployed, 2 for a usage error. */
int deploy_main(int argc, char **argv);

#endif
