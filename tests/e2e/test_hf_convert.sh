#!/bin/sh
# tests/e2e/test_hf_convert.sh - end-to-end tests of `kite convert --hf`.
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this).  POSIX sh.  The tiny Hugging Face directory (llama shape, 2 layers,
# SentencePiece-style tokenizer.json, two safetensors shards + index) is
# written by `$KITE_BUILD/tests/test_hf_convert --write-fixture DIR`.
#
# What is checked:
#   * f32, f16, q8_0 and the default type: exit 0, one summary line on stdout
#     naming the architecture, tokenizer and type; the output passes
#     `kite info` and `kite run` generates from it;
#   * f32 vs f16 outputs give close logits (--dump-logits);
#   * TinyStories-656K as Hugging Face tools save it (tests/data/hf-tinystories656k,
#     tied embeddings stored only as lm_head.weight), converted unchanged at the
#     default type (f16) and f32: `kite run --temp 0` gives the golden prompt ids
#     and 60 greedy ids of tests/data/golden/tinystories656k-greedy.jsonl;
#     `kite tokenize` parses its "<|start_story|>" text (and not with
#     --no-parse-special);
#   * errors: missing -o, a bad --type, --tokenizer with --hf, a stray
#     positional argument exit 2; a missing directory, a truncated shard and
#     an unsupported model_type exit 1; each with one stderr line
#     "kite convert: ..." naming the file; a failed conversion leaves no
#     output file.
#
# The last line is "tests/e2e/test_hf_convert.sh: N passed, M failed".

set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
D=$T/hf
FIX=$KITE_BUILD/tests/test_hf_convert
mkdir -p "$D"
if [ -x "$FIX" ] && "$FIX" --write-fixture "$D" >/dev/null 2>&1; then
    e2e_ok "fixture written"
else
    e2e_fail "fixture written" "$FIX --write-fixture failed (build the unit tests first)"
    e2e_summary
    exit 1
fi

# convert_ok NAME TYPE WANT: --type TYPE (empty = default) must succeed with
# one stdout line containing WANT.
convert_ok() {
    _name=$1
    _type=$2
    _want=$3
    _outf=$T/$_name.gguf
    if [ -n "$_type" ]; then
        e2e_kite "$T/out" "$T/err" convert --hf "$D" -o "$_outf" --type "$_type"
    else
        e2e_kite "$T/out" "$T/err" convert --hf "$D" -o "$_outf"
    fi
    if [ "$rc" -ne 0 ]; then
        e2e_fail "convert $_name" "exit $rc: $(e2e_first_line "$T/err")"
    elif ! e2e_one_line "$T/out" || ! grep -qF -e "$_want" "$T/out"; then
        e2e_fail "convert $_name" "stdout: $(e2e_first_line "$T/out")"
    elif [ -s "$T/err" ]; then
        e2e_fail "convert $_name" "unexpected stderr: $(e2e_first_line "$T/err")"
    else
        e2e_ok "convert $_name"
    fi
    e2e_kite "$T/out" "$T/err" info "$_outf" --no-tensors
    if [ "$rc" -eq 0 ] && grep -q 'tokenizer.ggml.model .*"llama"' "$T/out"; then
        e2e_ok "info $_name"
    else
        e2e_fail "info $_name" "exit $rc: $(e2e_first_line "$T/err")"
    fi
    e2e_kite "$T/out" "$T/err" run -m "$_outf" -p "ab a" -n 4 --temp 0 -t 1 --dump-logits "$T/$_name.f32"
    if [ "$rc" -eq 0 ] && [ -s "$T/$_name.f32" ]; then
        e2e_ok "run $_name"
    else
        e2e_fail "run $_name" "exit $rc: $(e2e_first_line "$T/err")"
    fi
}

convert_ok f32 f32 "(llama from llama: 2 layers, 265 tokens (llama), 21 tensors, f32)"
convert_ok f16 f16 "21 tensors, f16)"
convert_ok q8_0 q8_0 "21 tensors, q8_0)"
# default: the checkpoint's embedding is BF16, so bf16
convert_ok auto "" "21 tensors, bf16)"

# f16 rounding of weights in [-0.5, 0.5) moves these tiny logits by < 1e-2
set -- $(e2e_max_abs_diff "$T/f32.f32" "$T/f16.f32")
if [ "$1" -gt 0 ] && [ "$1" -eq "$2" ] && [ "$4" -eq 0 ] && awk -v d="$3" 'BEGIN { exit !(d < 1e-2) }'; then
    e2e_ok "f32 vs f16 logits (max diff $3)"
else
    e2e_fail "f32 vs f16 logits" "counts $1/$2, max diff $3, non-finite $4"
fi

expect_error() {
    _n=$1
    _s=$2
    shift 2
    e2e_expect_error "$_n" "$_s" "kite convert: " "$@"
}
expect_error "missing -o" 2 "-o OUT.gguf is required" convert --hf "$D"
expect_error "bad --type" 2 "--type: expected f32, f16, bf16 or q8_0, got 'q4_0'" convert --hf "$D" -o "$T/x.gguf" --type q4_0
expect_error "--tokenizer with --hf" 2 "--tokenizer is for llama2.c checkpoints" convert --hf "$D" -o "$T/x.gguf" --tokenizer t.bin
expect_error "positional with --hf" 2 "unexpected argument 'model.bin'" convert model.bin --hf "$D" -o "$T/x.gguf"
expect_error "--hf without value" 2 "--hf needs a value" convert -o "$T/x.gguf" --hf
expect_error "missing directory" 1 "$T/nope/config.json: not found" convert --hf "$T/nope" -o "$T/x.gguf"

S=$D/model-00002-of-00002.safetensors
cp "$S" "$T/shard.bak"
head -c 100 "$T/shard.bak" >"$S"
expect_error "truncated shard" 1 "model-00002-of-00002.safetensors: header length" convert --hf "$D" -o "$T/x.gguf"
cp "$T/shard.bak" "$S"
cp "$D/config.json" "$T/config.bak"
printf '{"model_type": "falcon", "architectures": ["FalconForCausalLM"]}' >"$D/config.json"
expect_error "unsupported model_type" 1 "model_type 'falcon' (architectures[0] 'FalconForCausalLM') is not supported" \
    convert --hf "$D" -o "$T/x.gguf"
printf '{"architectures": ["Phi3ForCausalLM"], "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 48, "rope_scaling": {"type": "longrope", "long_factor": [1, 2, 3, 4]}}' >"$D/config.json"
expect_error "phi3 longrope without short_factor" 1 "rope_scaling: longrope needs 'short_factor', a list of 4 numbers (rotary dims 8 / 2)" \
    convert --hf "$D" -o "$T/x.gguf"
cp "$T/config.bak" "$D/config.json"
if [ -e "$T/x.gguf" ] || ls "$T"/x.gguf.tmp.* >/dev/null 2>&1; then
    e2e_fail "no output after errors" "$T/x.gguf or a temporary file exists"
else
    e2e_ok "no output after errors"
fi

# A real directory, unchanged: TinyStories-656K stores its tied embedding only
# as lm_head.weight.  Golden ids from Hugging Face's tokenizers library and a
# float64 forward pass (min top-2 margin 0.01, so f16 weights keep every argmax).
R=tests/data/hf-tinystories656k
G=tests/data/golden/tinystories656k-greedy.jsonl
for ty in auto f32; do
    if [ "$ty" = auto ]; then
        e2e_kite "$T/out" "$T/err" convert --hf "$R" -o "$T/ts656.gguf"
    else
        e2e_kite "$T/out" "$T/err" convert --hf "$R" -o "$T/ts656.gguf" --type "$ty"
    fi
    if [ "$rc" -eq 0 ] && grep -qF "2 layers, 2048 tokens (llama), 20 tensors" "$T/out"; then
        e2e_ok "convert tinystories656k ($ty)"
    else
        e2e_fail "convert tinystories656k ($ty)" "exit $rc: $(e2e_first_line "$T/err")$(e2e_first_line "$T/out")"
        continue
    fi
    i=0
    while IFS= read -r line; do
        i=$((i + 1))
        # the golden prompts hold no quote or backslash, so sed can take the fields
        prompt=$(printf '%s\n' "$line" | sed -n 's/.*"prompt": "\([^"\\]*\)".*/\1/p')
        pids=$(printf '%s\n' "$line" | sed -n 's/.*"prompt_ids": \(\[[^]]*\]\).*/\1/p')
        nids=$(printf '%s\n' "$line" | sed -n 's/.*"new_ids": \(\[[^]]*\]\).*/\1/p')
        if [ -z "$prompt" ] || [ -z "$pids" ] || [ -z "$nids" ]; then
            e2e_fail "tinystories656k golden $i ($ty)" "cannot read the golden line"
            continue
        fi
        e2e_kite "$T/out" "$T/err" run -m "$T/ts656.gguf" -p "$prompt" -n 60 --temp 0 -t 2 --json
        got=$(tail -n 1 "$T/out")
        case $got in
        *"\"prompt_ids\": $pids, \"ids\": $nids, "*) e2e_ok "tinystories656k golden $i ($ty)" ;;
        *) e2e_fail "tinystories656k golden $i ($ty)" "exit $rc: $(printf '%s' "$got" | cut -c 1-200)" ;;
        esac
    done <"$G"
    [ "$i" -eq 2 ] || e2e_fail "tinystories656k golden ($ty)" "$i cases, expected 2"
done
# Its model card's prompt writes BOS as text: parsed, "<|start_story|>" + the golden
# prompt gives the golden prompt_ids (Hugging Face's post-processor adds that BOS);
# as plain text the vocabulary has one piece for most of it.
e2e_kite "$T/out" "$T/err" tokenize -m "$T/ts656.gguf" "<|start_story|>Once upon a time, there was"
if [ "$rc" -eq 0 ] && [ "$(cat "$T/out")" = "[1, 80, 147, 201, 282, 215, 248, 197]" ]; then
    e2e_ok "tinystories656k <|start_story|> parsed"
else
    e2e_fail "tinystories656k <|start_story|> parsed" "exit $rc: $(e2e_first_line "$T/out")"
fi
e2e_kite "$T/out" "$T/err" tokenize -m "$T/ts656.gguf" --no-parse-special "<|start_story|>Once upon a time, there was"
if [ "$rc" -eq 0 ] && [ "$(cat "$T/out")" = "[296, 248, 197]" ]; then
    e2e_ok "tinystories656k --no-parse-special"
else
    e2e_fail "tinystories656k --no-parse-special" "exit $rc: $(e2e_first_line "$T/out")"
fi

e2e_kite "$T/out" "$T/err" convert --hf "$D" --help
if [ "$rc" -eq 0 ] && grep -q "usage: kite convert --hf DIR" "$T/out"; then
    e2e_ok "--hf --help"
else
    e2e_fail "--hf --help" "exit $rc"
fi

e2e_summary
