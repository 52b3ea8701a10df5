#!/bin/sh
# tests/e2e/test_batch.sh - `kite batch` (issue 27 item 4's front end, docs/offload.md).
#
#   * at temperature 0 every output line's ids equal `kite run --temp 0` for its
#     prompt (per-line max_tokens too), with 3 sequences in flight, with and
#     without --mem-budget, and with 1 in flight;
#   * ids and "id" values come back in input order;
#   * bad input (unreadable file, a line that is not an object, no "prompt", a
#     bad max_tokens, no prompts, a missing output folder) exits 1 with one line
#     naming the file and line, and leaves no output file, no temporary file,
#     and an existing output untouched; a missing -o is a usage error (2).
set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
M=models/stories260K.gguf
N=24
cat >"$T/p.jsonl" <<'EOF'
{"prompt": "Once upon a time", "id": "first"}

{"prompt": "The little dog", "max_tokens": 9, "id": 2}
{"prompt": "Lily wanted"}
{"prompt": "Tom and Sue went to the park. They"}
{"prompt": "One day, a bird", "id": {"k": [1, 2]}}
EOF

# want_ids PROMPT N: kite run's greedy ids
want_ids() {
    "$KITE" run -m "$M" -p "$1" -n "$2" --temp 0 --ignore-eos --json </dev/null 2>/dev/null | tail -n 1 |
        sed -n 's/.*"ids": \[\([^]]*\)\].*/\1/p'
}
# line_ids FILE K: the ids of output line K (1-based)
line_ids() {
    sed -n "${2}p" "$1" | sed -n 's/.*"ids": \[\([^]]*\)\].*/\1/p'
}

w1=$(want_ids "Once upon a time" $N)
w2=$(want_ids "The little dog" 9)
w3=$(want_ids "Lily wanted" $N)
w4=$(want_ids "Tom and Sue went to the park. They" $N)
w5=$(want_ids "One day, a bird" $N)

check_out() { # NAME FILE
    _bad=""
    [ "$(wc -l <"$2")" -eq 5 ] || _bad="$(wc -l <"$2") lines, expected 5"
    k=1
    for w in "$w1" "$w2" "$w3" "$w4" "$w5"; do
        g=$(line_ids "$2" $k)
        [ -n "$w" ] && [ "$g" = "$w" ] || _bad="$_bad line $k ids '$g' != run's '$w';"
        k=$((k + 1))
    done
    sed -n 1p "$2" | grep -q '"index": 0, "id": "first"' || _bad="$_bad line 1 id;"
    sed -n 2p "$2" | grep -q '"id": 2,' || _bad="$_bad line 2 id;"
    sed -n 3p "$2" | grep -q '"id": null,' || _bad="$_bad line 3 id;"
    sed -n 5p "$2" | grep -q '"id": {"k":\[1,2\]},' || _bad="$_bad line 5 id;"
    if [ -z "$_bad" ]; then e2e_ok "$1: ids equal kite run --temp 0, in input order"; else e2e_fail "$1" "$_bad"; fi
}

e2e_kite "$T/stdout" "$T/err" batch -m "$M" -f "$T/p.jsonl" -o "$T/out.jsonl" -n $N -B 3 --ignore-eos -q
if [ "$rc" -eq 0 ]; then check_out "batch -B 3" "$T/out.jsonl"; else e2e_fail "batch -B 3" "exit $rc: $(e2e_first_line "$T/err")"; fi
grep -q "^kite batch: 5 prompts, .* generated" "$T/err" && e2e_ok "batch summary line" ||
    e2e_fail "batch summary line" "$(tail -n 1 "$T/err")"
e2e_kite "$T/stdout" "$T/err" batch -m "$M" -f "$T/p.jsonl" -o "$T/out2.jsonl" -n $N -B 3 --ignore-eos -q \
    --mem-budget 500K
if [ "$rc" -eq 0 ]; then check_out "batch -B 3 --mem-budget 500K" "$T/out2.jsonl"
else e2e_fail "batch --mem-budget" "exit $rc: $(e2e_first_line "$T/err")"; fi
e2e_kite "$T/stdout" "$T/err" batch -m "$M" -f "$T/p.jsonl" -o "$T/out3.jsonl" -n $N -B 1 --ignore-eos -q
if [ "$rc" -eq 0 ]; then check_out "batch -B 1" "$T/out3.jsonl"; else e2e_fail "batch -B 1" "exit $rc: $(e2e_first_line "$T/err")"; fi
# -B auto (the default): the cost model picks B, prints it with its prediction; the outputs are the same
e2e_kite "$T/stdout" "$T/err" batch -m "$M" -f "$T/p.jsonl" -o "$T/out4.jsonl" -n $N --ignore-eos --mem-budget 500K
if [ "$rc" -eq 0 ]; then check_out "batch -B auto --mem-budget 500K" "$T/out4.jsonl"
else e2e_fail "batch -B auto" "exit $rc: $(e2e_first_line "$T/err")"; fi
pol=$(grep "^kite batch: policy B = " "$T/err")
pb=$(printf '%s\n' "$pol" | sed -n 's/^kite batch: policy B = \([0-9]*\) (cost model.*/\1/p')
if [ -n "$pb" ] && [ "$pb" -ge 1 ] && [ "$pb" -le 5 ] &&
    printf '%s\n' "$pol" | grep -q "MB streamed per pass at .* GB/s.*predicted [0-9.]* tok/s, decode .*-bound" &&
    grep -q "up to $pb in flight" "$T/err"; then
    e2e_ok "batch -B auto prints its policy (B = $pb of 5 prompts) with the prediction, and runs it"
else
    e2e_fail "batch -B auto policy line" "'$pol' / $(tail -n 1 "$T/err")"
fi
e2e_expect_error "batch: -B x" 2 "kite batch: -B: 'x' is not auto or a count in [1, 1024]" "" \
    batch -m "$M" -f "$T/p.jsonl" -o "$T/o5.jsonl" -B x
e2e_expect_error "batch: -B 0" 2 "kite batch: -B: '0' is not auto" "" batch -m "$M" -f "$T/p.jsonl" -o "$T/o5.jsonl" -B 0

# ---- errors: one line, no partial output -----------------------------------------

mkdir "$T/o"
echo old >"$T/o/keep.jsonl"
bad_input() { # NAME NEEDLE CONTENT
    printf '%s\n' "$3" >"$T/bad.jsonl"
    e2e_expect_error "batch: $1" 1 "kite batch: " "$2" batch -m "$M" -f "$T/bad.jsonl" -o "$T/o/keep.jsonl" -q
    if [ "$(cat "$T/o/keep.jsonl")" = old ] && [ "$(ls "$T/o")" = keep.jsonl ]; then
        e2e_ok "batch: $1 leaves the old output and no temporary file"
    else
        e2e_fail "batch: $1 output" "folder: $(ls "$T/o" | tr '\n' ' ') content: $(head -c 40 "$T/o/keep.jsonl")"
    fi
}
bad_input "a line that is not an object" "bad.jsonl:2: not a JSON object" '{"prompt": "a"}
[1, 2'
bad_input "no prompt" "bad.jsonl:1: \"prompt\" (a string) is missing" '{"text": "a"}'
bad_input "bad max_tokens" "bad.jsonl:1: \"max_tokens\" must be an integer" '{"prompt": "a", "max_tokens": 0}'
bad_input "no prompts" "bad.jsonl holds no prompts" ''
e2e_expect_error "batch: unreadable file" 1 "kite batch: cannot open '$T/none.jsonl'" "" \
    batch -m "$M" -f "$T/none.jsonl" -o "$T/o/x.jsonl"
e2e_expect_error "batch: missing output folder" 1 "kite batch: cannot create '$T/nodir/out.jsonl.tmp." "" \
    batch -m "$M" -f "$T/p.jsonl" -o "$T/nodir/out.jsonl" -n 2 -q
e2e_expect_error "batch: no -o" 2 "kite batch: missing -o" "" batch -m "$M" -f "$T/p.jsonl"
e2e_expect_error "batch: bad --mem-budget" 2 "kite batch: --mem-budget: " "not a size" \
    batch -m "$M" -f "$T/p.jsonl" -o "$T/o/y.jsonl" --mem-budget x
[ ! -e "$T/o/x.jsonl" ] && [ ! -e "$T/o/y.jsonl" ] && e2e_ok "batch: failed runs wrote nothing" ||
    e2e_fail "batch: failed runs" "output exists"

e2e_summary
