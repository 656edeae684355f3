/* diag.c: the error record (see diag.h). */
#include "diag.h"

#include <stdio.h>
#include <string.h>

static void flatten_to_one_line(char *s)
{
    for (; *s; s++)
        if (*s == '\n' || *s == '\r' || *s == '\t')
            *s = ' ';
}

int diag_vset(struct diag *d, const char *file, int line, const char *fmt, va_list ap)
{
    if (!d)
        return -1;
    snprintf(d->file, sizeof d->file, "%s", file ? file : "<input>");
    d->line = line;
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    flatten_to_one_line(d->msg);
    return -1;
}

int diag_set(struct diag *d, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_vset(d, file, line, fmt, ap);
    va_end(ap);
    return -1;
}

void diag_prefix(struct diag *d, const char *fmt, ...)
{
    if (!d)
        return;
    char old[DIAG_MSG_MAX];
    memcpy(old, d->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof d->msg)
        memccpy(d->msg + n, old, '\0', sizeof d->msg - (size_t)n);
    d->msg[sizeof d->msg - 1] = '\0';
    flatten_to_one_line(d->msg);
}

void diag_print(const struct diag *d) { fprintf(stderr, "%s:%d: error: %s\n", d->file, d->line, d->msg); }
