#!/bin/sh
# tests/acceptance/issue27_policy.sh [BUILD] - issue 27, item 4 (docs/offload.md, "kite batch"):
# the cost model's block size against a sweep.  On the 22-layer TinyLlama-1.1B shape
# (POL_TYPE, default q4_0; tests/acceptance/models.lib) under --mem-budget POL_BUDGET
# (default 512M), POL_N prompts (default 64) of 20-30 tokens with POL_GEN generated tokens
# each (default 32, --ignore-eos):
#   * `kite batch -B auto` prints its policy and prediction and runs it;
#   * the same prompts with -B 1, 2, 4, ... up to POL_N: the chosen B's measured tok/s is at
#     least POL_TOL (default 0.8) of the best measured one (the issue's "within 20%");
#   * every run's ids are the same (the block size changes the schedule, not the outputs).
# Page cache dropped before each run when root.  Slow (the B = 1 run alone generates POL_N x
# POL_GEN tokens from disk): run by `make acceptance`; speed needs a calm machine.
set -u
build=${1:-build}
here=$(pwd)
KITE="$build/kite"
[ -x "$KITE" ] || { echo "issue27_policy: $KITE not found (make first)" >&2; exit 1; }
. tests/acceptance/models.lib
TYPE=${POL_TYPE:-q4_0}
BUDGET=${POL_BUDGET:-512M}
N=${POL_N:-64}
GEN=${POL_GEN:-32}
TOL=${POL_TOL:-0.8}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok    $1"; }
bad() { failed=$((failed + 1)); echo "  FAIL  $1"; }

M=$(acc_tinyllama "$TYPE") || { echo "issue27_policy: cannot make the $TYPE model" >&2; exit 1; }
words="Once upon a time there was a little girl named Lily who loved to play in the park with her friends and the big dog"
i=0
while [ $i -lt "$N" ]; do
    # prompt i: the words rotated by i, 16 of them
    set -- $words
    k=0
    while [ $k -lt $((i % 20)) ]; do w=$1; shift; set -- "$@" "$w"; k=$((k + 1)); done
    echo "{\"prompt\": \"$1 $2 $3 $4 $5 $6 $7 $8 $9 ${10} ${11} ${12} ${13} ${14} ${15} ${16}\"}"
    i=$((i + 1))
done >"$T/p.jsonl"

drop() { [ "$(id -u)" -eq 0 ] && sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; true; }
# run NAME ARGS...: kite batch; prints its tok/s (empty on failure)
run() {
    _n=$1
    shift
    drop
    "$KITE" batch -m "$M" -f "$T/p.jsonl" -o "$T/$_n.jsonl" -n "$GEN" --ignore-eos --mem-budget "$BUDGET" "$@" \
        >"$T/$_n.out" 2>"$T/$_n.err" || { echo ""; return; }
    sed -n 's/^kite batch: .* generated in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' "$T/$_n.err"
}
ids() { sed 's/.*"ids": \(\[[^]]*\]\).*/\1/' "$1"; }

auto=$(run auto)
pol=$(grep "^kite batch: policy B = " "$T/auto.err")
ab=$(printf '%s\n' "$pol" | sed -n 's/^kite batch: policy B = \([0-9]*\) .*/\1/p')
if [ -n "$auto" ] && [ -n "$ab" ]; then
    ok "-B auto chose B = $ab and measured $auto tok/s:"
    echo "        $pol"
else
    bad "-B auto: $(tail -n 1 "$T/auto.err")"
fi
best=0
bestb=0
b=1
while :; do
    [ $b -gt "$N" ] && b=$N
    t=$(run "b$b" -B "$b" -q)
    if [ -z "$t" ]; then
        bad "-B $b: $(tail -n 1 "$T/b$b.err")"
    else
        echo "  note  -B $b: $t tok/s"
        if [ "$(echo "$t > $best" | bc)" -eq 1 ]; then best=$t; bestb=$b; fi
        if ids "$T/b$b.jsonl" | cmp -s - "$T/ids.ref" 2>/dev/null || { [ ! -f "$T/ids.ref" ] && ids "$T/b$b.jsonl" >"$T/ids.ref"; }; then :
        else bad "-B $b: ids differ from -B 1's"; fi
    fi
    [ $b -eq "$N" ] && break
    b=$((b * 2))
done
# judged on the sweep's own run of the chosen B (the same execution as -B auto's), measured in the
# same stretch of time as the others: on this project's VMs the disk alone varies by 2x between minutes
chosen=$(sed -n 's/^kite batch: .* generated in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1/p' "$T/b$ab.err" 2>/dev/null)
if [ -n "$chosen" ] && [ "$(echo "$chosen >= $TOL * $best" | bc)" -eq 1 ]; then
    ok "the chosen B = $ab ($chosen tok/s in the sweep, $auto as -B auto) is within $TOL of the best swept, B = $bestb ($best tok/s)"
else
    bad "the chosen B = $ab (${chosen:-not swept} tok/s in the sweep, $auto as -B auto) is below $TOL of the best swept, B = $bestb ($best tok/s)"
fi
if [ -f "$T/auto.jsonl" ] && ids "$T/auto.jsonl" | cmp -s - "$T/ids.ref"; then ok "-B auto's ids equal the sweep's"
else bad "-B auto's ids differ from the sweep's"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
