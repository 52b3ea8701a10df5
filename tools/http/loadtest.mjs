// tools/http/loadtest.mjs URL CLIENTS REQUESTS TOKENS - a bounded load on
// a kite server (`make loadtest`): CLIENTS concurrent streaming clients run
// REQUESTS chat completions in all, each asking for exactly TOKENS tokens
// (ignore_eos, temperature 0.8, a different prompt per request).  Refuses
// any host but loopback.  Prints throughput and percentiles of time to first
// token (TTFT), time per output token after the first (TPOT: (last chunk -
// first chunk) / (tokens - 1), per request) and request latency, then one
// JSON line with the same numbers.
const [url, clients = "16", requests = "64", tokens = "64"] = process.argv.slice(2);
const host = new URL(url).hostname;
if (!["127.0.0.1", "localhost", "[::1]", "::1"].includes(host)) {
  console.error(`loadtest: ${host} is not loopback; refusing`);
  process.exit(2);
}
const nClients = Number(clients), nRequests = Number(requests), nTokens = Number(tokens);
const subjects = ["dog", "cat", "bird", "girl", "boy", "king", "frog", "fish", "tree", "ship", "moon", "cake"];
const ttft = [], itl = [], latency = [];
let next = 0, tokensOut = 0, failures = 0;

async function one(i) {
  const t0 = performance.now();
  const r = await fetch(url + "/v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({
      messages: [{ role: "user", content: `Tell me story number ${i} about a ${subjects[i % subjects.length]}.` }],
      max_tokens: nTokens, ignore_eos: true, temperature: 0.8, seed: i, stream: true,
      stream_options: { include_usage: true },
    }),
  });
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = "", first = 0, last = 0, done = false, n = 0;
  while (!done) {
    const { value, done: end } = await reader.read();
    if (end) break;
    buf += dec.decode(value, { stream: true });
    let k;
    while ((k = buf.indexOf("\n\n")) >= 0) {
      const line = buf.slice(0, k).replace(/^data: /, "");
      buf = buf.slice(k + 2);
      if (line === "[DONE]") { done = true; break; }
      const ev = JSON.parse(line);
      if (ev.usage) { tokensOut += ev.usage.completion_tokens; n = ev.usage.completion_tokens; }
      const c = ev.choices[0];
      if (c && c.delta && c.delta.content) {
        const now = performance.now();
        if (!first) first = now;
        last = now;
      }
    }
  }
  ttft.push(first - t0);
  if (n > 1) itl.push((last - first) / (n - 1));
  latency.push(performance.now() - t0);
}

async function client() {
  while (next < nRequests) {
    const i = next++;
    try { await one(i); } catch (e) { failures++; console.error("loadtest: request " + i + ": " + e.message); }
  }
}

function pct(a, p) {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

const t0 = performance.now();
await Promise.all(Array.from({ length: nClients }, client));
const secs = (performance.now() - t0) / 1000;
const row = (name, a) => `${name.padEnd(14)} p50 ${pct(a, 50).toFixed(1).padStart(8)}  p90 ${pct(a, 90).toFixed(1).padStart(8)}  p99 ${pct(a, 99).toFixed(1).padStart(8)}  max ${pct(a, 100).toFixed(1).padStart(8)} ms`;
console.log(`loadtest: ${nRequests} requests (${failures} failed), ${nClients} concurrent clients, ${nTokens} tokens each, ${secs.toFixed(2)} s`);
console.log(`throughput     ${(tokensOut / secs).toFixed(1)} generated tok/s, ${((nRequests - failures) / secs).toFixed(2)} requests/s`);
console.log(row("TTFT", ttft));
console.log(row("TPOT", itl));
console.log(row("request", latency));
console.log(JSON.stringify({
  clients: nClients, requests: nRequests, failed: failures, tokens: nTokens, seconds: +secs.toFixed(3),
  tok_s: +(tokensOut / secs).toFixed(1), ttft_p50_ms: +pct(ttft, 50).toFixed(2), ttft_p99_ms: +pct(ttft, 99).toFixed(2),
  tpot_p50_ms: +pct(itl, 50).toFixed(2), tpot_p99_ms: +pct(itl, 99).toFixed(2),
  latency_p50_ms: +pct(latency, 50).toFixed(2), latency_p99_ms: +pct(latency, 99).toFixed(2),
}));
process.exit(failures ? 1 : 0);
