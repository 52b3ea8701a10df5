// tests/e2e/serve_structured.mjs - structured output of `kite serve` through the official
// `openai` npm package, validated with `ajv` (issue 24): response_format json_schema (strict)
// at temperature 1.0 over 20 seeds, json_object, llama-server's json_schema and grammar
// fields, stop strings with a constrained output, and a 400 naming an unsupported keyword.
// Every output must JSON.parse and validate.  Run by tests/e2e/test_serve_grammar.sh with
// KITE_URL and KITE_NODE_DIR (where npm installed openai and ajv); the last line is a summary.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const require = createRequire(process.env.KITE_NODE_DIR + "/package.json");
const mod = await import(pathToFileURL(require.resolve("openai")).href);
const OpenAI = mod.default ?? mod.OpenAI;
const ajvMod = await import(pathToFileURL(require.resolve("ajv")).href);
const Ajv = ajvMod.default?.default ?? ajvMod.default ?? ajvMod.Ajv;
const ajv = new Ajv({ strict: true, allErrors: true });
const client = new OpenAI({ baseURL: process.env.KITE_URL + "/v1", apiKey: "none", maxRetries: 0 });

function check(cond, what) {
  if (!cond) {
    console.error("FAIL: " + what);
    process.exit(1);
  }
}

// a nested object with enums, an array, bounded strings and an integer range
const schema = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 16 },
    role: { enum: ["admin", "user", "guest"] },
    age: { type: "integer", minimum: 0, maximum: 120 },
    tags: { type: "array", items: { type: "string", maxLength: 8 }, minItems: 1, maxItems: 3 },
    address: {
      type: "object",
      properties: { city: { type: "string", maxLength: 12 }, zip: { type: "integer", minimum: 10000, maximum: 99999 } },
      required: ["city", "zip"],
      additionalProperties: false,
    },
    active: { type: "boolean" },
    note: { anyOf: [{ type: "null" }, { type: "string", maxLength: 6 }] },
  },
  required: ["name", "role", "age", "tags", "address"],
  additionalProperties: false,
};
const validate = ajv.compile(schema);
const messages = [{ role: "user", content: "Describe a person as JSON." }];

let valid = 0;
const seen = new Set();
for (let seed = 1; seed <= 20; seed++) {
  const r = await client.chat.completions.create({
    model: "kite", messages, max_tokens: 460, temperature: 1.0, seed,
    response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema } },
  });
  const text = r.choices[0].message.content;
  check(r.choices[0].finish_reason === "stop", `seed ${seed}: finish_reason ${r.choices[0].finish_reason}: ${text}`);
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    check(false, `seed ${seed}: JSON.parse failed (${e.message}): ${text}`);
  }
  check(validate(doc), `seed ${seed}: ajv: ${ajv.errorsText(validate.errors)}: ${text}`);
  seen.add(text);
  valid++;
}
check(seen.size > 1, "20 seeds at temperature 1 gave one output only"); // sampling is really on

// streaming: the concatenated deltas validate too
const stream = await client.chat.completions.create({
  model: "kite", messages, max_tokens: 460, temperature: 1.0, seed: 99, stream: true,
  response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema } },
});
let streamed = "";
for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
check(validate(JSON.parse(streamed)), "streamed output: " + streamed);

// json_object: any object
const anyObj = ajv.compile({ type: "object" });
for (let seed = 1; seed <= 5; seed++) {
  const r = await client.completions.create({
    model: "kite", prompt: "Once upon a time", max_tokens: 120, temperature: 1.0, seed,
    response_format: { type: "json_object" },
  });
  const t = r.choices[0].text;
  if (r.choices[0].finish_reason === "stop") check(anyObj(JSON.parse(t)), "json_object: " + t);
}

// llama-server's fields through the same client (extra body fields)
const small = { type: "object", properties: { ok: { type: "boolean" }, n: { type: "integer", minimum: -3, maximum: 3 } }, required: ["ok", "n"], additionalProperties: false };
const vsmall = ajv.compile(small);
const ls = await client.completions.create({ model: "kite", prompt: "Once", max_tokens: 60, temperature: 1.0, seed: 7, json_schema: small });
check(vsmall(JSON.parse(ls.choices[0].text)), "json_schema field: " + ls.choices[0].text);
const gr = await client.completions.create({ model: "kite", prompt: "Once", max_tokens: 20, temperature: 1.0, seed: 8, grammar: 'root ::= ("yes" | "no") "!"' });
check(gr.choices[0].text === "yes!" || gr.choices[0].text === "no!", "grammar field: " + gr.choices[0].text);

// stop strings act on constrained text: the output ends before the stop string
const st = await client.completions.create({
  model: "kite", prompt: "Once", max_tokens: 60, temperature: 0, stop: ["\"n\""], json_schema: small,
});
check(st.choices[0].finish_reason === "stop" && !st.choices[0].text.includes("\"n\"") && st.choices[0].text.startsWith("{"),
      "stop with a grammar: " + JSON.stringify(st.choices[0]));

// an unsupported keyword: a 400 naming it
let err = null;
try {
  await client.chat.completions.create({
    model: "kite", messages, max_tokens: 10,
    response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", pattern: "^a+$" } } },
  });
} catch (e) {
  err = e;
}
check(err && err.status === 400 && /pattern/.test(err.message) && err.param === "response_format", "400 for pattern: " + (err && err.message));

console.log(`${valid}/20 seeds valid against the schema (${seen.size} distinct), stream, json_object, json_schema, grammar, stop, 400`);
