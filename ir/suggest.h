/* suggest.h: "did you mean": the name of a list nearest to a misspelt one.
 * Header-only, as both the device programs' option parser
 * (runtime/cli_option.c) and the model reader (frontend/hyper_check.c)
 * use it and the runtime links no compiler library. */
#ifndef FUSION_SUGGEST_H
#define FUSION_SUGGEST_H

#include <stdio.h>
#include <string.h>

#define SUGGEST_NAME_MAX 64 /* longer names are compared by their first 64 bytes */

/* Levenshtein distance (one row of the table). */
static inline int suggest_edit_distance(const char *a, const char *b)
{
    int n = (int)strnlen(a, SUGGEST_NAME_MAX), m = (int)strnlen(b, SUGGEST_NAME_MAX), row[SUGGEST_NAME_MAX + 1];
    for (int j = 0; j <= m; j++)
        row[j] = j;
    for (int i = 1; i <= n; i++) {
        int diagonal = row[0];
        row[0] = i;
        for (int j = 1; j <= m; j++) {
            int up = row[j], best = diagonal + (a[i - 1] != b[j - 1]);
            best = up + 1 < best ? up + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diagonal = up, row[j] = best;
        }
    }
    return row[m];
}

/* "; did you mean 'NAME'?" into out for the one of names[] (NULLs
 * skipped) nearest to given when it is a typo away (an edit distance of
 * at most a third of its length, at least 1 and at most 2), else "". */
static inline void suggest_nearest(const char *given, const char *const *names, int n_names, char *out, size_t n)
{
    out[0] = '\0';
    int best = -1, best_d = 0, limit = (int)strlen(given) / 3 > 2 ? 2 : (int)strlen(given) / 3;
    for (int k = 0; k < n_names; k++) {
        int d = names[k] ? suggest_edit_distance(given, names[k]) : SUGGEST_NAME_MAX;
        if (d <= (limit > 0 ? limit : 1) && (best < 0 || d < best_d))
            best = k, best_d = d;
    }
    if (best >= 0)
        snprintf(out, n, "; did you mean '%s'?", names[best]);
}

#endif
