/* report.h: `fusionc report LOG... [-o DIR]` (report.c). */
#ifndef FUSION_REPORT_H
#define FUSION_REPORT_H

#include "../runtime/cli_option.h"

/* Its options and --help. */
extern const cli_usage report_usage;

/* argv: the command's arguments after "report".  0, 1 (a bad log, a plot
 * that could not be made) or 2 (usage). */
int report_main(int argc, char **argv);

#endif
