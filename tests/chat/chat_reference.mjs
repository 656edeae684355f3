// chat_reference: the reference `fusionc chat-template` is checked
// against: transformers.js's apply_chat_template (@lenml/tokenizers,
// which renders with @huggingface/jinja; installed by
// tests/tokenizer/install_reference.sh) over a conversation, printed.
//
// usage: node chat_reference.mjs MODELS_DIR MESSAGES.json [TEMPLATE_FILE]
//   MODELS_DIR: a folder with tokenizer.json and tokenizer_config.json;
//   TEMPLATE_FILE: a template to render instead of the config's.
// The packages are looked for in $FUSION_NPM_REFERENCE.
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [models, messagesFile, templateFile] = process.argv.slice(2);
if (!models || !messagesFile) {
  process.stderr.write("usage: node chat_reference.mjs MODELS_DIR MESSAGES.json [TEMPLATE_FILE]\n");
  process.exit(2);
}
const prefix = resolve(process.env.FUSION_NPM_REFERENCE ?? "build/npm-reference");
const lib = await import(pathToFileURL(join(prefix, "node_modules", "@lenml", "tokenizers", "dist", "main.mjs")).href);
const tokenizer = lib.TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(join(models, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(join(models, "tokenizer_config.json"), "utf8")),
});
const options = { tokenize: false, add_generation_prompt: true };
if (templateFile) options.chat_template = readFileSync(templateFile, "utf8");
try {
  process.stdout.write(tokenizer.apply_chat_template(JSON.parse(readFileSync(messagesFile, "utf8")), options));
} catch (e) {
  process.stdout.write(`ERROR: ${e.message}`);
}
