#!/bin/sh
# tests/acceptance/issue24_structured.sh [BUILD] - issue 24 (structured output), the
# checks too slow for make test:
#   1. `kite run --json-schema` on byte-level BPE vocabularies: tiny Llama 3 and Qwen3
#      shapes from `kite synth --vocab` (the real 128k / 152k vocabularies of
#      ../shared/models, random weights), temperature 1, STRUCT_SEEDS seeds each (5):
#      every output parses and validates with ajv (node, tests/e2e/.node) and ends by
#      the grammar;
#   2. the mask cost: `grammar_bench` (json-schema grammar, Llama 3 vocabulary, warm
#      cache) mean mask + masked-row time per token, against a TinyLlama-1.1B Q4_0
#      decode step from `kite bench` (/work/bench-models/tinyllama-q4_0.gguf, or
#      STRUCT_TINYLLAMA): at most 5%;
#   3. if STRUCT_LLAMA_HARNESS names a build of a harness timing llama.cpp's grammar
#      sampler over the full vocabulary (run as HARNESS VOCAB GBNF DOC, printing a JSON
#      line with mask_us_mean; not part of the repository), kite's mean mask + masked
#      row is at least 10x lower on the same grammar, document and vocabulary.
# Prints "N passed, N failed".  Minutes (two 17-20 MB model files are synthesized).
set -u
build=${1:-build}
here=$(pwd)
KITE="$here/$build/kite"
[ -x "$KITE" ] || { echo "issue24_structured: $KITE not found (make first)" >&2; exit 1; }
SEEDS=${STRUCT_SEEDS:-5}
TINY=${STRUCT_TINYLLAMA:-/work/bench-models/tinyllama-q4_0.gguf}
VOCABS=${STRUCT_VOCABS:-$here/../shared/models}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT INT TERM
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok    $1"; }
fail() { failed=$((failed + 1)); echo "  FAIL  $1: $2"; }
num() { sed -n "s/.*\"$2\": *\([-+.0-9eE]*\)[,}].*/\1/p" "$1" | head -n 1; }

NODE_DIR=${KITE_NODE_DIR:-$here/tests/e2e/.node}
cp tests/data/grammar/pet.schema.json "$T/schema.json" # a nested object, an enum with a non-ASCII value, bounds
for v in llama3:tiny-llama3 qwen3:tiny-qwen3; do
    voc=${v%%:*}
    shape=${v#*:}
    if ! "$KITE" synth --shape "$shape" --type q8_0 --vocab "$VOCABS/vocab-$voc.gguf" -o "$T/$voc.gguf" -t 2 \
        >"$T/synth.out" 2>&1; then
        fail "synth $shape --vocab $voc" "$(head -n 1 "$T/synth.out")"
        continue
    fi
    reports=
    bad=
    s=1
    while [ $s -le "$SEEDS" ]; do
        if "$KITE" run -m "$T/$voc.gguf" -p "Describe a pet:" -n 400 --temp 1.0 --seed $s --json \
            --json-schema "$T/schema.json" >"$T/r$s.out" 2>"$T/r$s.err"; then
            tail -n 1 "$T/r$s.out" >"$T/$voc-$s.json"
            reports="$reports $T/$voc-$s.json"
        else
            bad="$bad $s($(head -n 1 "$T/r$s.err"))"
        fi
        s=$((s + 1))
    done
    if [ -n "$bad" ]; then
        fail "kite run --json-schema ($voc BPE)" "runs failed:$bad"
    # shellcheck disable=SC2086
    elif KITE_NODE_DIR=$NODE_DIR node tests/e2e/validate_json.mjs "$T/schema.json" $reports >"$T/v.out" 2>&1; then
        ok "kite run --json-schema, $voc vocabulary (byte-level BPE), temperature 1: $(tail -n 1 "$T/v.out")"
    else
        fail "kite run --json-schema ($voc BPE) validates" "$(tail -n 2 "$T/v.out" | tr '\n' ' ')"
    fi
done

# 2. mask cost against a TinyLlama decode step
make -s BUILD="$build" "$build/grammar_bench" >/dev/null 2>&1
"$here/$build/grammar_bench" --reps 3 "$VOCABS/vocab-llama3.gguf" >"$T/gb.out" 2>"$T/gb.err"
grep '"json-schema"' "$T/gb.out" >"$T/gb.line"
mask=$(num "$T/gb.line" mask_us_mean)
apply=$(num "$T/gb.line" apply_us_mean)
if [ -f "$TINY" ] && [ -n "$mask" ]; then
    "$KITE" bench -m "$TINY" -p 0 -n 32 -r 2 -t 2 --json >"$T/bench.out" 2>"$T/bench.err"
    grep '"test": "tg' "$T/bench.out" | head -n 1 >"$T/tg.line"
    tg=$(num "$T/tg.line" tok_s)
    if [ -n "$tg" ] && awk -v m="$mask" -v a="$apply" -v tg="$tg" 'BEGIN { step = 1e6 / tg; exit !((m + a) <= 0.05 * step) }'; then
        ok "mask cost: $mask + $apply us per token vs a $(awk -v tg="$tg" 'BEGIN { printf "%.1f", 1e3 / tg }') ms TinyLlama Q4_0 step (<= 5%)"
    else
        fail "mask cost <= 5% of a TinyLlama step" "mask $mask us, apply $apply us, decode ${tg:-?} tok/s ($(head -n 1 "$T/bench.err"))"
    fi
else
    fail "mask cost" "no $TINY or no grammar_bench figure ($(head -n 1 "$T/gb.err"))"
fi

# 3. llama.cpp's grammar sampler, when a harness is given
if [ -n "${STRUCT_LLAMA_HARNESS:-}" ] && [ -x "$STRUCT_LLAMA_HARNESS" ]; then
    "$here/$build/grammar_bench" --print-schema >"$T/schema.gbnf" 2>"$T/doc.txt"
    "$STRUCT_LLAMA_HARNESS" "$VOCABS/vocab-llama3.gguf" "$T/schema.gbnf" "$T/doc.txt" 2 2>/dev/null | tail -n 1 >"$T/ll.out"
    ll=$(num "$T/ll.out" mask_us_mean)
    kite_us=$(awk -v m="$mask" -v a="$apply" 'BEGIN { print m + a }')
    if [ -n "$ll" ] && awk -v k="$kite_us" -v l="$ll" 'BEGIN { exit !(k > 0 && l >= 10 * k) }'; then
        ok "llama.cpp grammar sampler $ll us vs kite mask + row $kite_us us per token ($(awk -v k="$kite_us" -v l="$ll" 'BEGIN { printf "%.0f", l / k }')x)"
    else
        fail "10x faster than llama.cpp" "llama.cpp ${ll:-?} us, kite mask + row $kite_us us"
    fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
