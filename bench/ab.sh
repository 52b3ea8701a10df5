#!/bin/sh
# bench/ab.sh KITE_A KITE_B MODEL... - two builds of kite side by side, in turns.
#
# For a change that must not change speed (a refactor), or one that should:
# each round runs `kite bench` once with build A and once with build B on
# every model (the order within a round alternates A,B / B,A, so that a drift
# of this shared machine hits both alike), one repetition each, and the
# medians over the rounds are printed with the ratio B/A:
#
#   model  test   A tok/s (min-max)   B tok/s (min-max)   B/A
#
# Environment (defaults): AB_ROUNDS (5), AB_THREADS (2), AB_P (128),
# AB_N (32), AB_OUT (a temporary folder: raw JSON lines, one file per build).
# Each `kite bench` keeps its own core-availability check (docs/bench.md).
# POSIX sh + awk.  Example (the baseline built in another worktree):
#   bench/ab.sh ../base/build/kite build/kite build/bench-models/tinyllama-q4_0.gguf
set -u
[ $# -ge 3 ] || { echo "usage: bench/ab.sh KITE_A KITE_B MODEL..." >&2; exit 2; }
a=$1 b=$2
shift 2
for k in "$a" "$b"; do [ -x "$k" ] || { echo "bench/ab.sh: $k is not an executable" >&2; exit 1; }; done
rounds=${AB_ROUNDS:-5}
threads=${AB_THREADS:-2}
np=${AB_P:-128}
ng=${AB_N:-32}
out=${AB_OUT:-$(mktemp -d)}
mkdir -p "$out" || exit 1
: >"$out/a.jsonl"
: >"$out/b.jsonl"

one() { # KITE MODEL OUTFILE
    "$1" bench -m "$2" -t "$threads" -p "$np" -n "$ng" -r 1 --json >>"$3" 2>>"$out/stderr.log"
}

r=1
while [ "$r" -le "$rounds" ]; do
    echo "bench/ab.sh: round $r of $rounds" >&2
    for m in "$@"; do
        if [ $((r % 2)) -eq 1 ]; then
            one "$a" "$m" "$out/a.jsonl"; one "$b" "$m" "$out/b.jsonl"
        else
            one "$b" "$m" "$out/b.jsonl"; one "$a" "$m" "$out/a.jsonl"
        fi
    done
    r=$((r + 1))
done

# median of each (model, test) per build, then the ratio
summ() { # FILE -> "model test median min max" lines
    awk '{
        m = $0; sub(/.*"model": "/, "", m); sub(/".*/, "", m)
        t = $0; sub(/.*"test": "/, "", t); sub(/".*/, "", t)
        v = $0; sub(/.*"tok_s": /, "", v); sub(/[,}].*/, "", v)
        print m, t, v
    }' "$1" | sort -k1,1 -k2,2 -k3,3g | awk '
        function flush() { if (n) { printf "%s %s %.2f %.2f %.2f\n", key1, key2, (n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2), x[1], x[n] } }
        { k = $1 " " $2; if (k != cur) { flush(); cur = k; key1 = $1; key2 = $2; n = 0 } x[++n] = $3 }
        END { flush() }'
}
summ "$out/a.jsonl" >"$out/a.txt"
summ "$out/b.jsonl" >"$out/b.txt"
echo "A: $a ($(cd "$(dirname "$a")/.." && git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "B: $b ($(cd "$(dirname "$b")/.." && git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "rounds $rounds, threads $threads, raw results in $out"
printf '%-28s %-6s %-24s %-24s %s\n' model test "A tok/s (min-max)" "B tok/s (min-max)" "B/A"
awk '{print $1 "/" $2, $3, $4, $5}' "$out/a.txt" | sort >"$out/a.key"
awk '{print $1 "/" $2, $3, $4, $5}' "$out/b.txt" | sort >"$out/b.key"
join "$out/a.key" "$out/b.key" |
    awk '{ split($1, k, "/"); printf "%-28s %-6s %8.2f (%.2f-%.2f)    %8.2f (%.2f-%.2f)    %.3f\n", k[1], k[2], $2, $3, $4, $5, $6, $7, ($2 > 0 ? $5 / $2 : 0) }'
