// tests/e2e/serve_web.mjs - the chat page of `kite serve` in headless
// Chromium (playwright-core driving Debian's /usr/bin/chromium): sends without
// a key and expects the settings to open at the API key field (401), enters the
// API key in the settings, types a message, presses Enter and waits for the
// streamed reply; then checks that Stop aborts a long generation.  Before
// that: the model's name shows before any key is entered, the empty chat
// shows a hint (gone after the first message), and the favicon is served.  Run by
// tests/e2e/test_serve.sh with KITE_URL, KITE_KEY, KITE_NODE_DIR and
// KITE_CHROMIUM.  Exits non-zero on failure; the last line is a summary.
import { createRequire } from "node:module";

const require = createRequire(process.env.KITE_NODE_DIR + "/package.json");
const { chromium } = require("playwright-core");

const browser = await chromium.launch({
  executablePath: process.env.KITE_CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
let failed = null;
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(process.env.KITE_URL + "/");
  // before any key is entered: the model's name (from /health), the empty-state hint, a favicon
  await page.waitForFunction(() => document.querySelector("#model").textContent.length > 0, null, { timeout: 5000 })
    .catch(() => { throw new Error("no model name shown before the API key is entered"); });
  if (!(await page.isVisible("#empty"))) throw new Error("no empty-state hint on an empty chat");
  const icon = await page.getAttribute('link[rel="icon"]', "href");
  const ir = await page.request.get(process.env.KITE_URL + icon);
  if (!icon || ir.status() !== 200 || !(ir.headers()["content-type"] || "").startsWith("image/"))
    throw new Error(`favicon ${icon}: status ${ir.status()}`);
  // no key yet: the server answers 401 and the page opens its settings at
  // the API key field
  await page.fill("#input", "Hello?");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => {
    const el = document.querySelector(".msg.assistant");
    return el && el.dataset.state === "error";
  }, null, { timeout: 10000 });
  const asked = await page.evaluate(() => !document.getElementById("settings").hidden &&
    document.getElementById("api-key").getAttribute("aria-invalid") === "true");
  if (!asked) throw new Error("after a 401 the page does not ask for the API key in its settings");
  await page.click("#new-chat");
  if (await page.isHidden("#settings")) await page.click("#toggle-settings");
  await page.fill("#api-key", process.env.KITE_KEY);
  await page.dispatchEvent("#api-key", "change");
  await page.fill("#max-tokens", "48");
  await page.dispatchEvent("#max-tokens", "change");
  await page.fill("#input", "Tell me a story about a cat.");
  await page.press("#input", "Enter");
  const reply = page.locator(".msg.assistant").first();
  await reply.waitFor();
  if (await page.isVisible("#empty")) throw new Error("the empty-state hint stays after a message");
  await page.waitForFunction(() => {
    const el = document.querySelector(".msg.assistant");
    return el && el.dataset.state !== "streaming";
  }, null, { timeout: 30000 });
  const state = await reply.getAttribute("data-state");
  const chunks = Number(await reply.getAttribute("data-chunks"));
  const text = await reply.textContent();
  if (state !== "done") throw new Error(`reply state ${state}: ${text}`);
  if (!(text.length > 0)) throw new Error("empty reply");
  if (!(chunks > 2)) throw new Error(`only ${chunks} stream events`);
  const status = await page.textContent("#status");

  // Stop: hold the next request in the browser for a moment (the tiny model
  // would otherwise finish first), press Stop, expect an aborted turn
  await page.route("**/v1/chat/completions", async (route) => {
    await new Promise((r) => setTimeout(r, 1500));
    await route.continue().catch(() => {});
  });
  await page.fill("#input", "Another story, please.");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant").length === 2);
  await page.click("#stop");
  await page.waitForFunction(() => {
    const el = document.querySelectorAll(".msg.assistant")[1];
    return el && el.dataset.state !== "streaming";
  }, null, { timeout: 10000 });
  const state2 = await page.locator(".msg.assistant").nth(1).getAttribute("data-state");
  if (state2 !== "stopped") throw new Error(`after Stop the reply state is ${state2}`);
  if (await page.isDisabled("#send")) throw new Error("Send stays disabled after Stop");
  if (errors.length) throw new Error("page errors: " + errors.join("; "));
  console.log(`asks for the key after a 401; reply of ${text.length} chars in ${chunks} events; ${status}; Stop aborts`);
} catch (e) {
  failed = e;
} finally {
  await browser.close();
}
if (failed) {
  console.error("FAIL: " + (failed.stack || failed));
  process.exit(1);
}
