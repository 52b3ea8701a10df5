#!/bin/sh
# tests/acceptance/issue25_signals.sh [BUILD] - issue 25, item 7: no
# temporary file survives SIGINT/SIGTERM.  A TinyLlama-1.1B-shape F16 model
# from `kite synth` (SIG_LAYERS, default 22: 2.2 GB) is quantized to q4_0;
# once the writer's temporary file (OUT.tmp.<pid>.<n>) exists and has grown
# past 8 MB, the quantizer gets SIGINT (then, in a second run, SIGTERM): it
# must die of that signal and leave only the input in the folder.  The same
# for `kite synth` itself (interrupted while writing).  Prints "N passed,
# N failed".  Slow (the synth takes a minute or more): run by `make acceptance`.
set -u
build=${1:-build}
here=$(pwd)
KITE="$here/$build/kite"
[ -x "$KITE" ] || { echo "issue25_signals: $KITE not found (make first)" >&2; exit 1; }
LAYERS=${SIG_LAYERS:-22}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok    $1"; }
bad() { failed=$((failed + 1)); echo "  FAIL  $1"; }

# wait_tmp PID: until a *.tmp.* file over 8 MB exists in $T (or PID exits)
wait_tmp() {
    i=0
    while kill -0 "$1" 2>/dev/null && [ $i -lt 6000 ]; do
        f=$(find "$T" -name '*.tmp.*' -size +8M 2>/dev/null | head -n 1)
        [ -n "$f" ] && return 0
        sleep 0.05
        i=$((i + 1))
    done
    return 1
}

# interrupt NAME SIGNAL COMMAND...: run COMMAND, signal it mid-write, check
interrupt() {
    name=$1 sig=$2
    shift 2
    "$@" 2>"$T/log.txt" &
    pid=$!
    if ! wait_tmp $pid; then
        wait $pid
        bad "$name: no temporary file appeared while it ran"
        return
    fi
    kill -s "$sig" $pid
    wait $pid
    st=$?
    left=$(find "$T" -name '*.tmp.*' -o -name '*.smooth.*' | wc -l)
    case $sig in INT) want=130 ;; TERM) want=143 ;; *) want=-1 ;; esac
    if [ "$st" -eq "$want" ] && [ "$left" -eq 0 ] && [ ! -e "$T/out.gguf" ]; then
        ok "$name: $sig mid-write, exit $st, no temporary file"
    else
        bad "$name: $sig: exit $st (want $want), $left temporary file(s) left"
        ls -la "$T"
    fi
}

interrupt "synth" INT "$KITE" synth --shape tinyllama-1.1b --layers "$LAYERS" --type f16 -o "$T/out.gguf"
interrupt "synth" TERM "$KITE" synth --shape tinyllama-1.1b --layers "$LAYERS" --type f16 -o "$T/out.gguf"
"$KITE" synth --shape tinyllama-1.1b --layers "$LAYERS" --type f16 -o "$T/in.gguf" 2>/dev/null ||
    { echo "issue25_signals: synth failed" >&2; exit 1; }
interrupt "quantize q4_0" INT "$KITE" quantize -m "$T/in.gguf" -o "$T/out.gguf" --type q4_0
interrupt "quantize q4_0" TERM "$KITE" quantize -m "$T/in.gguf" -o "$T/out.gguf" --type q4_0
echo "issue25_signals: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
