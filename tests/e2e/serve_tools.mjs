// tests/e2e/serve_tools.mjs - tool calling of `kite serve` through the official `openai` npm
// package (issue 24 part 4), arguments validated with `ajv`: tool_choice "required" at
// temperature 1.0 over several seeds (one call, then parallel calls), a named tool_choice,
// streamed calls (raw chunks, token by token, and the client's own stream helper) reassembling to the
// non-streamed call, tool role messages in the history, "auto" and "none", and 400s for bad
// tools.  Run by tests/e2e/test_serve_tools.sh with KITE_URL, KITE_NODE_DIR and KITE_FAMILY
// (the server's --chat-template, for the messages); the last line is a summary.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(process.env.KITE_NODE_DIR + "/package.json");
const mod = await import(pathToFileURL(require.resolve("openai")).href);
const OpenAI = mod.default ?? mod.OpenAI;
const ajvMod = await import(pathToFileURL(require.resolve("ajv")).href);
const Ajv = ajvMod.default?.default ?? ajvMod.default ?? ajvMod.Ajv;
const ajv = new Ajv({ strict: true, allErrors: true });
const client = new OpenAI({ baseURL: process.env.KITE_URL + "/v1", apiKey: "none", maxRetries: 0 });
const family = process.env.KITE_FAMILY ?? "chatml";
const SEEDS = Number(process.env.KITE_SEEDS ?? 10);

function check(cond, what) {
  if (!cond) {
    console.error(`FAIL (${family}): ${what}`);
    process.exit(1);
  }
}

const weather = {
  type: "object",
  properties: {
    city: { type: "string", minLength: 1, maxLength: 12 },
    unit: { enum: ["celsius", "fahrenheit"] },
    days: { type: "integer", minimum: 1, maximum: 7 },
  },
  required: ["city", "unit"],
  additionalProperties: false,
};
const add = {
  type: "object",
  properties: { a: { type: "integer", minimum: -1000, maximum: 1000 }, b: { type: "integer", minimum: -1000, maximum: 1000 } },
  required: ["a", "b"],
  additionalProperties: false,
};
const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: weather, strict: true } },
  { type: "function", function: { name: "add", description: "Sum of two integers", parameters: add } },
];
const validators = { get_weather: ajv.compile(weather), add: ajv.compile(add) };
const messages = [{ role: "user", content: "What is the weather in Paris?" }];

// every call names a tool and its arguments parse and validate
function checkCalls(choice, what, only) {
  check(choice.finish_reason === "tool_calls", `${what}: finish_reason ${choice.finish_reason}`);
  const calls = choice.message.tool_calls;
  check(Array.isArray(calls) && calls.length >= 1, `${what}: no tool_calls: ${JSON.stringify(choice.message)}`);
  const ids = new Set();
  for (const c of calls) {
    check(c.type === "function" && typeof c.id === "string" && c.id.length > 0, `${what}: call shape ${JSON.stringify(c)}`);
    check(!ids.has(c.id), `${what}: duplicate call id ${c.id}`);
    ids.add(c.id);
    const v = validators[c.function.name];
    check(v, `${what}: unknown function ${c.function.name}`);
    if (only) check(c.function.name === only, `${what}: called ${c.function.name}, not ${only}`);
    let args;
    try {
      args = JSON.parse(c.function.arguments);
    } catch (e) {
      check(false, `${what}: arguments do not parse: ${c.function.arguments}`);
    }
    check(v(args), `${what}: arguments ${c.function.arguments} fail the schema: ${ajv.errorsText(v.errors)}`);
  }
  return calls;
}

let n = 0;
// tool_choice "required", one call, temperature 1
const distinct = new Set();
for (let seed = 1; seed <= SEEDS; seed++) {
  const r = await client.chat.completions.create({
    model: "kite", messages, tools, tool_choice: "required", parallel_tool_calls: false,
    temperature: 1.0, seed, max_tokens: 400,
  });
  const calls = checkCalls(r.choices[0], `required, seed ${seed}`);
  check(calls.length === 1, `required without parallel calls: ${calls.length} calls`);
  distinct.add(calls[0].function.name + calls[0].function.arguments);
  n++;
}
check(distinct.size > 1, "the seeds gave the same call");
// parallel calls (the default): one or more, all valid (a call cut by max_tokens is dropped)
for (let seed = 1; seed <= 3; seed++) {
  const r = await client.chat.completions.create({
    model: "kite", messages, tools, tool_choice: "required", temperature: 1.0, seed, max_tokens: 200,
  });
  checkCalls(r.choices[0], `required parallel, seed ${seed}`);
  n++;
}
// a named function
for (let seed = 1; seed <= 3; seed++) {
  const r = await client.chat.completions.create({
    model: "kite", messages, tools, tool_choice: { type: "function", function: { name: "add" } },
    parallel_tool_calls: false, temperature: 1.0, seed, max_tokens: 300,
  });
  checkCalls(r.choices[0], `named, seed ${seed}`, "add");
  n++;
}
// streaming: raw chunks reassemble to the non-streamed call, token by token: the first delta
// of a call has index, id, type, name and arguments "", the next ones index and a fragment
async function streamCalls(body) {
  const stream = await client.chat.completions.create({ ...body, stream: true });
  const got = [];
  let finish = null, content = "", argChunks = 0;
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    content += ch.delta?.content ?? "";
    for (const d of ch.delta?.tool_calls ?? []) {
      check(Number.isInteger(d.index), `stream: delta without index ${JSON.stringify(d)}`);
      if (!got[d.index]) {
        check(d.index === got.length, `stream: call ${d.index} before call ${got.length}`);
        check(d.id && d.type === "function" && d.function?.name && d.function.arguments === "",
          `stream: first delta of a call lacks id/type/name/arguments "" ${JSON.stringify(d)}`);
        got[d.index] = { id: d.id, name: d.function.name, arguments: "" };
      } else {
        check(!d.id && !d.function?.name && typeof d.function?.arguments === "string" && d.function.arguments.length > 0,
          `stream: a later delta of a call ${JSON.stringify(d)}`);
        got[d.index].arguments += d.function.arguments;
        argChunks++;
      }
    }
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  return { got, finish, content, argChunks };
}
const req = { model: "kite", messages, tools, tool_choice: "required", parallel_tool_calls: false, temperature: 1.0, seed: 7, max_tokens: 400 };
let argChunksSeen = 0, argCalls = 0;
for (const r of [req, { ...req, seed: 3, tool_choice: { type: "function", function: { name: "add" } } },
                 { ...req, seed: 5, parallel_tool_calls: true, max_tokens: 200 }]) {
  const plain = await client.chat.completions.create(r);
  const want = checkCalls(plain.choices[0], `stream reference, seed ${r.seed}`);
  const { got, finish, content, argChunks } = await streamCalls(r);
  // with parallel calls a last call cut by max_tokens is streamed (finish "length") and dropped whole
  const nGot = finish === "length" ? got.length - 1 : got.length;
  check(finish === "tool_calls" || (finish === "length" && r.parallel_tool_calls), `stream: finish_reason ${finish}`);
  check(nGot === want.length && want.every((c, i) => c.function.name === got[i].name &&
    c.function.arguments === got[i].arguments),
    `stream (seed ${r.seed}) reassembles to ${JSON.stringify(got)}, not ${JSON.stringify(want)}`);
  check(content === (plain.choices[0].message.content ?? ""), `stream content ${JSON.stringify(content)}`);
  // chunks hold what was decoded since the client's last read: a fast model on a busy
  // machine may give a few tokens per chunk, so the count is checked over the three requests
  argChunksSeen += argChunks;
  argCalls += got.length;
  n++;
}
// (the old whole-call stream sent exactly one arguments chunk per call; tests/unit/test_chat_tools.c
// checks fragment by fragment that every token's bytes go out as soon as they are decoded)
check(argChunksSeen >= argCalls + 2, `stream: ${argCalls} calls' arguments in ${argChunksSeen} chunks (not token by token)`);
// "auto" (unconstrained): the streamed content and calls equal the non-streamed answer
for (let seed = 1; seed <= 3; seed++) {
  const r = { model: "kite", messages, tools, temperature: 1.0, seed, max_tokens: 48 };
  const plain = await client.chat.completions.create(r);
  const { got, finish, content } = await streamCalls(r);
  const pm = plain.choices[0].message;
  check(finish === plain.choices[0].finish_reason || (finish === "length" && got.length), `auto stream: finish ${finish}`);
  check(content === (pm.content ?? ""), `auto stream content ${JSON.stringify(content)} != ${JSON.stringify(pm.content)}`);
  const want = pm.tool_calls ?? [];
  check(want.every((c, i) => got[i] && c.function.arguments === got[i].arguments), `auto stream calls ${JSON.stringify(got)}`);
  n++;
}
// the client's own stream helper accumulates the same message
const streamApi = client.chat.completions.stream ? client.chat.completions : client.beta.chat.completions;
const helper = streamApi.stream({ ...req, stream: true });
const final = await helper.finalChatCompletion();
const hc = checkCalls(final.choices[0], "stream helper");
const want = checkCalls((await client.chat.completions.create(req)).choices[0], "stream reference");
check(hc[0].function.name === want[0].function.name && hc[0].function.arguments === want[0].function.arguments,
  `stream helper: ${JSON.stringify(hc)}`);
n++;
// tool role messages in the history, then an answer (auto)
const history = [
  ...messages,
  { role: "assistant", content: null, tool_calls: [{ id: want[0].id, type: "function", function: want[0].function }] },
  { role: "tool", tool_call_id: want[0].id, content: "{\"temperature\": 21}" },
];
const after = await client.chat.completions.create({ model: "kite", messages: history, tools, temperature: 0, max_tokens: 8 });
check(after.choices[0].message.role === "assistant", "history with a tool result: no answer");
check(["stop", "length", "tool_calls"].includes(after.choices[0].finish_reason), `history: finish ${after.choices[0].finish_reason}`);
if (after.choices[0].finish_reason === "tool_calls") checkCalls(after.choices[0], "auto after a tool result");
n++;
// "none": plain content, never tool calls; the history is still accepted
const none = await client.chat.completions.create({ model: "kite", messages: history, tools, tool_choice: "none", max_tokens: 8 });
check(none.choices[0].finish_reason !== "tool_calls" && !none.choices[0].message.tool_calls, `none: ${JSON.stringify(none.choices[0])}`);
check(typeof none.choices[0].message.content === "string", "none: no content");
n++;
// bad tools: 400 naming the parameter
async function expect400(body, param, what) {
  try {
    await client.chat.completions.create({ model: "kite", messages, max_tokens: 4, ...body });
    check(false, `${what}: accepted`);
  } catch (e) {
    check(e.status === 400, `${what}: status ${e.status} ${e.message}`);
    check(e.error?.param === param || e.param === param, `${what}: param ${e.error?.param ?? e.param}, not ${param}`);
  }
  n++;
}
await expect400({ tools: [{ type: "function", function: { name: "bad name!" } }] }, "tools", "a bad function name");
await expect400({ tools: [{ type: "retrieval" }] }, "tools", "a tool that is not a function");
await expect400({ tools: { name: "x" } }, "tools", "tools not an array");
await expect400({ tools: [] }, "tools", "an empty tools array");
await expect400({ tools: [{ type: "function", function: { name: "f", parameters: { type: "string", pattern: "a+" } } }] }, "tools", "an unsupported schema keyword");
await expect400({ tools, tool_choice: { type: "function", function: { name: "nope" } } }, "tool_choice", "a named unknown function");
await expect400({ tools, tool_choice: "sometimes" }, "tool_choice", "a bad tool_choice");
await expect400({ tool_choice: "required" }, "tool_choice", "tool_choice without tools");
await expect400({ tools, parallel_tool_calls: "yes" }, "parallel_tool_calls", "parallel_tool_calls not a boolean");
await expect400({ tools, tool_choice: "required", response_format: { type: "json_object" } }, "response_format", "tools with response_format");
await expect400({ messages: [{ role: "tool", content: "x" }] }, "messages", "a tool message without tool_call_id");
await expect400({ messages: [{ role: "assistant", tool_calls: [{ type: "function", function: { name: "f", arguments: "{x" } }] }] },
  "messages", "tool call arguments that are not JSON");
console.log(`serve_tools (${family}): ${n} checks passed (${SEEDS} seeds, ${distinct.size} distinct calls, ${argChunksSeen} streamed argument chunks)`);
