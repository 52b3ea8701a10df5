#!/bin/sh
# tests/acceptance/issue22_phi.sh [BUILD] - issue 22, item 4: FlashDecoding++'s
# unified maximum, calibrated.  On the TinyLlama-1.1B shape (Q8_0):
#   1. `kite tune --attn-calib TEXT` (1024 tokens of a story) writes a copy of
#      the model with kite.attention.unified_max;
#   2. `kite bench --attn-ctx 1024,4096,16384` on that copy: at 4096
#      positions the calibrated values send under 1% of the chunks off the
#      unified path (recomputation);
#   3. at 4096 and 16384 positions split-KV decode attention with the
#      calibrated values is faster (median) than with phi = 0.
# The figures of every context and mode are printed (the report's table).
#
# Environment (defaults): PHI_MODEL (/work/bench-models/tinyllama-q8_0.gguf
# when it exists, else synthesized once with `kite synth --shape
# tinyllama-1.1b --type q8_0` into $BUILD/roofline-models), PHI_TEXT
# (../shared/golden/tinystories-valid-sample.txt), PHI_THREADS (2), PHI_REPS
# (3), PHI_STEPS (2).  Speed checks need a calm machine (uptime well under the
# CPU count): under load the medians are noise.  Prints "N passed, N failed".
# Slow (minutes: a 1024-token calibration, a 1.1 GB copy, a 512-token
# prefill, 16k-position decode steps): run by `make acceptance`.
set -u
build=${1:-build}
here=$(pwd)
KITE="$here/$build/kite"
[ -x "$KITE" ] || { echo "issue22_phi: $KITE not found (make first)" >&2; exit 1; }
THREADS=${PHI_THREADS:-2}
REPS=${PHI_REPS:-3}
STEPS=${PHI_STEPS:-2}
TEXT=${PHI_TEXT:-$here/../shared/golden/tinystories-valid-sample.txt}
MODEL=${PHI_MODEL:-}
. "$here/tests/acceptance/models.lib"
[ -n "$MODEL" ] || MODEL=$(acc_tinyllama q8_0) || exit 1
[ -f "$TEXT" ] || { echo "issue22_phi: calibration text $TEXT not found (PHI_TEXT)" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok    $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL  $1: $2"; }
echo "issue22_phi: $MODEL, $TEXT, $THREADS threads; uptime: $(uptime)"

if "$KITE" tune -m "$MODEL" --attn-calib "$TEXT" --attn-out "$T/phi.gguf" --attn-tokens 1024 -t "$THREADS" \
    >"$T/calib.out" 2>"$T/calib.err"; then
    ok "tune --attn-calib"
    tail -n 1 "$T/calib.out"
else
    fail "tune --attn-calib" "$(head -n 1 "$T/calib.err")"
    echo "$passed passed, $failed failed"
    exit 1
fi

"$KITE" bench -m "$T/phi.gguf" --attn-ctx 1024,4096,16384 -f "$TEXT" --attn-prefill 512 -n "$STEPS" -r "$REPS" \
    -t "$THREADS" --json >"$T/bench.json" 2>"$T/bench.err" || {
    fail "bench --attn-ctx" "$(head -n 1 "$T/bench.err")"
    echo "$passed passed, $failed failed"
    exit 1
}
cat "$T/bench.json"

# field CTX MODE NAME: a number from the JSON line of (CTX, MODE)
field() {
    grep "\"ctx\":$1,\"mode\":\"$2\"" "$T/bench.json" | sed -n "s/.*\"$3\":\([-+.0-9eE]*\)[,}].*/\1/p" | head -n 1
}

pct=$(field 4096 calibrated recompute_pct)
if [ -n "$pct" ] && awk -v p="$pct" 'BEGIN { exit !(p < 1.0) }'; then
    ok "recomputation at 4096 with calibrated phi: $pct% of chunks (< 1%)"
else
    fail "recomputation at 4096 with calibrated phi" "${pct:-missing}% of chunks"
fi

for ctx in 4096 16384; do
    a=$(field $ctx calibrated attn_ms)
    b=$(field $ctx phi=0 attn_ms)
    if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { exit !(a < b) }'; then
        ok "decode attention at $ctx: calibrated $a ms < phi=0 $b ms"
    else
        fail "decode attention at $ctx faster than phi=0" "calibrated ${a:-?} ms, phi=0 ${b:-?} ms"
    fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
