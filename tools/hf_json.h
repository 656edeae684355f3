/* hf_json.h: a JSON file as Hugging Face writes it, two spaces an
 * indent and "key": value (hf_json.c), for fusionc export's files. */
#ifndef FUSION_HF_JSON_H
#define FUSION_HF_JSON_H

#include <stddef.h>

struct cJSON;

/* DIR/NAME from j, whole or not at all (atomic_file.h).  0, or -1 with err. */
int hf_json_write(const char *dir, const char *name, const struct cJSON *j, char *err, size_t n);

#endif
