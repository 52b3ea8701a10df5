#!/bin/sh
# tests/e2e/test_serve_tools.sh - tool calling of `kite serve` (issue 24 part 4,
# docs/http.md "Tools") on the bundled model, one server per tool-call syntax:
# chatml (Hermes <tool_call>, the model's default), llama3, mistral and gemma
# (the generic format), chosen with --chat-template.
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this).  POSIX sh + curl; node with the npm packages openai and ajv (installed
# into tests/e2e/.node on first use, as test_serve.sh does).  Checks:
#   * through the openai client (tests/e2e/serve_tools.mjs), per family:
#     tool_choice "required" at temperature 1 over 10 seeds -> finish_reason
#     "tool_calls", arguments that parse and validate (ajv); parallel calls;
#     a named function; streamed calls (raw chunks and the client's stream
#     helper) sent token by token (argument chunks counted), equal to the
#     non-streamed call for the same seed, "auto" included; tool messages in the history;
#     "none"; 400s naming the parameter for bad tools;
#   * with curl: the legacy functions field is refused with a 400 naming it,
#     a forced call's prompt carries the tool list (prompt_tokens grow).
# The prompts with a tool list are longer than the model's 512 trained
# positions: the servers run with --ctx 2048 (the grammar keeps the calls
# well-formed whatever the model's quality there).
#
# The last line is "tests/e2e/test_serve_tools.sh: N passed, M failed".

set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
PIDS=
skip() { printf '  skip  %s: %s\n' "$1" "$2"; }
trap 'e2e_stop_servers; rm -rf "$E2E_TMP"' EXIT
trap 'e2e_stop_servers; rm -rf "$E2E_TMP"; exit 130' INT TERM

if ! command -v curl >/dev/null 2>&1; then
    skip "kite serve tools" "curl is not installed"
    e2e_summary
    exit 0
fi
NODE_DIR=${KITE_NODE_DIR:-tests/e2e/.node}
case "$NODE_DIR" in /*) ;; *) NODE_DIR=$(pwd)/$NODE_DIR ;; esac
HAVE_NODE=0
command -v node >/dev/null 2>&1 && e2e_npm_ready "$NODE_DIR" openai "$T/npm.log" &&
    e2e_npm_ready "$NODE_DIR" ajv "$T/npm.log" && HAVE_NODE=1

for fam in chatml llama3 mistral gemma; do
    "$KITE" serve --port 0 -t 1 --parallel 2 --ctx 2048 --alias kite -q --chat-template $fam </dev/null >"$T/$fam.out" \
        2>"$T/$fam.log" &
    PIDS="$PIDS $!"
    e2e_serve_port "$T/$fam.log" "$!"
    if [ -z "$PORT" ]; then
        e2e_fail "$fam server starts" "$(e2e_first_line "$T/$fam.log")"
        continue
    fi
    URL=http://127.0.0.1:$PORT
    if [ $HAVE_NODE = 1 ]; then
        if KITE_NODE_DIR=$NODE_DIR KITE_URL=$URL KITE_FAMILY=$fam timeout 120 node tests/e2e/serve_tools.mjs \
            >"$T/node.out" 2>&1; then
            e2e_ok "openai client + ajv: $(tail -n 1 "$T/node.out")"
        else
            e2e_fail "openai client + ajv ($fam)" "$(tail -n 3 "$T/node.out" | tr '\n' ' ')"
        fi
    else
        skip "openai client + ajv ($fam)" "node, or the openai / ajv npm packages, not available"
    fi
    if [ $fam = chatml ]; then
        code=$(curl -s -o "$T/e.json" -w '%{http_code}' "$URL/v1/chat/completions" \
            -d '{"messages":[{"role":"user","content":"x"}],"functions":[{"name":"f"}]}')
        if [ "$code" = 400 ] && grep -q '"param":"functions"' "$T/e.json"; then e2e_ok "legacy functions: 400 naming it"
        else e2e_fail "legacy functions" "$code $(cat "$T/e.json")"; fi
        body='{"messages":[{"role":"user","content":"x"}],"max_tokens":1,"temperature":0'
        tools=',"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]'
        curl -s "$URL/v1/chat/completions" -d "$body}" >"$T/p0.json"
        curl -s "$URL/v1/chat/completions" -d "$body$tools}" >"$T/p1.json"
        curl -s "$URL/v1/chat/completions" -d "$body$tools,\"tool_choice\":\"none\"}" >"$T/p2.json"
        p0=$(sed -n 's/.*"prompt_tokens":\([0-9]*\).*/\1/p' "$T/p0.json")
        p1=$(sed -n 's/.*"prompt_tokens":\([0-9]*\).*/\1/p' "$T/p1.json")
        p2=$(sed -n 's/.*"prompt_tokens":\([0-9]*\).*/\1/p' "$T/p2.json")
        if [ -n "$p0" ] && [ -n "$p1" ] && [ "$p1" -gt $((p0 + 100)) ] && [ "$p2" = "$p0" ]; then
            e2e_ok "the tool list is in the prompt ($p0 -> $p1 tokens), not with tool_choice none ($p2)"
        else
            e2e_fail "tool list in the prompt" "prompt tokens $p0 / $p1 / $p2"
        fi
    fi
done
e2e_stop_servers
e2e_summary
