/* probe.h: `fusionc probe CLUSTER -o MEASURED.xml` (tools/probe.c): the
 * hosts' devices and the paths between them measured over ssh, written
 * into the cluster file in place of the declared figures. */
#ifndef FUSION_PROBE_H
#define FUSION_PROBE_H

#include "../runtime/cli_option.h"

extern const cli_usage probe_usage;

/* argv: the arguments after "probe".  0, 1 when a host or a measurement
 * failed (said), 2 on a usage error. */
int probe_main(int argc, char **argv);

#endif
