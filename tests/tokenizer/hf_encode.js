// hf_encode: Hugging Face's own tokenizers (the Rust library, through its
// Node binding: npm's `tokenizers`, installed by install_reference.sh) as
// the second reference `fusionc tokenize` is checked against.  Encodes
// each FILE on its own (no special tokens added), --eos putting the
// tokenizer's end of text after each (the same choice as
// reference_encode.mjs's END_OF_TEXT, given by name), and writes the same
// llm.c-style shard (version 2, uint32 ids, when the vocabulary is over
// 65,536).  Prints the encode's MB/s per CPU second and per wall second
// (files read and tokenizer loaded before the clock starts) to stderr.
//
// usage: node hf_encode.js TOKENIZER.json OUT.bin [--eos TOKEN] FILE...
// The package is looked for in $FUSION_NPM_REFERENCE/node_modules.
"use strict";
const fs = require("fs");
const path = require("path");
const prefix = process.env.FUSION_NPM_REFERENCE || path.join(__dirname, "..", "..", "build", "npm-reference");
const { Tokenizer } = require(path.join(prefix, "node_modules", "tokenizers"));

async function main() {
  const args = process.argv.slice(2);
  if (args.length < 3) {
    console.error("usage: node hf_encode.js TOKENIZER.json OUT.bin [--eos TOKEN] FILE...");
    process.exit(2);
  }
  const [tokPath, out] = args;
  let files = args.slice(2), eos = null;
  if (files[0] === "--eos") {
    eos = files[1];
    files = files.slice(2);
  }
  const tok = Tokenizer.fromFile(tokPath);
  const eosId = eos === null ? null : tok.tokenToId(eos);
  if (eos !== null && (eosId === null || eosId === undefined)) throw new Error(`${tokPath}: no token '${eos}'`);
  const texts = files.map((f) => fs.readFileSync(f, "utf8"));
  const cpu0 = process.cpuUsage(), wall0 = process.hrtime.bigint();
  const ids = [];
  for (const t of texts) {
    const e = await tok.encode(t, null, { addSpecialTokens: false });
    for (const id of e.getIds()) ids.push(id);
    if (eosId !== null) ids.push(eosId);
  }
  const cpu = process.cpuUsage(cpu0), wall = Number(process.hrtime.bigint() - wall0) / 1e9;
  const bytes = texts.reduce((s, t) => s + Buffer.byteLength(t), 0);
  const wide = tok.getVocabSize(true) > 65536;
  const buf = Buffer.alloc(1024 + ids.length * (wide ? 4 : 2));
  buf.writeInt32LE(20240520, 0);
  buf.writeInt32LE(wide ? 2 : 1, 4);
  buf.writeInt32LE(ids.length, 8);
  ids.forEach((v, i) => (wide ? buf.writeUInt32LE(v, 1024 + 4 * i) : buf.writeUInt16LE(v, 1024 + 2 * i)));
  fs.writeFileSync(out, buf);
  const mb = bytes / 1e6;
  console.error(`hf_encode: ${(mb / ((cpu.user + cpu.system) / 1e6)).toFixed(3)} MB/s per CPU second, ` +
                `${(mb / wall).toFixed(3)} MB/s wall (${bytes} bytes, ${files.length} files, ${ids.length} ids)`);
}
main().catch((e) => {
  console.error(`hf_encode: ${e.message}`);
  process.exit(1);
});
