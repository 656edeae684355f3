/* chat_cmd.h: `fusionc chat-template TOKENIZER --messages FILE`
 * (tools/chat_cmd.c): a conversation through the tokenizer's chat
 * template, the text printed. */
#ifndef FUSION_CHAT_CMD_H
#define FUSION_CHAT_CMD_H

#include "../runtime/cli_option.h"

extern const cli_usage chat_usage;

/* argv: the arguments after the command.  0, 1 on a failure (said), 2 on a usage error. */
int chat_template_main(int argc, char **argv);

#endif
