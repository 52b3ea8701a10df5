#!/bin/sh
# tests/e2e/test_serve_spec.sh - `kite serve --lookup N`: speculative decoding
# with prompt lookup inside the serving engine (docs/engine.md).
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this).  POSIX sh + curl.  Starts two servers on 127.0.0.1 (ports chosen by
# the system) with the bundled model: one with --lookup 3 --draft-max 6, one
# without speculation.  Checks:
#   * temperature-0 /v1/completions of input-copying prompts (and one plain
#     story opening) give the same text and token counts on both servers,
#     sent concurrently to the speculative one;
#   * a streamed temperature-0 completion from the speculative server has
#     the same text as the non-streaming one;
#   * /metrics of the speculative server shows drafted and accepted tokens
#     (so the comparison above is not vacuous), and no running sequence or
#     used KV block once every request is done; the plain server drafted
#     nothing;
#   * `kite bench --parallel 2 --lookup 3 --json` reports the speeds without
#     and with speculation, a non-zero acceptance and the tokens per pass;
#   * bad values of --lookup / --draft-max are rejected with exit status 2;
#   * other drafters: a server with --draft-model (the bundled model
#     itself), one with --draft-skip-layers 3 and one with --lookahead 8,4,8
#     (asked at the same time) answer prompt 1 with the plain server's text,
#     drafted tokens show in /metrics (all accepted for the draft model,
#     which is the target itself);
#     `kite bench --parallel 2 --draft-skip-layers 3 --json` reports both
#     speeds; two drafters at once and a bad layer list exit with status 2.
#
# The last line is "tests/e2e/test_serve_spec.sh: N passed, M failed".

set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
PIDS=

skip() { printf '  skip  %s: %s\n' "$1" "$2"; }

trap 'e2e_stop_servers; rm -rf "$E2E_TMP"' EXIT
trap 'e2e_stop_servers; rm -rf "$E2E_TMP"; exit 130' INT TERM

if ! command -v curl >/dev/null 2>&1; then
    skip "kite serve --lookup" "curl is not installed"
    e2e_summary
    exit 0
fi

# start NAME ARGS...: starts a server, sets $PORT ("" on failure).
start() {
    _name=$1
    shift
    "$KITE" serve --port 0 -t 1 --parallel 4 --ctx 256 -q "$@" </dev/null >"$T/$_name.out" 2>"$T/$_name.log" &
    _pid=$!
    PIDS="$PIDS $_pid"
    e2e_serve_port "$T/$_name.log" "$_pid"
}

start spec --lookup 3 --draft-max 6
SPEC_PORT=$PORT
start plain
PLAIN_PORT=$PORT
start dm --draft-model models/stories260K.gguf
DM_PORT=$PORT
start self --draft-skip-layers 3
SELF_PORT=$PORT
start la --lookahead 8,4,8
LA_PORT=$PORT
if [ -z "$SPEC_PORT" ] || [ -z "$PLAIN_PORT" ] || [ -z "$DM_PORT" ] || [ -z "$SELF_PORT" ] || [ -z "$LA_PORT" ]; then
    why=
    for n in spec plain dm self la; do why="$why$n: $(e2e_first_line "$T/$n.log"); "; done
    e2e_fail "servers start" "$why"
    e2e_summary
    exit 1
fi
e2e_ok "servers start (--lookup 3, plain, --draft-model, --draft-skip-layers 3, --lookahead 8,4,8)"

# post PORT FILE BODY: POST /v1/completions; sets $code.
post() {
    code=$(printf '%s' "$3" | curl -s -m 60 -o "$2" -w '%{http_code}' -X POST \
        -H 'Content-Type: application/json' --data-binary @- "http://127.0.0.1:$1/v1/completions")
}

P1='Tom had a red car. He liked to drive it in the yard with his dog. One day the car broke. Tom had a red car. He liked to'
P2='There was a small bird who loved to sing. Every morning it sang a happy song for the children. There was a small bird who loved to sing. Every morning'
P3='Mom said: \"Be careful, the stove is hot!\" Lily said: \"I will be careful, Mom.\" Mom said: \"Be'
P4='Once upon a time'

# the four prompts at once to the speculative server, then one by one to the plain one
n=1
CPIDS=
for p in "$P1" "$P2" "$P3" "$P4"; do
    post "$SPEC_PORT" "$T/spec$n.json" "{\"prompt\":\"$p\",\"max_tokens\":64,\"temperature\":0}" &
    CPIDS="$CPIDS $!"
    n=$((n + 1))
done
for c in $CPIDS; do wait "$c"; done
n=1
for p in "$P1" "$P2" "$P3" "$P4"; do
    post "$PLAIN_PORT" "$T/plain$n.json" "{\"prompt\":\"$p\",\"max_tokens\":64,\"temperature\":0}"
    a=$(json_raw "$T/spec$n.json" text)
    b=$(json_raw "$T/plain$n.json" text)
    ta=$(json_num "$T/spec$n.json" completion_tokens)
    tb=$(json_num "$T/plain$n.json" completion_tokens)
    if [ "$code" != 200 ] || [ -z "$b" ]; then
        e2e_fail "prompt $n: plain server" "status $code: $(e2e_first_line "$T/plain$n.json")"
    elif [ "$a" = "$b" ] && [ "$ta" = "$tb" ]; then
        e2e_ok "prompt $n: --lookup 3 output equals plain decoding ($ta tokens)"
    else
        e2e_fail "prompt $n: --lookup 3 differs" "spec ($ta tokens) '$(printf '%s' "$a" | cut -c 1-80)' vs plain ($tb) '$(printf '%s' "$b" | cut -c 1-80)'"
    fi
    n=$((n + 1))
done

# streaming from the speculative server: same text as non-streaming
code=$(printf '%s' "{\"prompt\":\"$P1\",\"max_tokens\":64,\"temperature\":0,\"stream\":true}" |
    curl -s -N -m 60 -o "$T/stream.txt" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
        --data-binary @- "http://127.0.0.1:$SPEC_PORT/v1/completions")
s=$(sse_text "$T/stream.txt")
a=$(json_raw "$T/spec1.json" text)
if [ "$code" = 200 ] && [ -n "$s" ] && [ "$s" = "$a" ]; then e2e_ok "streamed text equals the non-streaming text"
else e2e_fail "streamed text" "status $code: '$(printf '%s' "$s" | cut -c 1-80)' vs '$(printf '%s' "$a" | cut -c 1-80)'"; fi

# metrics
metric() { sed -n "s/^$1 //p" "$T/metrics"; }
curl -s -m 10 "http://127.0.0.1:$SPEC_PORT/metrics" >"$T/metrics"
drafted=$(metric kite_spec_draft_tokens_total)
accepted=$(metric kite_spec_accepted_tokens_total)
passes=$(metric kite_spec_verify_passes_total)
if [ -n "$drafted" ] && [ -n "$accepted" ] && [ -n "$passes" ] && [ "$accepted" -gt 0 ] &&
    [ "$drafted" -ge "$accepted" ] && [ "$passes" -gt 0 ]; then
    e2e_ok "/metrics: $drafted drafted, $accepted accepted in $passes verification passes"
else
    e2e_fail "/metrics spec counters" "drafted '$drafted' accepted '$accepted' passes '$passes'"
fi
i=0
while [ $i -lt 50 ]; do
    curl -s -m 10 "http://127.0.0.1:$SPEC_PORT/metrics" >"$T/metrics"
    [ "$(metric kite_running_sequences)" = 0 ] && [ "$(metric kite_kv_blocks_used)" = 0 ] && break
    sleep 0.1
    i=$((i + 1))
done
if [ "$(metric kite_running_sequences)" = 0 ] && [ "$(metric kite_kv_blocks_used)" = 0 ]; then
    e2e_ok "no running sequence or used KV block left"
else
    e2e_fail "KV blocks freed" "running $(metric kite_running_sequences), used $(metric kite_kv_blocks_used)"
fi
curl -s -m 10 "http://127.0.0.1:$PLAIN_PORT/metrics" >"$T/metrics"
if [ "$(metric kite_spec_draft_tokens_total)" = 0 ]; then e2e_ok "the plain server drafted nothing"
else e2e_fail "plain server drafts" "kite_spec_draft_tokens_total $(metric kite_spec_draft_tokens_total)"; fi

# other drafters: prompt 1 to the three servers at once, compared with the plain server's answer above
CPIDS=
for port in $DM_PORT $SELF_PORT $LA_PORT; do
    post "$port" "$T/d$port.json" "{\"prompt\":\"$P1\",\"max_tokens\":64,\"temperature\":0}" &
    CPIDS="$CPIDS $!"
done
for c in $CPIDS; do wait "$c"; done
for d in dm self la; do
    case $d in dm) port=$DM_PORT ;; self) port=$SELF_PORT ;; *) port=$LA_PORT ;; esac
    a=$(json_raw "$T/d$port.json" text)
    b=$(json_raw "$T/plain1.json" text)
    same=yes
    if [ -z "$a" ] || [ "$a" != "$b" ] ||
        [ "$(json_num "$T/d$port.json" completion_tokens)" != "$(json_num "$T/plain1.json" completion_tokens)" ]; then
        same="'$(printf '%s' "$a" | cut -c 1-60)' vs '$(printf '%s' "$b" | cut -c 1-60)'"
    fi
    curl -s -m 10 "http://127.0.0.1:$port/metrics" >"$T/metrics"
    drafted=$(metric kite_spec_draft_tokens_total)
    accepted=$(metric kite_spec_accepted_tokens_total)
    if [ "$same" = yes ] && [ -n "$drafted" ] && [ "${accepted:-0}" -gt 0 ] &&
        { [ "$d" != dm ] || [ "$accepted" = "$drafted" ]; }; then
        e2e_ok "$d drafter: outputs equal plain decoding ($drafted drafted, $accepted accepted)"
    else
        e2e_fail "$d drafter" "$same; drafted '$drafted' accepted '$accepted'"
    fi
done
# the model drafter's own counters: time in draft passes, and its blocks back in the pool
curl -s -m 10 "http://127.0.0.1:$DM_PORT/metrics" >"$T/metrics"
ds=$(metric kite_spec_draft_seconds_total)
db=$(metric kite_kv_draft_blocks_used)
if [ -n "$ds" ] && awk -v s="$ds" 'BEGIN { exit !(s > 0) }' && [ "$db" = 0 ]; then
    e2e_ok "/metrics of the draft-model server: $ds s in draft passes, no draft block held"
else
    e2e_fail "/metrics draft counters" "kite_spec_draft_seconds_total '$ds' kite_kv_draft_blocks_used '$db'"
fi
e2e_stop_servers

# kite bench --parallel ... --lookup: both runs in one invocation, acceptance and tokens/pass reported
e2e_kite "$T/bench.out" "$T/bench.err" bench --parallel 2 -t 1 -n 24 --lookup 3 --reps 1 --json \
    --prompt "The ball was very happy. The ball was very happy. The ball was very happy."
if [ "$rc" = 0 ] && grep -q '"test": "serve_lookup", .*"parallel": 2,.*"plain_tok_s": [0-9]' "$T/bench.out" &&
    grep -q '"lookup_tok_s": [0-9].*"acceptance": 0\.[0-9]*[1-9].*"tokens_per_pass": [1-9]' "$T/bench.out"; then
    e2e_ok "kite bench --parallel 2 --lookup 3 reports both speeds, acceptance and tokens per pass"
else
    e2e_fail "kite bench --lookup" "rc $rc: $(e2e_first_line "$T/bench.out") $(e2e_first_line "$T/bench.err")"
fi

e2e_kite "$T/bench2.out" "$T/bench2.err" bench --parallel 2 -t 1 -p 16 -n 16 --draft-skip-layers 3 --reps 1 --json
if [ "$rc" = 0 ] && grep -q '"test": "serve_spec", "drafter": "skip-layers", .*"plain_tok_s": [0-9].*"spec_tok_s": [0-9]' \
    "$T/bench2.out"; then
    e2e_ok "kite bench --parallel 2 --draft-skip-layers 3 reports both speeds"
else
    e2e_fail "kite bench --draft-skip-layers" "rc $rc: $(e2e_first_line "$T/bench2.out") $(e2e_first_line "$T/bench2.err")"
fi

# bad flags
e2e_expect_error "two drafters are rejected" 2 "" "at most one" serve --port 0 --lookup 2 --draft-skip-layers 3
e2e_expect_error "a bad layer list is rejected" 2 "" "layer list" serve --port 0 --draft-skip-layers 1-99
e2e_expect_error "a bad --lookahead is rejected" 2 "" "lookahead" serve --port 0 --lookahead 8,12,8
e2e_expect_error "--lookup 0 is rejected" 2 "" "--lookup" serve --port 0 --lookup 0
e2e_expect_error "--draft-max 17 is rejected" 2 "" "--draft-max" serve --port 0 --lookup 2 --draft-max 17

e2e_summary
