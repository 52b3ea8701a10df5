#!/bin/sh
# tests/e2e/test_cli.sh - end-to-end tests of the kite command line.
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this); uses $KITE_BUILD/kite.  POSIX sh, no python: golden texts and ids
# come from the plain files in tests/data/golden/greedy/ (see the README
# there for how they are derived from the .jsonl copies).
#
# What is checked:
#   * greedy generations equal llama2.c run.c's, text byte for byte and
#     ids, for stories260K (bundled), aidreams260K and babyllama105 (converted here);
#     -t 1 and -t 2 give the same output;
#   * --dump-logits equals the reference logits within 1e-4;
#   * --json shape, the stderr statistics line;
#   * usage errors exit 2 and bad files exit 1, each with exactly one stderr
#     line naming the command (and the file), never a crash;
#   * info, tokenize, convert (f32 byte-identical to the bundled model; f16,
#     bf16), the bundled-model lookup from another directory, --help and the
#     Makefile's "run" command line.
#
# Every check prints "  ok    name" or "  FAIL  name: details"; the last line
# is "tests/e2e/test_cli.sh: N passed, M failed".  Scratch files live in a
# mktemp directory removed on exit.

set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
G=tests/data/golden
C=tests/data/convert
M=models/stories260K.gguf
VOCAB=models/vocab-llama2.gguf

# ids_diff EXPECTED GOT: describes how two comma-separated id lists differ.
ids_diff() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        na = split(a, x, ","); nb = split(b, y, ",")
        for (i = 1; i <= na || i <= nb; i++)
            if (x[i] != y[i]) break
        printf "expected %d ids, got %d; first difference at index %d (expected %s, got %s)",
            na, nb, i - 1, (i <= na ? x[i] : "none"), (i <= nb ? y[i] : "none")
    }'
}

# json_array FILE KEY: the integer array KEY of the one-line JSON in FILE,
# comma-separated without spaces (empty if absent).
json_array() {
    sed -n "s/.*\"$2\": *\[\([0-9, ]*\)\].*/\1/p" "$1" | tr -d ' '
}

# json_scalar FILE KEY: a number or string value of KEY (quotes stripped).
json_scalar() {
    sed -n "s/.*\"$2\": *\"*\([-+.0-9eEa-z_]*\)\"*[,}].*/\1/p" "$1"
}

# expect_text NAME EXPECTED_TEXT_FILE: compares $T/out with the file plus the
# final newline kite adds, after checking $rc.
expect_text() {
    { cat "$2"; echo; } >"$T/exp"
    if [ "$rc" -ne 0 ]; then
        e2e_fail "$1" "exit $rc: $(e2e_first_line "$T/err")"
    elif cmp -s "$T/exp" "$T/out"; then
        e2e_ok "$1"
    else
        e2e_fail "$1" "stdout differs from $2 + newline: $(cmp "$T/exp" "$T/out" 2>&1 | head -n 1)"
    fi
}

# check_greedy MODEL TAG IDX N STOP PROMPT: one golden case, three checks.
check_greedy() {
    _m=$1
    _tag=$2
    _i=$3
    _n=$4
    _stop=$5
    _p=$6
    _base=$G/greedy/$_tag-$_i
    _name="greedy $_tag #$_i"

    e2e_kite "$T/out" "$T/err" run -m "$_m" -p "$_p" -n "$_n" --temp 0
    expect_text "$_name text" "$_base.text"
    cp "$T/out" "$T/plain"

    e2e_kite "$T/out" "$T/err" run -m "$_m" -p "$_p" -n "$_n" --temp 0 --json
    tail -n 1 "$T/out" >"$T/json"
    _gp=$(json_array "$T/json" prompt_ids)
    _gi=$(json_array "$T/json" ids)
    _gs=$(json_scalar "$T/json" stop)
    _ep=$(sed -n 1p "$_base.ids")
    _ei=$(sed -n 2p "$_base.ids")
    if [ "$rc" -ne 0 ]; then
        e2e_fail "$_name ids" "--json: exit $rc: $(e2e_first_line "$T/err")"
    elif [ "$_gp" != "$_ep" ]; then
        e2e_fail "$_name ids" "prompt_ids [$_gp], expected [$_ep]"
    elif [ "$_gi" != "$_ei" ]; then
        e2e_fail "$_name ids" "$(ids_diff "$_ei" "$_gi")"
    elif [ "$_gs" != "$_stop" ]; then
        e2e_fail "$_name ids" "stop '$_gs', expected '$_stop'"
    else
        e2e_ok "$_name ids"
    fi
    # the text before the JSON line is the same as without --json
    sed '$d' "$T/out" >"$T/jtext"
    if cmp -s "$T/plain" "$T/jtext"; then
        e2e_ok "$_name --json keeps the text"
    else
        e2e_fail "$_name --json keeps the text" "$(cmp "$T/plain" "$T/jtext" 2>&1 | head -n 1)"
    fi
}

# greedy_cases MODEL TAG: every case of $G/greedy/TAG.cases.
greedy_cases() {
    _cases=$G/greedy/$2.cases
    if [ ! -s "$_cases" ]; then
        e2e_fail "greedy $2" "$_cases missing or empty"
        return
    fi
    # (a function reading the case file must not let kite read it: e2e_kite
    # gives kite /dev/null as stdin)
    while IFS=$TAB read -r _ci _cn _cs _cp; do
        check_greedy "$1" "$2" "$_ci" "$_cn" "$_cs" "$_cp"
    done <"$_cases"
}

# ---- 1. greedy golden generations -----------------------------------------

greedy_cases "$M" stories260K

# converted_cases TAG MODEL.bin TOK.bin: kite convert, then every golden case of TAG
converted_cases() {
    e2e_kite "$T/out" "$T/err" convert "$2" --tokenizer "$3" -o "$T/$1.gguf"
    if [ "$rc" -eq 0 ] && [ -s "$T/$1.gguf" ]; then
        e2e_ok "convert $1"
        greedy_cases "$T/$1.gguf" "$1"
    else
        e2e_fail "convert $1" "exit $rc: $(e2e_first_line "$T/err")"
    fi
}
converted_cases aidreams260K "$C/aidreams260K.bin" "$C/aidreams260K-tok512.bin"
# BabyLlama-936K (GQA, 128-wide rows, a character-level vocabulary): run.c's greedy output
converted_cases babyllama105 "$C/babyllama105/babyllama105.bin" "$C/babyllama105/tok105.bin"

# threads: case 1 with one and with two threads
case1=$(sed -n 2p "$G/greedy/stories260K.cases")
n1=$(printf '%s\n' "$case1" | cut -f 2)
p1=$(printf '%s\n' "$case1" | cut -f 4)
e2e_kite "$T/out" "$T/err" run -m "$M" -p "$p1" -n "$n1" --temp 0 -t 1
expect_text "greedy stories260K #1 -t 1" "$G/greedy/stories260K-1.text"
cp "$T/out" "$T/t1"
e2e_kite "$T/out" "$T/err" run -m "$M" -p "$p1" -n "$n1" --temp 0 -t 2
if [ "$rc" -eq 0 ] && cmp -s "$T/t1" "$T/out"; then
    e2e_ok "greedy stories260K #1 -t 2 equals -t 1"
else
    e2e_fail "greedy stories260K #1 -t 2 equals -t 1" "exit $rc; $(cmp "$T/t1" "$T/out" 2>&1 | head -n 1)"
fi

# --logit-bias: -100 on greedy's first token bans it; +100 on another forces that one
e2e_kite "$T/out" "$T/err" run -m "$M" -p "Once upon a time" -n 4 --temp 0 --json
first=$(tail -n 1 "$T/out" | sed -n 's/.*"ids": \[\([0-9]*\).*/\1/p')
e2e_kite "$T/out" "$T/err" run -m "$M" -p "Once upon a time" -n 4 --temp 0 --json --logit-bias "$first=-100"
ban1=$(tail -n 1 "$T/out" | sed -n 's/.*"ids": \[\([0-9]*\).*/\1/p')
e2e_kite "$T/out" "$T/err" run -m "$M" -p "Once upon a time" -n 4 --temp 0 --json --logit-bias "7=-3,300=100"
force=$(tail -n 1 "$T/out" | sed -n 's/.*"ids": \[\([0-9, ]*\)\].*/\1/p')
if [ -n "$first" ] && [ -n "$ban1" ] && [ "$ban1" != "$first" ] && [ "$force" = "300, 300, 300, 300" ]; then
    e2e_ok "run --logit-bias: -100 bans greedy's token $first, +100 forces token 300"
else
    e2e_fail "run --logit-bias" "first '$first', banned run '$ban1', forced '$force'"
fi
e2e_expect_error "run --logit-bias out of range exits 2" 2 "kite run: " "--logit-bias" run -m "$M" -p x --logit-bias 5=-101
e2e_expect_error "run --logit-bias id outside the vocabulary exits 1" 1 "kite run: " "outside the vocabulary" \
    run -m "$M" -p x --logit-bias 9999=1

# ---- 2. --dump-logits -----------------------------------------------------

# check_logits NAME FILE REFERENCE: 32 x 512 float32 within 1e-4.
check_logits() {
    _size=$(wc -c <"$2" 2>/dev/null || echo 0)
    if [ "$rc" -ne 0 ]; then
        e2e_fail "$1" "exit $rc: $(e2e_first_line "$T/err")"
    elif [ "$_size" -ne 65536 ]; then
        e2e_fail "$1" "$2 has $_size bytes, expected 65536 (32 rows x 512 float32)"
    else
        # shellcheck disable=SC2046 # split into the four numbers on purpose
        set -- "$1" $(e2e_max_abs_diff "$2" "$3")
        if [ "$2" -ne "$3" ] || [ "$5" -ne 0 ]; then
            e2e_fail "$1" "$2 vs $3 values, $5 not finite"
        elif awk -v d="$4" 'BEGIN { exit !(d <= 1e-4) }'; then
            e2e_ok "$1"
        else
            e2e_fail "$1" "max |kite - reference| = $4 > 1e-4"
        fi
    fi
}

for thr in default 2; do
    if [ $thr = default ]; then set --; else set -- -t $thr; fi
    e2e_kite "$T/out" "$T/err" run -p "Once upon a time" -n 28 --temp 0 --dump-logits "$T/logits-$thr.f32" "$@"
    check_logits "--dump-logits (threads $thr)" "$T/logits-$thr.f32" "$G/stories260K-logits-once.f32"
done

# ---- 3. --json shape ------------------------------------------------------

e2e_kite "$T/out" "$T/err" run -p "Once upon a time" -n 4 --temp 0 --json
tail -n 1 "$T/out" >"$T/json"
missing=
for key in prompt_ids ids text prefill_tok_s decode_tok_s; do
    grep -q "\"$key\": *" "$T/json" || missing="$missing $key"
done
if [ "$rc" -ne 0 ]; then
    e2e_fail "--json keys" "exit $rc: $(e2e_first_line "$T/err")"
elif [ -n "$missing" ] || ! grep -q '^{.*}$' "$T/json"; then
    e2e_fail "--json keys" "missing:$missing in: $(cut -c 1-200 "$T/json")"
else
    e2e_ok "--json keys"
fi
got=$(json_array "$T/json" prompt_ids)
gen=$(json_array "$T/json" ids | awk -F, '{ print NF }')
dec=$(json_scalar "$T/json" decode_tok_s)
if [ "$got" = "1,403,407,261,378" ] && [ "$gen" = 4 ] && awk -v v="$dec" 'BEGIN { exit !(v + 0 > 0) }'; then
    e2e_ok "--json values"
else
    e2e_fail "--json values" "prompt_ids [$got] (expected [1,403,407,261,378]), $gen ids (expected 4), decode_tok_s '$dec'"
fi

# ---- 4. statistics on stderr ----------------------------------------------

e2e_kite "$T/out" "$T/err" run -p "Once upon a time" -n 8 --temp 0
if [ "$rc" -ne 0 ]; then
    e2e_fail "stderr statistics" "exit $rc: $(e2e_first_line "$T/err")"
elif grep -q 'load[^|]*[0-9] ms' "$T/err" && grep -q 'prompt[^|]*[0-9] tok/s' "$T/err" &&
    grep -q 'generated[^|]*[0-9] tok/s' "$T/err" && ! grep -q 'tok/s' "$T/out"; then
    e2e_ok "stderr statistics"
else
    e2e_fail "stderr statistics" "expected load ms, prompt and decode tok/s on stderr only: $(e2e_first_line "$T/err")"
fi

# ---- 5. usage errors ------------------------------------------------------

e2e_expect_error "usage: unknown option" 2 "kite run:" "--bogus" run --bogus
e2e_expect_error "usage: missing value" 2 "kite run:" "-n" run -n
e2e_expect_error "usage: missing -p value" 2 "kite run:" "-p" run -p
e2e_expect_error "usage: -n -5" 2 "kite run:" "-5" run -n -5
e2e_expect_error "usage: -n abc" 2 "kite run:" "abc" run -n abc
e2e_expect_error "usage: --temp x" 2 "kite run:" "--temp" run --temp x
e2e_expect_error "usage: -t 99999" 2 "kite run:" "99999" run -t 99999
e2e_expect_error "usage: -c -1" 2 "kite run:" "-c" run -c -1
e2e_expect_error "usage: --top-p 2" 2 "kite run:" "--top-p" run --top-p 2
e2e_expect_error "usage: --repeat-penalty 0" 2 "kite run:" "--repeat-penalty" run --repeat-penalty 0
e2e_expect_error "usage: unknown command" 2 "kite:" "bogus" bogus
e2e_expect_error "usage: info without file" 2 "kite info:" "" info
e2e_expect_error "usage: tokenize without text" 2 "kite tokenize:" "" tokenize
e2e_expect_error "usage: convert --type q4" 2 "kite convert:" "q4" convert "$C/stories260K.bin" --tokenizer "$C/tok512.bin" -o "$T/q4.gguf" --type q4
e2e_kite "$T/out" "$T/err"
if [ "$rc" -eq 2 ] && grep -q 'usage' "$T/out" "$T/err"; then
    e2e_ok "usage: no arguments"
else
    e2e_fail "usage: no arguments" "exit $rc (expected 2 and a usage text)"
fi

# ---- 6. bad files ---------------------------------------------------------

printf 'this is not a model\n' >"$T/text.gguf"
: >"$T/empty.gguf"
head -c 1000 "$M" >"$T/trunc1000.gguf"
head -c 600000 "$M" >"$T/trunc600000.gguf"
msize=$(wc -c <"$M")
head -c $((msize - 1)) "$M" >"$T/trunc-1.gguf"
{ printf 'GGUX'; tail -c +5 "$M"; } >"$T/magic.gguf"
mkdir "$T/dir.gguf"

for f in "$T/nonexistent.gguf" "$T/text.gguf" "$T/empty.gguf" "$T/trunc1000.gguf" \
    "$T/trunc600000.gguf" "$T/trunc-1.gguf" "$T/magic.gguf" "$T/dir.gguf"; do
    b=${f##*/}
    e2e_expect_error "bad file: run $b" 1 "kite run:" "$f" run -m "$f" -n 1 --temp 0
    e2e_expect_error "bad file: info $b" 1 "kite info:" "$f" info "$f"
    e2e_expect_error "bad file: tokenize $b" 1 "kite tokenize:" "$f" tokenize -m "$f" x
done
for f in "$T/trunc1000.gguf" "$T/trunc600000.gguf" "$T/trunc-1.gguf"; do
    e2e_expect_error "bad file: run --mmap ${f##*/}" 1 "kite run:" "$f" run --mmap -m "$f" -n 1 --temp 0
done
e2e_expect_error "bad file: run vocab-only" 1 "kite run:" "$VOCAB" run -m "$VOCAB" -n 1 --temp 0
if grep -q 'vocab-only' "$T/err"; then
    e2e_ok "bad file: run vocab-only says vocab-only"
else
    e2e_fail "bad file: run vocab-only says vocab-only" "$(e2e_first_line "$T/err")"
fi

# one message for a vocab-only file wherever weights are needed (the loader's)
printf 'Once upon a time\n' >"$T/short.txt"
e2e_expect_error "bad file: serve vocab-only" 1 "kite serve: $VOCAB is a vocab-only GGUF" "no weights" serve -m "$VOCAB"
e2e_expect_error "bad file: chat vocab-only" 1 "kite chat: $VOCAB is a vocab-only GGUF" "no weights" chat -m "$VOCAB"
e2e_expect_error "bad file: ppl vocab-only" 1 "kite ppl: $VOCAB is a vocab-only GGUF" "no weights" \
    ppl -m "$VOCAB" -f "$T/short.txt"
e2e_expect_error "bad file: run vocab-only (message)" 1 "kite run: $VOCAB is a vocab-only GGUF" "no weights" \
    run -m "$VOCAB" -n 1 --temp 0
# what a wrong -m file looks like; a llama2.c checkpoint gets the convert command
e2e_expect_error "bad file: run llama2.c .bin suggests convert" 1 "kite run: $C/stories260K.bin: magic: not a GGUF file" \
    "it looks like a llama2.c checkpoint; convert it first: kite convert" run -m "$C/stories260K.bin" -n 1
e2e_expect_error "bad file: run text says text" 1 "kite run:" "it looks like a text file" run -m "$T/text.gguf" -n 1
e2e_expect_error "bad file: run llama2.c tokenizer" 1 "kite run:" "it looks like a llama2.c tokenizer" \
    run -m "$C/tok512.bin" -n 1

# warnings: -c above the trained context (512), perplexity over a few tokens
e2e_kite "$T/out" "$T/err" run -m "$M" -c 1024 -p "Once" -n 2 --temp 0
if [ "$rc" -eq 0 ] && grep -q "^kite run: warning: -c 1024 is above the model's trained context (512)" "$T/err"; then
    e2e_ok "run -c above the trained context warns"
else
    e2e_fail "run -c above the trained context warns" "exit $rc: $(e2e_first_line "$T/err")"
fi
e2e_kite "$T/out" "$T/err" run -m "$M" -c 512 -p "Once" -n 2 --temp 0
if [ "$rc" -eq 0 ] && ! grep -q "warning" "$T/err"; then
    e2e_ok "run -c at the trained context: no warning"
else
    e2e_fail "run -c at the trained context: no warning" "exit $rc: $(e2e_first_line "$T/err")"
fi
e2e_kite "$T/out" "$T/err" ppl -m "$M" -f "$T/short.txt"
if [ "$rc" -eq 0 ] && grep -q "^kite ppl: warning: only [0-9]* tokens scored: too few" "$T/err"; then
    e2e_ok "ppl over a few tokens warns"
else
    e2e_fail "ppl over a few tokens warns" "exit $rc: $(tail -n 1 "$T/err")"
fi

# ---- 7. info and tokenize -------------------------------------------------

e2e_kite "$T/out" "$T/err" info "$M"
ntens=$(grep -c '\.weight ' "$T/out")
if [ "$rc" -eq 0 ] && grep -q 'general\.architecture .*"llama"' "$T/out" &&
    grep -q 'n_tensors: *48$' "$T/out" && grep -q ' blk\.4\.ffn_down\.weight ' "$T/out" && [ "$ntens" -eq 48 ]; then
    e2e_ok "info stories260K"
else
    e2e_fail "info stories260K" "exit $rc, $ntens tensor rows: $(e2e_first_line "$T/err")"
fi
e2e_kite "$T/out" "$T/err" info "$VOCAB"
if [ "$rc" -eq 0 ] && grep -q 'n_tensors: *0$' "$T/out"; then
    e2e_ok "info vocab-only"
else
    e2e_fail "info vocab-only" "exit $rc: $(e2e_first_line "$T/err")"
fi

# expect_stdout NAME EXPECTED: $T/out must be exactly EXPECTED + newline.
expect_stdout() {
    printf '%s\n' "$2" >"$T/exp"
    if [ "$rc" -eq 0 ] && cmp -s "$T/exp" "$T/out"; then
        e2e_ok "$1"
    else
        e2e_fail "$1" "exit $rc, stdout '$(e2e_first_line "$T/out")', expected '$2'"
    fi
}

e2e_kite "$T/out" "$T/err" tokenize -m "$M" "Once upon a time"
expect_stdout "tokenize" "[403, 407, 261, 378]"
e2e_kite "$T/out" "$T/err" tokenize -m "$M" --bos "Once upon a time"
expect_stdout "tokenize --bos" "[1, 403, 407, 261, 378]"
# special-token text is parsed by default (llama-tokenize's behaviour), as text with --no-parse-special
e2e_kite "$T/out" "$T/err" tokenize -m "$M" "<s>Once</s><unk>"
expect_stdout "tokenize special text" "[1, 403, 2, 0]"
e2e_kite "$T/out" "$T/err" tokenize -m "$M" --no-parse-special "<s>Once</s><unk>"
expect_stdout "tokenize --no-parse-special" "[410, 504, 419, 505, 441, 416, 331, 504, 492, 419, 505, 504, 379, 433, 505]"
for ps in "" --no-parse-special; do
    e2e_kite "$T/out" "$T/err" run -m "$M" -p "Once</s>" -n 1 --temp 0 --json $ps
    tail -n 1 "$T/out" >"$T/json"
    got=$(json_array "$T/json" prompt_ids)
    want=1,403,2
    [ -n "$ps" ] && want=1,403,504,492,419,505 # as kite tokenize --bos --no-parse-special
    if [ "$rc" -eq 0 ] && [ "$got" = "$want" ]; then
        e2e_ok "run prompt with special text ${ps:-parsed}"
    else
        e2e_fail "run prompt with special text ${ps:-parsed}" "exit $rc, prompt_ids [$got], expected [$want]"
    fi
done
printf 'Once upon a time' >"$T/in.txt"
"$KITE" tokenize -m "$M" - <"$T/in.txt" >"$T/out" 2>"$T/err"
rc=$?
expect_stdout "tokenize stdin" "[403, 407, 261, 378]"
e2e_kite "$T/out" "$T/err" tokenize -m "$VOCAB" "Hello world"
expect_stdout "tokenize vocab-only" "[15043, 3186]"
e2e_kite "$T/out" "$T/err" tokenize "Once upon a time"
expect_stdout "tokenize bundled model" "[403, 407, 261, 378]"

# ---- 8. convert -----------------------------------------------------------

e2e_kite "$T/out" "$T/err" convert "$C/stories260K.bin" --tokenizer "$C/tok512.bin" -o "$T/s.gguf"
if [ "$rc" -eq 0 ] && cmp -s "$T/s.gguf" "$M"; then
    e2e_ok "convert f32 equals bundled model"
else
    e2e_fail "convert f32 equals bundled model" "exit $rc: $(e2e_first_line "$T/err") $(cmp "$T/s.gguf" "$M" 2>&1 | head -n 1)"
fi

case0=$(sed -n 1p "$G/greedy/stories260K.cases")
n0=$(printf '%s\n' "$case0" | cut -f 2)
p0=$(printf '%s\n' "$case0" | cut -f 4)
for ty in f16 bf16; do
    e2e_kite "$T/out" "$T/err" convert "$C/stories260K.bin" --tokenizer "$C/tok512.bin" -o "$T/s-$ty.gguf" --type $ty
    if [ "$rc" -eq 0 ] && [ -s "$T/s-$ty.gguf" ]; then
        e2e_ok "convert --type $ty"
    else
        e2e_fail "convert --type $ty" "exit $rc: $(e2e_first_line "$T/err")"
    fi
done
# F16: greedy margins (>= 4e-3) survive F16 rounding, so the text is exact.
e2e_kite "$T/out" "$T/err" run -m "$T/s-f16.gguf" -p "$p0" -n "$n0" --temp 0
expect_text "convert f16: greedy stories260K #0" "$G/greedy/stories260K-0.text"
# F16 logits against the reference made from the same F16 weights
# (llama.cpp's F16 GGUF, dequantized; our converter must round identically).
e2e_kite "$T/out" "$T/err" run -m "$T/s-f16.gguf" -p "Once upon a time" -n 28 --temp 0 --dump-logits "$T/logits-f16.f32"
check_logits "convert f16: --dump-logits" "$T/logits-f16.f32" "$G/stories260K-F16-logits-once.f32"
# BF16 (8-bit mantissa) may flip a close greedy choice late in the story; it
# must run and start with the prompt.
e2e_kite "$T/out" "$T/err" run -m "$T/s-bf16.gguf" -p "$p0" -n "$n0" --temp 0
case $(head -c ${#p0} "$T/out") in
"$p0") bf_ok=$rc ;;
*) bf_ok=x ;;
esac
if [ "$bf_ok" = 0 ]; then
    e2e_ok "convert bf16: runs"
else
    e2e_fail "convert bf16: runs" "exit $rc: $(e2e_first_line "$T/err") stdout '$(e2e_first_line "$T/out")'"
fi

e2e_expect_error "convert: missing model" 1 "kite convert:" "$T/nonexistent.bin" convert "$T/nonexistent.bin" --tokenizer "$C/tok512.bin" -o "$T/bad.gguf"
e2e_expect_error "convert: text as model" 1 "kite convert:" "$T/text.gguf" convert "$T/text.gguf" --tokenizer "$C/tok512.bin" -o "$T/bad.gguf"
e2e_expect_error "convert: truncated model" 1 "kite convert:" "$T/trunc1000.gguf" convert "$T/trunc1000.gguf" --tokenizer "$C/tok512.bin" -o "$T/bad.gguf"
e2e_expect_error "convert: tokenizer too large" 1 "kite convert:" "$C/tokenizer.bin" convert "$C/stories260K.bin" --tokenizer "$C/tokenizer.bin" -o "$T/bad.gguf"
# what a wrong file looks like (tools/convert/llama2c.c, src/gguf/gguf_sniff.c)
e2e_expect_error "convert: text as model says text" 1 "kite convert: $T/text.gguf: not a llama2.c checkpoint" \
    "it looks like a text file" convert "$T/text.gguf" --tokenizer "$C/tok512.bin" -o "$T/bad.gguf"
e2e_expect_error "convert: GGUF as model" 1 "kite convert:" "it looks like a GGUF file" \
    convert "$M" --tokenizer "$C/tok512.bin" -o "$T/bad.gguf"
printf 'PK\003\004pytorch zip archive, not a model' >"$T/model.pt"
e2e_expect_error "convert: PyTorch zip as model" 1 "kite convert:" "zip archive" \
    convert "$T/model.pt" --tokenizer "$C/tok512.bin" -o "$T/bad.gguf"
printf '\200\002}q\000(X\005\000\000\000modelq\001pickled, not a model' >"$T/pickle.bin"
e2e_expect_error "convert: pickle as model" 1 "kite convert:" "Python pickle" \
    convert "$T/pickle.bin" --tokenizer "$C/tok512.bin" -o "$T/bad.gguf"
# a SentencePiece ModelProto: pieces { piece: "<unk>" score: 0 type: 2 }
printf '\012\011\012\005<unk>\025\000\000\000\000\030\002' >"$T/tokenizer.model"
e2e_expect_error "convert: SentencePiece .model as tokenizer" 1 "kite convert: $T/tokenizer.model: not a llama2.c tokenizer" \
    "SentencePiece .model" convert "$C/stories260K.bin" --tokenizer "$T/tokenizer.model" -o "$T/bad.gguf"
e2e_expect_error "convert --hf: a GGUF file, not a directory" 1 "kite convert: --hf $M is a file: it looks like a GGUF file" \
    "not a Hugging Face model directory" convert --hf "$M" -o "$T/bad.gguf"
e2e_expect_error "convert: text as tokenizer" 1 "kite convert:" "it looks like a text file" \
    convert "$C/stories260K.bin" --tokenizer "$T/text.gguf" -o "$T/bad.gguf"
if [ -e "$T/bad.gguf" ]; then
    e2e_fail "convert: no output left on failure" "$T/bad.gguf exists"
else
    e2e_ok "convert: no output left on failure"
fi

# ---- 9. bundled model from another directory --------------------------------

# An installed layout PREFIX/bin/kite + PREFIX/models (as build/kite sits
# next to models/ in the repository), run from /.
mkdir -p "$T/inst/bin"
cp "$KITE" "$T/inst/bin/kite"
repo=$(pwd)
ln -s "$repo/models" "$T/inst/models"
(cd / && "$T/inst/bin/kite" run -n 5 --temp 0 </dev/null >"$T/out" 2>"$T/err")
rc=$?
if [ "$rc" -eq 0 ] && grep -q '^Once upon a time' "$T/out"; then
    e2e_ok "bundled model from another directory"
else
    e2e_fail "bundled model from another directory" "exit $rc: $(e2e_first_line "$T/err")"
fi
(cd / && KITE_MODEL="$repo/$M" "$T/inst/bin/kite" tokenize "Once upon a time" </dev/null >"$T/out" 2>"$T/err")
rc=$?
expect_stdout "KITE_MODEL from another directory" "[403, 407, 261, 378]"
e2e_kite "$T/out" "$T/err" run -n 5 --temp 0
if [ "$rc" -eq 0 ] && grep -q '^Once upon a time' "$T/out"; then
    e2e_ok "bundled model without -m"
else
    e2e_fail "bundled model without -m" "exit $rc: $(e2e_first_line "$T/err")"
fi

# ---- 10. help -------------------------------------------------------------

for cmd in "" run info convert tokenize; do
    e2e_kite "$T/out" "$T/err" $cmd --help
    if [ "$rc" -eq 0 ] && grep -q "usage: kite $cmd" "$T/out"; then
        e2e_ok "help: kite${cmd:+ $cmd} --help"
    else
        e2e_fail "help: kite${cmd:+ $cmd} --help" "exit $rc: $(e2e_first_line "$T/err")"
    fi
done

# ---- 11. the Makefile's run target --------------------------------------------

# Its command line must be the first golden case; run it with our binary.
mk=$(sed -n '/^run:/{n;p;}' Makefile | sed 's/^[[:space:]]*//')
want="\$(BUILD)/kite run -p \"$p0\" -n $n0 --temp 0"
if [ "$mk" = "$want" ]; then
    # shellcheck disable=SC2016 # "$KITE_BUILD" is expanded by the eval
    cmdline=$(printf '%s\n' "$mk" | sed 's/^\$(BUILD)/"$KITE_BUILD"/')
    eval "$cmdline" </dev/null >"$T/out" 2>"$T/err"
    rc=$?
    expect_text "make run: output is golden #0" "$G/greedy/stories260K-0.text"
else
    e2e_fail "make run: output is golden #0" "Makefile run command is '$mk', expected '$want'"
fi

e2e_summary
