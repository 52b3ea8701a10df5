#!/bin/sh
# tests/e2e/test_embed.sh - embeddings (issue 24, part 5): `kite embed` and `kite serve`'s
# POST /v1/embeddings and /embedding on the bundled model.
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does this).
# POSIX sh + awk + curl; node with the npm package openai (installed into tests/e2e/.node on
# first use, as test_serve.sh does) for tests/e2e/serve_embeddings.mjs.
# Checks:
#   * kite embed: n_embd floats per input line, L2 norm 1, deterministic, the same with 1 and
#     2 threads, -f lines equal to -p of each line, pooling modes differ (CLS equal for two
#     texts: a causal model's BOS state), --no-normalize, --json; errors exit 2 (usage) or 1
#     with one line;
#   * kite serve: /v1/embeddings and llama-server's /embedding give kite embed's vector; the
#     400s (dimensions, empty and mixed input, unknown field, an input over --ctx) are OpenAI
#     JSON errors naming the param; the openai client checks of serve_embeddings.mjs.
#
# The last line is "tests/e2e/test_embed.sh: N passed, M failed".

set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
PIDS=
skip() { printf '  skip  %s: %s\n' "$1" "$2"; }
trap 'e2e_stop_servers; rm -rf "$E2E_TMP"' EXIT
trap 'e2e_stop_servers; rm -rf "$E2E_TMP"; exit 130' INT TERM

# norm FILE: the L2 norm of each line's numbers, one per line
norm() { awk '{ s = 0; for (i = 1; i <= NF; i++) s += $i * $i; printf "%.7f\n", sqrt(s) }' "$1"; }

# ---- kite embed ------------------------------------------------------------------

A="Once upon a time there was a cat."
B="The dog ran to the park."
C="Lily liked red apples."
e2e_kite "$T/a" "$T/err" embed -p "$A" -t 1
N_EMBD=$(awk '{ print NF }' "$T/a")
if [ "$rc" = 0 ] && e2e_one_line "$T/a" && [ "$N_EMBD" = 64 ] && [ "$(norm "$T/a")" = 1.0000000 ]; then
    e2e_ok "kite embed -p: one line of 64 floats, norm 1"
else
    e2e_fail "kite embed -p" "exit $rc, $N_EMBD fields, norm $(norm "$T/a") $(e2e_first_line "$T/err")"
fi
e2e_kite "$T/a2" "$T/err" embed -p "$A" -t 2
if cmp -s "$T/a" "$T/a2"; then e2e_ok "deterministic (1 and 2 threads: same bytes)"
else e2e_fail "deterministic" "the two runs differ"; fi

printf '%s\n%s\n%s\n' "$A" "$B" "$C" >"$T/in.txt"
e2e_kite "$T/f" "$T/err" embed -f "$T/in.txt"
e2e_kite "$T/b" "$T/err2" embed -p "$B"
e2e_kite "$T/c" "$T/err2" embed -p "$C"
cat "$T/a" "$T/b" "$T/c" >"$T/singles"
if [ "$rc" = 0 ] && [ "$(wc -l <"$T/f")" = 3 ] && cmp -s "$T/f" "$T/singles"; then
    e2e_ok "kite embed -f: three lines equal to the inputs one by one"
else
    e2e_fail "kite embed -f batch == singles" "$(wc -l <"$T/f") lines $(e2e_first_line "$T/err")"
fi
if ! cmp -s "$T/a" "$T/b"; then e2e_ok "different inputs, different vectors"; else e2e_fail "inputs differ" "same vector"; fi
printf '%s\n' "$A" | "$KITE" embed -f - >"$T/stdin" 2>"$T/err"
if cmp -s "$T/stdin" "$T/a"; then e2e_ok "kite embed -f - reads standard input"
else e2e_fail "kite embed -f -" "$(e2e_first_line "$T/err")"; fi

e2e_kite "$T/last" "$T/err" embed -p "$A" --pooling last
e2e_kite "$T/cls" "$T/err" embed -p "$A" --pooling cls
e2e_kite "$T/cls_b" "$T/err" embed -p "$B" --pooling cls
if ! cmp -s "$T/a" "$T/last" && ! cmp -s "$T/a" "$T/cls" && ! cmp -s "$T/last" "$T/cls" && cmp -s "$T/cls" "$T/cls_b" &&
    [ "$(norm "$T/last")" = 1.0000000 ]; then
    e2e_ok "--pooling mean, last, cls differ; cls of two texts equal (BOS state)"
else
    e2e_fail "--pooling" "vectors not as expected"
fi
e2e_kite "$T/raw" "$T/err" embed -p "$A" --no-normalize
if [ "$rc" = 0 ] && [ "$(norm "$T/raw")" != 1.0000000 ]; then e2e_ok "--no-normalize: norm $(norm "$T/raw")"
else e2e_fail "--no-normalize" "exit $rc, norm $(norm "$T/raw")"; fi
e2e_kite "$T/json" "$T/err" embed -f "$T/in.txt" --json
if [ "$rc" = 0 ] && e2e_one_line "$T/json" && grep -q '"n_embd": 64, "pooling": "mean"' "$T/json" &&
    [ "$(grep -o '"index": ' "$T/json" | wc -l)" = 3 ]; then
    if command -v node >/dev/null 2>&1; then
        if node -e 'const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
            const a = require("fs").readFileSync(process.argv[2], "utf8").trim().split(/\s+/).map(Number);
            process.exit(j.data.length === 3 && j.data[0].embedding.every((x, i) => x === a[i]) ? 0 : 1)' \
            "$T/json" "$T/a"; then
            e2e_ok "--json: parses, three items, the plain output's numbers"
        else
            e2e_fail "--json" "does not parse or differs from the plain output"
        fi
    else
        e2e_ok "--json: one line, three items"
    fi
else
    e2e_fail "--json" "exit $rc $(e2e_first_line "$T/err")"
fi

e2e_expect_error "no input: usage error" 2 "kite embed: missing -p TEXT or -f FILE" "" embed
e2e_expect_error "-p and -f: usage error" 2 "" "not both" embed -p x -f "$T/in.txt"
e2e_expect_error "bad --pooling" 2 "" "expected mean, last or cls" embed -p x --pooling max
e2e_expect_error "missing file" 1 "kite embed: cannot open" "" embed -f "$T/nope.txt"
printf 'a\n\nb\n' >"$T/blank.txt"
e2e_expect_error "empty line" 1 "" "line 2 is empty" embed -f "$T/blank.txt"
e2e_expect_error "input over -c" 1 "" "more than the context of 4" embed -p "$A" -c 4
e2e_expect_error "bad model" 1 "kite embed: " "" embed -m "$T/nope.gguf" -p x

# ---- kite serve ------------------------------------------------------------------

if ! command -v curl >/dev/null 2>&1; then
    skip "kite serve embeddings" "curl is not installed"
    e2e_summary
    exit
fi
"$KITE" serve --port 0 -t 1 --parallel 2 --ctx 64 --alias emb-alias -q </dev/null >"$T/srv.out" 2>"$T/srv.log" &
PIDS="$PIDS $!"
e2e_serve_port "$T/srv.log" "$!"
if [ -z "$PORT" ]; then
    e2e_fail "server starts" "$(e2e_first_line "$T/srv.log")"
    e2e_summary
    exit 1
fi
URL=http://127.0.0.1:$PORT
MODEL=$(curl -s "$URL/v1/models" | sed -n 's/.*"data":\[{"id":"\([^"]*\)".*/\1/p')

# post PATH BODY: the status in $code, the body in $T/r.json
post() {
    code=$(curl -s -o "$T/r.json" -w '%{http_code}' "$URL$1" -H 'Content-Type: application/json' -d "$2")
}
# floats FILE: the numbers of the first "embedding" array, space-separated on one line
floats() { tr -d '\n' <"$1" | sed 's/.*"embedding":\[\[*\([^]]*\)\].*/\1/' | tr ',' ' '; }

post /v1/embeddings "{\"input\":\"$A\",\"model\":\"$MODEL\",\"encoding_format\":\"float\"}"
if [ "$code" = 200 ] && grep -q '"object":"list"' "$T/r.json" && grep -q '"object":"embedding","index":0' "$T/r.json" &&
    grep -q '"usage":{"prompt_tokens":[1-9][0-9]*,"total_tokens":' "$T/r.json" &&
    [ "$(floats "$T/r.json")" = "$(cat "$T/a")" ]; then
    e2e_ok "/v1/embeddings: OpenAI shape, kite embed's vector"
else
    e2e_fail "/v1/embeddings" "$code $(head -c 200 "$T/r.json")"
fi
post /embedding "{\"content\":\"$A\"}"
if [ "$code" = 200 ] && grep -q '^\[{"index":0,"embedding":\[\[' "$T/r.json" && [ "$(floats "$T/r.json")" = "$(cat "$T/a")" ]; then
    e2e_ok "/embedding (llama-server): [{index, embedding: [[...]]}], the same vector"
else
    e2e_fail "/embedding" "$code $(head -c 200 "$T/r.json")"
fi

# expect_400 NAME BODY PARAM: a 400 OpenAI error naming PARAM
expect_400() {
    post /v1/embeddings "$2"
    if [ "$code" = 400 ] && grep -q '^{"error":{"message":"' "$T/r.json" && grep -q "\"param\":\"$3\"" "$T/r.json"; then
        e2e_ok "$1: 400 naming '$3'"
    else
        e2e_fail "$1" "$code $(head -c 200 "$T/r.json")"
    fi
}
expect_400 "dimensions != n_embd" '{"input":"x","dimensions":32}' dimensions
expect_400 "empty input" '{"input":""}' input
expect_400 "empty array" '{"input":[]}' input
expect_400 "mixed array" '{"input":["a",[1,"b"]]}' input
expect_400 "token out of vocabulary" '{"input":[1,99999]}' input
expect_400 "unknown field" '{"input":"x","pooling":"mean"}' pooling
expect_400 "missing input" '{"model":"x"}' input
long=$(awk 'BEGIN { for (i = 0; i < 80; i++) printf "cat dog "; }')
expect_400 "input over --ctx 64" "{\"input\":\"$long\"}" input
if grep -q context_length_exceeded "$T/r.json"; then e2e_ok "  ... with code context_length_exceeded"
else e2e_fail "context_length_exceeded" "$(head -c 200 "$T/r.json")"; fi
# --alias: the served name is listed and answered; the file's own name is accepted too
[ "$MODEL" = emb-alias ] && e2e_ok "--alias emb-alias is the listed model" || e2e_fail "--alias listed" "got '$MODEL'"
post /v1/embeddings '{"input":"x","model":"stories260K.gguf"}'
if [ "$code" = 200 ] && grep -q '"model":"emb-alias"' "$T/r.json"; then e2e_ok "the file name is accepted, the alias answered"
else e2e_fail "file name as model" "$code $(head -c 200 "$T/r.json")"; fi
post /v1/embeddings '{"input":"x","model":"no-such-model"}'
if [ "$code" = 404 ] && grep -q model_not_found "$T/r.json"; then e2e_ok "unknown model: 404 model_not_found"
else e2e_fail "unknown model" "$code $(head -c 200 "$T/r.json")"; fi
# generation still works beside the embeddings, which go through the engine (counted there)
post /v1/completions '{"prompt":"Once upon","max_tokens":4,"temperature":0}'
if [ "$code" = 200 ]; then e2e_ok "completions still answer"; else e2e_fail "completions" "$code"; fi
n_emb=$(curl -s "$URL/metrics" | sed -n 's/^kite_embedding_inputs_total \([0-9]*\).*/\1/p')
if [ -n "$n_emb" ] && [ "$n_emb" -ge 3 ]; then e2e_ok "the engine ran the embedding inputs (kite_embedding_inputs_total $n_emb)"
else e2e_fail "embeddings through the engine" "kite_embedding_inputs_total '$n_emb'"; fi

NODE_DIR=${KITE_NODE_DIR:-tests/e2e/.node}
case "$NODE_DIR" in /*) ;; *) NODE_DIR=$(pwd)/$NODE_DIR ;; esac
if command -v node >/dev/null 2>&1 && e2e_npm_ready "$NODE_DIR" openai "$T/npm.log"; then
    if KITE_NODE_DIR=$NODE_DIR KITE_URL=$URL KITE_MODEL=$MODEL KITE_N_EMBD=$N_EMBD KITE_CLI_VEC=$T/a KITE_CLI_TEXT=$A \
        timeout 120 node tests/e2e/serve_embeddings.mjs >"$T/node.out" 2>&1; then
        e2e_ok "$(tail -n 1 "$T/node.out")"
    else
        e2e_fail "openai client" "$(tail -n 3 "$T/node.out" | tr '\n' ' ')"
    fi
else
    skip "openai client" "node or the openai npm package is not available"
fi
e2e_stop_servers
e2e_summary
