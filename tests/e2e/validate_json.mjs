// tests/e2e/validate_json.mjs SCHEMA.json REPORT... - each REPORT is the --json line of a
// `kite run` (its "text" field is the generated output): the output must JSON.parse and
// validate against SCHEMA with `ajv`.  KITE_NODE_DIR: where npm installed ajv.  Prints one
// summary line; exits non-zero on the first invalid output.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const require = createRequire(process.env.KITE_NODE_DIR + "/package.json");
const ajvMod = await import(pathToFileURL(require.resolve("ajv")).href);
const Ajv = ajvMod.default?.default ?? ajvMod.default ?? ajvMod.Ajv;
const ajv = new Ajv({ strict: true, allErrors: true });
const [schemaPath, ...reports] = process.argv.slice(2);
const validate = ajv.compile(JSON.parse(readFileSync(schemaPath, "utf8")));
const seen = new Set();
for (const r of reports) {
  const lines = readFileSync(r, "utf8").trim().split("\n");
  const rep = JSON.parse(lines[lines.length - 1]);
  let doc;
  try {
    doc = JSON.parse(rep.text);
  } catch (e) {
    console.log(`FAIL: ${r}: JSON.parse: ${e.message}: ${JSON.stringify(rep.text)}`);
    process.exit(1);
  }
  if (!validate(doc)) {
    console.log(`FAIL: ${r}: ${ajv.errorsText(validate.errors)}: ${rep.text}`);
    process.exit(1);
  }
  if (rep.stop !== "grammar") {
    console.log(`FAIL: ${r}: stop ${rep.stop}, not grammar`);
    process.exit(1);
  }
  seen.add(rep.text);
}
console.log(`${reports.length}/${reports.length} valid (${seen.size} distinct)`);
