"""chat_reference: Hugging Face's own way to render a chat template, the
reference `fusionc chat-template` is checked against: Python's jinja2 as
transformers sets it up (an immutable sandbox, trim_blocks and
lstrip_blocks, the loopcontrols extension, raise_exception and its tojson),
over a conversation, with the tokenizer config's special tokens.

usage: chat_reference.py MODELS_DIR MESSAGES.json [TEMPLATE_FILE]
Prints the text, or "ERROR: <message>" when the template raises."""
import json
import sys

from jinja2 import ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


def raise_exception(message):
    raise ValueError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    config = json.load(open(sys.argv[1] + "/tokenizer_config.json", encoding="utf-8"))
    template = open(sys.argv[3], encoding="utf-8").read() if len(sys.argv) == 4 else config["chat_template"]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    tokens = {}
    for key in SPECIAL:
        value = config.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        if value:
            tokens[key] = value
    messages = json.load(open(sys.argv[2], encoding="utf-8"))
    try:
        text = env.from_string(template).render(messages=messages, add_generation_prompt=True, **tokens)
    except Exception as e:  # the template's raise_exception, or its own error
        text = "ERROR: " + str(e)
    sys.stdout.write(text)


main()
