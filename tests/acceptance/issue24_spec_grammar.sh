#!/bin/sh
# tests/acceptance/issue24_spec_grammar.sh [BUILD] - issue 24, item 1: grammar-constrained
# decoding integrated with speculative decoding (drafts checked against the grammar), lossless.
#   1. tests/unit/test_spec: under the pet JSON schema every drafter's greedy output is
#      token for token the schema alone's, on stories260K and on the q8_0 scale model;
#      sampled speculative output only holds allowed tokens; kite_gen_check_draft agrees
#      with the mask.  One check.
#   2. kite run, greedy: for 3 constraints (the pet schema, --json-object, a GBNF list) and
#      5 drafters (--lookup 3, --lookup 1 --draft-max 16, --lookahead 8,4,8,
#      --draft-skip-layers 1, --draft-model the F16 copy) on stories260K, and 3 drafters
#      (lookup, lookahead, skip) with the schema and --json-object on the scale models
#      build/scale/tl4-q8_0.gguf and tl4-q4_0.gguf (make them first: make
#      build/scale/tl4-q8_0.gguf build/scale/tl4-q4_0.gguf; a missing one fails): the
#      output equals the constrained run without a drafter, byte for byte.  One check per
#      model and constraint.
#   3. kite serve: a --lookup 3 and a --draft-skip-layers 1 server give the plain server's
#      temperature-0 json_schema answers on 4 prompts, and drafted tokens; at temperature 1
#      over 10 seeds the two servers' json_object answers all JSON.parse (node).
# Prints "N passed, N failed".  About a minute.
set -u
build=${1:-build}
here=$(pwd)
KITE="$here/$build/kite"
[ -x "$KITE" ] || { echo "issue24_spec_grammar: $KITE not found (make first)" >&2; exit 1; }
T=$(mktemp -d)
PIDS=
trap 'for p in $PIDS; do kill "$p" 2>/dev/null; done; rm -rf "$T"' EXIT INT TERM
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok    $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL  $1: $2"; }
SCHEMA=tests/data/grammar/pet.schema.json
F16=tests/data/tokenizer/stories260K-F16.gguf

# 1. the unit test
if [ -x "$build/tests/test_spec" ] && "$build/tests/test_spec" >"$T/unit.out" 2>&1; then
    ok "test_spec: $(tail -n 1 "$T/unit.out") ($(grep -c 'under the schema' "$T/unit.out") drafter runs under the schema)"
else
    fail "test_spec" "$(grep FAIL "$T/unit.out" 2>/dev/null | head -n 3 | tr '\n' ' ')"
fi

# 2. kite run: constrained + drafter == constrained alone
P='{"name": "Tom", "kind": "dog", "age": 3, "home": {"town": "Ely"}} {"name": "Tom", "kind": "dog", "age": 3, "home": {"town": "Ely"}}'
GBNF='root ::= "[" item ("," " "? item)* "]"
item ::= "\"" [a-z ]+ "\""'
# same MODEL N NAME DRAFTERS -- CONSTRAINT...: every drafter's output equals the plain run's
same() {
    _m=$1 _n=$2 _name=$3 _drafters=$4
    shift 5
    if ! "$KITE" run -m "$_m" -p "$P" -n "$_n" --temp 0 -t 2 "$@" --json </dev/null >"$T/ref" 2>"$T/ref.err"; then
        fail "$_name" "the plain constrained run failed: $(head -n 1 "$T/ref.err")"
        return
    fi
    sed '$d' "$T/ref" >"$T/ref.text"
    _bad= _acc=
    _old_ifs=$IFS
    IFS='|'
    for d in $_drafters; do
        IFS=$_old_ifs
        # shellcheck disable=SC2086
        if ! "$KITE" run -m "$_m" -p "$P" -n "$_n" --temp 0 -t 2 "$@" $d --json </dev/null >"$T/got" 2>"$T/got.err"; then
            _bad="$_bad [$d: $(head -n 1 "$T/got.err")]"
            continue
        fi
        sed '$d' "$T/got" >"$T/got.text"
        cmp -s "$T/ref.text" "$T/got.text" || _bad="$_bad [$d differs]"
        _acc="$_acc $(tail -n 1 "$T/got" | sed -n 's/.*"spec_accept_rate": \([0-9.]*\).*/\1/p')"
    done
    IFS=$_old_ifs
    _stop=$(tail -n 1 "$T/ref" | sed -n 's/.*"stop": "\([a-z ]*\)".*/\1/p')
    if [ -z "$_bad" ]; then ok "$_name: every drafter = the constraint alone (stop $_stop; accept rates$_acc)"
    else fail "$_name" "$_bad"; fi
}
D5="--lookup 3|--lookup 1 --draft-max 16|--lookahead 8,4,8|--draft-skip-layers 1|--draft-model $F16"
same models/stories260K.gguf 300 "stories260K, pet schema" "$D5" -- --json-schema "$SCHEMA"
same models/stories260K.gguf 200 "stories260K, --json-object" "$D5" -- --json-object
same models/stories260K.gguf 120 "stories260K, GBNF list" "$D5" -- --grammar "$GBNF"
D3="--lookup 3|--lookahead 8,4,8|--draft-skip-layers 3"
for q in q8_0 q4_0; do
    m=build/scale/tl4-$q.gguf
    if [ ! -f "$m" ]; then
        fail "tl4-$q" "$m is missing (make $m)"
        continue
    fi
    same "$m" 48 "tl4-$q, pet schema" "$D3" -- --json-schema "$SCHEMA"
    same "$m" 48 "tl4-$q, --json-object" "$D3" -- --json-object
done

# 3. kite serve
start() {
    _log=$T/$1.log
    shift
    "$KITE" serve --port 0 -t 1 --parallel 2 --ctx 512 -q "$@" </dev/null >/dev/null 2>"$_log" &
    PIDS="$PIDS $!"
    _i=0
    PORT=
    while [ $_i -lt 100 ] && [ -z "$PORT" ]; do
        PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$_log" | head -n 1)
        [ -n "$PORT" ] || sleep 0.1
        _i=$((_i + 1))
    done
}
start plain
PLAIN=$PORT
start lookup --lookup 3
LOOKUP=$PORT
start skip --draft-skip-layers 1
SKIP=$PORT
if [ -z "$PLAIN" ] || [ -z "$LOOKUP" ] || [ -z "$SKIP" ]; then
    fail "servers start" "$(head -n 1 "$T/plain.log") $(head -n 1 "$T/lookup.log") $(head -n 1 "$T/skip.log")"
else
    sch=$(tr -d '\n' <"$SCHEMA")
    bad=
    i=0
    for prompt in "$P" "Once upon a time" '{"name": "Rex", "kind": "cat"' "A pet as JSON: {\"name\":"; do
        i=$((i + 1))
        esc=$(printf '%s' "$prompt" | sed 's/\\/\\\\/g; s/"/\\"/g')
        body="{\"prompt\": \"$esc\", \"max_tokens\": 200, \"temperature\": 0, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"pet\", \"schema\": $sch}}}"
        for srv in PLAIN LOOKUP SKIP; do
            eval port=\$$srv
            printf '%s' "$body" | curl -s -m 120 -H 'Content-Type: application/json' --data-binary @- \
                "http://127.0.0.1:$port/v1/completions" | sed 's/"id":"[^"]*"//; s/"created":[0-9]*//' >"$T/$srv.$i"
        done
        grep -q '"text"' "$T/PLAIN.$i" || bad="$bad prompt$i(plain: $(head -c 120 "$T/PLAIN.$i"))"
        cmp -s "$T/PLAIN.$i" "$T/LOOKUP.$i" || bad="$bad prompt$i(lookup)"
        cmp -s "$T/PLAIN.$i" "$T/SKIP.$i" || bad="$bad prompt$i(skip)"
    done
    metric() { curl -s "http://127.0.0.1:$1/metrics" | sed -n "s/^$2 \\([0-9.e+]*\\)\$/\\1/p"; }
    dl=$(metric "$LOOKUP" kite_spec_draft_tokens_total)
    ds=$(metric "$SKIP" kite_spec_draft_tokens_total)
    as=$(metric "$SKIP" kite_spec_accepted_tokens_total)
    if [ -z "$bad" ] && [ "${dl:-0}" != 0 ] && [ "${ds:-0}" != 0 ]; then
        ok "serve: --lookup 3 and --draft-skip-layers 1 answer the plain server's json_schema replies at temperature 0 ($dl and $ds tokens drafted, the skip drafter's drawn under the schema: ${as:-?} accepted)"
    else
        fail "serve, temperature 0 under a schema" "$bad drafted ${dl:-none} ${ds:-none}"
    fi
    bad=
    for seed in 1 2 3 4 5 6 7 8 9 10; do
        if [ $seed -le 5 ]; then port=$LOOKUP; else port=$SKIP; fi
        curl -s -m 120 -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/chat/completions" \
            -d "{\"messages\": [{\"role\": \"user\", \"content\": \"A pet as JSON\"}], \"max_tokens\": 300, \"temperature\": 1, \"seed\": $seed, \"response_format\": {\"type\": \"json_object\"}}" >"$T/s.json"
        node -e '
            const b = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
            const c = b.choices[0];
            if (c.finish_reason !== "stop") process.exit(2);
            const v = JSON.parse(c.message.content);
            if (typeof v !== "object" || v === null || Array.isArray(v)) process.exit(3);' "$T/s.json" 2>/dev/null ||
            bad="$bad $seed($(head -c 100 "$T/s.json"))"
    done
    if ! command -v node >/dev/null 2>&1; then fail "serve, temperature 1" "node is not installed"
    elif [ -z "$bad" ]; then ok "serve --lookup 3 and --draft-skip-layers 1, json_object at temperature 1 over 10 seeds: every reply parses as an object"
    else fail "serve --lookup, json_object at temperature 1" "seeds:$bad"; fi
fi

echo "issue24_spec_grammar: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
