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

# ---- usage errors ------------------------------------------------------------------

e2e_expect_error "tune: unknown option" 2 "kite tune: " "--bogus" tune --bogus
e2e_expect_error "tune: -t 0" 2 "kite tune: " "-t" tune -t 0
e2e_expect_error "tune: missing model" 1 "kite tune: " "$T/none.gguf" tune -m "$T/none.gguf" --out "$T/x.txt"

e2e_summary
