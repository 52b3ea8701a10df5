// tests/e2e/serve_embeddings.mjs - `kite serve`'s POST /v1/embeddings through the official
// `openai` npm package (issue 24): shape, normalisation, determinism, a batch equal to its
// inputs one by one, token-id inputs, base64 equal to floats, equal to `kite embed`'s vector,
// and the 400s (dimensions, bad input) as OpenAI-style errors.  Run by tests/e2e/test_embed.sh
// with KITE_URL, KITE_NODE_DIR (where npm installed openai), KITE_MODEL (the served id),
// KITE_N_EMBD and KITE_CLI_VEC (a file with `kite embed -p "$KITE_CLI_TEXT"`'s line); the last
// line is a summary.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(process.env.KITE_NODE_DIR + "/package.json");
const mod = await import(pathToFileURL(require.resolve("openai")).href);
const OpenAI = mod.default ?? mod.OpenAI;
const client = new OpenAI({ baseURL: process.env.KITE_URL + "/v1", apiKey: "none", maxRetries: 0 });
const model = process.env.KITE_MODEL;
const nEmbd = Number(process.env.KITE_N_EMBD);
let checks = 0;

function check(cond, what) {
  if (!cond) {
    console.error("FAIL: " + what);
    process.exit(1);
  }
  checks++;
}
const same = (a, b) => a.length === b.length && a.every((x, i) => Math.fround(x) === Math.fround(b[i]));
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

const texts = ["Once upon a time there was a cat.", "The dog ran to the park.", "Lily liked red apples."];

// floats: shape, norm, usage, object fields
const f = await client.embeddings.create({ model, input: texts[0], encoding_format: "float" });
check(f.object === "list" && f.data.length === 1 && f.data[0].object === "embedding" && f.data[0].index === 0,
  "list of one embedding object");
check(f.data[0].embedding.length === nEmbd, `length ${f.data[0].embedding.length} == n_embd ${nEmbd}`);
check(Math.abs(norm(f.data[0].embedding) - 1) < 1e-5, `norm ${norm(f.data[0].embedding)}`);
check(f.model === model, "model echoed");
check(f.usage.prompt_tokens > 0 && f.usage.total_tokens === f.usage.prompt_tokens, "usage");

// determinism
const again = await client.embeddings.create({ model, input: texts[0], encoding_format: "float" });
check(same(f.data[0].embedding, again.data[0].embedding), "same input, same vector");

// batch == one by one (bit for bit), indices in order, inputs differ
const batch = await client.embeddings.create({ model, input: texts, encoding_format: "float", user: "e2e" });
check(batch.data.length === 3 && batch.data.every((d, i) => d.index === i), "three embeddings, in order");
let tokens = 0;
for (let i = 0; i < texts.length; i++) {
  const one = await client.embeddings.create({ model, input: texts[i], encoding_format: "float" });
  check(same(batch.data[i].embedding, one.data[0].embedding), `batch item ${i} equals its single request`);
  tokens += one.usage.prompt_tokens;
}
check(batch.usage.prompt_tokens === tokens, "batch usage = sum of the singles'");
check(!same(batch.data[0].embedding, batch.data[1].embedding), "different inputs, different vectors");

// the client's default (it asks for base64 and decodes it) and an explicit base64 decoded here
const dflt = await client.embeddings.create({ model, input: texts });
check(dflt.data.every((d, i) => same(d.embedding, batch.data[i].embedding)), "client default (base64) = floats");
const raw = await fetch(process.env.KITE_URL + "/v1/embeddings", {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ model, input: texts[1], encoding_format: "base64" }),
}).then((r) => r.json());
check(typeof raw.data[0].embedding === "string", "base64 is a string");
const buf = Buffer.from(raw.data[0].embedding, "base64");
check(buf.length === 4 * nEmbd, `base64 bytes ${buf.length}`);
const dec = Array.from({ length: nEmbd }, (_, i) => buf.readFloatLE(4 * i));
check(same(dec, batch.data[1].embedding), "base64 decodes to the float answer");

// token ids: the tokens of a text (via /tokenize with BOS) give the text's vector
const tok = await fetch(process.env.KITE_URL + "/tokenize", {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ content: texts[2], add_special: true }),
}).then((r) => r.json());
const byIds = await client.embeddings.create({ model, input: [tok.tokens, tok.tokens], encoding_format: "float" });
check(byIds.data.length === 2 && same(byIds.data[0].embedding, batch.data[2].embedding),
  "token-id input = the text's vector");
const oneIds = await client.embeddings.create({ model, input: tok.tokens, encoding_format: "float" });
check(oneIds.data.length === 1 && same(oneIds.data[0].embedding, batch.data[2].embedding), "a flat id list is one input");

// kite embed's vector for the same text
if (process.env.KITE_CLI_VEC) {
  const cli = readFileSync(process.env.KITE_CLI_VEC, "utf8").trim().split(/\s+/).map(Number);
  const srv = await client.embeddings.create({ model, input: process.env.KITE_CLI_TEXT, encoding_format: "float" });
  check(same(cli, srv.data[0].embedding), "kite embed prints the server's vector");
}

// errors: OpenAI-style 400s the client raises as APIError
async function expect400(body, param, what) {
  try {
    await client.embeddings.create(body);
  } catch (e) {
    check(e.status === 400, `${what}: status ${e.status}`);
    check(e.error && typeof e.error.message === "string" && e.param === param, `${what}: param ${e.param}`);
    return;
  }
  check(false, `${what}: accepted`);
}
await expect400({ model, input: "x", dimensions: nEmbd + 1 }, "dimensions", "dimensions != n_embd");
await expect400({ model, input: "" }, "input", "empty string");
await expect400({ model, input: [] }, "input", "empty array");
await expect400({ model, input: [1, "a"] }, "input", "mixed array");
await expect400({ model, input: "x", encoding_format: "hex" }, "encoding_format", "bad encoding_format");
const ok = await client.embeddings.create({ model, input: "x", dimensions: nEmbd, encoding_format: "float" });
check(ok.data[0].embedding.length === nEmbd, "dimensions == n_embd accepted");

console.log(`openai client: ${checks} embedding checks passed`);
