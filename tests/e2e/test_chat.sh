#!/bin/sh
# tests/e2e/test_chat.sh - end-to-end tests of `kite chat` (docs/chat.md).
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this).  Uses the bundled model models/stories260K.gguf (not a chat model:
# it has no chat template, so the chatml default applies, and its replies are
# story text; the checks are about the chat loop, not the replies' sense).
#
# What is checked:
#   * two piped user lines at --temp 0 give two replies and exit 0: -v
#     reports turns 1 and 2, the second reusing the KV cache (only the new
#     turn is evaluated), and the first reply alone is a prefix of the output;
#   * the output with KV reuse equals --no-cache (whole conversation
#     re-evaluated each turn), byte for byte;
#   * every --chat-template family runs; empty input exits 0 silently;
#   * a small context (-c 64) drops the oldest exchanges with a note and a
#     message too long for the context is refused, both exiting 0;
#   * usage errors (bad --chat-template, bad -n) exit 2 and a missing model
#     exits 1, each with exactly one stderr line.

set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
M=models/stories260K.gguf

# chat NAME INPUT ARGS...: pipes INPUT (printf format) into kite chat ARGS;
# stdout in $T/out, stderr in $T/err, exit status in $rc.
chat() {
    _in=$1
    shift
    # shellcheck disable=SC2059 # the input is a printf format on purpose
    printf "$_in" | "$KITE" chat -m "$M" "$@" >"$T/out" 2>"$T/err"
    rc=$?
}

# two replies, KV cache reuse
chat 'Hello there\nTell me a story\n' --temp 0 -n 24 -t 1 -v
cp "$T/out" "$T/two"
reused=$(sed -n 's/.*turn 2: prompt [0-9]* tokens (\([0-9]*\) reused.*/\1/p' "$T/err")
if [ "$rc" -ne 0 ]; then
    e2e_fail "two turns" "exit $rc: $(e2e_first_line "$T/err")"
elif ! grep -q "turn 1: " "$T/err" || ! grep -q "turn 2: " "$T/err"; then
    e2e_fail "two turns" "stderr lacks the turn lines: $(tr '\n' '|' <"$T/err")"
elif [ ! -s "$T/out" ]; then
    e2e_fail "two turns" "no reply on stdout"
else
    e2e_ok "two turns"
fi
if [ -n "$reused" ] && [ "$reused" -gt 0 ]; then
    e2e_ok "second turn reuses the KV cache ($reused tokens)"
else
    e2e_fail "second turn reuses the KV cache" "$(grep 'turn 2' "$T/err")"
fi

chat 'Hello there\n' --temp 0 -n 24 -t 1
one_len=$(wc -c <"$T/out")
if [ "$rc" -eq 0 ] && [ "$one_len" -gt 1 ] && head -c "$one_len" "$T/two" | cmp -s - "$T/out" &&
    [ "$(wc -c <"$T/two")" -gt "$one_len" ]; then
    e2e_ok "first reply is the prefix, a second reply follows"
else
    e2e_fail "first reply is the prefix, a second reply follows" "exit $rc, one=$one_len bytes, two=$(wc -c <"$T/two") bytes"
fi

chat 'Hello there\nTell me a story\n' --temp 0 -n 24 -t 1 --no-cache
if [ "$rc" -eq 0 ] && cmp -s "$T/out" "$T/two"; then
    e2e_ok "KV reuse equals --no-cache"
else
    e2e_fail "KV reuse equals --no-cache" "exit $rc: $(cmp "$T/out" "$T/two" 2>&1 | head -n 1)"
fi

for f in llama2 llama3 chatml mistral zephyr gemma; do
    chat 'Hi\nAnd then?\n' --chat-template "$f" --system "You tell stories." --temp 0 -n 8 -t 1 -v
    if [ "$rc" -eq 0 ] && grep -q "template $f (chosen with --chat-template)" "$T/err" && grep -q "turn 2: " "$T/err"; then
        e2e_ok "--chat-template $f"
    else
        e2e_fail "--chat-template $f" "exit $rc: $(tr '\n' '|' <"$T/err")"
    fi
done

chat '' --temp 0
if [ "$rc" -eq 0 ] && [ ! -s "$T/out" ]; then
    e2e_ok "empty input"
else
    e2e_fail "empty input" "exit $rc, $(wc -c <"$T/out") bytes on stdout"
fi

chat 'Hello there\nTell me a story\nAnd then what happened?\nThe end\n' --temp 0 -n 16 -c 64 -t 1 -v
if [ "$rc" -eq 0 ] && grep -q "context full: dropped the oldest exchange" "$T/err" && grep -q "turn 4: " "$T/err"; then
    e2e_ok "full context drops old exchanges"
else
    e2e_fail "full context drops old exchanges" "exit $rc: $(tr '\n' '|' <"$T/err")"
fi

long=$(awk 'BEGIN { for (i = 0; i < 80; i++) printf "word%d ", i }')
chat "$long\\nHi\\n" --temp 0 -n 8 -c 64 -t 1 -v
if [ "$rc" -eq 0 ] && grep -q "message not sent" "$T/err" && grep -q "turn 1: " "$T/err"; then
    e2e_ok "too long a message is refused"
else
    e2e_fail "too long a message is refused" "exit $rc: $(tr '\n' '|' <"$T/err")"
fi

e2e_expect_error "bad --chat-template" 2 "kite chat: " "unknown template 'nope'" chat -m "$M" --chat-template nope
e2e_expect_error "bad -n" 2 "kite chat: " "" chat -m "$M" -n 0
e2e_expect_error "missing model" 1 "kite chat: " "no-such.gguf" chat -m "$T/no-such.gguf"

e2e_summary
