// openai_client.mjs: fusionc serve through the official OpenAI client for
// Node (npm's `openai`, installed by tests/serve/install_openai.sh), an
// independent reader of the API's shapes and of server-sent events.
//
//   node openai_client.mjs URL stream PROMPT N   a streamed completion at
//       temperature 0: prints its text (the chunks joined) and, on a line
//       of its own, its finish reason
//   node openai_client.mjs URL concurrent K N    K chat completions at once
//       (each its own short conversation): prints how many came back with
//       a choice, an assistant message and usage counts
import { createRequire } from "node:module";
import { join } from "node:path";

// The package from the folder install_openai.sh filled (FUSION_NPM_OPENAI).
const require = createRequire(join(process.env.FUSION_NPM_OPENAI, "package.json"));
const OpenAI = require("openai").default ?? require("openai");

const [url, mode, arg, n] = process.argv.slice(2);
const client = new OpenAI({ baseURL: url, apiKey: process.env.FUSION_API_KEY || "none" });

if (mode === "stream") {
  const stream = await client.completions.create({
    model: "llama", prompt: arg, max_tokens: Number(n), temperature: 0, stream: true,
  });
  let text = "", finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  process.stdout.write(text + "\n" + finish + "\n");
} else if (mode === "concurrent") {
  const k = Number(arg);
  const answers = await Promise.all(Array.from({ length: k }, (_, i) => client.chat.completions.create({
    model: "llama", messages: [{ role: "user", content: `Question ${i}?` }], max_tokens: Number(n), temperature: 0.7,
    seed: i,
  })));
  const good = answers.filter((a) => a.choices.length === 1 && a.choices[0].message.role === "assistant" &&
    typeof a.choices[0].message.content === "string" && a.usage.completion_tokens === Number(n));
  process.stdout.write(`${good.length}\n`);
} else {
  process.stderr.write("usage: node openai_client.mjs URL stream|concurrent ...\n");
  process.exit(2);
}
