#!/bin/sh
# tests/acceptance/issue24_api.sh [BUILD] - issue 24 (the OpenAI API without silent
# gaps), items logprobs, logit_bias, n, unknown fields and models/{id}, against
# `kite serve` on the bundled stories260K model:
#   1. tests/e2e/serve_api.mjs with the official `openai` npm package
#      (tests/e2e/.node): completions and chat logprobs, streaming and not, agree with
#      the softmax of `kite run --dump-logits` within 1e-4, the greedy token is the
#      most likely alternative, exp(top_logprobs) sums to at most 1; logit_bias -100
#      bans the greedy token (the runner-up takes its place, renormalized), +100 forces
#      one; n = 3 with a seed is reproducible, streamed and not, choice 0 = n = 1;
#      GET /v1/models/{id} 200 / 404;
#   2. logprobs under a constrained format (json_object, temperature 1, 5 seeds): every
#      chosen token has mass, top_logprobs sorted with exp-sum <= 1;
#   3. no field is silently ignored: every request field of OpenAI's chat and
#      completions references that kite does not honour gets a 400 naming it in
#      "param", while the honoured ones (and user, null values) are accepted;
#   4. an unknown "model" is a 404 model_not_found (the server runs with --alias kite:
#      "kite" and the file name are accepted).
# Prints "N passed, N failed".  About 20 s.
set -u
build=${1:-build}
here=$(pwd)
KITE="$here/$build/kite"
[ -x "$KITE" ] || { echo "issue24_api: $KITE not found (make first)" >&2; exit 1; }
T=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$T"' EXIT INT TERM
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok    $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL  $1: $2"; }
NODE_DIR=${KITE_NODE_DIR:-$here/tests/e2e/.node}
KEY=issue24

"$KITE" serve --port 0 -t 2 --parallel 8 --ctx 256 --api-key "$KEY" -a kite </dev/null >"$T/out" 2>"$T/log" &
PID=$!
i=0
PORT=
while [ $i -lt 100 ] && [ -z "$PORT" ]; do
    PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T/log" | head -n 1)
    [ -n "$PORT" ] || sleep 0.1
    i=$((i + 1))
done
[ -n "$PORT" ] || { echo "issue24_api: the server did not start: $(head -n 1 "$T/log")"; exit 1; }
URL=http://127.0.0.1:$PORT

# 1. the npm client checks
if [ ! -d "$NODE_DIR/node_modules/openai" ]; then
    fail "openai npm package" "not installed in $NODE_DIR (run make test once, online)"
elif "$KITE" run -p "Once upon a time" -n 8 --temp 0 --json --dump-logits "$T/dump.bin" </dev/null >"$T/run.json" 2>"$T/run.err"; then
    ids=$(tail -n 1 "$T/run.json" | sed -n 's/.*"ids": \[\([0-9, ]*\)\].*/\1/p' | tr -d ' ')
    n_pr=$(tail -n 1 "$T/run.json" | sed -n 's/.*"prompt_ids": \[\([0-9, ]*\)\].*/\1/p' | tr ',' '\n' | wc -l)
    if KITE_NODE_DIR=$NODE_DIR KITE_URL=$URL KITE_KEY=$KEY KITE_DUMP=$T/dump.bin KITE_DUMP_PROMPT=$n_pr \
        KITE_DUMP_IDS=$ids timeout 120 node tests/e2e/serve_api.mjs >"$T/api.out" 2>&1; then
        ok "logprobs, logit_bias, n, unknown fields, models/{id} ($(tail -n 1 "$T/api.out"))"
    else
        fail "serve_api.mjs" "$(tail -n 3 "$T/api.out" | tr '\n' ' ')"
    fi
else
    fail "kite run --dump-logits" "$(head -n 1 "$T/run.err")"
fi

post() { # PATH BODY: status in $code, body in $T/body
    code=$(printf '%s' "$2" | curl -s -m 60 -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $KEY" \
        -H 'Content-Type: application/json' --data-binary @- "$URL$1")
}

# 2. logprobs under a grammar
bad=
for s in 1 2 3 4 5; do
    post /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"A pet as JSON\"}], \"max_tokens\": 40,
        \"temperature\": 1, \"seed\": $s, \"logprobs\": true, \"top_logprobs\": 20, \"response_format\": {\"type\": \"json_object\"}}"
    if [ "$code" != 200 ]; then bad="$bad $s(status $code)"; continue; fi
    node -e '
        const b = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
        const c = b.choices[0].logprobs.content;
        if (!c.length) process.exit(1);
        for (const e of c) {
            if (!(e.logprob > -9999 && e.logprob <= 0)) process.exit(2);
            const t = e.top_logprobs;
            if (!t.length || t.some((x, i) => i && x.logprob > t[i - 1].logprob)) process.exit(3);
            if (t.reduce((a, x) => a + Math.exp(x.logprob), 0) > 1 + 1e-5) process.exit(4);
            if (e.logprob > t[0].logprob + 1e-6) process.exit(5);
        }' "$T/body" || bad="$bad $s(check $?)"
done
if [ -z "$bad" ]; then ok "logprobs under json_object at temperature 1, 5 seeds: chosen tokens have mass, tops sorted, mass <= 1"
else fail "logprobs under a grammar" "seeds:$bad"; fi

# 3. every OpenAI request field: honoured, or a 400 naming it
CHAT='"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2'
bad=
for f in 'tools:[{"type":"function","function":{"name":"f g"}}]' 'tool_choice:"auto"' 'functions:[{"name":"f"}]' \
    'function_call:"auto"' 'parallel_tool_calls:true' 'audio:{"voice":"alloy","format":"wav"}' 'modalities:["text"]' \
    'prediction:{"type":"content","content":"x"}' 'reasoning_effort:"low"' 'web_search_options:{}' \
    'service_tier:"auto"' 'metadata:{"a":"b"}' 'store:true' 'frobnicate:1' 'logit_bias:{"x":1}' 'n:17' \
    'top_logprobs:3' 'logprobs:"yes"'; do
    name=${f%%:*}
    post /v1/chat/completions "{$CHAT, \"$name\": ${f#*:}}"
    if [ "$code" != 400 ] || ! grep -q "\"param\":\"$name\"" "$T/body"; then bad="$bad $name($code)"; fi
done
for f in 'echo:true' 'best_of:3' 'suffix:"x"' 'frobnicate:1' 'logprobs:true' 'top_logprobs:2'; do
    name=${f%%:*}
    post /v1/completions "{\"prompt\": \"x\", \"max_tokens\": 2, \"$name\": ${f#*:}}"
    if [ "$code" != 400 ] || ! grep -q "\"param\":\"$name\"" "$T/body"; then bad="$bad completions.$name($code)"; fi
done
post /v1/chat/completions '{"messages": [{"role": "user", "content": "hi", "name": "bob"}], "max_tokens": 2}'
if [ "$code" != 400 ] || ! grep -q "messages\[0\]\.name" "$T/body"; then bad="$bad messages[0].name($code)"; fi
for f in 'verbosity:"low"' 'user:1' 'prompt_cache_key:{}' 'stream_options:{"include_obfuscation":true}' \
    'stream_options:{"frobnicate":1}'; do
    name=${f%%:*}
    post /v1/chat/completions "{$CHAT, \"$name\": ${f#*:}}"
    if [ "$code" != 400 ] || ! grep -q "\"param\":\"$name" "$T/body"; then bad="$bad $name($code)"; fi
done
if [ -z "$bad" ]; then ok "30 unhonoured or invalid fields (one inside messages) each get a 400 naming the field"
else fail "unhonoured fields get a 400 naming them" "$bad"; fi
bad=
for f in 'user:"u"' 'store:false' 'tools:null' 'n:2' 'seed:1' 'logprobs:true' 'logit_bias:{"5":-100}' \
    'stream_options:{"include_usage":false}' 'top_p:0.5' 'stop:["x"]' 'response_format:{"type":"text"}' \
    'safety_identifier:"s"' 'prompt_cache_key:"k"' 'stream_options:{"include_obfuscation":false}' \
    'model:"kite"' 'model:"stories260K.gguf"'; do
    post /v1/chat/completions "{$CHAT, \"${f%%:*}\": ${f#*:}}"
    [ "$code" = 200 ] || bad="$bad ${f%%:*}($code: $(head -c 120 "$T/body"))"
done
post /v1/completions '{"prompt": "x", "max_tokens": 2, "echo": false, "best_of": 2, "n": 2, "logprobs": 2}'
[ "$code" = 200 ] || bad="$bad completions.best_of=n($code)"
if [ -z "$bad" ]; then ok "honoured fields, user, store false, null values, best_of = n, the alias and the file name are accepted"
else fail "accepted fields" "$bad"; fi

# 4. an unknown model is OpenAI's 404 (curl; serve_api.mjs checks the npm client's NotFoundError)
bad=
for ep in chat/completions completions; do
    if [ $ep = completions ]; then body='"prompt": "x", "max_tokens": 2'; else body=$CHAT; fi
    post /v1/$ep "{$body, \"model\": \"gpt-4o\"}"
    if [ "$code" != 404 ] || ! grep -q '"type":"invalid_request_error","param":"model","code":"model_not_found"' "$T/body"; then
        bad="$bad $ep($code: $(head -c 160 "$T/body"))"
    fi
done
if [ -z "$bad" ]; then ok "unknown model -> 404 model_not_found (param model), chat and completions"
else fail "unknown model" "$bad"; fi

echo "issue24_api: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
