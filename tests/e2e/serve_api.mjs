// tests/e2e/serve_api.mjs - issue 24's API features of `kite serve` through
// the official `openai` npm package: logprobs / top_logprobs (chat and
// completions, streaming and not, checked against the softmax of
// `kite run --dump-logits`), logit_bias, n > 1 with a seed, unknown fields
// and GET /v1/models/{id}.  Run by tests/e2e/test_serve.sh with KITE_URL,
// KITE_KEY, KITE_NODE_DIR, and KITE_DUMP / KITE_DUMP_PROMPT / KITE_DUMP_IDS:
// the logits file of `kite run --temp 0 -p "Once upon a time"`, its prompt
// token count and its output ids.  Exits non-zero on the first failed check; the
// last line is a one-line summary.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(process.env.KITE_NODE_DIR + "/package.json");
const mod = await import(pathToFileURL(require.resolve("openai")).href);
const OpenAI = mod.default ?? mod.OpenAI;
const client = new OpenAI({ baseURL: process.env.KITE_URL + "/v1", apiKey: process.env.KITE_KEY, maxRetries: 0 });

let n_checks = 0;
function check(cond, what) {
  n_checks++;
  if (!cond) {
    console.error("FAIL: " + what);
    process.exit(1);
  }
}
const near = (a, b, tol) => Math.abs(a - b) <= tol;

// ---- completions logprobs against kite run --dump-logits ----
const N = 8, K = 5;
const comp = await client.completions.create({ model: "kite", prompt: "Once upon a time", max_tokens: N, temperature: 0, logprobs: K });
const lp = comp.choices[0].logprobs;
check(lp && lp.tokens.length === N && lp.token_logprobs.length === N && lp.top_logprobs.length === N &&
      lp.text_offset.length === N, "completions logprobs shape: " + JSON.stringify(lp));
check(lp.tokens.join("") === comp.choices[0].text, "tokens join to the text");
check(lp.text_offset[0] === 0 && lp.text_offset[1] === lp.tokens[0].length, "text_offset");
const dump = readFileSync(process.env.KITE_DUMP);
const n_vocab = (await client.models.list()).data[0].meta.n_vocab, n_prompt = Number(process.env.KITE_DUMP_PROMPT);
const rows = new Float32Array(dump.buffer, dump.byteOffset, dump.byteLength / 4);
let worst = 0;
for (let i = 0; i < N; i++) {
  const row = rows.subarray((n_prompt - 1 + i) * n_vocab, (n_prompt + i) * n_vocab);
  let max = -Infinity, arg = 0;
  for (let v = 0; v < n_vocab; v++) if (row[v] > max) { max = row[v]; arg = v; }
  let sum = 0;
  for (let v = 0; v < n_vocab; v++) sum += Math.exp(row[v] - max);
  const want = row[arg] - max - Math.log(sum); // greedy: the argmax's log-softmax
  worst = Math.max(worst, Math.abs(want - lp.token_logprobs[i]));
  const tops = Object.values(lp.top_logprobs[i]);
  check(tops.length >= 1 && tops.length <= K, `top_logprobs[${i}] has ${tops.length} entries`);
  check(near(Math.max(...tops), lp.token_logprobs[i], 1e-6), `greedy token ${i} is the most likely`);
  check(tops.reduce((a, x) => a + Math.exp(x), 0) <= 1 + 1e-5, `top_logprobs[${i}] mass <= 1`);
}
check(worst <= 1e-4, `logprobs agree with the --dump-logits softmax (worst ${worst})`);

// streamed completions: the same tokens and values
const cs = await client.completions.create({ model: "kite", prompt: "Once upon a time", max_tokens: N, temperature: 0, logprobs: K, stream: true });
const stoks = [], slps = [], soffs = [];
for await (const chunk of cs) {
  const l = chunk.choices[0]?.logprobs;
  if (l) { stoks.push(...l.tokens); slps.push(...l.token_logprobs); soffs.push(...l.text_offset); }
}
check(JSON.stringify(stoks) === JSON.stringify(lp.tokens) && JSON.stringify(soffs) === JSON.stringify(lp.text_offset),
      "streamed completion logprobs tokens/offsets");
check(slps.every((x, i) => x === lp.token_logprobs[i]), "streamed completion logprobs values");

// ---- chat logprobs ----
const messages = [{ role: "user", content: "Tell me a story about a dog." }];
const chat = await client.chat.completions.create({ model: "kite", messages, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 3 });
const content = chat.choices[0].logprobs?.content;
check(Array.isArray(content) && content.length === chat.usage.completion_tokens, "chat logprobs.content per token");
check(content.map((e) => e.token).join("") === chat.choices[0].message.content, "chat tokens join to the content");
for (const e of content) {
  check(typeof e.token === "string" && typeof e.logprob === "number" && e.logprob <= 0, "chat entry fields");
  check(Array.isArray(e.bytes) && Buffer.from(e.bytes).toString("utf8") === e.token, "bytes are the token's UTF-8");
  check(e.top_logprobs.length === 3 && near(e.top_logprobs[0].logprob, e.logprob, 1e-6), "greedy token is top_logprobs[0]");
  check(e.top_logprobs.every((t, i) => i === 0 || t.logprob <= e.top_logprobs[i - 1].logprob), "top_logprobs sorted");
}
const chs = await client.chat.completions.create({ model: "kite", messages, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 3, stream: true });
const sc = [];
for await (const chunk of chs) sc.push(...(chunk.choices[0]?.logprobs?.content ?? []));
check(JSON.stringify(sc) === JSON.stringify(content), "streamed chat logprobs equal the non-streamed ones");
// temperature does not reshape the reported distribution (documented)
const hot = await client.chat.completions.create({ model: "kite", messages, max_tokens: 1, temperature: 1.7, seed: 4, logprobs: true, top_logprobs: 3 });
check(near(hot.choices[0].logprobs.content[0].top_logprobs[0].logprob, content[0].top_logprobs[0].logprob, 1e-6),
      "logprobs are at temperature 1");
const none = await client.chat.completions.create({ model: "kite", messages, max_tokens: 2, temperature: 0 });
check(none.choices[0].logprobs === null, "no logprobs unless asked");

// ---- logit_bias: -100 bans what greedy would pick (ids from kite run --json) ----
const ids = process.env.KITE_DUMP_IDS.split(",").map(Number);
const ban = { [String(ids[0])]: -100 };
const banned = await client.completions.create({ model: "kite", prompt: "Once upon a time", max_tokens: N, temperature: 0, logprobs: 1, logit_bias: ban });
const bl = banned.choices[0].logprobs;
check(bl.tokens[0] !== lp.tokens[0], `logit_bias -100 bans the greedy token ${JSON.stringify(lp.tokens[0])}`);
const second = Object.entries(lp.top_logprobs[0]).sort((x, y) => y[1] - x[1])[1];
check(bl.tokens[0] === second[0], `the runner-up ${JSON.stringify(second[0])} takes its place`);
check(near(bl.token_logprobs[0], second[1] - Math.log1p(-Math.exp(lp.token_logprobs[0])), 1e-4),
      "the ban renormalizes the distribution");
const banned_chat = await client.chat.completions.create({ model: "kite", messages, max_tokens: 16, temperature: 1, seed: 3, logit_bias: ban });
check(typeof banned_chat.choices[0].message.content === "string", "chat accepts logit_bias");
const forced = await client.completions.create({
  model: "kite", prompt: "Once upon a time", max_tokens: 1, temperature: 0, logit_bias: { [String(ids[1])]: 100 },
});
check(forced.choices[0].text === lp.tokens[1], "logit_bias +100 forces a token");

// ---- n > 1 ----
const three = await client.chat.completions.create({ model: "kite", messages, max_tokens: 12, temperature: 1, seed: 7, n: 3 });
check(three.choices.length === 3 && three.choices.every((c, i) => c.index === i), "n = 3 gives choices 0, 1, 2");
const texts = three.choices.map((c) => c.message.content);
check(new Set(texts).size > 1, "the choices differ (own seed each): " + JSON.stringify(texts));
const again = await client.chat.completions.create({ model: "kite", messages, max_tokens: 12, temperature: 1, seed: 7, n: 3 });
check(JSON.stringify(again.choices.map((c) => c.message.content)) === JSON.stringify(texts), "n = 3 with a seed is reproducible");
const one = await client.chat.completions.create({ model: "kite", messages, max_tokens: 12, temperature: 1, seed: 7 });
check(one.choices[0].message.content === texts[0], "choice 0 of n = 3 is the n = 1 answer");
check(three.usage.completion_tokens >= 3 && three.usage.completion_tokens <= 36 && three.usage.completion_tokens > one.usage.completion_tokens,
      "usage counts every choice");
const st = await client.chat.completions.create({ model: "kite", messages, max_tokens: 12, temperature: 1, seed: 7, n: 3, stream: true });
const stext = ["", "", ""], sfin = [null, null, null];
for await (const chunk of st)
  for (const c of chunk.choices) {
    stext[c.index] += c.delta.content ?? "";
    if (c.finish_reason) sfin[c.index] = c.finish_reason;
  }
check(JSON.stringify(stext) === JSON.stringify(texts), "streamed n = 3 equals the non-streamed choices");
check(sfin.every((f) => f === "length" || f === "stop"), "every streamed choice finishes");
const cn = await client.completions.create({ model: "kite", prompt: "Once upon a time", max_tokens: 6, temperature: 1, seed: 9, n: 2, logprobs: 1 });
check(cn.choices.length === 2 && cn.choices.every((c) => c.logprobs.tokens.join("") === c.text), "completions n = 2 with logprobs");

// ---- errors: nothing silently ignored ----
async function status(p) {
  try { await p; return 200; } catch (e) { return e.status; }
}
check(await status(client.chat.completions.create({ model: "kite", messages, n: 17 })) === 400, "n above the limit -> 400");
check(await status(client.chat.completions.create({ model: "kite", messages, functions: [{ name: "f" }] })) === 400,
      "legacy functions -> 400");
check(await status(client.chat.completions.create({ model: "kite", messages, frobnicate: 1 })) === 400, "unknown field -> 400");
check(await status(client.chat.completions.create({ model: "kite", messages, logit_bias: { x: 1 } })) === 400, "bad logit_bias -> 400");

// ---- GET /v1/models/{id} ----
const list = await client.models.list();
const id = list.data[0].id;
const m = await client.models.retrieve(id);
check(m.id === id && m.object === "model", "models.retrieve: " + JSON.stringify(m));
check(await status(client.models.retrieve("no-such-model")) === 404, "unknown model -> 404");
// an unknown "model" in a generation request: OpenAI's 404, which the client throws as NotFoundError
for (const [what, p] of [
  ["chat", () => client.chat.completions.create({ model: "gpt-4o", messages, max_tokens: 2 })],
  ["completions", () => client.completions.create({ model: "gpt-4o", prompt: "Once", max_tokens: 2 })],
  ["chat stream", () => client.chat.completions.create({ model: "gpt-4o", messages, max_tokens: 2, stream: true })],
]) {
  let e = null;
  try { await p(); } catch (x) { e = x; }
  check(e instanceof mod.NotFoundError && e.status === 404 && e.code === "model_not_found" && e.param === "model" &&
        e.type === "invalid_request_error" && /The model `gpt-4o` does not exist/.test(e.message),
        `${what}: unknown model -> NotFoundError model_not_found (${e && e.message})`);
}
// the served name is answered whichever accepted name the request gave
const byFile = process.env.KITE_MODEL_FILE;
if (byFile) {
  const r = await client.completions.create({ model: byFile, prompt: "Once", max_tokens: 2, temperature: 0 });
  check(r.model === id, `the file name ${byFile} is accepted and answered as ${id} (got ${r.model})`);
  check((await client.models.retrieve(byFile)).id === id, "models.retrieve(file name) gives the served model");
}

console.log(`openai${mod.VERSION ? " " + mod.VERSION : ""}: ${n_checks} checks, logprobs worst error ${worst.toExponential(1)}`);
