/* chat_template.h: a tokenizer's chat template (tokenizer_config.json's
 * `chat_template`, a Jinja template) rendered over a conversation, as
 * Hugging Face's apply_chat_template renders it.
 *
 * The Jinja that chat templates use (chat_template.c): {{ }} output,
 * {% if / elif / else %}, {% for x in xs [if c] %} with loop.index,
 * index0, first, last, length, revindex, revindex0 and break/continue,
 * {% set x = e %} and {% set ns.x = e %} with namespace(), {# #}; the
 * whitespace control of -, and Hugging Face's trim_blocks and
 * lstrip_blocks; literals, lists and dicts, attribute and index access,
 * slices, + - * / // % ~, comparisons, in, not, and, or, the inline if,
 * `is` tests (defined, none, string, number, mapping, sequence, true,
 * false, odd, even, ...), the filters and the string and dict methods the
 * templates call (trim, length, tojson, join, selectattr, strip, split,
 * startswith, get, items, ...), raise_exception and range.  Macros and
 * call blocks are refused with the line they are on.
 *
 * Values are cJSON nodes: a conversation comes as the request's JSON. */
#ifndef FUSION_TOOLS_CHAT_TEMPLATE_H
#define FUSION_TOOLS_CHAT_TEMPLATE_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* The template's text rendered with the variables of `context` (an
 * object: messages, add_generation_prompt, bos_token, ...); malloc'd, or
 * NULL with why ("line N: ...", or the template's raise_exception). */
char *chat_template_render(const char *template_text, const cJSON *context, char *why, size_t why_len);

/* The whole of file `path` (- for standard input), malloc'd and
 * NUL-ended, or NULL when it cannot be read. */
char *chat_template_read_file(const char *path);

/* The chat template and special tokens of the tokenizer at `path` (a
 * tokenizer.json or its folder: tokenizer_config.json beside it) into
 * *template_text (malloc'd; NULL when the config has none) and the
 * special tokens into `context` (bos_token, eos_token, ...).  0, or -1
 * with why (a config that is there but not JSON). */
int chat_template_load(const char *path, char **template_text, cJSON *context, char *why, size_t why_len);

#endif
