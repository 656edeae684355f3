/* process.h: run a tool the compiler needs (the C compiler that links a
 * bundle, fatbinary), without a shell. */
#ifndef FUSION_PROCESS_H
#define FUSION_PROCESS_H

#include "../ir/diag.h"

/* Run argv[0] with argv (execvp: a bare name is looked up on PATH); 0 when
 * it exits 0, else -1 with err naming `what` and the exit status. */
int run_command(char *const argv[], struct diag *err, const char *what);

/* Run argv with its standard output (and standard error too, when
 * with_stderr) in *out (malloc'd, NUL-terminated; NULL when out of
 * memory).  Returns the exit status (128 + N for signal N), or -1 when it
 * cannot start. */
int run_capture_status(char *const argv[], int with_stderr, char **out);

/* The same, with its standard output in *out (malloc'd, NUL-terminated). */
int run_capture(char *const argv[], char **out, struct diag *err, const char *what);

#endif
