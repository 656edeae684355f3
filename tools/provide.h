/* provide.h: `fusionc provide --invite FILE`, a machine's device offered
 * to a run (provide.c says how; broker/broker_provider.h the broker's side). */
#ifndef FUSION_TOOLS_PROVIDE_H
#define FUSION_TOOLS_PROVIDE_H
#include "../runtime/cli_option.h"

extern const cli_usage provide_usage;
/* argv: the arguments after "provide".  The exit status: 0 when the run no
 * longer needs the device, 1 an error (said), 2 bad arguments. */
int cmd_provide(int argc, char **argv);

#endif
