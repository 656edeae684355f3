/* diag.h: the error record every library function fills instead of exiting.
 *
 * A function that can fail returns 0 on success and -1 on failure, after
 * filling a `struct diag` with where (file, line) and what.  Only a program's
 * main() decides to print and exit.  The one-line form is the compiler
 * convention tools and editors understand:
 *
 *     models/gpt2.xml:41: error: op 'h.0.attn' (attention): ...
 *
 * Line 0 means "the whole file" (missing, unreadable, empty).
 */
#ifndef FUSION_DIAG_H
#define FUSION_DIAG_H

#include <stdarg.h>

#define DIAG_FILE_MAX 512
#define DIAG_MSG_MAX  1024

struct diag {
    char file[DIAG_FILE_MAX];
    int line;
    char msg[DIAG_MSG_MAX];
};

/* Fill d (if not NULL) and return -1, so callers can write
 * `return diag_set(d, file, line, "...", ...);`.  Newlines in the message
 * are replaced by spaces: the printed form is always one line. */
int diag_set(struct diag *d, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int diag_vset(struct diag *d, const char *file, int line, const char *fmt, va_list ap);

/* Prefix the message already in d with more context ("op 'x': " + msg). */
void diag_prefix(struct diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Print "file:line: error: msg\n" to stderr. */
void diag_print(const struct diag *d);

#endif
