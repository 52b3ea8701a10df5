#!/bin/sh
# tests/e2e/test_imatrix.sh - importance matrices against llama.cpp's files.
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this).  POSIX sh.
#
# tests/data/imatrix holds, for four models, the file llama-imatrix (llama.cpp
# Feb 2025, build 4748) wrote on tests/data/quant-calib/calib.txt with -c 128,
# and the per-tensor hashes (`kite info --hash`) of what llama-quantize
# --imatrix wrote from it for every type both tools know (README.md there).
# What is checked:
#   * kite quantize --imatrix with llama.cpp's file writes the same tensors,
#     type for type, on stories260K (k-quant mixes: every matrix falls back),
#     tiny-k256 (rows of 256: the k-quants themselves, mixes and --pure),
#     tiny-mixtral (3-D expert tensors: one imatrix slice per expert) and the
#     real Hugging Face TinyStories-656K;
#   * the importance changes the bytes (Q4_K_M with and without differ) and
#     the ffn_down guard of llama.cpp's Q4_0 mix with an imatrix (q4_1 on the
#     first eighth of the layers) applies;
#   * kite imatrix writes a file kite quantize reads, with the
#     quantize.imatrix.* keys in the output; its ppl line;
#   * errors: an imatrix of another model, a truncated file, a missing file,
#     --imatrix with gptq, a text shorter than one chunk: one line each.
#
# The last line is "tests/e2e/test_imatrix.sh: N passed, M failed".

set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
D=tests/data/imatrix
CALIB=tests/data/quant-calib/calib.txt

# the models, made here as the fixtures' were (deterministic)
cp models/stories260K.gguf "$T/stories260K.gguf"
"$KITE" synth --shape tiny-k256 --type f32 --vocab models/stories260K.gguf -o "$T/tiny-k256.gguf" -q >/dev/null 2>&1 ||
    e2e_fail "synth tiny-k256" "exit $?"
"$KITE" synth --shape tiny-mixtral --type f32 --vocab models/stories260K.gguf -o "$T/tiny-mixtral.gguf" -q >/dev/null 2>&1 ||
    e2e_fail "synth tiny-mixtral" "exit $?"
"$KITE" convert --hf tests/data/hf-tinystories656k --type f32 -o "$T/tinystories656k.gguf" >/dev/null 2>&1 ||
    e2e_fail "convert tinystories656k" "exit $?"

# hashes FILE: "hash type name" lines sorted by name, as the .expected files hold them after the type
hashes() {
    "$KITE" info --hash "$1" | sort -k3
}

# ---- 1. llama-quantize's bytes, every type ----------------------------------------
for m in stories260K tiny-k256 tiny-mixtral tinystories656k; do
    n_ok=0
    n_bad=0
    bad=""
    for t in $(awk '{print $1}' "$D/$m.expected" | uniq); do
        pure=""
        ty=$t
        case $t in */pure) ty=${t%/pure} pure=--pure ;; esac
        if ! "$KITE" quantize -q $pure --imatrix "$D/$m.imatrix" "$T/$m.gguf" "$T/q.gguf" "$ty" 1 >"$T/out" 2>"$T/err"; then
            n_bad=$((n_bad + 1))
            bad="$bad $t(exit: $(head -n 1 "$T/err"))"
            continue
        fi
        awk -v t="$t" '$1 == t { $1 = ""; sub(/^ /, ""); print }' "$D/$m.expected" | tr -s ' ' >"$T/want"
        hashes "$T/q.gguf" | tr -s ' ' >"$T/got"
        if cmp -s "$T/want" "$T/got"; then
            n_ok=$((n_ok + 1))
        else
            n_bad=$((n_bad + 1))
            bad="$bad $t($(diff "$T/want" "$T/got" | grep -c '^>') tensors differ)"
        fi
    done
    if [ "$n_bad" -eq 0 ] && [ "$n_ok" -ge 10 ]; then
        e2e_ok "$m: llama-quantize --imatrix's tensors for all $n_ok types"
    else
        e2e_fail "$m: llama-quantize --imatrix's tensors" "$n_ok types identical, $n_bad not:$bad"
    fi
done

# ---- 2. the importance matters; the Q4_0 guard ----------------------------------------
"$KITE" quantize -q "$T/tiny-k256.gguf" "$T/plain.gguf" Q4_K_M 1 >/dev/null 2>&1
"$KITE" quantize -q --imatrix "$D/tiny-k256.imatrix" "$T/tiny-k256.gguf" "$T/imat.gguf" Q4_K_M 1 >/dev/null 2>&1
n=$(hashes "$T/plain.gguf" | sort >"$T/a"; hashes "$T/imat.gguf" | sort >"$T/b"; comm -13 "$T/a" "$T/b" | grep -vc _norm)
if [ "$n" -ge 14 ]; then e2e_ok "the importance changes the quantized matrices ($n differ)"
else e2e_fail "the importance changes the quantized matrices" "only $n differ"; fi
"$KITE" synth --shape tiny-k256 --layers 8 --type f32 --vocab models/stories260K.gguf -o "$T/k8.gguf" -q >/dev/null 2>&1
"$KITE" imatrix -q -m "$T/k8.gguf" -f "$CALIB" -c 128 -o "$T/k8.imatrix" >/dev/null 2>&1
"$KITE" quantize --imatrix "$T/k8.imatrix" "$T/k8.gguf" "$T/k8q.gguf" Q4_0 1 >/dev/null 2>"$T/err"
if grep -q 'blk\.0\.ffn_down\.weight  *f32 -> q4_1 .*imatrix' "$T/err" && grep -q 'blk\.1\.ffn_down\.weight  *f32 -> q4_0 ' "$T/err"; then
    e2e_ok "Q4_0 with an imatrix: q4_1 on the first eighth of ffn_down (llama.cpp's guard)"
else
    e2e_fail "Q4_0 with an imatrix: q4_1 on the first eighth of ffn_down" "$(grep ffn_down "$T/err" | head -n 2)"
fi

# ---- 3. kite imatrix -> kite quantize --------------------------------------------------
e2e_kite "$T/out" "$T/err" imatrix -m "$T/tiny-k256.gguf" -f "$CALIB" -c 128 -o "$T/k.imatrix" -t 2
if [ "$rc" -eq 0 ] && grep -q '^imatrix: 14 entries from 55 chunks of 128 tokens written to .*estimated ppl [0-9]' "$T/out"; then
    e2e_ok "kite imatrix writes 14 entries"
else
    e2e_fail "kite imatrix writes 14 entries" "exit $rc: $(head -n 1 "$T/out") $(tail -n 1 "$T/err")"
fi
e2e_kite "$T/out" "$T/err" quantize --imatrix "$T/k.imatrix" "$T/tiny-k256.gguf" "$T/kq.gguf" IQ4_XS 1
if [ "$rc" -eq 0 ] && grep -q "^quantize: imatrix $T/k.imatrix: 14 entries from $CALIB, 55 chunks" "$T/err" &&
    [ "$(grep -c '  imatrix$' "$T/err")" -eq 14 ]; then
    e2e_ok "kite quantize reads kite's file (14 matrices weighted)"
else
    e2e_fail "kite quantize reads kite's file" "exit $rc: $(grep -c '  imatrix$' "$T/err") weighted; $(tail -n 1 "$T/err")"
fi
"$KITE" info "$T/kq.gguf" >"$T/info" 2>&1
if grep -q 'quantize.imatrix.file  *string  *"'"$T"'/k.imatrix"' "$T/info" && grep -q 'quantize.imatrix.dataset  *string  *"'"$CALIB"'"' "$T/info" &&
    grep -q 'quantize.imatrix.entries_count  *int32  *14' "$T/info" && grep -q 'quantize.imatrix.chunks_count  *int32  *55' "$T/info"; then
    e2e_ok "quantize.imatrix.* keys, as llama-quantize writes them"
else
    e2e_fail "quantize.imatrix.* keys" "$(grep quantize.imatrix "$T/info" | tr '\n' ';')"
fi

# ---- 4. errors -------------------------------------------------------------------------
e2e_expect_error "imatrix of another model" 1 "kite quantize: " "has 64 values, the tensor needs 256" \
    quantize -q --imatrix "$D/stories260K.imatrix" "$T/tiny-k256.gguf" "$T/x.gguf" Q4_0
head -c 700 "$D/tiny-k256.imatrix" >"$T/cut.imatrix"
e2e_expect_error "truncated imatrix" 1 "kite quantize: " "cut.imatrix" \
    quantize -q --imatrix "$T/cut.imatrix" "$T/tiny-k256.gguf" "$T/x.gguf" Q4_0
e2e_expect_error "missing imatrix" 1 "kite quantize: " "no-such.imatrix: cannot open" \
    quantize -q --imatrix "$T/no-such.imatrix" "$T/tiny-k256.gguf" "$T/x.gguf" Q4_0
e2e_expect_error "--imatrix with gptq" 2 "kite quantize: " "--imatrix" \
    quantize -q --imatrix "$D/tiny-k256.imatrix" --method gptq --calib "$CALIB" "$T/tiny-k256.gguf" "$T/x.gguf" Q4_0
printf 'Once upon a time.\n' >"$T/short.txt"
e2e_expect_error "text shorter than a chunk" 1 "kite imatrix: " "less than one chunk of 128" \
    imatrix -q -m "$T/tiny-k256.gguf" -f "$T/short.txt" -c 128 -o "$T/short.imatrix"
if [ -e "$T/x.gguf" ] || [ -e "$T/short.imatrix" ] || ls "$T" | grep -q '\.tmp\.'; then
    e2e_fail "failed runs leave no file" "$(ls "$T" | tr '\n' ' ')"
else
    e2e_ok "failed runs leave no file"
fi

e2e_summary
