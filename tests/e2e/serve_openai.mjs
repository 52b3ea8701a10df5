// tests/e2e/serve_openai.mjs - `kite serve` through the official `openai`
// npm package: chat, streaming chat (with usage), completions, streaming
// completions and an API error.  Run by tests/e2e/test_serve.sh with
// KITE_URL (server), KITE_KEY (API key) and KITE_NODE_DIR (where npm
// installed the package, outside git).  Exits non-zero on the first failed
// check; the last line is a one-line summary.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(process.env.KITE_NODE_DIR + "/package.json");
const mod = await import(pathToFileURL(require.resolve("openai")).href);
const OpenAI = mod.default ?? mod.OpenAI;
const client = new OpenAI({ baseURL: process.env.KITE_URL + "/v1", apiKey: process.env.KITE_KEY, maxRetries: 0 });

function check(cond, what) {
  if (!cond) {
    console.error("FAIL: " + what);
    process.exit(1);
  }
}

const messages = [{ role: "user", content: "Tell me a story about a dog." }];

const chat = await client.chat.completions.create({ model: "kite", messages, max_tokens: 16, temperature: 0 });
check(chat.object === "chat.completion", "chat object: " + chat.object);
check(chat.choices[0].message.role === "assistant", "chat role");
check(typeof chat.choices[0].message.content === "string" && chat.choices[0].message.content.length > 0, "chat content");
check(chat.usage.total_tokens === chat.usage.prompt_tokens + chat.usage.completion_tokens, "chat usage");

const stream = await client.chat.completions.create({
  model: "kite", messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let text = "", chunks = 0, finish = null, usage = null;
for await (const chunk of stream) {
  check(chunk.object === "chat.completion.chunk", "chunk object: " + chunk.object);
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  const c = chunk.choices[0];
  if (!c) continue;
  text += c.delta.content ?? "";
  if (c.finish_reason) finish = c.finish_reason;
}
check(text === chat.choices[0].message.content, `stream text ${JSON.stringify(text)} != ${JSON.stringify(chat.choices[0].message.content)}`);
check(finish === chat.choices[0].finish_reason, "stream finish_reason");
check(usage && usage.completion_tokens === chat.usage.completion_tokens, "stream usage");

const comp = await client.completions.create({ model: "kite", prompt: "Once upon a time", max_tokens: 20, temperature: 0 });
check(comp.object === "text_completion", "completion object");
check(comp.choices[0].text.startsWith(", there was a little girl named Lily"), "completion text: " + comp.choices[0].text);
check(comp.usage.prompt_tokens === 5 && comp.usage.completion_tokens === 20, "completion usage");

const cstream = await client.completions.create({ model: "kite", prompt: "Once upon a time", max_tokens: 20, temperature: 0, stream: true });
let ctext = "";
for await (const chunk of cstream) ctext += chunk.choices[0]?.text ?? "";
check(ctext === comp.choices[0].text, "streamed completion text");

let status = 0;
try {
  await client.chat.completions.create({ model: "kite", messages, n: 17 });
} catch (e) {
  status = e.status;
}
check(status === 400, "n = 17 (above the server limit) gives 400, got " + status);

console.log(`openai${mod.VERSION ? " " + mod.VERSION : ""}: ${chunks} chunks, ${usage.completion_tokens} tokens`);
