/* launch.h: `fusionc launch OUT` and `fusionc stop OUT` (tools/launch.c):
 * start every deployed device on its host over ssh, gather the logs, and
 * stop them. */
#ifndef FUSION_LAUNCH_H
#define FUSION_LAUNCH_H

#include "../runtime/cli_option.h"

/* Their options and --help. */
extern const cli_usage launch_usage, stop_usage;

/* argv: the arguments after the command.  Exit status: 0, 1 when a device
 * failed (or could not be stopped), 2 for a usage error. */
int launch_main(int argc, char **argv);
int stop_main(int argc, char **argv);

#endif
