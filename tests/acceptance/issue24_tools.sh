#!/bin/sh
# tests/acceptance/issue24_tools.sh [BUILD] - issue 24 part 4 (tools), the checks too slow
# for make test:
#   1. tests/e2e/serve_tools.mjs (the openai npm client, arguments validated with ajv)
#      against `kite serve` on the bundled stories260K (SentencePiece) for each tool-call
#      syntax (--chat-template chatml, llama3, mistral, gemma) with TOOLS_SEEDS seeds
#      (default 20) of tool_choice "required" at temperature 1: every answer has
#      finish_reason "tool_calls" and arguments that validate; named, parallel, streamed
#      (reassembled, and the client's stream helper), history and 400 checks as in make test;
#   2. the same on byte-level BPE vocabularies, whose tokens hold the call markup in few
#      tokens (Qwen3 has <tool_call> as one token): tiny Qwen3 (chatml) and Llama 3 shapes
#      from `kite synth --vocab` (../shared/models, random weights), TOOLS_BPE_SEEDS seeds
#      (default 5).
# Needs node with the openai and ajv packages in tests/e2e/.node (test_serve_tools.sh
# installs them).  Prints "N passed, N failed".  About 20 s (two 17-20 MB models are
# synthesized).
set -u
build=${1:-build}
here=$(pwd)
KITE="$here/$build/kite"
[ -x "$KITE" ] || { echo "issue24_tools: $KITE not found (make first)" >&2; exit 1; }
SEEDS=${TOOLS_SEEDS:-20}
BPE_SEEDS=${TOOLS_BPE_SEEDS:-5}
VOCABS=${TOOLS_VOCABS:-$here/../shared/models}
NODE_DIR=${KITE_NODE_DIR:-$here/tests/e2e/.node}
T=$(mktemp -d)
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$T"' EXIT INT TERM
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok    $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL  $1: $2"; }

if [ ! -d "$NODE_DIR/node_modules/openai" ] || [ ! -d "$NODE_DIR/node_modules/ajv" ]; then
    fail "node packages" "openai and ajv are not in $NODE_DIR (run tests/e2e/test_serve_tools.sh once)"
    echo "$passed passed, $failed failed"
    exit 1
fi

# serve_with NAME SEEDS ARGS...: starts kite serve ARGS, runs serve_tools.mjs, stops it
serve_with() {
    name=$1
    seeds=$2
    shift 2
    "$KITE" serve --port 0 -t 1 --parallel 2 --alias kite -q "$@" </dev/null >"$T/serve.out" 2>"$T/serve.log" &
    PID=$!
    port=
    w=0
    while [ $w -lt 300 ] && [ -z "$port" ]; do
        port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$T/serve.log")
        kill -0 "$PID" 2>/dev/null || break
        [ -z "$port" ] && sleep 0.1
        w=$((w + 1))
    done
    if [ -z "$port" ]; then
        fail "$name: server starts" "$(head -n 1 "$T/serve.log")"
    elif KITE_NODE_DIR=$NODE_DIR KITE_URL=http://127.0.0.1:$port KITE_FAMILY=$name KITE_SEEDS=$seeds \
        timeout 600 node tests/e2e/serve_tools.mjs >"$T/node.out" 2>&1; then
        ok "$(tail -n 1 "$T/node.out")"
    else
        fail "$name" "$(tail -n 3 "$T/node.out" | tr '\n' ' ')"
    fi
    kill "$PID" 2>/dev/null
    wait "$PID" 2>/dev/null
    PID=
}

# 1. the bundled model, every syntax
for fam in chatml llama3 mistral gemma; do
    serve_with "$fam" "$SEEDS" --ctx 2048 --chat-template "$fam"
done

# 2. byte-level BPE vocabularies
for v in qwen3:tiny-qwen3:chatml llama3:tiny-llama3:llama3; do
    voc=${v%%:*}
    rest=${v#*:}
    shape=${rest%%:*}
    fam=${rest#*:}
    if ! "$KITE" synth --shape "$shape" --type q8_0 --vocab "$VOCABS/vocab-$voc.gguf" -o "$T/$voc.gguf" -t 2 \
        >"$T/synth.out" 2>&1; then
        fail "synth $shape --vocab $voc" "$(head -n 1 "$T/synth.out")"
        continue
    fi
    serve_with "$fam on the $voc vocabulary" "$BPE_SEEDS" -m "$T/$voc.gguf" --ctx 2048 --chat-template "$fam"
    rm -f "$T/$voc.gguf"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
