/* process.h: run a tool the compiler needs (the C compiler that links a
 * bundle, fatbinary), without a shell. */
#ifndef FUSION_PROCESS_H
#define FUSION_PROCESS_H

#include "../ir/diag.h"

/* Run argv[0] with argv (execvp: a bare name is looked up on PATH); 0 when
 * it exits 0, else -1 with err naming `what` and the exit status. */
int run_command(char *const argv[], struct diag *err, const char *what);

/* The same, with its standard output in *out (malloc'd, NUL-terminated). */
int run_capture(char *const argv[], char **out, struct diag *err, const char *what);

#endif
