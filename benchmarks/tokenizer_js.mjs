// The outside reference encoders, run with Node: GPT-2's gpt-3-encoder and @lenml/tokenizers
// (a JavaScript port of Hugging Face's tokenizers). Used by benchmarks/tokenizer_throughput.sh
// and by kiri's tokenizer tests, which compare the ids byte for byte.
//   node tokenizer_js.mjs gpt3 PACKAGE_DIR IN OUT
//   node tokenizer_js.mjs lenml PACKAGE_DIR TOKENIZER_JSON TOKENIZER_CONFIG IN OUT
// IN holds texts separated by NUL bytes (one file, or a set of hostile strings); each is
// encoded on its own. OUT gets, per text, its token count (u32) and its ids (u32), little
// endian. The seconds spent encoding (not loading) go to stdout as JSON.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [kind, pkg, ...rest] = process.argv.slice(2);
let encode, input, output;
if (kind === "gpt3") {
  [input, output] = rest;
  const gpt3 = createRequire(import.meta.url)(join(pkg, "Encoder.js"));
  encode = (text) => gpt3.encode(text);
} else if (kind === "lenml") {
  const [tokenizerJson, tokenizerConfig] = rest;
  [input, output] = rest.slice(2);
  const { TokenizerLoader } = await import(pathToFileURL(join(pkg, "dist/main.mjs")).href);
  const tokenizer = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(readFileSync(tokenizerJson, "utf8")),
    tokenizerConfig: JSON.parse(readFileSync(tokenizerConfig, "utf8")),
  });
  encode = (text) => tokenizer.encode(text, { add_special_tokens: false });
} else {
  console.error("usage: node tokenizer_js.mjs gpt3|lenml PACKAGE_DIR [TOKENIZER_JSON CONFIG] IN OUT");
  process.exit(2);
}
// Invalid UTF-8 becomes U+FFFD here, as JavaScript strings cannot hold raw bytes.
const texts = readFileSync(input, "utf8").split("\0");
const start = process.hrtime.bigint();
const all = texts.map((t) => encode(t));
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
let words = 0;
for (const ids of all) words += 1 + ids.length;
const out = new Uint32Array(words);
let at = 0;
for (const ids of all) {
  out[at++] = ids.length;
  for (const id of ids) out[at++] = id;
}
writeFileSync(output, Buffer.from(out.buffer));
console.log(JSON.stringify({ encoder: kind, texts: texts.length, tokens: words - texts.length, seconds }));
