#!/bin/sh
# tests/e2e/test_tune.sh - end-to-end tests of `kite tune` and of the tune
# table at run time (src/kernels/tune.h, cli/tune.c, docs/kernels.md "Tuning").
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this; it exports KITE_TUNE=off for every other test, this script turns
# tuning back on with KITE_TUNE=on).  POSIX sh.  XDG_CACHE_HOME points to a
# scratch directory, so neither the user's tune table nor the probe cache is
# read or written; the probe runs once (1-3 s).
#
# What is checked:
#   * kite tune --quick on the bundled model writes a table (header, level,
#     entry lines; no temp file left) and prints its summary; a second run
#     for another thread count merges into the same file;
#   * kite bench with that table in KITE_TUNE_FILE names the variants that
#     ran (table output and the JSON "variants" object) and how many calls
#     the table chose;
#   * greedy generation gives the same text with the table and without it;
#   * a malformed line gives exactly one warning "kite: FILE:LINE: ..." and
#     the run goes on; KITE_TUNE=off ignores the table;
#   * kernel options: kite tune --quick times those that apply to a bf16 and
#     an f16 model at this machine's kernel level (and says why the others
#     are not timed); a table's "option" lines reach kite bench ("tune"), the
#     environment overrides them ("env"), a bad value warns once; greedy
#     text is the same with every option off and on;
#   * usage errors.
#
# The last line is "tests/e2e/test_tune.sh: N passed, M failed".

set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
XDG_CACHE_HOME=$T/cache
export XDG_CACHE_HOME
KITE_TUNE=on
export KITE_TUNE
unset KITE_TUNE_FILE
MODEL=models/stories260K.gguf

# kite_env OUT ERR VAR=VALUE ARGS...: e2e_kite with one more environment
# variable for this run only (env(1): portable, unlike VAR=x before a function).
kite_env() {
    _o=$1
    _e=$2
    _v=$3
    shift 3
    env "$_v" "$KITE" "$@" </dev/null >"$_o" 2>"$_e"
    rc=$?
}
TAB_FILE=$T/tune/table.txt

# ---- kite tune ------------------------------------------------------------------

e2e_kite "$T/out" "$T/err" tune --quick -m "$MODEL" -t 2 --out "$TAB_FILE"
n_entries=$(grep -c '^[a-z0-9_]* [0-9]* [0-9]* [0-9+-]* 2 [a-zA-Z0-9-]*$' "$TAB_FILE" 2>/dev/null)
if [ "$rc" -ne 0 ]; then
    e2e_fail "tune --quick writes a table" "exit $rc: $(e2e_first_line "$T/err")"
elif ! grep -q '^kite-tune 1$' "$TAB_FILE" || ! grep -q '^level [a-z0-9]*$' "$TAB_FILE"; then
    e2e_fail "tune --quick writes a table" "header: $(e2e_first_line "$TAB_FILE")"
elif [ "${n_entries:-0}" -lt 6 ]; then
    e2e_fail "tune --quick writes a table" "only ${n_entries:-0} entry lines"
elif ! grep -q "^wrote $TAB_FILE: " "$T/out" || ! grep -q '^| f32 ' "$T/out"; then
    e2e_fail "tune --quick writes a table" "summary: $(e2e_first_line "$T/out")"
elif [ "$(find "$T/tune" -type f | wc -l)" -ne 1 ]; then
    e2e_fail "tune --quick writes a table" "files left: $(find "$T/tune" -type f | tr '\n' ' ')"
else
    e2e_ok "tune --quick writes a table ($n_entries classes, atomically)"
fi

e2e_kite "$T/out" "$T/err" tune --quick -m "$MODEL" -t 1 --out "$TAB_FILE"
n1=$(grep -c '^[a-z0-9_]* [0-9]* [0-9]* [0-9+-]* 1 [a-zA-Z0-9-]*$' "$TAB_FILE")
n2=$(grep -c '^[a-z0-9_]* [0-9]* [0-9]* [0-9+-]* 2 [a-zA-Z0-9-]*$' "$TAB_FILE")
if [ "$rc" -eq 0 ] && [ "$n1" -ge 6 ] && [ "$n2" -eq "${n_entries:-0}" ]; then
    e2e_ok "tune -t 1 merges into the table (keeps the -t 2 classes)"
else
    e2e_fail "tune -t 1 merges into the table" "exit $rc, $n1 t=1 and $n2 t=2 lines: $(e2e_first_line "$T/err")"
fi

# ---- kite bench names the variants ---------------------------------------------

KITE_TUNE_FILE=$TAB_FILE
export KITE_TUNE_FILE
e2e_kite "$T/out" "$T/err" bench -m "$MODEL" -p 32 -n 4 -r 1 -t 2 --no-check
if [ "$rc" -ne 0 ]; then
    e2e_fail "bench names the variants" "exit $rc: $(e2e_first_line "$T/err")"
elif ! grep -q "^tune table: $TAB_FILE ([0-9]* classes)$" "$T/out"; then
    e2e_fail "bench names the variants" "no 'tune table:' line: $(grep -v '^|' "$T/out" | head -n 3)"
elif [ "$(grep -c '^variants \(pp32\|tg4\) t=2: [a-z].* [0-9][0-9]* (matmul calls; [1-9][0-9]* chosen by the tune table)$' "$T/out")" -ne 2 ]; then
    e2e_fail "bench names the variants" "variants lines: $(grep '^variants' "$T/out" | head -n 2)"
elif [ -s "$T/err" ] && grep -q '^kite: ' "$T/err"; then
    e2e_fail "bench names the variants" "warnings: $(grep '^kite: ' "$T/err" | head -n 1)"
else
    e2e_ok "bench names the variants (table output)"
fi
e2e_kite "$T/out" "$T/err" bench -m "$MODEL" -p 32 -n 0 -r 1 -t 2 --no-check --json
if [ "$rc" -eq 0 ] && [ "$(wc -l <"$T/out")" -eq 1 ] &&
    grep -q '"variants": {"[a-z]*-[0-9a-zK-]*": [1-9][0-9]*' "$T/out" &&
    grep -q '"variants_tuned": [1-9][0-9]*, "tune_table": "'"$TAB_FILE"'"' "$T/out" &&
    grep -q '"tok_s": [0-9]' "$T/out"; then
    e2e_ok "bench --json: variants, variants_tuned, tune_table"
else
    e2e_fail "bench --json variants" "exit $rc: $(e2e_first_line "$T/out") $(e2e_first_line "$T/err")"
fi

# ---- same results with and without the table ------------------------------------

e2e_kite "$T/tuned.txt" "$T/err" run -m "$MODEL" -p "Once upon a time" -n 40 --temp 0 -t 2
rc1=$rc
kite_env "$T/plain.txt" "$T/err" KITE_TUNE=off run -m "$MODEL" -p "Once upon a time" -n 40 --temp 0 -t 2
if [ "$rc1" -eq 0 ] && [ "$rc" -eq 0 ] && [ -s "$T/plain.txt" ] && cmp -s "$T/tuned.txt" "$T/plain.txt"; then
    e2e_ok "greedy text identical with the table and with KITE_TUNE=off"
else
    e2e_fail "greedy text identical with and without the table" "exit $rc1/$rc; $(e2e_first_line "$T/tuned.txt")"
fi

# ---- malformed tables, KITE_TUNE=off --------------------------------------------

{
    cat "$TAB_FILE"
    echo "q4_0 2048 2048 1 2 warp-speed"
} >"$T/bad.txt"
bad_line=$(wc -l <"$T/bad.txt" | tr -d ' ')
kite_env "$T/out" "$T/err" "KITE_TUNE_FILE=$T/bad.txt" bench -m "$MODEL" -p 8 -n 2 -r 1 -t 2 --no-check
if [ "$rc" -ne 0 ]; then
    e2e_fail "malformed line: one warning, still runs" "exit $rc: $(e2e_first_line "$T/err")"
elif [ "$(grep -c '^kite: ' "$T/err")" -ne 1 ] || ! grep -q "^kite: $T/bad.txt:$bad_line: unknown variant" "$T/err"; then
    e2e_fail "malformed line: one warning, still runs" "stderr: $(grep '^kite: ' "$T/err" | head -n 2 | tr '\n' '|')"
elif ! grep -q "^tune table: $T/bad.txt (" "$T/out"; then
    e2e_fail "malformed line: one warning, still runs" "the rest of the table was not used"
else
    e2e_ok "malformed line: one warning (file:line), the rest of the table used"
fi
printf 'not a table\n' >"$T/junk.txt"
kite_env "$T/out" "$T/err" "KITE_TUNE_FILE=$T/junk.txt" bench -m "$MODEL" -p 0 -n 2 -r 1 -t 1 --no-check
if [ "$rc" -eq 0 ] && [ "$(grep -c '^kite: ' "$T/err")" -eq 1 ] && grep -q "junk.txt:1: not a kite tune table" "$T/err" &&
    grep -q '^tune table: none' "$T/out"; then
    e2e_ok "not a table: one warning, built-in defaults"
else
    e2e_fail "not a table: one warning, built-in defaults" "exit $rc: $(grep '^kite: ' "$T/err" | head -n 1)"
fi
kite_env "$T/out" "$T/err" KITE_TUNE=off bench -m "$MODEL" -p 0 -n 2 -r 1 -t 2 --no-check
if [ "$rc" -eq 0 ] && grep -q '^tune table: off' "$T/out" && grep -q '(matmul calls; 0 chosen by the tune table)$' "$T/out"; then
    e2e_ok "KITE_TUNE=off: built-in defaults"
else
    e2e_fail "KITE_TUNE=off: built-in defaults" "exit $rc: $(grep '^tune\|^variants' "$T/out" | head -n 2 | tr '\n' '|')"
fi

# ---- kernel options (dispatch.h kern_opt) ------------------------------------------

LEVEL=$(sed -n 's/^level //p' "$TAB_FILE")
for ty in bf16 f16; do
    e2e_kite "$T/out" "$T/err" synth --shape tiny-llama3 --type $ty -o "$T/tiny-$ty.gguf" -t 1
    [ "$rc" -eq 0 ] || e2e_fail "synth tiny-llama3 $ty" "exit $rc: $(e2e_first_line "$T/err")"
done
e2e_kite "$T/out" "$T/err" tune --quick -m "$T/tiny-bf16.gguf" -t 2 --min-mib 0 --out "$T/opt.txt"
# what this level times: decode-prefetch at avx512 and up, bf16-fma at avx512bf16; f16-widen needs f16 matrices
case $LEVEL in
avx512bf16) want_pf=timed want_bf=timed ;;
avx512 | avx512vnni) want_pf=timed want_bf=skip ;;
*) want_pf=skip want_bf=skip ;;
esac
opt_row() { # opt_row NAME timed|skip: the summary row of an option says the same
    if [ "$2" = timed ]; then
        grep -q "^| $1 *| \(pp\|tg\)[0-9]* *| *[0-9.]* | *[0-9.]* | \(on\|off\|no change\) " "$T/out"
    else
        grep -q "^| $1 *| - .* not timed: " "$T/out"
    fi
}
if [ "$rc" -ne 0 ]; then
    e2e_fail "tune times the kernel options" "exit $rc: $(e2e_first_line "$T/err")"
elif ! opt_row decode-prefetch $want_pf || ! opt_row bf16-fma $want_bf || ! opt_row f16-widen skip; then
    e2e_fail "tune times the kernel options ($LEVEL)" "$(grep '^| [a-z0-9]*-[a-z]* ' "$T/out" | tr '\n' '|')"
elif grep -v '^option \(decode-prefetch\|bf16-fma\) \(on\|off\)$' "$T/opt.txt" | grep -q '^option'; then
    e2e_fail "tune times the kernel options" "option lines: $(grep '^option' "$T/opt.txt" | tr '\n' '|')"
else
    e2e_ok "tune times the kernel options that apply ($LEVEL: decode-prefetch $want_pf, bf16-fma $want_bf)"
fi
e2e_kite "$T/out" "$T/err" tune --quick -m "$T/tiny-f16.gguf" -t 2 --no-options --out "$T/opt2.txt"
if [ "$rc" -eq 0 ] && ! grep -q '^| f16-widen' "$T/out" && grep -q '^| f16 ' "$T/out"; then
    e2e_ok "tune --no-options times the matmul variants only"
else
    e2e_fail "tune --no-options" "exit $rc: $(grep '^| [a-z0-9]*-[a-z]* ' "$T/out" | head -n 1)"
fi

printf 'kite-tune 1\nlevel %s\noption decode-prefetch off\noption f16-widen on\n' "$LEVEL" >"$T/opts.txt"
kite_env "$T/out" "$T/err" "KITE_TUNE_FILE=$T/opts.txt" bench -m "$MODEL" -p 0 -n 2 -r 1 -t 1 --no-check --json
if [ "$rc" -eq 0 ] && grep -q '"decode_prefetch": false, "bf16_fma": [a-z]*, "f16_widen": true' "$T/out" &&
    grep -q '"kernel_opts_from": {"decode-prefetch": "tune", "bf16-fma": "cpu", "f16-widen": "tune"}' "$T/out"; then
    e2e_ok "bench: the table's option lines apply (from \"tune\")"
else
    e2e_fail "bench: the table's option lines apply" "exit $rc: $(grep -o '"decode_prefetch.*"f16-widen": "[a-z]*"}' "$T/out")"
fi
KITE_TUNE_FILE=$T/opts.txt KITE_DECODE_PREFETCH=1 KITE_BF16_FMA=yes "$KITE" bench -m "$MODEL" -p 0 -n 2 -r 1 -t 1 \
    --no-check --json </dev/null >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -q '"decode_prefetch": true' "$T/out" &&
    grep -q '"kernel_opts_from": {"decode-prefetch": "env", "bf16-fma": "cpu", "f16-widen": "tune"}' "$T/out" &&
    [ "$(grep -c '^kite: ' "$T/err")" -eq 1 ] && grep -q '^kite: KITE_BF16_FMA=yes is not 0 or 1: ignored$' "$T/err"; then
    e2e_ok "bench: the environment overrides the table; a bad value warns once"
else
    e2e_fail "bench: environment overrides" "exit $rc: $(grep -o '"decode_prefetch.*"f16-widen": "[a-z]*"}' "$T/out") $(e2e_first_line "$T/err")"
fi
# the prompt is 14 tokens of this vocabulary: more than 12, so f16 prefill takes the widened path
for ty in bf16 f16; do
    KITE_DECODE_PREFETCH=0 KITE_BF16_FMA=0 KITE_F16_WIDEN=0 "$KITE" run -m "$T/tiny-$ty.gguf" -p "Once upon a time" \
        -n 24 --temp 0 -t 2 </dev/null >"$T/off.txt" 2>"$T/err"
    rc1=$?
    KITE_DECODE_PREFETCH=1 KITE_BF16_FMA=1 KITE_F16_WIDEN=1 "$KITE" run -m "$T/tiny-$ty.gguf" -p "Once upon a time" \
        -n 24 --temp 0 -t 2 </dev/null >"$T/on.txt" 2>"$T/err"
    rc=$?
    if [ "$rc1" -eq 0 ] && [ "$rc" -eq 0 ] && [ -s "$T/on.txt" ] && cmp -s "$T/off.txt" "$T/on.txt"; then
        e2e_ok "$ty: greedy text identical with every kernel option off and on"
    else
        e2e_fail "$ty: greedy text with options off and on" "exit $rc1/$rc: $(e2e_first_line "$T/err")"
    fi
done

# ---- usage errors ------------------------------------------------------------------

e2e_expect_error "tune: unknown option" 2 "kite tune: " "--bogus" tune --bogus
e2e_expect_error "tune: -t 0" 2 "kite tune: " "-t" tune -t 0
e2e_expect_error "tune: --min-mib -1" 2 "kite tune: " "--min-mib" tune --min-mib -1
e2e_expect_error "tune: missing model" 1 "kite tune: " "$T/none.gguf" tune -m "$T/none.gguf" --out "$T/x.txt"

e2e_summary
