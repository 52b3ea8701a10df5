#!/bin/sh
# tests/e2e/test_kv_type.sh - `--kv-type` of kite run / bench / ppl
# (quantized KV cache, docs/attention.md).
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this).  The bundled stories260K has head_dim 8, so:
#   * q8_0 / q4_0 are refused by run, ppl and bench: exit 1, one stderr line
#     naming head_dim (bench: its last stderr line, after the machine lines);
#   * f16 works with run (text printed, exit 0); --kv-type f32 prints exactly
#     the default run's text (the same bits);
#   * an unknown type is a usage error (exit 2, one line).
# Numbers for head_dim >= 32 models are in tests/unit/test_kv_quant.c.
#
# The last line is "tests/e2e/test_kv_type.sh: N passed, M failed".

set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
M=models/stories260K.gguf
TEXT=tests/data/eval/tinystories-valid-sample.txt
head -c 1500 "$TEXT" >"$T/short.txt"

for kv in q8_0 q4_0; do
    e2e_expect_error "run --kv-type $kv refused (head_dim 8)" 1 "kite run: " "head_dim" \
        run -m "$M" -p "Once" -n 4 --temp 0 --kv-type "$kv"
done
e2e_expect_error "ppl --kv-type q4_0 refused" 1 "kite ppl: " "multiple of 32" \
    ppl -m "$M" -f "$T/short.txt" -q --kv-type q4_0
# bench prints its machine lines on stderr first: check the exit and the last line
e2e_kite "$T/b.out" "$T/b.err" bench -m "$M" -p 0 -n 2 -r 1 --no-check --kv-type q8_0
if [ "$rc" -eq 1 ] && tail -n 1 "$T/b.err" | grep -q "^kite bench: .*multiple of 32"; then
    e2e_ok "bench --kv-type q8_0 refused"
else
    e2e_fail "bench --kv-type q8_0 refused" "exit $rc: $(tail -n 1 "$T/b.err" | cut -c 1-200)"
fi
e2e_expect_error "unknown --kv-type" 2 "kite run: " "q5_1" run -m "$M" --kv-type q5_1

e2e_kite "$T/f16.txt" "$T/f16.err" run -m "$M" -p "Once upon a time" -n 24 --temp 0 --kv-type f16
if [ "$rc" -eq 0 ] && grep -q "Once upon a time" "$T/f16.txt"; then
    e2e_ok "run --kv-type f16 works with head_dim 8"
else
    e2e_fail "run --kv-type f16 works with head_dim 8" "exit $rc: $(e2e_first_line "$T/f16.err")"
fi

e2e_kite "$T/def.txt" "$T/def.err" run -m "$M" -p "Once upon a time" -n 48 --temp 0
e2e_kite "$T/f32.txt" "$T/f32.err" run -m "$M" -p "Once upon a time" -n 48 --temp 0 --kv-type f32
if [ "$rc" -eq 0 ] && cmp -s "$T/def.txt" "$T/f32.txt"; then
    e2e_ok "run --kv-type f32 = default"
else
    e2e_fail "run --kv-type f32 = default" "exit $rc or different text"
fi

e2e_summary
