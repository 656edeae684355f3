/* inference_bundle.h: what fusionc generate and fusionc serve share
 * (tools/inference_bundle.c): the inference program compiled once per
 * set of arguments into a cache, found there, and the text of generated
 * tokens released as far as it can no longer change.
 *
 * The cache: $FUSION_CACHE_DIR, else $XDG_CACHE_HOME/fusion, else
 * ~/.cache/fusion; under it generate/<16 hex digits>/, named by a hash of
 * the compile's arguments, of the files they name, and of this fusionc
 * (size and time of its executable).  A folder appears whole: compiled
 * beside it, renamed into place. */
#ifndef FUSION_INFERENCE_BUNDLE_H
#define FUSION_INFERENCE_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "../ir/folders.h" /* FU_PATH_BYTES */

#define INFERENCE_MAX_FORWARD 256
/* The prompt step's tokens a sequence unless --prefill says (passes/prefill.c). */
#define INFERENCE_DEFAULT_PREFILL "64"

/* `fusionc compile FORWARD... --inference --set batch=ROWS --set seq=1`
 * into the cache, or the folder already there, into dir.  who names the
 * command in messages.  0, 1 (said on stderr), or 2 (compile refused the
 * command line). */
int inference_compile_cached(const char *const *forward, int n_forward, int64_t rows, const char *who, char *dir,
                             size_t n);
/* argv[*i], none of the command's own options: an option of `fusionc
 * compile` (checked, with its value) or a positional argument, appended to
 * forward[*n_forward].  0, or -1 with why (an unknown option, a bad value,
 * too many arguments). */
int inference_forward_arg(int argc, char **argv, int *i, const char **forward, int *n_forward, char *why, size_t n);
/* A device program of an inference bundle: where, and its stage of how many. */
typedef struct {
    char path[FU_PATH_BYTES + 640];
    int stage, stages;
} inference_program;
/* The device programs in dir (at most max) into out[*n].  0, or 1 (said). */
int inference_find_programs(const char *dir, const char *who, inference_program *out, int max, int *n);

/* How far text[0, n) can be released: before the first of the stop texts
 * (*stopped set), else all but an unfinished UTF-8 character and what may
 * yet become a stop text (final: all). */
size_t inference_text_end(const char *text, size_t n, const char *const *stop, int n_stop, int final, int *stopped);

#endif
