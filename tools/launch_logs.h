/* launch_logs.h: the devices' logs as `fusionc launch` reads them
 * (tools/launch_logs.c), over ssh and under Slurm alike. */
#ifndef FUSION_LAUNCH_LOGS_H
#define FUSION_LAUNCH_LOGS_H

#include <stddef.h>

/* Print the lines a device's log gained since *offset, each prefixed
 * "[device] " (a line not yet whole waits for the next call). */
void launch_follow(const char *log, const char *device, long *offset);

/* The line of a log that says why its device stopped: its first error,
 * else its last line, else "no output". */
void launch_log_reason(const char *log, char *out, size_t len);

#endif
