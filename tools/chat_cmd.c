/* chat_cmd.c: `fusionc chat-template TOKENIZER --messages FILE`: the text a
 * chat model is given for a conversation (chat_cmd.h), as fusionc serve
 * builds it for /v1/chat/completions. */
#include "chat_cmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"

typedef struct {
    const char *messages, *template_file;
    int no_generation_prompt;
} chat_options;

/* clang-format off */
static const cli_option chat_table[] = {
    { .name = "--messages", .metavar = "FILE", CLI_NONEMPTY(chat_options, messages),
      .help = "the conversation: a JSON list of {\"role\": ..., \"content\": ...} (- for standard input)" },
    { .name = "--template", .metavar = "FILE", CLI_NONEMPTY(chat_options, template_file),
      .help = "a Jinja chat template to use instead of the tokenizer's" },
    { .name = "--no-generation-prompt", CLI_FLAG(chat_options, no_generation_prompt),
      .help = "render without add_generation_prompt (the assistant's turn not opened)" },
};
/* clang-format on */

const cli_usage chat_usage = {
    "usage: fusionc chat-template [TOKENIZER] --messages FILE [--template FILE] [--no-generation-prompt]\n"
    "\n"
    "Prints the text a chat model is given for a conversation: the tokenizer's chat template\n"
    "(tokenizer_config.json's chat_template, beside its tokenizer.json) rendered over the\n"
    "messages with add_generation_prompt, bos_token and eos_token, as Hugging Face's\n"
    "apply_chat_template renders it and as fusionc serve gives /v1/chat/completions.\n"
    "Without a TOKENIZER, --template's alone (no special tokens).\n",
    chat_table,
    NULL,
    sizeof chat_table / sizeof chat_table[0],
    26,
    NULL,
};

/* The template text `fresh` in place of `old` (freed). */
static char *replace_text(char *old, char *fresh)
{
    free(old);
    return fresh;
}

int chat_template_main(int argc, char **argv)
{
    chat_options o = { 0 };
    const char *tokenizer = NULL;
    char why[1024];
    for (int i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            cli_usage_print(stdout, &chat_usage);
            return 0;
        }
        int took = cli_take(&chat_usage, argc, argv, &i, &o, why, sizeof why);
        if (took < 0)
            return cli_usage_fail(&chat_usage, "fusionc chat-template", "%s", why);
        if (took == 0 && (argv[i][0] == '-' || tokenizer))
            return cli_usage_fail(&chat_usage, "fusionc chat-template", "unexpected '%s'", argv[i]);
        if (took == 0)
            tokenizer = argv[i];
    }
    if ((!tokenizer && !o.template_file) || !o.messages)
        return cli_usage_fail(&chat_usage, "fusionc chat-template", "%s",
                              !o.messages ? "expected --messages FILE"
                                          : "expected a TOKENIZER (a tokenizer.json or its folder) or --template FILE");
    cJSON *context = cJSON_CreateObject();
    char *template_text = NULL, *messages_text = chat_template_read_file(o.messages), *out = NULL;
    cJSON *messages = messages_text ? cJSON_Parse(messages_text) : NULL;
    int rc = 1;
    if (!context)
        fprintf(stderr, "fusionc chat-template: out of memory\n");
    else if (!messages_text)
        fprintf(stderr, "fusionc chat-template: cannot read --messages %s\n", o.messages);
    else if (!cJSON_IsArray(messages))
        fprintf(stderr, "fusionc chat-template: %s: not a JSON list of messages\n", o.messages);
    else if (tokenizer && chat_template_load(tokenizer, &template_text, context, why, sizeof why) != 0)
        fprintf(stderr, "fusionc chat-template: %s\n", why);
    else if (o.template_file &&
             !(template_text = replace_text(template_text, chat_template_read_file(o.template_file))))
        fprintf(stderr, "fusionc chat-template: cannot read --template %s\n", o.template_file);
    else if (!template_text)
        fprintf(stderr, "fusionc chat-template: %s: no chat_template in its tokenizer_config.json (give --template)\n",
                tokenizer);
    else {
        cJSON_AddItemReferenceToObject(context, "messages", messages);
        cJSON_AddBoolToObject(context, "add_generation_prompt", !o.no_generation_prompt);
        if (!(out = chat_template_render(template_text, context, why, sizeof why)))
            fprintf(stderr, "fusionc chat-template: %s: %s\n", o.template_file ? o.template_file : tokenizer, why);
        else
            rc = fputs(out, stdout) < 0 || fflush(stdout) != 0;
    }
    free(out);
    free(template_text);
    free(messages_text);
    cJSON_Delete(messages);
    cJSON_Delete(context);
    return rc;
}
