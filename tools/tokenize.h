/* tokenize.h: `fusionc tokenize` (tokenize.c): text files to an llm.c
 * token shard with a Hugging Face tokenizer.json, and back (--decode). */
#ifndef FUSION_TOKENIZE_H
#define FUSION_TOKENIZE_H

#include "../runtime/cli_option.h"

/* Its options and --help. */
extern const cli_usage tokenize_usage;

/* argv: the command's arguments after "tokenize".  0, 1 (a bad file or
 * tokenizer, a write that failed) or 2 (usage). */
int tokenize_main(int argc, char **argv);

/* --jsonl: FILEs of {"prompt": ..., "completion": ...} lines to a shard
 * with a loss mask (tokenize_jsonl.c).  0, or 1 with the error printed. */
int tokenize_jsonl(const char *tokenizer, char **files, int n_files, const char *output, int with_eos);

#endif
