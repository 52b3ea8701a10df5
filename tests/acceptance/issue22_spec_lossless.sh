#!/bin/sh
# tests/acceptance/issue22_spec_lossless.sh [BUILD] - issue 22, item 1:
# speculative decoding is lossless on quantized models at full scale.
#   1. `test_scale --full`: the scale tier of make test at its full size (4-layer
#      TinyLlama-shape q4_0, q8_0, q4_K_M and f16 models; 10 prompts x 128
#      greedy tokens; every drafter against plain greedy; verify passes,
#      chunked and batched prefill and 1-3 threads bit-identical to plain
#      decode, at every CPU level this machine runs).  One check.
#   2. `kite bench --spec D` passes its own losslessness check (exit 0, no
#      "DIFFERS") on the 22-layer TinyLlama-1.1B shape at Q8_0, Q4_0 and
#      Q4_K_M for every drafter D: lookup 3, lookahead 8,4,8, skip 8-13 (self-
#      speculative) and draft (the 4-layer q4_0 model).  12 checks.
# Models: /work/bench-models/tinyllama-TYPE.gguf when present (SPEC_MODELS
# overrides the folder), else synthesized into $BUILD/spec-models (kept for
# reruns; a 22-layer q4_K_M takes about 11 minutes to make).  SPEC_N (64)
# tokens, SPEC_THREADS (2), SPEC_TYPES (q8_0 q4_0 q4_k_m), SPEC_PARTS ("scale
# bench": which of 1. and 2. to run; a part not run counts neither way).
# Prints "N passed, N failed".  Slow: tens of minutes (part 1 is about 40
# minutes of CPU; each 22-layer bench loads a 0.6-1.2 GB file).
set -u
build=${1:-build}
here=$(pwd)
KITE="$here/$build/kite"
[ -x "$KITE" ] || { echo "issue22_spec_lossless: $KITE not found (make first)" >&2; exit 1; }
[ -x "$build/tests/test_scale" ] || { echo "issue22_spec_lossless: $build/tests/test_scale not found (make test first)" >&2; exit 1; }
N=${SPEC_N:-64}
THREADS=${SPEC_THREADS:-2}
MODELS=${SPEC_MODELS:-/work/bench-models}
SCALE=${KITE_SCALE_DIR:-build/scale}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
XDG_CACHE_HOME=$T/cache
export XDG_CACHE_HOME
passed=0
failed=0
ok() { echo "  ok    $1"; passed=$((passed + 1)); }
bad() { echo "  FAIL  $1"; failed=$((failed + 1)); }

PARTS=${SPEC_PARTS:-scale bench}
case " $PARTS " in *" scale "*) ;; *) SKIP_SCALE=1 ;; esac
for t in q4_0 q8_0 q4_k_m f16; do
    [ -f "$SCALE/tl4-$t.gguf" ] || "$KITE" synth --shape tinyllama-1.1b --type "$t" --layers 4 \
        -o "$SCALE/tl4-$t.gguf" >/dev/null 2>&1 || { bad "synth $SCALE/tl4-$t.gguf"; }
done
if [ -n "${SKIP_SCALE:-}" ]; then
    echo "  (test_scale --full not run: SPEC_PARTS=$PARTS)"
elif KITE_SCALE_DIR=$SCALE "$build/tests/test_scale" --full >"$T/scale.log" 2>&1; then
    ok "test_scale --full ($(tail -n 1 "$T/scale.log"))"
else
    cat "$T/scale.log"
    bad "test_scale --full"
fi

model() { # TYPE -> path of a 22-layer model of that type
    if [ -f "$MODELS/tinyllama-$1.gguf" ]; then
        echo "$MODELS/tinyllama-$1.gguf"
        return
    fi
    mkdir -p "$here/$build/spec-models"
    f="$here/$build/spec-models/tinyllama-$1.gguf"
    [ -f "$f" ] || "$KITE" synth --shape tinyllama-1.1b --type "$1" -o "$f" >/dev/null 2>&1 || return 1
    echo "$f"
}

case " $PARTS " in *" bench "*) TYPES=${SPEC_TYPES:-q8_0 q4_0 q4_k_m} ;; *) TYPES= ;; esac
for t in $TYPES; do
    m=$(model "$t") || { bad "synth tinyllama-$t"; continue; }
    for d in "lookup 3" "lookahead 8,4,8" "skip 8-13" "draft $SCALE/tl4-q4_0.gguf"; do
        # shellcheck disable=SC2086 # the drafter is two words on purpose
        "$KITE" bench -m "$m" --spec $d -f bench/copy_prompt.txt -n "$N" -r 1 -t "$THREADS" >"$T/b.out" 2>"$T/b.err"
        rc=$?
        name="kite bench --spec ${d%% *} on $(basename "$m")"
        if [ "$rc" -eq 0 ] && ! grep -q DIFFERS "$T/b.out" "$T/b.err"; then
            ok "$name: $(sed -n 's/.*; \(acceptance .*passes\).*/\1/p' "$T/b.out" | head -n 1)"
        else
            cat "$T/b.out" "$T/b.err"
            bad "$name (status $rc)"
        fi
    done
done
echo "issue22_spec_lossless: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
