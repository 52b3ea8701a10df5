#!/bin/sh
# tests/e2e/test_serve.sh - end-to-end tests of `kite serve` (docs/http.md).
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this).  POSIX sh + curl (+ node for the client-library and browser checks).
# Starts one server on 127.0.0.1 with a port chosen by the system (--port 0;
# the port is read from the "listening on" log line), the bundled model, an
# API key, a small context (256), a 64 KiB body limit and a 2 s idle timeout.
#
# What is checked:
#   * every endpoint: /health, /v1/models, /v1/completions and
#     /v1/chat/completions (non-streaming and SSE, OpenAI's object shapes,
#     finish_reason, usage, stream_options.include_usage, [DONE]), /metrics
#     (every documented metric), /tokenize, /detokenize, the page at / and
#     its files;
#   * "sot": true (Skeleton-of-Thought) with a given "sot_skeleton": points in
#     order, deterministic, the streamed answer equals the non-streaming one;
#   * greedy output equals `kite run --temp 0`, a token-id prompt equals the
#     same text prompt, the stream's text equals the non-streaming text, stop
#     strings, max_completion_tokens, seeds;
#   * every bad request gets the right status and an OpenAI error body
#     {"error": {"message", "type", "param", "code"}}: malformed JSON, wrong
#     types, n > 1, missing fields, bad roles, a prompt longer than the
#     context (context_length_exceeded), bodies over the limit (413, with and
#     without Content-Length), unknown URL (404), wrong method (405), missing
#     or wrong API key (401); unknown fields, functions, bad logit_bias and n get 400;
#   * a slow client (incomplete request) is dropped after the timeout while
#     others are served; clients that disconnect mid-stream leave no running
#     sequence or used KV block behind (/metrics);
#   * 32 concurrent streaming clients all get complete outputs, each equal at
#     temperature 0 to the same request served alone;
#   * with node and npm: the official `openai` package (chat, streaming chat,
#     completions) and a headless-Chromium test of the chat page
#     (playwright-core driving /usr/bin/chromium).  Packages are installed
#     into tests/e2e/.node (ignored by git); when that fails (offline) or a
#     tool is missing, the check prints a "skip" line and is not counted.
#
# The last line is "tests/e2e/test_serve.sh: N passed, M failed".

set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
KEY=test-key-123
PID=

skip() { printf '  skip  %s: %s\n' "$1" "$2"; }
# the real clients (openai package, Chromium): skipped on a bare machine, a failure where
# KITE_REQUIRE_BROWSER=1 (.ci/run installs them and sets it)
skip_client() {
    if [ "${KITE_REQUIRE_BROWSER:-0}" = 1 ]; then e2e_fail "$1" "$2 (KITE_REQUIRE_BROWSER=1: not skipped)"
    else skip "$1" "$2"; fi
}

stop_server() {
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null
        wait "$PID" 2>/dev/null
        PID=
    fi
}
trap 'stop_server; rm -rf "$E2E_TMP"' EXIT
trap 'stop_server; rm -rf "$E2E_TMP"; exit 130' INT TERM

if ! command -v curl >/dev/null 2>&1; then
    skip "kite serve" "curl is not installed"
    e2e_summary
    exit 0
fi

# ---- start -------------------------------------------------------------------

"$KITE" serve --port 0 -t 1 --parallel 8 --ctx 256 --api-key "$KEY" --idle-timeout 2 --max-body 65536 -a kite \
    </dev/null >"$T/server.out" 2>"$T/server.log" &
PID=$!
e2e_serve_port "$T/server.log" "$PID"
if [ -z "$PORT" ]; then
    e2e_fail "server starts" "no 'listening on' line: $(e2e_first_line "$T/server.log")"
    e2e_summary
    exit 1
fi
e2e_ok "server starts on 127.0.0.1 (port $PORT)"
URL=http://127.0.0.1:$PORT

# ---- helpers -----------------------------------------------------------------

# call METHOD PATH [BODY]: sets $code; the body goes to $T/body.
call() {
    if [ $# -ge 3 ]; then
        code=$(printf '%s' "$3" | curl -s -m 30 -o "$T/body" -w '%{http_code}' -X "$1" \
            -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' --data-binary @- "$URL$2")
    else
        code=$(curl -s -m 30 -o "$T/body" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $KEY" "$URL$2")
    fi
}

# has FILE FIXED-STRING
has() { grep -qF -e "$2" "$1"; }

# json_str FILE KEY: the first string value of KEY, JSON escapes decoded
# (\n \t \" \\ \/ and \u00XX); multi-line values come out with real newlines.
json_str() {
    awk -v key="\"$2\":\"" '
        { s = s (NR > 1 ? "\n" : "") $0 }
        END {
            i = index(s, key); if (!i) exit 1
            s = substr(s, i + length(key)); out = ""
            while (length(s)) {
                c = substr(s, 1, 1)
                if (c == "\"") break
                if (c == "\\") {
                    d = substr(s, 2, 1); s = substr(s, 3)
                    if (d == "n") out = out "\n"; else if (d == "t") out = out "\t"
                    else if (d == "u") { out = out sprintf("%c", hex(substr(s, 1, 4))); s = substr(s, 5) }
                    else out = out d
                    continue
                }
                out = out c; s = substr(s, 2)
            }
            printf "%s", out
        }
        function hex(h,   k, v) { v = 0; for (k = 1; k <= 4; k++) v = v * 16 + index("0123456789abcdef", tolower(substr(h, k, 1))) - 1; return v }
    ' "$1"
}

# expect_error NAME STATUS CODE METHOD PATH BODY: status STATUS and an
# OpenAI error body whose "code" is CODE ("" = any).
expect_error() {
    _n=$1
    _s=$2
    _c=$3
    shift 3
    call "$@"
    if [ "$code" != "$_s" ]; then
        e2e_fail "$_n" "status $code (expected $_s): $(e2e_first_line "$T/body")"
    elif ! has "$T/body" '{"error":{"message":"' || ! has "$T/body" '"type":"' || ! has "$T/body" '"param":' ||
        ! has "$T/body" '"code":'; then
        e2e_fail "$_n" "not an OpenAI error body: $(e2e_first_line "$T/body")"
    elif [ -n "$_c" ] && ! has "$T/body" "\"code\":\"$_c\""; then
        e2e_fail "$_n" "error code is not $_c: $(e2e_first_line "$T/body")"
    else
        e2e_ok "$_n"
    fi
}

# metric NAME: its value in the last /metrics answer ($T/metrics).
metric() { sed -n "s/^$1 //p" "$T/metrics"; }

get_metrics() {
    curl -s -m 10 -H "Authorization: Bearer $KEY" "$URL/metrics" >"$T/metrics"
}

# ---- small endpoints ---------------------------------------------------------

code=$(curl -s -m 10 -o "$T/body" -w '%{http_code}' "$URL/health")
if [ "$code" = 200 ] && has "$T/body" '"status":"ok"'; then e2e_ok "GET /health (no key needed)"
else e2e_fail "GET /health" "status $code: $(e2e_first_line "$T/body")"; fi

call GET /v1/models
if [ "$code" = 200 ] && has "$T/body" '"object":"list"' && has "$T/body" '"id":"kite"' &&
    has "$T/body" '"object":"model"' && ! has "$T/body" 'stories260K.gguf'; then e2e_ok "GET /v1/models lists the --alias"
else e2e_fail "GET /v1/models" "status $code: $(e2e_first_line "$T/body")"; fi
call GET /v1/models/kite
if [ "$code" = 200 ] && has "$T/body" '{"id":"kite","object":"model"'; then e2e_ok "GET /v1/models/{id}"
else e2e_fail "GET /v1/models/{id}" "status $code: $(e2e_first_line "$T/body")"; fi
call GET /v1/models/stories260K.gguf
if [ "$code" = 200 ] && has "$T/body" '{"id":"kite","object":"model"'; then e2e_ok "GET /v1/models/{file name} gives the aliased model"
else e2e_fail "GET /v1/models/{file name}" "status $code: $(e2e_first_line "$T/body")"; fi
expect_error "GET /v1/models/{unknown id} -> 404" 404 model_not_found GET /v1/models/gpt-4

call POST /tokenize '{"content": "Once upon a time", "add_special": true}'
if [ "$code" = 200 ] && has "$T/body" '{"tokens":[1,403,407,261,378]}'; then e2e_ok "POST /tokenize"
else e2e_fail "POST /tokenize" "status $code: $(e2e_first_line "$T/body")"; fi

call POST /detokenize '{"tokens": [1, 403, 407, 261, 378]}'
if [ "$code" = 200 ] && has "$T/body" '{"content":"Once upon a time"}'; then e2e_ok "POST /detokenize"
else e2e_fail "POST /detokenize" "status $code: $(e2e_first_line "$T/body")"; fi

code=$(curl -s -m 10 -o "$T/page" -w '%{http_code}' "$URL/")
ok=1
for f in /style.css /app.js; do
    c2=$(curl -s -m 10 -o "$T/asset" -w '%{http_code}' "$URL$f")
    [ "$c2" = 200 ] && [ -s "$T/asset" ] || ok=0
done
if [ "$code" = 200 ] && [ $ok = 1 ] && has "$T/page" '<script src="/app.js">' && ! grep -q 'https\?://' "$T/page"; then
    e2e_ok "GET / serves the chat page and its files (no external resources)"
else
    e2e_fail "GET /" "status $code, assets ok=$ok"
fi

# ---- completions -------------------------------------------------------------

expected=$("$KITE" run -p "Once upon a time" -n 20 --temp 0 -t 1 2>/dev/null)
expected=${expected#Once upon a time}
call POST /v1/completions '{"model": "kite", "prompt": "Once upon a time", "max_tokens": 20, "temperature": 0}'
got=$(json_str "$T/body" text)
if [ "$code" != 200 ]; then
    e2e_fail "completion (greedy)" "status $code: $(e2e_first_line "$T/body")"
elif [ "$got" != "$expected" ]; then
    e2e_fail "completion (greedy) equals kite run" "got '$got', expected '$expected'"
else
    e2e_ok "completion (greedy) equals kite run --temp 0"
fi
if has "$T/body" '"object":"text_completion"' && has "$T/body" '"model":"kite"' && has "$T/body" '"finish_reason":"length"' &&
    has "$T/body" '"usage":{"prompt_tokens":5,"completion_tokens":20,"total_tokens":25}' && has "$T/body" '"id":"cmpl-'; then
    e2e_ok "completion shape, model echoed, finish_reason, usage"
else
    e2e_fail "completion shape" "$(e2e_first_line "$T/body")"
fi
cp "$T/body" "$T/greedy.json"
# "model": the alias or the file name; answers carry the served name; absent is accepted (llama-server)
call POST /v1/completions '{"model": "stories260K.gguf", "prompt": "Once upon a time", "max_tokens": 2, "temperature": 0}'
if [ "$code" = 200 ] && has "$T/body" '"model":"kite"'; then e2e_ok "model: the file name is accepted, answered as the alias"
else e2e_fail "model: the file name" "status $code: $(e2e_first_line "$T/body")"; fi
expect_error "completions: unknown model -> 404" 404 model_not_found POST /v1/completions \
    '{"model": "gpt-4o", "prompt": "Once", "max_tokens": 2}'
if has "$T/body" '"param":"model"' && has "$T/body" '"type":"invalid_request_error"' &&
    has "$T/body" 'The model `gpt-4o` does not exist'; then e2e_ok "unknown model: OpenAI's error body"
else e2e_fail "unknown model: OpenAI's error body" "$(e2e_first_line "$T/body")"; fi
expect_error "chat: unknown model -> 404" 404 model_not_found POST /v1/chat/completions \
    '{"model": "stories260K", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": true}'

call POST /v1/completions '{"prompt": [1, 403, 407, 261, 378], "max_tokens": 20, "temperature": 0}'
if [ "$code" = 200 ] && [ "$(json_str "$T/body" text)" = "$expected" ]; then e2e_ok "prompt as token ids"
else e2e_fail "prompt as token ids" "status $code: $(e2e_first_line "$T/body")"; fi
# special-token text in a prompt is the special token, as in llama-server and kite run: BOS + <unk> + 4
call POST /v1/completions '{"prompt": "<unk>Once upon a time", "max_tokens": 1, "temperature": 0}'
if [ "$code" = 200 ] && has "$T/body" '"prompt_tokens":6,'; then e2e_ok "special-token text in a prompt"
else e2e_fail "special-token text in a prompt" "status $code: $(e2e_first_line "$T/body")"; fi

curl -s -N -m 30 -H "Authorization: Bearer $KEY" -d '{"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0, "stream": true}' \
    "$URL/v1/completions" >"$T/sse"
if [ "$(sse_text "$T/sse")" = "$(json_raw "$T/greedy.json" text)" ] &&
    [ "$(tail -n 2 "$T/sse" | head -n 1)" = "data: [DONE]" ] && has "$T/sse" '"finish_reason":"length"' &&
    ! has "$T/sse" '"usage"'; then
    e2e_ok "streaming completion equals the non-streaming text, ends with [DONE]"
else
    e2e_fail "streaming completion" "$(head -c 300 "$T/sse")"
fi

call POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stop": ["Lily"]}'
got=$(json_str "$T/body" text)
if [ "$code" = 200 ] && [ "$got" = ", there was a little girl named " ] && has "$T/body" '"finish_reason":"stop"'; then
    e2e_ok "stop string ends the text before it, finish_reason stop"
else
    e2e_fail "stop string" "status $code: got '$got'"
fi

s1=$(call POST /v1/completions '{"prompt": "Once", "max_tokens": 24, "temperature": 1, "seed": 42}'; json_str "$T/body" text)
s2=$(call POST /v1/completions '{"prompt": "Once", "max_tokens": 24, "temperature": 1.0, "seed": 42, "top_p": 0.9, "top_k": 40}'; json_str "$T/body" text)
s3=$(call POST /v1/completions '{"prompt": "Once", "max_tokens": 24, "temperature": 1.0, "seed": 42, "top_p": 0.9, "top_k": 40}'; json_str "$T/body" text)
if [ -n "$s2" ] && [ "$s2" = "$s3" ] && [ -n "$s1" ]; then e2e_ok "same seed, same sampled text"
else e2e_fail "seed" "'$s2' vs '$s3'"; fi

# ---- chat --------------------------------------------------------------------

CHAT='"messages": [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me a story."}]'
call POST /v1/chat/completions "{$CHAT, \"max_completion_tokens\": 12, \"temperature\": 0, \"user\": \"u1\", \"tools\": null}"
if [ "$code" = 200 ] && has "$T/body" '"object":"chat.completion"' && has "$T/body" '"message":{"role":"assistant","content":"' &&
    has "$T/body" '"finish_reason":"' && has "$T/body" '"completion_tokens":' && has "$T/body" '"id":"chatcmpl-'; then
    e2e_ok "chat completion shape (user and null fields accepted, max_completion_tokens)"
else
    e2e_fail "chat completion" "status $code: $(e2e_first_line "$T/body")"
fi
n_gen=$(json_num "$T/body" completion_tokens)
[ -n "$n_gen" ] && [ "$n_gen" -le 12 ] && [ "$n_gen" -ge 1 ] && e2e_ok "chat usage within max_completion_tokens" ||
    e2e_fail "chat usage" "completion_tokens '$n_gen'"
chat_text=$(json_raw "$T/body" content)

curl -s -N -m 30 -H "Authorization: Bearer $KEY" \
    -d "{$CHAT, \"max_tokens\": 12, \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" \
    "$URL/v1/chat/completions" >"$T/sse"
first=$(sed -n '1p' "$T/sse")
usage_line=$(grep '"choices":\[\],"usage":{' "$T/sse")
case "$first" in
*'"object":"chat.completion.chunk"'*'"delta":{"role":"assistant","content":""}'*) role_ok=1 ;;
*) role_ok=0 ;;
esac
if [ $role_ok = 1 ] && [ -n "$usage_line" ] && [ "$(tail -n 2 "$T/sse" | head -n 1)" = "data: [DONE]" ] &&
    has "$T/sse" '"delta":{},"logprobs":null,"finish_reason":"' && has "$T/sse" '"usage":null'; then
    e2e_ok "streaming chat: role chunk, deltas, finish chunk, usage chunk, [DONE]"
else
    e2e_fail "streaming chat" "$(head -c 400 "$T/sse")"
fi
stream_text=$(sse_text "$T/sse")
if [ "$stream_text" = "$chat_text" ]; then e2e_ok "streaming chat text equals the non-streaming reply"
else e2e_fail "streaming chat text" "'$stream_text' vs '$chat_text'"; fi

# ---- Skeleton-of-Thought ("sot": true, kite extension) -------------------------

# a given outline ("sot_skeleton") and temperature 0 make the answer deterministic
SOT='"messages": [{"role": "user", "content": "Tell me about pets."}], "sot": true, "sot_skeleton": "1. The dog\n2. The cat\n3. The fish", "max_tokens": 6, "temperature": 0'
call POST /v1/chat/completions "{$SOT}"
sot_text=$(json_raw "$T/body" content)
case "$sot_text" in
'1. The dog'*'\n2. The cat'*'\n3. The fish'*) sot_order=1 ;;
*) sot_order=0 ;;
esac
if [ "$code" = 200 ] && has "$T/body" '"object":"chat.completion"' && [ $sot_order = 1 ] &&
    has "$T/body" '"finish_reason":"stop"'; then
    e2e_ok "sot: the given outline's points expanded in order"
else
    e2e_fail "sot" "status $code: $(e2e_first_line "$T/body")"
fi
call POST /v1/chat/completions "{$SOT}"
if [ "$code" = 200 ] && [ "$(json_raw "$T/body" content)" = "$sot_text" ]; then e2e_ok "sot: same request, same answer"
else e2e_fail "sot repeat" "status $code: $(e2e_first_line "$T/body")"; fi
curl -s -N -m 30 -H "Authorization: Bearer $KEY" -d "{$SOT, \"stream\": true}" "$URL/v1/chat/completions" >"$T/sse"
if [ "$(sse_text "$T/sse")" = "$sot_text" ] && [ "$(tail -n 2 "$T/sse" | head -n 1)" = "data: [DONE]" ]; then
    e2e_ok "sot streaming: the assembled answer in one chunk, then [DONE]"
else
    e2e_fail "sot streaming" "$(head -c 400 "$T/sse")"
fi
# the request's deadline stops Skeleton-of-Thought too: 10 points of up to 400 tokens
# cannot be expanded in 1 ms; its engine requests are cancelled and the answer is a 503
SOT_LONG='"messages": [{"role": "user", "content": "Tell me a story."}], "sot": true, "sot_skeleton": "1. a\n2. b\n3. c\n4. d\n5. e\n6. f\n7. g\n8. h\n9. i\n10. j", "max_tokens": 400, "temperature": 1, "t_max_predict_ms": 1'
call POST /v1/chat/completions "{$SOT_LONG}"
if [ "$code" = 503 ] && has "$T/body" '"code":"timeout"'; then e2e_ok "sot: t_max_predict_ms stops it with a 503 timeout"
else e2e_fail "sot deadline" "status $code: $(e2e_first_line "$T/body")"; fi
call POST /v1/chat/completions "{$SOT}"
if [ "$code" = 200 ] && [ "$(json_raw "$T/body" content)" = "$sot_text" ]; then e2e_ok "sot: the next request is answered as before"
else e2e_fail "sot after a stop" "status $code: $(e2e_first_line "$T/body")"; fi
expect_error "sot on /v1/completions is a 400" 400 invalid_value POST /v1/completions '{"prompt": "x", "sot": true}'
expect_error "sot_skeleton of the wrong type is a 400" 400 invalid_type POST /v1/chat/completions \
    '{"messages": [{"role": "user", "content": "x"}], "sot": true, "sot_skeleton": 5}'

# ---- bad requests ------------------------------------------------------------

expect_error "malformed JSON -> 400" 400 invalid_json POST /v1/completions '{"prompt": "x",'
expect_error "trailing garbage -> 400" 400 invalid_json POST /v1/completions '{"prompt": "x"} xyz'
expect_error "empty body -> 400" 400 invalid_json POST /v1/chat/completions ''
expect_error "body not an object -> 400" 400 invalid_type POST /v1/completions '[1, 2]'
expect_error "temperature of the wrong type -> 400" 400 invalid_type POST /v1/completions '{"prompt": "x", "temperature": "hot"}'
has "$T/body" '"param":"temperature"' && e2e_ok "error names the param" || e2e_fail "error param" "$(e2e_first_line "$T/body")"
expect_error "max_tokens not an integer -> 400" 400 invalid_type POST /v1/completions '{"prompt": "x", "max_tokens": 1.5}'
expect_error "stream not a boolean -> 400" 400 invalid_type POST /v1/completions '{"prompt": "x", "stream": "yes"}'
expect_error "stop of the wrong type -> 400" 400 invalid_type POST /v1/completions '{"prompt": "x", "stop": 5}'
expect_error "top_p out of range -> 400" 400 invalid_value POST /v1/completions '{"prompt": "x", "top_p": 3}'
expect_error "n above the server limit -> 400" 400 invalid_value POST /v1/completions '{"prompt": "x", "n": 17}'
expect_error "n = 0 -> 400" 400 invalid_value POST /v1/completions '{"prompt": "x", "n": 0}'
expect_error "unknown field -> 400 naming it" 400 unknown_parameter POST /v1/chat/completions "{$CHAT, \"some_unknown_field\": {\"x\": 1}}"
has "$T/body" '"param":"some_unknown_field"' && e2e_ok "unknown field named in param" || e2e_fail "unknown field param" "$(e2e_first_line "$T/body")"
expect_error "legacy functions -> 400 unsupported" 400 unsupported_parameter POST /v1/chat/completions "{$CHAT, \"functions\": []}"
expect_error "echo true -> 400" 400 unsupported_value POST /v1/completions '{"prompt": "x", "echo": true}'
expect_error "logit_bias key not an id -> 400" 400 invalid_value POST /v1/completions '{"prompt": "x", "logit_bias": {"abc": 1}}'
expect_error "logit_bias value out of range -> 400" 400 invalid_value POST /v1/completions '{"prompt": "x", "logit_bias": {"5": 101}}'
expect_error "logit_bias id outside the vocabulary -> 400" 400 invalid_value POST /v1/completions '{"prompt": "x", "logit_bias": {"99999": 1}}'
expect_error "top_logprobs without logprobs -> 400" 400 invalid_value POST /v1/chat/completions "{$CHAT, \"top_logprobs\": 2}"
expect_error "top_logprobs above 20 -> 400" 400 invalid_value POST /v1/chat/completions "{$CHAT, \"logprobs\": true, \"top_logprobs\": 21}"
expect_error "completions logprobs above 20 -> 400" 400 invalid_value POST /v1/completions '{"prompt": "x", "logprobs": 21}'
expect_error "missing prompt -> 400" 400 missing_required_parameter POST /v1/completions '{"max_tokens": 3}'
expect_error "missing messages -> 400" 400 missing_required_parameter POST /v1/chat/completions '{"prompt": "x"}'
expect_error "messages not an array -> 400" 400 invalid_type POST /v1/chat/completions '{"messages": "hi"}'
expect_error "unknown role -> 400" 400 invalid_value POST /v1/chat/completions '{"messages": [{"role": "wizard", "content": "hi"}]}'
expect_error "token id outside the vocabulary -> 400" 400 invalid_value POST /v1/completions '{"prompt": [1, 99999]}'
expect_error "several prompts -> 400" 400 invalid_value POST /v1/completions '{"prompt": ["a", "b"]}'
long=$(awk 'BEGIN { printf "["; for (i = 0; i < 300; i++) printf "%s403", (i ? "," : ""); printf "]" }')
expect_error "prompt longer than the context -> 400" 400 context_length_exceeded POST /v1/completions "{\"prompt\": $long}"
longtext=$(awk 'BEGIN { for (i = 0; i < 200; i++) printf "Once upon a time "; }')
expect_error "chat longer than the context -> 400" 400 context_length_exceeded POST /v1/chat/completions \
    "{\"messages\": [{\"role\": \"user\", \"content\": \"$longtext\"}]}"
expect_error "tokenize without content -> 400" 400 missing_required_parameter POST /tokenize '{"x": 1}'
expect_error "detokenize bad ids -> 400" 400 invalid_value POST /detokenize '{"tokens": [-3]}'
expect_error "unknown URL -> 404" 404 "" GET /v1/nothing
expect_error "wrong method -> 405" 405 "" GET /v1/completions

awk 'BEGIN { printf "{\"prompt\": \""; for (i = 0; i < 70000; i++) printf "a"; printf "\"}" }' >"$T/big.json"
code=$(curl -s -m 10 -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $KEY" --data-binary @"$T/big.json" "$URL/v1/completions")
if [ "$code" = 413 ] && has "$T/body" '"code":"request_too_large"'; then e2e_ok "oversized body -> 413"
else e2e_fail "oversized body" "status $code: $(e2e_first_line "$T/body")"; fi
code=$(curl -s -m 10 -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $KEY" -H 'Transfer-Encoding: chunked' \
    --data-binary @"$T/big.json" "$URL/v1/completions")
if [ "$code" = 413 ] && has "$T/body" '"code":"request_too_large"'; then e2e_ok "oversized chunked body -> 413"
else e2e_fail "oversized chunked body" "status $code: $(e2e_first_line "$T/body")"; fi

code=$(curl -s -m 10 -o "$T/body" -w '%{http_code}' -d '{"prompt": "x"}' "$URL/v1/completions")
if [ "$code" = 401 ] && has "$T/body" '"code":"invalid_api_key"'; then e2e_ok "missing API key -> 401"
else e2e_fail "missing API key" "status $code: $(e2e_first_line "$T/body")"; fi
code=$(curl -s -m 10 -o "$T/body" -w '%{http_code}' -H 'Authorization: Bearer wrong' "$URL/metrics")
if [ "$code" = 401 ] && has "$T/body" '"type":"invalid_request_error"'; then e2e_ok "wrong API key -> 401"
else e2e_fail "wrong API key" "status $code: $(e2e_first_line "$T/body")"; fi

# a slow client: the headers arrive, the body never does; the server drops
# it after the 2 s idle timeout (logged "(timeout)") and serves others meanwhile
(printf 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{"pro' "$KEY"
    sleep 8) | curl -s -m 9 "telnet://127.0.0.1:$PORT" >/dev/null 2>&1 &
slow=$!
sleep 0.3
code=$(curl -s -m 5 -o "$T/body" -w '%{http_code}' "$URL/health")
i=0
while [ $i -lt 60 ] && ! grep -q "POST /v1/completions .*(timeout)" "$T/server.log"; do
    sleep 0.1
    i=$((i + 1))
done
if [ "$code" = 200 ] && grep -q "POST /v1/completions .*(timeout)" "$T/server.log"; then
    e2e_ok "slow client dropped after the idle timeout, others served meanwhile"
else
    e2e_fail "slow client" "health $code; no timeout line in the log after 6 s"
fi
kill "$slow" 2>/dev/null

# ---- clients that disconnect mid-stream --------------------------------------

get_metrics
c0=$(metric kite_http_cancelled_total)
pids=
for i in 1 2 3 4 5 6; do
    curl -s -N -m 30 -H "Authorization: Bearer $KEY" \
        -d "{\"prompt\": \"Once upon a time $i\", \"max_tokens\": 240, \"ignore_eos\": true, \"stream\": true}" \
        "$URL/v1/completions" 2>/dev/null | head -c 200 >/dev/null &
    pids="$pids $!"
done
# shellcheck disable=SC2086
wait $pids
i=0
while [ $i -lt 50 ]; do
    get_metrics
    [ "$(metric kite_running_sequences)" = 0 ] && [ "$(metric kite_queue_length)" = 0 ] && break
    sleep 0.1
    i=$((i + 1))
done
c1=$(metric kite_http_cancelled_total)
if [ "$(metric kite_running_sequences)" = 0 ] && [ "$(metric kite_kv_blocks_used)" = 0 ] &&
    [ "$(metric kite_queue_length)" = 0 ] && [ "$(metric kite_requests_total)" = "$(metric kite_requests_done_total)" ]; then
    e2e_ok "disconnects mid-stream: no running sequence, queued request or used KV block left ($((c1 - c0)) cancelled)"
else
    e2e_fail "disconnects mid-stream" "$(grep -v '^#' "$T/metrics" | tr '\n' ' ')"
fi
if [ "$c1" -gt "$c0" ]; then e2e_ok "the disconnected streams were cancelled"
else e2e_fail "disconnected streams cancelled" "kite_http_cancelled_total $c0 -> $c1 (all finished before the disconnect?)"; fi

# ---- metrics -----------------------------------------------------------------

get_metrics
missing=
for m in kite_requests_total kite_tokens_in_total kite_tokens_out_total kite_queue_length kite_running_sequences \
    kite_kv_blocks_used kite_kv_blocks_free kite_prefix_cache_hit_tokens_total kite_kv_waste_ratio; do
    grep -q "^# TYPE $m " "$T/metrics" && grep -q "^$m [0-9]" "$T/metrics" || missing="$missing $m"
done
if [ -z "$missing" ] && [ "$(metric kite_tokens_out_total)" -gt 0 ]; then e2e_ok "GET /metrics has every documented metric"
else e2e_fail "GET /metrics" "missing:$missing"; fi

# ---- 32 concurrent streaming clients -----------------------------------------

prompt_of() { printf 'Once upon a time there was a %s' "$(echo "dog cat bird girl boy king frog fish" | cut -d' ' -f$(($1 % 8 + 1)))"; }
for i in 0 1 2 3 4 5 6 7; do
    curl -s -N -m 60 -H "Authorization: Bearer $KEY" \
        -d "{\"prompt\": \"$(prompt_of $i)\", \"max_tokens\": 32, \"temperature\": 0, \"stream\": true}" \
        "$URL/v1/completions" >"$T/alone.$i"
done
i=0
pids=
while [ $i -lt 32 ]; do
    curl -s -N -m 120 -H "Authorization: Bearer $KEY" \
        -d "{\"prompt\": \"$(prompt_of $i)\", \"max_tokens\": 32, \"temperature\": 0, \"stream\": true}" \
        "$URL/v1/completions" >"$T/conc.$i" &
    pids="$pids $!"
    i=$((i + 1))
done
# shellcheck disable=SC2086
wait $pids
bad=
i=0
while [ $i -lt 32 ]; do
    a=$T/alone.$((i % 8))
    c=$T/conc.$i
    if [ "$(tail -n 2 "$c" | head -n 1)" != "data: [DONE]" ] || ! has "$c" '"finish_reason":"'; then
        bad="$bad $i(incomplete)"
    elif [ "$(sse_text "$c")" != "$(sse_text "$a")" ] || [ -z "$(sse_text "$a")" ]; then
        bad="$bad $i(differs)"
    fi
    i=$((i + 1))
done
if [ -z "$bad" ]; then e2e_ok "32 concurrent streams complete, each equal to the request served alone"
else e2e_fail "32 concurrent streams" "bad:$bad"; fi

# ---- node: the official openai package and the chat page in Chromium ---------

# npm packages: tests/e2e/.node (ignored by git, kept across build dirs and
# `make clean`, so one install per clone), or $KITE_NODE_DIR
NODE_DIR=${KITE_NODE_DIR:-tests/e2e/.node}
case "$NODE_DIR" in /*) ;; *) NODE_DIR=$(pwd)/$NODE_DIR ;; esac
npm_ready() { e2e_npm_ready "$NODE_DIR" "$1" "$T/npm.log"; }
if ! command -v node >/dev/null 2>&1; then
    skip_client "openai npm package" "node is not installed"
    skip_client "web page in Chromium" "node is not installed"
else
    if npm_ready openai; then
        if KITE_NODE_DIR=$NODE_DIR KITE_URL=$URL KITE_KEY=$KEY timeout 60 node tests/e2e/serve_openai.mjs >"$T/node.out" 2>&1; then
            e2e_ok "openai npm package: chat, streaming chat, completions ($(tail -n 1 "$T/node.out"))"
        else
            e2e_fail "openai npm package" "$(tail -n 3 "$T/node.out" | tr '\n' ' ')"
        fi
        # issue 24: logprobs against kite run's logits, logit_bias, n, unknown fields, models/{id}
        if "$KITE" run -p "Once upon a time" -n 8 --temp 0 --json --dump-logits "$T/dump.bin" </dev/null \
            >"$T/run.json" 2>"$T/run.err"; then
            ids=$(tail -n 1 "$T/run.json" | sed -n 's/.*"ids": \[\([0-9, ]*\)\].*/\1/p' | tr -d ' ')
            n_pr=$(tail -n 1 "$T/run.json" | sed -n 's/.*"prompt_ids": \[\([0-9, ]*\)\].*/\1/p' | tr ',' '\n' | wc -l)
            if KITE_NODE_DIR=$NODE_DIR KITE_URL=$URL KITE_KEY=$KEY KITE_DUMP=$T/dump.bin KITE_MODEL_FILE=stories260K.gguf \
                KITE_DUMP_PROMPT=$n_pr KITE_DUMP_IDS=$ids timeout 90 node tests/e2e/serve_api.mjs >"$T/api.out" 2>&1; then
                e2e_ok "openai npm package: logprobs, logit_bias, n, unknown fields, models/{id} ($(tail -n 1 "$T/api.out"))"
            else
                e2e_fail "openai npm package (issue 24 API)" "$(tail -n 3 "$T/api.out" | tr '\n' ' ')"
            fi
        else
            e2e_fail "kite run --dump-logits for the logprobs check" "$(e2e_first_line "$T/run.err")"
        fi
    else
        skip_client "openai npm package" "npm install openai failed (offline?): $(tail -n 1 "$T/npm.log" 2>/dev/null)"
    fi
    CHROMIUM=${KITE_CHROMIUM:-/usr/bin/chromium}
    if [ ! -x "$CHROMIUM" ]; then
        skip_client "web page in Chromium" "$CHROMIUM not found"
    elif npm_ready playwright-core; then
        if KITE_NODE_DIR=$NODE_DIR KITE_URL=$URL KITE_KEY=$KEY KITE_CHROMIUM=$CHROMIUM timeout 60 node tests/e2e/serve_web.mjs >"$T/web.out" 2>&1; then
            e2e_ok "web page in headless Chromium: typed message, streamed reply ($(tail -n 1 "$T/web.out"))"
        else
            e2e_fail "web page in Chromium" "$(tail -n 3 "$T/web.out" | tr '\n' ' ')"
        fi
    else
        skip_client "web page in Chromium" "npm install playwright-core failed (offline?): $(tail -n 1 "$T/npm.log" 2>/dev/null)"
    fi
fi

# ---- command line -------------------------------------------------------------

e2e_expect_error "serve: bad --port exits 2" 2 "kite serve: " "--port" serve --port 70000
e2e_expect_error "serve: unknown option exits 2" 2 "kite serve: " "unknown option" serve --frobnicate
e2e_expect_error "serve: missing model exits 1" 1 "kite serve: " "nope.gguf" serve -m "$T/nope.gguf" --port 0
e2e_expect_error "serve: unknown chat template exits 2" 2 "kite serve: " "nope" serve --chat-template nope --port 0
e2e_expect_error "serve: port in use exits 1" 1 "kite serve: " "cannot listen" serve --port "$PORT" -t 1

# ---- log and shutdown --------------------------------------------------------

if grep -q "^kite serve: 127.0.0.1 POST /v1/completions 200 .* ms prompt=5 gen=20 length" "$T/server.log" &&
    grep -q "^kite serve: 127.0.0.1 POST /v1/completions 401 " "$T/server.log"; then
    e2e_ok "one log line per request on stderr"
else
    e2e_fail "request log" "$(grep -m 2 'POST' "$T/server.log" | tr '\n' ' ')"
fi
kill "$PID"
wait "$PID"
rc=$?
PID=
if [ "$rc" = 0 ] && grep -q "shutting down" "$T/server.log"; then e2e_ok "SIGTERM shuts down cleanly"
else e2e_fail "shutdown" "exit $rc: $(tail -n 1 "$T/server.log")"; fi

e2e_summary
