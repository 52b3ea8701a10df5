#!/bin/sh
# tests/e2e/test_llamacpp_habits.sh - llama.cpp habits of the CLI (issue 28).
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does this).
#
# What is checked:
#   * `kite quantize IN OUT TYPE [NTHREADS]` (llama-quantize's positional form) with its type
#     names (any case, the q4_k alias, an ftype number) writes, tensor for tensor (`kite info
#     --hash`: names, types, bytes), the files llama.cpp's quantizer wrote: every mix in
#     tests/data/quant-models, and TinyStories-656K Q2_K from the Hugging Face directory;
#   * without OUT the output is ggml-model-TYPE.gguf beside IN; --pure, --leave-output-tensor,
#     --output-tensor-type and --token-embedding-type give the tensors they promise;
#   * -m is accepted by info and convert; -s is the seed and --system the system prompt of chat;
#     bench runs the bundled model without -m; bench --parallel takes -r;
#   * usage errors exit 2, runtime errors 1 (run -p "" --no-bos);
#   * every subcommand's --help exits 0, and every `--flag` README.md or docs/ write after
#     `kite CMD` is listed by `kite CMD --help` (whose text comes from the option tables, whose
#     every row tests/unit/test_cli_opts.c feeds a valid value);
#   * the llama.cpp-written TinyStories file (a SentencePiece vocabulary with every score -1000)
#     tokenizes as llama.cpp tokenizes it: tests/data/tokenizer/tinystories656k-Q2_K-llamacpp.ids.tsv
#     (ids from llama.cpp's llama-cli --verbose-prompt, build 4748, Feb 2025; BOS included);
#   * progress: plain lines on a pipe (KITE_PROGRESS_PERIOD=0 shows them for short work),
#     none with -q, an updating line with a percentage under KITE_PROGRESS=tty.
# The last line is "tests/e2e/test_llamacpp_habits.sh: N passed, M failed".
set -u
. tests/e2e/lib.sh
e2e_init
T=$E2E_TMP
M=models/stories260K.gguf
Q=tests/data/quant-models

# same_tensors NAME A B: the two files hold the same tensors
same_tensors() {
    "$KITE" info --hash "$2" >"$T/ha" 2>&1
    "$KITE" info --hash "$3" >"$T/hb" 2>&1
    if [ -s "$T/hb" ] && cmp -s "$T/ha" "$T/hb"; then
        e2e_ok "$1 ($(wc -l <"$T/hb") tensors)"
    else
        e2e_fail "$1" "$(diff "$T/ha" "$T/hb" | head -n 4 | tr '\n' ' ')"
    fi
}

# ---- 1. positional form and type names against llama.cpp's files ---------------
for x in Q3_K_M:q3_k_m Q4_K_M:Q4_K Q5_K_M:q5_k_m Q6_K:18 TQ1_0:tq1_0; do
    ref=${x%%:*}
    name=${x#*:}
    e2e_kite "$T/out" "$T/err" quantize -q "$M" "$T/o.gguf" "$name" 2
    if [ "$rc" -ne 0 ]; then
        e2e_fail "quantize IN OUT $name 2" "exit $rc: $(e2e_first_line "$T/err")"
        continue
    fi
    same_tensors "quantize IN OUT $name 2 = llama.cpp's $ref" "$T/o.gguf" "$Q/stories260K-$ref.gguf"
done
e2e_kite "$T/out" "$T/err" convert --hf tests/data/hf-tinystories656k --type f32 -o "$T/ts.gguf" -q
e2e_kite "$T/out" "$T/err" quantize "$T/ts.gguf" "$T/ts-q2k.gguf" Q2_K -q
if [ "$rc" -eq 0 ]; then
    same_tensors "TinyStories-656K Q2_K = the llama.cpp-written file" "$T/ts-q2k.gguf" "$Q/tinystories656k-Q2_K-llamacpp.gguf"
else
    e2e_fail "TinyStories-656K Q2_K" "exit $rc: $(e2e_first_line "$T/err")"
fi

# without OUT: ggml-model-TYPE.gguf beside IN
cp "$M" "$T/in.gguf"
e2e_kite "$T/out" "$T/err" quantize -q "$T/in.gguf" q4_k_m
if [ "$rc" -eq 0 ] && [ -s "$T/ggml-model-Q4_K_M.gguf" ]; then e2e_ok "IN TYPE writes ggml-model-Q4_K_M.gguf beside IN"
else e2e_fail "IN TYPE writes ggml-model-Q4_K_M.gguf" "exit $rc: $(ls "$T")"; fi

# types of one tensor: type_of FILE NAME
type_of() { "$KITE" info --hash "$1" | awk -v n="$2" '$3 == n { print $2 }'; }
e2e_kite "$T/out" "$T/err" quantize -q "$M" "$T/p.gguf" q4_0 --pure
e2e_kite "$T/out" "$T/err" quantize -q "$M" "$T/m.gguf" q4_0
a=$(type_of "$T/p.gguf" output.weight)
b=$(type_of "$T/m.gguf" output.weight)
if [ "$a" = q4_0 ] && [ "$b" = q8_0 ]; then e2e_ok "--pure: output.weight q4_0 (the Q4_0 mix: q8_0, q6_K not fitting)"
else e2e_fail "--pure" "pure $a, mix $b"; fi
e2e_kite "$T/out" "$T/err" quantize -q "$M" "$T/l.gguf" q4_k_m --leave-output-tensor --token-embedding-type q8_0
a=$(type_of "$T/l.gguf" output.weight)
b=$(type_of "$T/l.gguf" token_embd.weight)
if [ "$rc" -eq 0 ] && [ "$a" = f32 ] && [ "$b" = q8_0 ]; then e2e_ok "--leave-output-tensor, --token-embedding-type"
else e2e_fail "--leave-output-tensor, --token-embedding-type" "exit $rc: output $a, token_embd $b"; fi
e2e_kite "$T/out" "$T/err" quantize -q -m "$M" -o "$T/o2.gguf" --type q4_k_m --output-tensor-type f16
a=$(type_of "$T/o2.gguf" output.weight)
if [ "$rc" -eq 0 ] && [ "$a" = f16 ]; then e2e_ok "--output-tensor-type f16"; else e2e_fail "--output-tensor-type" "exit $rc: $a"; fi

e2e_expect_error "quantize: TYPE missing" 2 "kite quantize: " "TYPE" quantize "$M" "$T/x.gguf"
e2e_expect_error "quantize: too many positionals" 2 "kite quantize: " "too many arguments" quantize "$M" "$T/x.gguf" q4_0 2 extra
e2e_expect_error "quantize: bad NTHREADS" 2 "kite quantize: NTHREADS" "" quantize "$M" "$T/x.gguf" q4_0 many
e2e_expect_error "quantize: IN twice" 2 "kite quantize: " "given twice" quantize -m "$M" "$M" q4_0
e2e_expect_error "quantize: bad --output-tensor-type" 2 "kite quantize: " "unknown type 'q9'" quantize "$M" "$T/x.gguf" q4_0 --output-tensor-type q9

# ---- 2. one spelling per option, -m everywhere, the bundled model as default ---------
e2e_kite "$T/a" "$T/err" info "$M" --no-tensors
e2e_kite "$T/b" "$T/err" info -m "$M" --no-tensors
if [ "$rc" -eq 0 ] && cmp -s "$T/a" "$T/b"; then e2e_ok "info -m FILE = info FILE"; else e2e_fail "info -m" "exit $rc"; fi
e2e_expect_error "info: two files" 2 "kite info: " "more than one FILE" info -m "$M" "$M"
e2e_kite "$T/out" "$T/err" convert -m tests/data/convert/stories260K.bin --tokenizer tests/data/convert/tok512.bin -o "$T/c.gguf" -q
if [ "$rc" -eq 0 ] && cmp -s "$T/c.gguf" "$M"; then e2e_ok "convert -m MODEL.bin"; else e2e_fail "convert -m" "exit $rc: $(e2e_first_line "$T/err")"; fi
e2e_kite "$T/a" "$T/err" run -p "Once" -n 8 --temp 1 -s 7
e2e_kite "$T/b" "$T/err" run -p "Once" -n 8 --temp 1 --seed 7
if [ "$rc" -eq 0 ] && cmp -s "$T/a" "$T/b"; then e2e_ok "run -s = --seed"; else e2e_fail "run -s" "exit $rc"; fi
printf 'Hi\n' >"$T/in.txt"
"$KITE" chat --system "You tell stories." -s 3 --temp 0 -n 4 -t 1 <"$T/in.txt" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ]; then e2e_ok "chat --system TEXT -s SEED"; else e2e_fail "chat --system" "exit $rc: $(e2e_first_line "$T/err")"; fi
e2e_expect_error "chat -s is the seed now" 2 "kite chat: " "-s" chat -s "You tell stories."
e2e_kite "$T/out" "$T/err" bench -p 4 -n 2 -r 1 -t 1 --no-check --json -q
if [ "$rc" -eq 0 ] && grep -q '"model"' "$T/out" && grep -q 'stories260K' "$T/out"; then e2e_ok "bench without -m: the bundled model"
else e2e_fail "bench without -m" "exit $rc: $(e2e_first_line "$T/err")"; fi
e2e_kite "$T/out" "$T/err" bench --parallel 1 -p 4 -n 2 -t 1 -r 1 --lookup 2 --json
if [ "$rc" -eq 0 ]; then e2e_ok "bench --parallel takes -r"; else e2e_fail "bench --parallel -r" "exit $rc: $(e2e_first_line "$T/err")"; fi
e2e_expect_error "run -p '' --no-bos is a usage error" 2 "kite run: " "nothing to evaluate" run -p "" --no-bos

# ---- 3. --help of every subcommand; README flags exist --------------------------
cmds=$("$KITE" --help 2>&1 | awk '/^  [a-z]+  / { print $1 }')
[ -n "$cmds" ] || e2e_fail "kite --help lists commands" "none found"
for c in $cmds; do
    "$KITE" "$c" --help >"$T/h" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ] || ! grep -q "^usage: kite $c" "$T/h"; then e2e_fail "$c --help" "exit $rc: $(e2e_first_line "$T/h")"; continue; fi
    # flags the README and docs/ write after "kite $c" (code spans and code blocks)
    # modes with their own table: bench --parallel / --spec / --attn-ctx, convert --hf, quantize --method smoothquant
    for a in "--parallel 1" --spec-verify --lut-gemm --hf "--method smoothquant" "--attn-ctx 2"; do
        # shellcheck disable=SC2086 # the mode's words split on purpose
        "$KITE" "$c" $a --help 2>/dev/null
    done >"$T/hm"
    missing=""
    for f in $(grep -ho "kite $c [^\`|]*" README.md docs/*.md docs/quantization/*.md | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
        case "$f" in --help) continue ;; esac
        grep -q -- "$f\\b" "$T/h" || grep -q -- "$f\\b" "$T/hm" || missing="$missing $f"
    done
    if [ -z "$missing" ]; then e2e_ok "$c --help exits 0 and lists the flags README.md and docs/ give it"
    else e2e_fail "$c: documented flags missing from --help" "$missing"; fi
done
"$KITE" convert --hf --help >"$T/h" 2>&1
if [ $? -eq 0 ] && grep -q "usage: kite convert --hf" "$T/h"; then e2e_ok "convert --hf --help"; else e2e_fail "convert --hf --help" "$(e2e_first_line "$T/h")"; fi

# ---- 4. a flat-scored vocabulary tokenizes as llama.cpp does -----------------------
n=0
bad=""
while IFS=$TAB read -r want text; do
    n=$((n + 1))
    got=$("$KITE" tokenize -m "$Q/tinystories656k-Q2_K-llamacpp.gguf" --bos -- "$text" 2>&1 | tr -d '[] ')
    [ "$got" = "$want" ] || bad="$bad '$text': [$got] vs llama.cpp [$want];"
done <tests/data/tokenizer/tinystories656k-Q2_K-llamacpp.ids.tsv
if [ "$n" -ge 10 ] && [ -z "$bad" ]; then e2e_ok "flat-scored SentencePiece vocabulary: $n texts tokenize as llama.cpp"
else e2e_fail "flat-scored vocabulary tokenizes as llama.cpp" "$n texts:$bad"; fi

# ---- 5. progress -----------------------------------------------------------------
KITE_PROGRESS=plain KITE_PROGRESS_PERIOD=0 "$KITE" synth --shape stories260k --type q8_0 -o "$T/s.gguf" -t 1 >"$T/out" 2>"$T/err"
if grep -q '^kite synth: 100% (0.4 MB of 0.4 MB)' "$T/err"; then e2e_ok "synth: plain progress lines"; else e2e_fail "synth progress" "$(e2e_first_line "$T/err")"; fi
KITE_PROGRESS=plain KITE_PROGRESS_PERIOD=0 "$KITE" synth --shape stories260k --type f16 -o "$T/s.gguf" -t 1 -q >"$T/out" 2>"$T/err"
if [ ! -s "$T/err" ]; then e2e_ok "synth -q: nothing on stderr"; else e2e_fail "synth -q" "$(e2e_first_line "$T/err")"; fi
"$KITE" synth --shape stories260k --type f16 -o "$T/s.gguf" -t 1 >"$T/out" 2>"$T/err"
if [ ! -s "$T/err" ]; then e2e_ok "synth under 2 s on a pipe: no progress lines"; else e2e_fail "synth quiet pipe" "$(e2e_first_line "$T/err")"; fi
KITE_PROGRESS=tty KITE_PROGRESS_PERIOD=0 "$KITE" quantize "$M" "$T/t.gguf" q8_0 >"$T/out" 2>"$T/err"
if tr '\r' '\n' <"$T/err" | grep -q '^kite quantize: *[0-9]*% '; then e2e_ok "quantize: terminal line with a percentage"
else e2e_fail "quantize tty progress" "$(head -c 200 "$T/err")"; fi
head -c 3000 tests/data/eval/tinystories-valid-sample.txt >"$T/short.txt"
KITE_PROGRESS=plain KITE_PROGRESS_PERIOD=0 "$KITE" ppl -m "$M" -f "$T/short.txt" -c 128 -t 1 >"$T/out" 2>"$T/err"
if grep -q '^kite ppl: .*% (.* of .* windows)' "$T/err"; then e2e_ok "ppl: progress with windows"; else e2e_fail "ppl progress" "$(tail -n 2 "$T/err" | tr '\n' ' ')"; fi

e2e_summary
