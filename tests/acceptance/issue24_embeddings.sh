#!/bin/sh
# tests/acceptance/issue24_embeddings.sh [BUILD] - issue 24, item 5 (embeddings):
#   1. tests/e2e/test_embed.sh: kite embed, /v1/embeddings and /embedding on stories260K,
#      the openai npm client's checks (shape, norm, determinism, batch == singles, base64,
#      the 400s);
#   2. every architecture the forward pass runs (the tiny synth shapes: llama3, mistral,
#      mixtral, qwen2, qwen3, qwen3moe, gpt2, phi3) and a 4-layer TinyLlama-shape Q4_0
#      model (build/scale/tl4-q4_0.gguf, made by kite synth if missing): kite embed
#      gives n_embd finite values of norm 1 per line, the -f batch equals -p of each line
#      byte for byte, and 1 and 2 threads print the same bytes, for each pooling mode;
#   3. the server under mixed load: 8 concurrent /v1/embeddings requests beside 4
#      concurrent completions all answer 200, and each embedding equals the one a lone
#      request gets (embeddings are batched in the engine beside the completions).
# Prints "N passed, N failed".  About a minute (the Q4_0 synth, when missing, about 20 s more).
set -u
build=${1:-build}
here=$(pwd)
KITE="$here/$build/kite"
[ -x "$KITE" ] || { echo "issue24_embeddings: $KITE not found (make first)" >&2; exit 1; }
T=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$T"' EXIT INT TERM
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok    $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL  $1: $2"; }

# 1. the e2e script
if KITE_BUILD=$build sh tests/e2e/test_embed.sh >"$T/e2e.out" 2>&1; then
    ok "tests/e2e/test_embed.sh ($(tail -n 1 "$T/e2e.out" | sed 's/.*: //'))"
else
    fail "tests/e2e/test_embed.sh" "$(grep FAIL "$T/e2e.out" | head -n 3 | tr '\n' ' ')"
fi

# 2. every architecture and a quantized TinyLlama shape
printf 'Once upon a time there was a cat.\nThe dog ran to the park.\nLily liked red apples.\n' >"$T/in.txt"
check_model() { # NAME MODEL
    bad=
    for pool in mean last cls; do
        "$KITE" embed -m "$2" -f "$T/in.txt" --pooling $pool -t 2 >"$T/f" 2>"$T/err" || { bad="$bad $pool: $(head -n 1 "$T/err")"; continue; }
        "$KITE" embed -m "$2" -f "$T/in.txt" --pooling $pool -t 1 >"$T/f1" 2>/dev/null
        : >"$T/s"
        while IFS= read -r line; do "$KITE" embed -m "$2" -p "$line" --pooling $pool -t 2 >>"$T/s" 2>/dev/null; done <"$T/in.txt"
        awk -v n="$3" '{ s = 0; for (i = 1; i <= NF; i++) { if ($i != $i + 0 || $i ~ /nan|inf/) exit 1; s += $i * $i }
                         if (NF != n || sqrt(s) < 0.99999 || sqrt(s) > 1.00001) exit 1 } END { if (NR != 3) exit 1 }' "$T/f" ||
            bad="$bad $pool: shape or norm"
        cmp -s "$T/f" "$T/s" || bad="$bad $pool: batch != singles"
        cmp -s "$T/f" "$T/f1" || bad="$bad $pool: threads differ"
    done
    if [ -z "$bad" ]; then ok "$1: 3 lines of $3 unit vectors, batch == singles, 1 == 2 threads (mean, last, cls)"
    else fail "$1" "$bad"; fi
}
n_embd() { "$KITE" info "$1" 2>/dev/null | awk '$2 ~ /\.embedding_length$/ { print $NF; exit }'; }
for shape in tiny-llama3 tiny-mistral tiny-mixtral tiny-qwen2 tiny-qwen3 tiny-qwen3moe tiny-gpt2 tiny-phi3; do
    if "$KITE" synth --shape $shape --type f32 -o "$T/$shape.gguf" -q >/dev/null 2>"$T/err"; then
        check_model "$shape" "$T/$shape.gguf" "$(n_embd "$T/$shape.gguf")"
    else
        fail "synth $shape" "$(head -n 1 "$T/err")"
    fi
    rm -f "$T/$shape.gguf"
done
Q4=build/scale/tl4-q4_0.gguf
if [ ! -f "$Q4" ]; then
    mkdir -p build/scale
    "$KITE" synth --shape tinyllama-1.1b --type q4_0 --layers 4 -o "$Q4" -q >/dev/null 2>"$T/err" || fail "synth tl4-q4_0" "$(head -n 1 "$T/err")"
fi
[ -f "$Q4" ] && check_model "TinyLlama shape, 4 layers, Q4_0" "$Q4" 2048

# 3. the server under mixed load
"$KITE" serve --port 0 -t 2 --parallel 4 --ctx 256 -q </dev/null >"$T/out" 2>"$T/log" &
PID=$!
i=0
PORT=
while [ $i -lt 100 ] && [ -z "$PORT" ]; do
    PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T/log" | head -n 1)
    [ -n "$PORT" ] || sleep 0.1
    i=$((i + 1))
done
if [ -z "$PORT" ]; then
    fail "server starts" "$(head -n 1 "$T/log")"
else
    URL=http://127.0.0.1:$PORT
    for k in 1 2 3 4 5 6 7 8; do
        curl -s -m 60 -o "$T/lone$k.json" "$URL/v1/embeddings" -d "{\"input\":[\"text $k about a cat\",\"another $k\"]}"
    done
    for k in 1 2 3 4; do
        curl -s -m 60 -o "$T/gen$k.json" -w '%{http_code}\n' "$URL/v1/completions" \
            -d '{"prompt":"Once upon a time","max_tokens":64,"temperature":0}' >"$T/gen$k.code" &
    done
    for k in 1 2 3 4 5 6 7 8; do
        curl -s -m 60 -o "$T/par$k.json" -w '%{http_code}\n' "$URL/v1/embeddings" \
            -d "{\"input\":[\"text $k about a cat\",\"another $k\"]}" >"$T/par$k.code" &
    done
    wait_n=0
    while [ $wait_n -lt 600 ] && [ "$(cat "$T"/gen*.code "$T"/par*.code 2>/dev/null | wc -l)" -lt 12 ]; do
        sleep 0.1
        wait_n=$((wait_n + 1))
    done
    bad=
    for k in 1 2 3 4; do [ "$(cat "$T/gen$k.code")" = 200 ] || bad="$bad gen$k:$(cat "$T/gen$k.code")"; done
    for k in 1 2 3 4 5 6 7 8; do
        [ "$(cat "$T/par$k.code")" = 200 ] || bad="$bad emb$k:$(cat "$T/par$k.code")"
        cmp -s "$T/par$k.json" "$T/lone$k.json" || bad="$bad emb$k differs from the lone request"
    done
    if [ -z "$bad" ]; then ok "8 concurrent embedding requests beside 4 completions: all 200, each equal to its lone answer"
    else fail "mixed load" "$bad"; fi
fi

echo "tests/acceptance/issue24_embeddings.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
