/* report.h: `fusionc report LOG... [-o DIR]` (report.c). */
#ifndef FUSION_REPORT_H
#define FUSION_REPORT_H

/* argv: the command's arguments after "report".  0, 1 (a bad log, a plot
 * that could not be made) or 2 (usage). */
int report_main(int argc, char **argv);

#endif
