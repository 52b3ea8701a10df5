// kite chat page: sends the conversation to /v1/chat/completions with
// stream: true and renders the server-sent events as they arrive (fetch +
// ReadableStream); Stop aborts the request (AbortController), which makes the
// server cancel the generation.  Settings are kept in localStorage.
// The assistant bubble carries data-state (streaming, done, stopped, error)
// and data-chunks (events received) for the browser test.
"use strict";

const $ = (id) => document.getElementById(id);
const log = $("log"), input = $("input"), sendBtn = $("send"), stopBtn = $("stop"), statusEl = $("status");
const settingIds = ["temperature", "max-tokens", "top-p", "system", "api-key"];
let history = [];      // [{role, content}] of the finished turns
let controller = null; // AbortController of the running request

for (const id of settingIds) {
  const saved = localStorage.getItem("kite." + id);
  if (saved !== null) $(id).value = saved;
  $(id).addEventListener("change", () => localStorage.setItem("kite." + id, $(id).value));
}

$("toggle-settings").addEventListener("click", () => {
  const s = $("settings");
  s.hidden = !s.hidden;
  $("toggle-settings").setAttribute("aria-expanded", String(!s.hidden));
});

// the empty-state hint shows while the conversation is empty
function showEmpty() { $("empty").hidden = log.childElementCount > 0; }

$("new-chat").addEventListener("click", () => {
  if (controller) controller.abort();
  history = [];
  log.textContent = "";
  showEmpty();
  statusEl.textContent = "";
  input.focus();
});

// The server wants a key (401): open the settings at the API key field.
function askForKey() {
  $("settings").hidden = false;
  $("toggle-settings").setAttribute("aria-expanded", "true");
  const k = $("api-key");
  k.setAttribute("aria-invalid", "true");
  k.placeholder = "this server needs its API key (--api-key)";
  k.focus();
  k.addEventListener("input", () => k.removeAttribute("aria-invalid"), { once: true });
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  log.appendChild(div);
  log.scrollTop = log.scrollHeight;
  showEmpty();
  return div;
}

function number(id, fallback) {
  const v = parseFloat($(id).value);
  return Number.isFinite(v) ? v : fallback;
}

// The model's name: /health names it without a key, so it shows even before one is entered.
async function loadModel() {
  try {
    const r = await fetch("/health");
    if (r.ok) {
      const j = await r.json();
      if (j.model) { $("model").textContent = j.model; return; }
    }
    const m = await fetch("/v1/models", { headers: headers() });
    if (!m.ok) return;
    const j = await m.json();
    if (j.data && j.data[0]) $("model").textContent = j.data[0].id;
  } catch (e) { /* the page still works without it */ }
}

// Reads an SSE body and calls onEvent(obj) for each "data: {...}" event.
async function readEvents(body, onEvent) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let sep;
    while ((sep = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, sep);
      buf = buf.slice(sep + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        onEvent(JSON.parse(data));
      }
    }
  }
}

async function send(text) {
  const messages = [];
  const sys = $("system").value.trim();
  if (sys) messages.push({ role: "system", content: sys });
  messages.push(...history, { role: "user", content: text });
  addMessage("user", text);
  const bubble = addMessage("assistant", "");
  bubble.dataset.state = "streaming";
  bubble.dataset.chunks = "0";
  let reply = "", usage = null, finish = null;
  const t0 = performance.now();
  controller = new AbortController();
  sendBtn.disabled = true;
  stopBtn.disabled = false;
  statusEl.textContent = "generating...";
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers(),
      signal: controller.signal,
      body: JSON.stringify({
        messages,
        stream: true,
        stream_options: { include_usage: true },
        temperature: number("temperature", 0.8),
        top_p: number("top-p", 1),
        max_tokens: Math.max(1, Math.round(number("max-tokens", 256))),
      }),
    });
    if (!r.ok) {
      let msg = r.status + " " + r.statusText;
      try { msg = (await r.json()).error.message; } catch (e) { /* keep the status line */ }
      if (r.status === 401) askForKey();
      throw new Error(msg);
    }
    await readEvents(r.body, (ev) => {
      if (ev.error) throw new Error(ev.error.message);
      if (ev.usage) usage = ev.usage;
      const c = ev.choices && ev.choices[0];
      if (!c) return;
      if (c.delta && c.delta.content) {
        reply += c.delta.content;
        bubble.textContent = reply;
        log.scrollTop = log.scrollHeight;
      }
      if (c.finish_reason) finish = c.finish_reason;
      bubble.dataset.chunks = String(Number(bubble.dataset.chunks) + 1);
    });
    history.push({ role: "user", content: text }, { role: "assistant", content: reply });
    bubble.dataset.state = "done";
    const secs = (performance.now() - t0) / 1000;
    statusEl.textContent = usage
      ? `${usage.completion_tokens} tokens in ${secs.toFixed(2)} s (${(usage.completion_tokens / secs).toFixed(1)} tok/s), prompt ${usage.prompt_tokens} tokens` + (finish ? `, finish: ${finish}` : "")
      : `done in ${secs.toFixed(2)} s`;
  } catch (e) {
    if (e.name === "AbortError") {
      bubble.dataset.state = "stopped";
      statusEl.textContent = "stopped";
      if (reply) history.push({ role: "user", content: text }, { role: "assistant", content: reply });
    } else {
      bubble.dataset.state = "error";
      bubble.classList.add("error");
      bubble.textContent = reply + (reply ? "\n" : "") + "Error: " + e.message;
      statusEl.textContent = "error";
    }
  } finally {
    controller = null;
    sendBtn.disabled = false;
    stopBtn.disabled = true;
  }
}

$("composer").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = input.value.trim();
  if (!text || controller) return;
  input.value = "";
  send(text);
});

input.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    $("composer").requestSubmit();
  }
});

stopBtn.addEventListener("click", () => { if (controller) controller.abort(); });

loadModel();
input.focus();
