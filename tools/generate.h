/* generate.h: `fusionc generate MODEL CLUSTER --init WEIGHTS ...`
 * (tools/generate.c): compile the model as an inference program (cached),
 * run it, and stream the text it generates. */
#ifndef FUSION_GENERATE_H
#define FUSION_GENERATE_H

#include "../runtime/cli_option.h"

/* Its own options and --help (the rest of its command line is compile's). */
extern const cli_usage generate_usage;

/* argv: the arguments after the command.  Exit status: 0, 1 when the
 * compile or the generation failed (said on stderr), 2 for a usage error. */
int generate_main(int argc, char **argv);

#endif
