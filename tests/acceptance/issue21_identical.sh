#!/bin/sh
# tests/acceptance/issue21_identical.sh [BUILD] - issue 21's "no behaviour
# changes": the outputs of this tree's kite are byte-identical to those of a
# baseline kite built from the commit before the refactor.
#
# What is compared (every output file and stdout, byte for byte; the stderr
# statistics lines hold timings and are left out):
#   - greedy text and --json ids, and --dump-logits of every position, for the
#     bundled model, BabyLlama-936K and TinyStories-656K (converted here), the
#     llama.cpp-written stories260K quantized files, and synthetic 2-layer
#     models of every architecture kite synthesizes (llama, mistral, mixtral,
#     qwen2, qwen3, qwen3moe, gpt2, llama3) at f16, q8_0, q4_0 and q4_k_m;
#     at every kernel level this CPU has (KITE_CPU_LEVEL);
#   - a sampled run (--seed), speculative runs (--lookup, --draft-skip-layers);
#   - the bytes of files written by kite synth, kite convert (llama2.c and
#     Hugging Face) and kite quantize (types, mixes, GPTQ, AWQ);
#   - kite tokenize ids and kite ppl's figures.
# The baseline: KITE_BASE=/path/to/kite, else built from BASE_REV (default
# 2990788, the last commit before issue 21) in a temporary git worktree.
# Runs in a temporary folder; prints "N passed, N failed" like the e2e tests.
# Slow (several minutes): run by `make acceptance`, not by `make test`.
set -u
build=${1:-build}
here=$(pwd)
KITE="$here/$build/kite"
[ -x "$KITE" ] || { echo "issue21_identical: $KITE not found (make first)" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"; [ -n "${wt:-}" ] && git -C "$here" worktree remove --force "$wt" 2>/dev/null' EXIT INT TERM
SHARED=${KITE_SHARED:-$here/../shared/models}

base=${KITE_BASE:-}
if [ -z "$base" ]; then
    rev=${BASE_REV:-2990788}
    wt=$T/base-src
    git -C "$here" worktree add -q --detach "$wt" "$rev" || exit 1
    echo "issue21_identical: building the baseline $rev" >&2
    make -C "$wt" -j"$(nproc)" build/kite >"$T/base-build.log" 2>&1 || { tail -n 20 "$T/base-build.log"; exit 1; }
    base=$wt/build/kite
fi
export KITE_TUNE=off  # built-in variants in both builds

passed=0 failed=0
ok() { passed=$((passed + 1)); echo "  ok    $1"; }
bad() { failed=$((failed + 1)); echo "  FAIL  $1"; }

# same NAME ARGS...: runs both builds with ARGS (the token @OUT@ stands for an
# output file, one per build; @PURE@ is --pure for this tree only; @A|B@ is A
# for the baseline and B for this tree), compares stdout and the output file.
same() {
    name=$1
    shift
    for side in a b; do
        k=$base
        [ "$side" = b ] && k=$KITE
        out=$T/out  # one path for both builds: some commands print it
        rm -f "$out" "$T/$side.out"
        args=""
        for x in "$@"; do
            [ "$x" = @OUT@ ] && x=$out
            case "$x" in
            @*'|'*@) # a per-build spelling of one argument
                x=${x#@}
                x=${x%@}
                if [ "$side" = a ]; then x=${x%%|*}; else x=${x#*|}; fi
                ;;
            esac
            if [ "$x" = @PURE@ ]; then
                # issue 28 gave --type llama-quantize's meaning (a mix); the
                # baseline's --type (every matrix one type) is --pure now
                [ "$side" = b ] && args="$args --pure"
                continue
            fi
            args="$args '$(printf '%s' "$x" | sed "s/'/'\\\\''/g")'"
        done
        # (a closing ", 1.2 s" of kite synth's summary line is a timing)
        eval "\"$k\" $args" >"$T/$side.raw" 2>"$T/$side.stderr"
        echo $? >"$T/$side.rc"
        sed -E 's/, [0-9]+\.[0-9]+ s$//' "$T/$side.raw" >"$T/$side.stdout"
        [ -f "$out" ] && mv "$out" "$T/$side.out"
    done
    if ! cmp -s "$T/a.rc" "$T/b.rc"; then
        bad "$name (exit status $(cat "$T/a.rc") vs $(cat "$T/b.rc"))"
    elif ! cmp -s "$T/a.stdout" "$T/b.stdout"; then
        bad "$name (stdout differs)"
    elif [ -f "$T/a.out" ] && ! cmp -s "$T/a.out" "$T/b.out"; then
        bad "$name (output file differs)"
    elif [ "$(cat "$T/a.rc")" != 0 ]; then
        bad "$name (both failed: $(head -n 1 "$T/b.stderr"))"
    else
        ok "$name"
    fi
}
# like same, but drops the timing fields of a --json line
# and the KV-cache size this tree adds at the end (27b64b2, issue 22's window ring)
json_strip() { sed -E 's/"(prefill_tok_s|decode_tok_s|load_ms)": [0-9.e+-]+/"\1": 0/g; s/, "kv_bytes": [0-9]+\}/}/'; }

# Issue 30 (Dec 2) moved the matmuls of q4_1, q5_0, q5_1 and iq4_nl weights off the
# generic path, which took f32 activations, onto integer kernels against q8_0
# activations (llama.cpp's arithmetic; tests/acceptance/issue30_kernels.sh checks them
# against a baseline within a tolerance): a model that multiplies by such a tensor has
# other logits by design.  int_changed FILE is true for such a model.
int_changed() {
    "$KITE" info "$1" 2>/dev/null | awk '/^tensors:/ { t = 1; next }
        t && $1 ~ /^[0-9]+$/ && $2 != "token_embd.weight" && $3 ~ /^(q4_1|q5_0|q5_1|iq4_nl)$/ { f = 1 }
        END { exit !f }'
}
same_json() {
    name=$1
    shift
    for side in a b; do
        k=$base
        [ "$side" = b ] && k=$KITE
        "$k" "$@" 2>/dev/null | json_strip >"$T/$side.json"
    done
    if cmp -s "$T/a.json" "$T/b.json" && [ -s "$T/b.json" ]; then ok "$name"; else bad "$name (--json output differs)"; fi
}

M=$here/models/stories260K.gguf
echo "== models"
"$KITE" convert "$SHARED/babyllama105/babyllama105.bin" --tokenizer "$SHARED/babyllama105/tok105.bin" -o "$T/baby.gguf" >/dev/null 2>&1 ||
    bad "convert babyllama105"
"$KITE" convert --hf "$SHARED/tinystories656k-hf" -o "$T/ts656k.gguf" >/dev/null 2>&1 || echo "  note  tinystories656k-hf does not import here (issue 22)"
models="$M $T/baby.gguf"
[ -f "$T/ts656k.gguf" ] && models="$models $T/ts656k.gguf"
for f in "$SHARED"/stories260K-*.gguf "$SHARED"/tinystories656k-Q2_K-llamacpp.gguf; do
    [ -f "$f" ] && models="$models $f"
done
for shape in tiny-llama3 tiny-mistral tiny-mixtral tiny-qwen2 tiny-qwen3 tiny-qwen3moe tiny-gpt2; do
    for t in f16 q8_0 q4_0; do # (tiny rows of 64 fit no 256-block: no q4_k_m)
        same "synth $shape $t (file bytes)" synth --shape "$shape" --type "$t" -o @OUT@ -t 2
        [ -f "$T/b.out" ] && cp "$T/b.out" "$T/$shape-$t.gguf" && models="$models $T/$shape-$t.gguf"
    done
done
for t in q4_0 q4_k_m; do
    same "synth tinyllama-1.1b --layers 1 $t (file bytes)" synth --shape tinyllama-1.1b --layers 1 --type "$t" -o @OUT@ -t 2
    [ -f "$T/b.out" ] && cp "$T/b.out" "$T/tinyllama1-$t.gguf" && models="$models $T/tinyllama1-$t.gguf"
done

echo "== generation and logits"
for m in $models; do
    n=$(basename "$m")
    if int_changed "$m"; then
        echo "  note  $n multiplies by q4_1/q5_0/q5_1/iq4_nl weights (issue 30 changed their arithmetic): not compared"
        continue
    fi
    same_json "run greedy --json $n" run -m "$m" -p "Once upon a time" -n 48 --temp 0 --json -t 2
    same "dump-logits $n" run -m "$m" -p "Once upon a time" -n 12 --temp 0 -t 2 --dump-logits @OUT@
done
# a level above the CPU's is capped to it, which only repeats a case
# Issue 30 (Dec 4) repacks q4_0 weights at avx2 and avx512 too (the 16-row layout, another float
# order: test_x16.c holds it to its scalar reference bit for bit); the baseline kept them plain
# there, so at those two levels both sides run with KITE_REPACK=0, the plain kernels this tree
# still has unchanged (no other matrix of these models is repacked at those levels).
for l in scalar avx2 avx512 avx512vnni avx512bf16; do
    export KITE_CPU_LEVEL="$l"
    case $l in avx2 | avx512) export KITE_REPACK=0 ;; *) unset KITE_REPACK ;; esac
    for m in "$M" "$T/tiny-qwen3moe-q4_0.gguf" "$T/tinyllama1-q4_k_m.gguf" "$T/tiny-llama3-q8_0.gguf" "$T/tiny-gpt2-q4_0.gguf"; do
        [ -f "$m" ] || continue
        same "dump-logits $(basename "$m") at $l, 1 thread" run -m "$m" -p "Once upon a time" -n 8 --temp 0 -t 1 --dump-logits @OUT@
    done
done
unset KITE_CPU_LEVEL KITE_REPACK
same_json "sampled run (seed 7)" run -m "$M" -p "Once upon a time" -n 64 --temp 0.9 --seed 7 --json -t 2
same_json "lookup speculation" run -m "$M" -p "Once upon a time" -n 64 --temp 0 --lookup 3 --json -t 2
same_json "self-speculation" run -m "$M" -p "Once upon a time" -n 64 --temp 0 --draft-skip-layers 2,3 --json -t 2
same_json "kv f16" run -m "$M" -p "Once upon a time" -n 64 --temp 0 --kv-type f16 --json -t 2
for kv in q8_0 q4_0; do
    same "kv $kv dump-logits (tinyllama shape, 1 layer)" run -m "$T/tinyllama1-q4_0.gguf" -p "Once upon a time" -n 16 --temp 0 --kv-type "$kv" -t 2 --dump-logits @OUT@
done

echo "== files"
same "convert llama2.c stories260K" convert "$here/tests/data/convert/stories260K.bin" --tokenizer "$SHARED/tok512.bin" -o @OUT@
same "convert llama2.c babyllama105" convert "$SHARED/babyllama105/babyllama105.bin" --tokenizer "$SHARED/babyllama105/tok105.bin" -o @OUT@
# The baseline predates issue 22's import of lm_head-only tied embeddings:
# where it cannot convert the directory there is nothing to compare (the
# converted file is checked by its golden ids in tests/e2e/test_hf_convert.sh).
if [ -f "$T/ts656k.gguf" ] && "$base" convert --hf "$SHARED/tinystories656k-hf" -o "$T/ts656k-base.gguf" >/dev/null 2>&1; then
    same "convert --hf tinystories656k" convert --hf "$SHARED/tinystories656k-hf" -o @OUT@
else
    echo "  note  the baseline cannot import tinystories656k-hf (a later fix): not compared"
fi
for t in q4_0 q4_1 q5_0 q8_0 q2_k q6_k iq4_nl iq4_xs tq2_0 bf16; do
    same "quantize --type $t" quantize -m "$M" -o @OUT@ --type "$t" @PURE@ -t 2
done
# issue 28: llama-quantize's Q3_K, Q4_K, Q5_K name its _M mixes, so the baseline's
# all-q3_K/q4_K/q5_K files (file_type 11, 14, 16) are this tree's _S --pure ones
for t in q3_k q4_k q5_k; do
    same "quantize --type $t (here ${t}_s --pure)" quantize -m "$M" -o @OUT@ --type "@$t|${t}_s@" @PURE@ -t 2
done
for x in q4_k_m q3_k_m q5_k_s q6_k; do
    same "quantize --mix $x" quantize -m "$M" -o @OUT@ --mix "$x" -t 2
done
CAL=$here/tests/data/quant-calib
cal=$(ls "$CAL"/*.txt 2>/dev/null | head -n 1)
if [ -n "$cal" ]; then
    same "quantize gptq q4_0" quantize -m "$M" -o @OUT@ --type q4_0 @PURE@ --method gptq --calib "$cal" --calib-tokens 512 -t 2
    same "quantize awq q4_0" quantize -m "$M" -o @OUT@ --type q4_0 @PURE@ --method awq --calib "$cal" --calib-tokens 512 -t 2
    same "ppl" ppl -m "$M" -f "$cal" -c 64 -t 2
fi
same "tokenize" tokenize -m "$M" "Once upon a time, Lily saw a big dog."

echo "issue21_identical: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
