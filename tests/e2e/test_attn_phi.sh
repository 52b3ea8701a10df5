#!/bin/sh
# tests/e2e/test_attn_phi.sh - `kite tune --attn-calib` and `kite bench
# --attn-ctx` on the bundled model (cli/tune_attn.c, cli/bench_attn.c,
# docs/attention.md "Choosing phi").
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this).  POSIX sh.  Under a second in all.
#
# What is checked:
#   * calibration on 400 tokens of a story writes a copy with
#     kite.attention.unified_max (one row per layer in the table, the summary
#     line), which kite info lists and which loads and generates the same
#     greedy text as the original (phi changes rounding only);
#   * without --attn-out the model itself is replaced (a copy here), and a
#     second calibration of a calibrated file works;
#   * kite bench --attn-ctx prints phi=0, calibrated and exact rows for each
#     context (JSON lines), counts chunks, and skips "calibrated" (saying so)
#     for a model without the key;
#   * errors: a missing text file, --attn-tokens out of range, --attn-ctx
#     without a model.
#
# The last line is "tests/e2e/test_attn_phi.sh: N passed, M failed".
set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
MODEL=models/stories260K.gguf
TEXT=$T/story.txt
# a story long enough for 400 tokens (rows of two split-KV chunks)
i=0
while [ $i -lt 12 ]; do
    printf 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tree and ran to get it. ' >>"$TEXT"
    i=$((i + 1))
done

e2e_kite "$T/out" "$T/err" tune -m "$MODEL" --attn-calib "$TEXT" --attn-out "$T/phi.gguf" --attn-tokens 400 -t 1
n_rows=$(grep -c '^| [0-9]* | [-0-9.]* |' "$T/out")
if [ "$rc" -eq 0 ] && [ "$n_rows" -eq 5 ] && grep -q '^rows outside the window .*storing per-\(layer\|head\) values$' "$T/out" &&
    grep -q 'wrote .*phi.gguf with kite.attention.unified_max' "$T/err"; then
    e2e_ok "tune --attn-calib writes the copy and a row per layer"
else
    e2e_fail "tune --attn-calib writes the copy and a row per layer" "exit $rc, $n_rows rows: $(e2e_first_line "$T/err")"
fi

e2e_kite "$T/info" "$T/err" info "$T/phi.gguf"
if [ "$rc" -eq 0 ] && grep -q 'kite.attention.unified_max' "$T/info"; then
    e2e_ok "kite info lists the key"
else
    e2e_fail "kite info lists the key" "exit $rc"
fi

e2e_kite "$T/a" "$T/err" run -m "$MODEL" -p "Once upon a time" -n 40 --temp 0 -t 1
e2e_kite "$T/b" "$T/err" run -m "$T/phi.gguf" -p "Once upon a time" -n 40 --temp 0 -t 1
if [ "$rc" -eq 0 ] && [ -s "$T/a" ] && cmp -s "$T/a" "$T/b"; then
    e2e_ok "the calibrated file generates the same greedy text"
else
    e2e_fail "the calibrated file generates the same greedy text" "exit $rc: $(e2e_first_line "$T/b")"
fi

cp "$MODEL" "$T/inplace.gguf"
e2e_kite "$T/out" "$T/err" tune -m "$T/inplace.gguf" --attn-calib "$TEXT" --attn-tokens 300 -t 1
e2e_kite "$T/out2" "$T/err2" tune -m "$T/inplace.gguf" --attn-calib "$TEXT" --attn-tokens 300 -t 1
e2e_kite "$T/info" "$T/err3" info "$T/inplace.gguf"
if [ "$rc" -eq 0 ] && grep -q 'kite.attention.unified_max' "$T/info" && grep -q 'wrote .*inplace.gguf' "$T/err2" &&
    [ -z "$(ls "$T" | grep 'inplace.gguf.tmp')" ]; then
    e2e_ok "without --attn-out the model is replaced, twice"
else
    e2e_fail "without --attn-out the model is replaced, twice" "exit $rc: $(e2e_first_line "$T/err2")"
fi

e2e_kite "$T/bench" "$T/err" bench -m "$T/phi.gguf" --attn-ctx 300,450 --attn-prefill 100 -f "$TEXT" -n 1 -r 2 -t 1 --json
n_lines=$(grep -c '^{"test":"attn","ctx":[0-9]*,"mode":"\(phi=0\|calibrated\|exact\)","attn_ms":[0-9.]*,.*"chunks":160,' "$T/bench")
if [ "$rc" -eq 0 ] && [ "$n_lines" -eq 6 ]; then
    e2e_ok "bench --attn-ctx: three modes per context, chunks counted"
else
    e2e_fail "bench --attn-ctx: three modes per context, chunks counted" "exit $rc, $n_lines lines: $(head -n 2 "$T/bench")"
fi

e2e_kite "$T/bench" "$T/err" bench -m "$MODEL" --attn-ctx 300 --attn-prefill 100 -n 1 -r 1 -t 1
if [ "$rc" -eq 0 ] && grep -q 'no kite.attention.unified_max (calibrated skipped)' "$T/err" &&
    grep -q '| 300 | phi=0 |' "$T/bench" && grep -q '| 300 | exact |' "$T/bench" && ! grep -q calibrated "$T/bench"; then
    e2e_ok "bench --attn-ctx without the key skips calibrated"
else
    e2e_fail "bench --attn-ctx without the key skips calibrated" "exit $rc: $(e2e_first_line "$T/err")"
fi

e2e_kite "$T/out" "$T/err" tune -m "$MODEL" --attn-calib "$T/missing.txt" --attn-out "$T/x.gguf"
if [ "$rc" -eq 1 ] && grep -q "cannot open '$T/missing.txt'" "$T/err" && [ ! -e "$T/x.gguf" ]; then
    e2e_ok "a missing calibration text"
else
    e2e_fail "a missing calibration text" "exit $rc: $(e2e_first_line "$T/err")"
fi
e2e_kite "$T/out" "$T/err" tune -m "$MODEL" --attn-calib "$TEXT" --attn-tokens 1
if [ "$rc" -eq 2 ] && grep -q -- '--attn-tokens' "$T/err"; then
    e2e_ok "--attn-tokens out of range"
else
    e2e_fail "--attn-tokens out of range" "exit $rc: $(e2e_first_line "$T/err")"
fi
e2e_kite "$T/out" "$T/err" bench --attn-ctx 300
if [ "$rc" -eq 2 ] && grep -q -- '-m FILE is required' "$T/err"; then
    e2e_ok "bench --attn-ctx without a model"
else
    e2e_fail "bench --attn-ctx without a model" "exit $rc: $(e2e_first_line "$T/err")"
fi

e2e_summary
