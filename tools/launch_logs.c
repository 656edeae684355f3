/* launch_logs.c: the devices' logs as `fusionc launch` reads them, over
 * ssh (launch.c) or from a Slurm job's shared folder (launch_slurm.c). */
#include "launch_logs.h"

#include <stdio.h>
#include <string.h>

#include "../ir/folders.h" /* FU_PATH_BYTES */

void launch_follow(const char *log, const char *device, long *offset)
{
    FILE *f = fopen(log, "r");
    if (!f)
        return;
    if (fseek(f, *offset, SEEK_SET) == 0) {
        char line[FU_PATH_BYTES];
        while (fgets(line, sizeof line, f)) {
            size_t n = strlen(line);
            if (line[n - 1] != '\n' && feof(f))
                break; /* not whole yet: read it again next time */
            /* (a line longer than the buffer prints in pieces, each prefixed) */
            printf("[%s] %s%s", device, line, line[n - 1] == '\n' ? "" : "\n");
            *offset += (long)n;
        }
    }
    fflush(stdout);
    fclose(f);
}

void launch_log_reason(const char *log, char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen(log, "r");
    if (!f)
        return;
    char line[1024], last[1024] = "";
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!out[0] && strstr(line, "error"))
            snprintf(out, len, "%s", line);
        if (line[0])
            snprintf(last, sizeof last, "%s", line);
    }
    fclose(f);
    if (!out[0])
        snprintf(out, len, "%s", last[0] ? last : "no output");
}
