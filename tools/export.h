/* export.h: `fusionc export` (export.c): a checkpoint as a Hugging Face
 * model folder (config.json, model.safetensors or shards and an index). */
#ifndef FUSION_EXPORT_H
#define FUSION_EXPORT_H

#include "../runtime/cli_option.h"

/* Its options and --help. */
extern const cli_usage export_usage;

/* argv: the command's arguments after "export".  0, 1 (a bad checkpoint,
 * a write that failed) or 2 (usage). */
int export_main(int argc, char **argv);

/* PATH a tokenizer.json (copied as DIR/tokenizer.json), or a folder whose
 * tokenizer files (tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, generation_config.json) go into DIR.  0, or -1
 * with err. */
int export_copy_tokenizer(const char *path, const char *dir, char *err, size_t n);

#endif
