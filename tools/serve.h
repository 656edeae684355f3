/* serve.h: `fusionc serve MODEL CLUSTER --init WEIGHTS` (tools/serve.c):
 * an OpenAI-compatible HTTP server in front of an inference program. */
#ifndef FUSION_SERVE_H
#define FUSION_SERVE_H

#include "../runtime/cli_option.h"

/* Its own options and --help (the rest of its command line is compile's). */
extern const cli_usage serve_usage;

/* argv: the arguments after the command.  Serves until SIGINT or SIGTERM
 * (0), or until its inference program stops (1); 2 for a usage error. */
int serve_main(int argc, char **argv);

#endif
