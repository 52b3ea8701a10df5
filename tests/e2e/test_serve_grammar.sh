#!/bin/sh
# tests/e2e/test_serve_grammar.sh - structured output (issue 24, docs/grammar.md):
# `kite run --json-schema / --grammar / --json-object` and `kite serve`'s
# response_format / grammar / json_schema fields, on the bundled model
# (SentencePiece vocabulary).  The byte-level BPE vocabularies (Llama 3,
# Qwen3 on synthetic tiny shapes) are tests/acceptance/issue24_structured.sh.
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this).  POSIX sh + curl; node with the npm packages openai and ajv (installed
# into tests/e2e/.node on first use, as test_serve.sh does) for validation.
# Checks:
#   * kite run --json-schema at temperature 1 over 5 seeds: every output
#     parses and validates (ajv), stops by the grammar, and the seeds differ;
#   * --grammar, --json-object; bad grammars and schemas exit 1 naming the
#     problem; with each drafter (--lookup, --lookahead, --draft-skip-layers,
#     --draft-model) temperature-0 output under the schema equals the schema
#     alone's;
#   * kite serve: the openai client at temperature 1 over 20 seeds with
#     response_format json_schema (strict), streaming, json_object, the
#     llama-server fields, stop strings, a 400 naming an unsupported keyword
#     (tests/e2e/serve_structured.mjs);
#   * a --lookup server (drafts judged under the grammar) and a --draft-skip-layers
#     server (drafts drawn under it) give the plain server's temperature-0
#     constrained output, with drafted and accepted tokens.
#
# The last line is "tests/e2e/test_serve_grammar.sh: N passed, M failed".

set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
PIDS=
skip() { printf '  skip  %s: %s\n' "$1" "$2"; }
trap 'e2e_stop_servers; rm -rf "$E2E_TMP"' EXIT
trap 'e2e_stop_servers; rm -rf "$E2E_TMP"; exit 130' INT TERM

NODE_DIR=${KITE_NODE_DIR:-tests/e2e/.node}
case "$NODE_DIR" in /*) ;; *) NODE_DIR=$(pwd)/$NODE_DIR ;; esac
npm_ready() { e2e_npm_ready "$NODE_DIR" "$1" "$T/npm.log"; }
HAVE_AJV=0
command -v node >/dev/null 2>&1 && npm_ready ajv && HAVE_AJV=1

# ---- kite run ------------------------------------------------------------------

cp tests/data/grammar/pet.schema.json "$T/schema.json" # a nested object, an enum with a non-ASCII value, bounds
reports=
bad=
for seed in 1 2 3 4 5; do
    if "$KITE" run -p "Once upon a time" -n 400 --temp 1.0 --seed $seed --json --json-schema "$T/schema.json" \
        >"$T/run$seed.out" 2>"$T/run$seed.err"; then
        tail -n 1 "$T/run$seed.out" >"$T/run$seed.json"
        reports="$reports $T/run$seed.json"
    else
        bad="$bad $seed($(e2e_first_line "$T/run$seed.err"))"
    fi
done
if [ -n "$bad" ]; then
    e2e_fail "kite run --json-schema" "failed runs:$bad"
elif [ $HAVE_AJV = 1 ]; then
    # shellcheck disable=SC2086
    if KITE_NODE_DIR=$NODE_DIR node tests/e2e/validate_json.mjs "$T/schema.json" $reports >"$T/v.out" 2>&1 &&
        ! grep -q "(1 distinct)" "$T/v.out"; then
        e2e_ok "kite run --json-schema, temperature 1, 5 seeds (SentencePiece): $(tail -n 1 "$T/v.out")"
    else
        e2e_fail "kite run --json-schema outputs validate" "$(tail -n 2 "$T/v.out" | tr '\n' ' ')"
    fi
else
    skip "kite run --json-schema validation" "node or the ajv npm package is not available"
fi

# run_text FILE: the "text" of a kite run --json line, still JSON-escaped
run_text() { tail -n 1 "$1" | sed -n 's/.*"text": "\(.*\)", "prefill_tok_s".*/\1/p'; }
e2e_kite "$T/out" "$T/err" run -p "Once" -n 20 --temp 1.0 --seed 3 --json --grammar 'root ::= ("yes" | "no") "."'
text=$(run_text "$T/out")
case "$text" in yes. | no.) e2e_ok "kite run --grammar: $text" ;; *) e2e_fail "kite run --grammar" "$text" ;; esac
e2e_kite "$T/out" "$T/err" run -p "Once" -n 150 --temp 0 --json --json-object
case "$(run_text "$T/out")" in '{'*'}') e2e_ok "kite run --json-object: an object" ;;
*) e2e_fail "kite run --json-object" "$(run_text "$T/out")" ;; esac
e2e_expect_error "bad GBNF names line:column" 1 "kite run: grammar:1:" "" run -p x -n 2 --grammar 'root ::= "a'
e2e_expect_error "unsupported schema keyword named" 1 "" 'unsupported keyword "pattern"' \
    run -p x -n 2 --json-schema '{"type":"string","pattern":"a"}'
# speculative decoding under the schema (drafts checked against it, every row masked): greedy
# output equals the grammar alone's for each drafter; the prompt repeats the schema's text so
# that lookup drafts
P='{"name": "Tom", "kind": "dog", "age": 3, "home": {"town": "Ely"}} {"name": "Tom", "kind": "dog", "age": 3, "home": {"town": "Ely"}}'
e2e_kite "$T/g0" "$T/g0.err" run -p "$P" -n 300 --temp 0 -t 1 --json-schema "$T/schema.json"
bad=
for d in "--lookup 3" "--lookup 1 --draft-max 16" "--lookahead 8,4,8" "--draft-skip-layers 1" \
    "--draft-model tests/data/tokenizer/stories260K-F16.gguf"; do
    # shellcheck disable=SC2086
    e2e_kite "$T/g1" "$T/g1.err" run -p "$P" -n 300 --temp 0 -t 1 --json-schema "$T/schema.json" $d
    cmp -s "$T/g0" "$T/g1" || bad="$bad [$d: $(tail -c 80 "$T/g1")$(e2e_first_line "$T/g1.err")]"
done
e2e_kite "$T/g2" "$T/g2.err" run -p "$P" -n 300 --temp 0 -t 1 --json-schema "$T/schema.json" --lookup 3 --json
acc=$(tail -n 1 "$T/g2" | sed -n 's/.*"spec_accept_rate": \([0-9.]*\).*/\1/p')
if [ -s "$T/g0" ] && [ -z "$bad" ] && [ "${acc:-0}" != 0.0000 ] && [ -n "$acc" ]; then
    e2e_ok "kite run --json-schema with 5 drafters: greedy output = the schema alone's (lookup accepts $acc)"
else
    e2e_fail "kite run --json-schema with drafters" "$(e2e_first_line "$T/g0.err")$bad accept ${acc:-none}"
fi

# ---- kite serve ------------------------------------------------------------------

if ! command -v curl >/dev/null 2>&1; then
    skip "kite serve structured output" "curl is not installed"
    e2e_summary
    exit 0
fi
start() {
    _name=$1
    shift
    "$KITE" serve --port 0 -t 1 --parallel 4 --ctx 512 -q -a kite "$@" </dev/null >"$T/$_name.out" 2>"$T/$_name.log" &
    PIDS="$PIDS $!"
    e2e_serve_port "$T/$_name.log" "$!"
}
start plain
PLAIN=$PORT
start spec --lookup 2 --draft-max 4
SPEC=$PORT
start skip --draft-skip-layers 1
SKIP=$PORT
if [ -z "$PLAIN" ] || [ -z "$SPEC" ] || [ -z "$SKIP" ]; then
    e2e_fail "servers start" "$(e2e_first_line "$T/plain.log") $(e2e_first_line "$T/spec.log")"
    e2e_summary
    exit 1
fi

if [ $HAVE_AJV = 1 ] && npm_ready openai; then
    if KITE_NODE_DIR=$NODE_DIR KITE_URL=http://127.0.0.1:$PLAIN timeout 120 node tests/e2e/serve_structured.mjs \
        >"$T/node.out" 2>&1; then
        e2e_ok "openai client + ajv: $(tail -n 1 "$T/node.out")"
    else
        e2e_fail "openai client + ajv" "$(tail -n 3 "$T/node.out" | tr '\n' ' ')"
    fi
else
    skip "openai client + ajv" "node, or the openai / ajv npm packages, not available"
fi

# the lookup drafter copies prompt n-grams: a prompt full of the schema's own text gets drafts
body='{"prompt":"{\"kind\":\"dog\",\"kind\":\"dog\",\"kind\":\"dog\",\"kind\":\"dog\"} {\"kind\":\"dog\",","max_tokens":60,"temperature":0,"json_schema":{"type":"object","properties":{"kind":{"enum":["cat","dog"]},"name":{"type":"string","maxLength":20}},"required":["kind","name"]}}'
for srv in plain spec skip; do
    eval port=\$$(echo "$srv" | tr a-z A-Z)
    curl -s "http://127.0.0.1:$port/v1/completions" -d "$body" >"$T/$srv.json"
done
a=$(json_raw "$T/plain.json" text)
b=$(json_raw "$T/spec.json" text)
c=$(json_raw "$T/skip.json" text)
drafted=$(curl -s "http://127.0.0.1:$SPEC/metrics" | sed -n 's/^kite_spec_draft_tokens_total \([0-9.e+]*\)$/\1/p')
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "${drafted:-0}" != 0 ]; then
    e2e_ok "--lookup server under a grammar: same temperature-0 output as plain ($drafted drafted)"
else
    e2e_fail "--lookup server under a grammar" "plain $a, spec $b, drafted ${drafted:-none}"
fi
# the self drafter draws its drafts under the grammar (engine_draft.c): most are accepted
acc=$(curl -s "http://127.0.0.1:$SKIP/metrics" | sed -n 's/^kite_spec_accepted_tokens_total \([0-9.e+]*\)$/\1/p')
if [ -n "$a" ] && [ "$a" = "$c" ] && [ "${acc:-0}" != 0 ]; then
    e2e_ok "--draft-skip-layers server under a grammar: same temperature-0 output as plain ($acc accepted)"
else
    e2e_fail "--draft-skip-layers server under a grammar" "plain $a, skip $c, accepted ${acc:-none}"
fi
curl -s -o "$T/e.json" -w '%{http_code}' "http://127.0.0.1:$PLAIN/v1/completions" \
    -d '{"prompt":"x","grammar":"root ::= a","max_tokens":2}' >"$T/code"
if [ "$(cat "$T/code")" = 400 ] && grep -q "undefined rule\|'a'" "$T/e.json"; then e2e_ok "bad grammar field: 400"
else e2e_fail "bad grammar field" "$(cat "$T/code") $(cat "$T/e.json")"; fi
e2e_stop_servers
e2e_summary
