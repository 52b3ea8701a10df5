#!/bin/sh
# tests/acceptance/issue25_gptq.sh [BUILD] - issue 25, item 1: GPTQ at real
# scale.  For one TinyLlama-1.1B layer and one LLaMA-2-7B layer shape
# (`kite synth --layers 1`, F16), `kite quantize --type q4_0 --method gptq`
# with GPTQ_TOKENS calibration tokens (default 512) of the bundled
# calibration text (repeated); the layer's time is from the quantizer's
# time report ("gptq: time ...": calibration pass, Hessians, factors and
# sweeps; the RTN of the embedding and the q6_K head, --allow-fallback, are
# not counted).
# Checks the 7B layer within GPTQ_7B_LIMIT seconds of wall time (default
# 120).  GPTQ_FULL=1 adds the full 22-layer F16 TinyLlama (GPTQ_FULL_MODEL,
# default /work/bench-models/tinyllama-f16.gguf, else a 22-layer synth)
# with 8192 tokens against GPTQ_FULL_LIMIT (default 900 s).  Prints the
# quantizer's time report and "N passed, N failed".  Run it on a calm
# machine: a loaded one stretches wall time (CPU seconds are printed too).
set -u
build=${1:-build}
here=$(pwd)
KITE="$here/$build/kite"
[ -x "$KITE" ] || { echo "issue25_gptq: $KITE not found (make first)" >&2; exit 1; }
TOKENS=${GPTQ_TOKENS:-512}
LIMIT7=${GPTQ_7B_LIMIT:-120}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
passed=0
failed=0
i=0
while [ $i -lt 64 ]; do cat "$here/tests/data/quant-calib/calib.txt"; i=$((i + 1)); done >"$T/calib.txt"

# layer_time LOG: "wall cpu" of the GPTQ work from the quantizer's "gptq: time" line: calibration
# passes + factors + row sweeps (wall), Hessian GEMMs + factors + sweeps (cpu; the forward passes'
# own CPU is not reported).  With one layer that is the layer (the head's calibration rows ride along).
layer_time() {
    sed -n 's/^gptq: time (wall \/ cpu): calibration passes \([0-9.]*\) s, of it Hessian GEMMs [0-9.]* \/ \([0-9.]*\) s.*factors \([0-9.]*\) \/ \([0-9.]*\) s.*row sweeps \([0-9.]*\) \/ \([0-9.]*\) s.*/\1 \2 \3 \4 \5 \6/p' "$1" |
        awk '{ printf "%.1f %.1f", $1 + $3 + $5, $2 + $4 + $6 }'
}

# run NAME SHAPE LIMIT: synth one layer of SHAPE, quantize it, check the layer time
run() {
    "$KITE" synth --shape "$2" --layers 1 --type f16 -o "$T/m.gguf" 2>/dev/null || { echo "synth $2 failed"; exit 1; }
    "$KITE" quantize -m "$T/m.gguf" -o "$T/q.gguf" --type q4_0 --method gptq --allow-fallback --calib "$T/calib.txt" \
        --calib-tokens "$TOKENS" -t 2 >/dev/null 2>"$T/log.txt"
    st=$?
    grep -E '^gptq: time|: [0-9.]+ s \(cpu' "$T/log.txt"
    set -- "$1" "$2" "$3" $(layer_time "$T/log.txt")
    if [ $st -eq 0 ] && awk -v w="$4" -v l="$3" 'BEGIN { exit !(w > 0 && w <= l) }'; then
        passed=$((passed + 1))
        echo "  ok    $1: one layer $4 s wall ($5 s cpu), limit $3 s ($TOKENS calibration tokens)"
    else
        failed=$((failed + 1))
        echo "  FAIL  $1: exit $st, one layer $4 s wall ($5 s cpu), limit $3 s"
    fi
    rm -f "$T/m.gguf" "$T/q.gguf"
}

run "tinyllama-1.1b layer" tinyllama-1.1b 120
run "llama2-7b layer (4096/11008)" llama2-7b "$LIMIT7"
if [ "${GPTQ_FULL:-0}" = 1 ]; then
    M=${GPTQ_FULL_MODEL:-/work/bench-models/tinyllama-f16.gguf}
    if [ ! -f "$M" ]; then
        "$KITE" synth --shape tinyllama-1.1b --type f16 -o "$T/full.gguf" 2>/dev/null
        M=$T/full.gguf
    fi
    t0=$(date +%s)
    "$KITE" quantize -m "$M" -o "$T/q.gguf" --type q4_0 --method gptq --allow-fallback --calib "$T/calib.txt" --calib-tokens 8192 \
        -t 2 >/dev/null 2>"$T/log.txt"
    st=$?
    dt=$(($(date +%s) - t0))
    grep -E '^gptq: time|^calibrate' "$T/log.txt"
    if [ $st -eq 0 ] && [ "$dt" -le "${GPTQ_FULL_LIMIT:-900}" ]; then
        passed=$((passed + 1)); echo "  ok    full 22-layer model, 8192 tokens: $dt s"
    else
        failed=$((failed + 1)); echo "  FAIL  full 22-layer model, 8192 tokens: exit $st, $dt s"
    fi
fi
echo "issue25_gptq: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
