#!/bin/sh
# bench/run.sh BUILD_DIR - the standard benchmark set behind `make bench`.
#
# 1. measures the machine (kite bench --probe: read bandwidth per thread
#    count, FP32 FMA peak) so every figure of the run has the same reference;
# 2. synthesizes the benchmark models once into $BENCH_MODELS (outside git,
#    default BUILD_DIR/bench-models): the TinyLlama-1.1B shape at every type in
#    $BENCH_TYPES.  A type kite cannot quantize to yet is skipped with a note;
# 3. runs `kite bench --json` on each (-t 2, plus -t 1 for $BENCH_T1_TYPES)
#    and on the bundled stories260K model (-t 1 and 2); for $BENCH_MMAP_TYPES
#    also with --mmap (weight residency: heap vs file mapping);
# 4. optionally, with LLAMA_BENCH=/path/to/llama-bench (an existing build; this
#    script never builds llama.cpp), runs llama-bench on the same files in the
#    same session, with -mmp 0 and with its default mmap (a probe before each
#    model gives its roofline).  kite's 2-thread run and llama-bench -mmp 0
#    take turns, one repetition each (-r 1), so that a drift of the machine
#    between them hits both engines alike; render.sh takes the medians;
# 5. optionally, with LLAMA2C=/path/to/run (a built karpathy/llama2.c `run`;
#    never built here) and stories260K.bin and tok512.bin in $LLAMA2C_DIR
#    (default: the binary's folder), times llama2.c's greedy decode of
#    $LLAMA2C_N tokens on the stories260K model against kite's on the bundled
#    GGUF copy, one thread, in turns, $LLAMA2C_REPS times each;
# 6. rewrites the generated part of $BENCH_OUT (default BENCHMARKS.md), between
#    the "bench:begin" and "bench:end" markers, with bench/render.sh.
#    Hand-written text outside the markers is kept.
#
# Environment (defaults): BENCH_LAYERS (22: the full model), BENCH_REPS (3),
# BENCH_TYPES ("f32 f16 bf16 q8_0 q4_0 q4_k_m"), BENCH_T1_TYPES ("f16 q4_0"),
# BENCH_MMAP_TYPES ("f32 f16"),
# BENCH_P (128), BENCH_N (32), BENCH_MODELS, BENCH_OUT, LLAMA_BENCH, LLAMA2C,
# LLAMA2C_DIR, LLAMA2C_N (256), LLAMA2C_REPS (5).
# POSIX sh + awk; no python.  Results stay in $BENCH_MODELS/results.jsonl.
set -u
build=${1:-build}
KITE=$build/kite
models=${BENCH_MODELS:-$build/bench-models}
layers=${BENCH_LAYERS:-22}
reps=${BENCH_REPS:-3}
types=${BENCH_TYPES:-f32 f16 bf16 q8_0 q4_0 q4_k_m}
t1_types=${BENCH_T1_TYPES:-f16 q4_0}
mmap_types=${BENCH_MMAP_TYPES:-f32 f16}
np=${BENCH_P:-128}
ng=${BENCH_N:-32}
out=${BENCH_OUT:-BENCHMARKS.md}
llama_bench=${LLAMA_BENCH:-}
llama2c=${LLAMA2C:-}
llama2c_dir=${LLAMA2C_DIR:-$(dirname "${llama2c:-.}")}
llama2c_n=${LLAMA2C_N:-256}
llama2c_reps=${LLAMA2C_REPS:-5}

[ -x "$KITE" ] || { echo "bench/run.sh: $KITE not found (run make first)" >&2; exit 1; }
mkdir -p "$models" || exit 1
res=$models/results.jsonl
meta=$models/meta.txt
: >"$res"

# ---- the session: when, what, how loaded ------------------------------------
{
    echo "date $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
    echo "compiler $(${CC:-cc} --version 2>/dev/null | head -n 1)"
    echo "load_before $(cut -d ' ' -f 1-3 /proc/loadavg 2>/dev/null)"
    echo "nproc $(nproc 2>/dev/null)"
    echo "layers $layers"
    echo "reps $reps"
    if [ -n "$llama_bench" ] && [ -x "$llama_bench" ]; then
        echo "paired 1"
        lcommit=$(git -C "$(dirname "$llama_bench")/../.." rev-parse HEAD 2>/dev/null || echo unknown)
        echo "llama_commit $lcommit"
    fi
    if [ -n "$llama2c" ] && [ -x "$llama2c" ]; then
        echo "llama2c_commit $(git -C "$(dirname "$llama2c")" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    fi
} >"$meta"

echo "bench: probing the machine" >&2
"$KITE" bench --probe --json >>"$res" || exit 1

# ---- models ------------------------------------------------------------------
bench_one() { # FILE THREADS REPS [--mmap]
    echo "bench: kite bench -m $1 -t $2 -r $3 ${4:-}" >&2
    # shellcheck disable=SC2086 # ${4:-} is an optional flag
    "$KITE" bench -m "$1" -t "$2" -r "$3" -p "$np" -n "$ng" --json ${4:-} >>"$res" ||
        echo "note kite bench failed on $(basename "$1") -t $2 ${4:-}" >>"$meta"
}

# llama.cpp side by side (optional, existing binary only)
have_llama() { [ -n "$llama_bench" ] && [ -x "$llama_bench" ]; }
llama_one() { # FILE MMP REPS
    echo "bench: llama-bench -m $1 -t 2 -mmp $2 -r $3" >&2
    "$llama_bench" -m "$1" -t 2 -p "$np" -n "$ng" -r "$3" -mmp "$2" -o jsonl 2>/dev/null |
        sed 's/^{/{"engine": "llama.cpp", /' >>"$res"
}

# kite -t 2 and llama-bench -mmp 0 in turns, one repetition each (without
# llama.cpp: one kite run of all the repetitions)
pair_runs() { # FILE
    if ! have_llama; then
        bench_one "$1" 2 "$reps"
        return
    fi
    i=0
    while [ "$i" -lt "$reps" ]; do
        bench_one "$1" 2 1
        llama_one "$1" 0 1
        i=$((i + 1))
    done
}

files=
for t in $types; do
    f=$models/tinyllama-1.1b-L$layers-$t.gguf
    if [ ! -f "$f" ]; then
        echo "bench: kite synth --shape tinyllama-1.1b --layers $layers --type $t" >&2
        if ! "$KITE" synth --shape tinyllama-1.1b --layers "$layers" --type "$t" -o "$f" >/dev/null 2>"$models/synth.err"; then
            echo "note skipped $t: $(head -n 1 "$models/synth.err")" >>"$meta"
            continue
        fi
    fi
    files="$files $f"
    # this VM's read bandwidth drifts by 2x within minutes: probe again, so
    # the model's roofline and the kite / llama.cpp pair are measured together
    "$KITE" bench --probe --json >>"$res" || exit 1
    pair_runs "$f"
    for t1 in $t1_types; do
        [ "$t1" = "$t" ] && bench_one "$f" 1 "$reps"
    done
    for tm in $mmap_types; do
        [ "$tm" = "$t" ] && bench_one "$f" 2 "$reps" --mmap
    done
    have_llama && llama_one "$f" 1 "$reps"
done
if [ -f models/stories260K.gguf ]; then
    echo "bench: kite bench -m models/stories260K.gguf -t 1,2" >&2
    "$KITE" bench -m models/stories260K.gguf -t 1,2 -r 5 -p "$np" -n "$ng" --json >>"$res"
fi

# stories260K against llama2.c, one thread, in turns (optional, existing binary only)
if [ -n "$llama2c" ] && [ -f models/stories260K.gguf ]; then
    if [ ! -x "$llama2c" ] || [ ! -f "$llama2c_dir/stories260K.bin" ] || [ ! -f "$llama2c_dir/tok512.bin" ]; then
        echo "note llama2.c skipped: need an executable $llama2c and stories260K.bin, tok512.bin in $llama2c_dir" >>"$meta"
    else
        i=0
        while [ "$i" -lt "$llama2c_reps" ]; do
            echo "bench: kite bench -m models/stories260K.gguf -t 1 -p 0 -n $llama2c_n; llama2.c run -n $llama2c_n" >&2
            "$KITE" bench -m models/stories260K.gguf -t 1 -r 1 -p 0 -n "$llama2c_n" --json >>"$res"
            # llama2.c prints "achieved tok/s: X" on stderr (greedy: -t 0)
            ts=$(cd "$llama2c_dir" && "$llama2c" stories260K.bin -z tok512.bin -t 0 -n "$llama2c_n" 2>&1 >/dev/null |
                sed -n 's/^achieved tok\/s: *\([0-9.]*\).*/\1/p')
            if [ -n "$ts" ]; then
                echo "{\"engine\": \"llama2.c\", \"test\": \"tg$llama2c_n\", \"threads\": 1, \"tok_s\": $ts}" >>"$res"
            else
                echo "note llama2.c printed no 'achieved tok/s' line (run $i)" >>"$meta"
            fi
            i=$((i + 1))
        done
    fi
fi

echo "load_after $(cut -d ' ' -f 1-3 /proc/loadavg 2>/dev/null)" >>"$meta"

# ---- BENCHMARKS.md -----------------------------------------------------------
gen=$models/generated.md
sh bench/render.sh "$res" "$meta" >"$gen" || exit 1
if [ -f "$out" ] && grep -q '<!-- bench:begin -->' "$out" && grep -q '<!-- bench:end -->' "$out"; then
    awk -v gen="$gen" '
        /<!-- bench:begin -->/ { print; while ((getline l < gen) > 0) print l; skip = 1; next }
        /<!-- bench:end -->/ { skip = 0 }
        !skip { print }' "$out" >"$out.tmp" && mv "$out.tmp" "$out"
else
    { echo "# Benchmarks"; echo; echo "<!-- bench:begin -->"; cat "$gen"; echo "<!-- bench:end -->"; } >"$out"
fi
echo "bench: wrote $out (raw results: $res)" >&2
