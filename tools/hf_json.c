/* hf_json.c: a JSON file as Hugging Face writes it (config.json,
 * adapter_config.json, the shards' index): hf_json.h. */
#include "hf_json.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/folders.h" /* FU_PATH_BYTES */
#include "../runtime/atomic_file.h"

/* j as Hugging Face writes its JSON: two spaces an indent, "key": value.
 * (cJSON indents with tabs; a tab never appears raw inside a string.) */
static char *json_text(const cJSON *j)
{
    char *tabs = cJSON_Print(j), *out = tabs ? malloc(2 * strlen(tabs) + 2) : NULL;
    size_t k = 0;
    for (const char *p = tabs; out && *p; p++) {
        if (*p != '\t')
            out[k++] = *p;
        else if (p > tabs && p[-1] == ':')
            out[k++] = ' ';
        else
            out[k++] = ' ', out[k++] = ' ';
    }
    if (out)
        out[k++] = '\n', out[k] = 0;
    free(tabs);
    return out;
}

int hf_json_write(const char *dir, const char *name, const cJSON *j, char *err, size_t n)
{
    char path[FU_PATH_BYTES + 64], *text = json_text(j);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = text ? atomic_write_file(path, text, strlen(text), err, n) : (snprintf(err, n, "out of memory"), -1);
    free(text);
    return rc;
}
