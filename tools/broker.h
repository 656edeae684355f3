/* broker.h: the command lines of `fusionc broker` (the run's broker,
 * broker/broker.h) and `fusionc standby` (a standby host's agent, which
 * registers with the broker and waits to be used). */
#ifndef FUSION_TOOLS_BROKER_H
#define FUSION_TOOLS_BROKER_H

#include "../broker/broker.h"
#include "../runtime/cli_option.h"

/* Their options and --help. */
extern const cli_usage broker_usage, standby_usage, invite_usage;

/* argv: the arguments after the command.  The exit status (2: usage). */
int cmd_broker(int argc, char **argv);
int cmd_standby(int argc, char **argv);
/* `fusionc invite OUT`: another invite for providers, or one revoked (--revoke N). */
int cmd_invite(int argc, char **argv);

#endif
