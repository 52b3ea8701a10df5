#!/bin/sh
# tests/e2e/test_bench.sh - end-to-end tests of `kite synth` and `kite bench`.
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does
# this).  POSIX sh, no python.  The probe cache goes to a scratch
# XDG_CACHE_HOME, so the user's cache is never touched; the probe itself runs
# once (about 1-3 s).  Models are stories260k-shaped with one layer, and the
# benchmarks are tiny (-p 8 -n 4 -r 2), so the script takes a few seconds.
#
# What is checked:
#   * synth: same seed -> identical bytes, another seed -> different; the file
#     runs with `kite run`; usage errors exit 2 and an unquantizable type
#     exits 1, each with one stderr line;
#   * bench --probe: prints the bandwidth / FMA figures and writes the cache;
#   * bench --json: one line per test (pp8, tg4) with every documented key,
#     residency heap by default and mmap with --mmap, positive speeds;
#   * bench table output and usage errors;
#   * `kite run` reports the weight residency on stderr;
#   * bench --spec-verify prints its k table, bench --spec lookup 3 its plain
#     vs speculative table with identical output; their usage errors.
#
# The last line is "tests/e2e/test_bench.sh: N passed, M failed".

set -u
. tests/e2e/lib.sh
e2e_init

T=$E2E_TMP
XDG_CACHE_HOME=$T/cache
export XDG_CACHE_HOME

# expect_error NAME STATUS NEEDLE ARGS...: exit status STATUS, one stderr line
# of the form "kite CMD: ..." containing NEEDLE.
expect_error() {
    _n=$1
    _s=$2
    shift 2
    e2e_expect_error "$_n" "$_s" "" "$@"
}

# json_num FILE KEY: the numeric value of KEY in the one-line JSON FILE.
json_num() {
    sed -n "s/.*\"$2\": *\([-+.0-9eE]*\)[,}].*/\1/p" "$1"
}

# json_str FILE KEY: the string value of KEY.
json_str() {
    sed -n "s/.*\"$2\": *\"\([^\"]*\)\".*/\1/p" "$1"
}

# ---- synth ------------------------------------------------------------------

e2e_kite "$T/out" "$T/err" synth --shape stories260k --layers 1 --type f32 -o "$T/a.gguf" --seed 5 -t 1
rc1=$rc
e2e_kite "$T/out" "$T/err" synth --shape stories260k --layers 1 --type f32 -o "$T/b.gguf" --seed 5 -t 2
rc2=$rc
e2e_kite "$T/out" "$T/err" synth --shape stories260k --layers 1 --type f32 -o "$T/c.gguf" --seed 6
if [ "$rc1" -ne 0 ] || [ "$rc2" -ne 0 ] || [ "$rc" -ne 0 ]; then
    e2e_fail "synth writes files" "exit $rc1/$rc2/$rc: $(e2e_first_line "$T/err")"
elif ! grep -q "shape stories260k, 1 layers, type f32, seed 6" "$T/out"; then
    e2e_fail "synth writes files" "summary line: $(e2e_first_line "$T/out")"
else
    e2e_ok "synth writes files"
fi
if cmp -s "$T/a.gguf" "$T/b.gguf"; then
    e2e_ok "synth: same seed, any -t, same bytes"
else
    e2e_fail "synth: same seed, any -t, same bytes" "$(cmp "$T/a.gguf" "$T/b.gguf" 2>&1 | head -n 1)"
fi
if cmp -s "$T/a.gguf" "$T/c.gguf"; then
    e2e_fail "synth: another seed, other bytes" "files are identical"
else
    e2e_ok "synth: another seed, other bytes"
fi

e2e_kite "$T/out" "$T/err" run -m "$T/a.gguf" -p "hello" -n 8 --temp 0 -t 1
if [ "$rc" -ne 0 ]; then
    e2e_fail "synth model runs" "exit $rc: $(e2e_first_line "$T/err")"
elif ! grep -q "weights heap" "$T/err"; then
    e2e_fail "synth model runs" "stderr lacks 'weights heap': $(e2e_first_line "$T/err")"
else
    e2e_ok "synth model runs (run reports weights heap)"
fi
e2e_kite "$T/out" "$T/err" run -m "$T/a.gguf" -p "hello" -n 2 --temp 0 -t 1 --mmap
if [ "$rc" -eq 0 ] && grep -q "weights mmap" "$T/err"; then
    e2e_ok "run --mmap reports weights mmap"
else
    e2e_fail "run --mmap reports weights mmap" "exit $rc: $(e2e_first_line "$T/err")"
fi

expect_error "synth: unknown shape" 2 "gpt-9" synth --shape gpt-9 --type f32 -o "$T/x.gguf"
expect_error "synth: no -o" 2 "-o" synth --shape stories260k --type f32
expect_error "synth: unknown type" 2 "zz9" synth --shape stories260k --type zz9 -o "$T/x.gguf"
expect_error "synth: type without quantizer" 1 "from_float" synth --shape stories260k --type i8 -o "$T/x.gguf"
# one prefix: library messages do not repeat the command's name
e2e_expect_error "synth: one prefix" 1 "kite synth: type i8 " "from_float" synth --shape stories260k --type i8 -o "$T/x.gguf"
e2e_expect_error "roofline: one prefix" 2 "kite roofline: unknown shape 'gpt-9'" "" roofline --shape gpt-9
if [ -e "$T/x.gguf" ]; then
    e2e_fail "synth: failures leave no file" "$T/x.gguf exists"
else
    e2e_ok "synth: failures leave no file"
fi

# rows a block does not fit: kite quantize's per-tensor fallback (quant_fallback), one summary line
e2e_kite "$T/out" "$T/err" synth --shape stories260k --type q4_0 -o "$T/s-q4.gguf" -t 1
if [ "$rc" -eq 0 ] && [ "$(grep -c 'fell back' "$T/err")" -eq 1 ] &&
    grep -q '^kite synth: 5 tensors fell back to a type that fits their row length: ffn_down q4_0->f16 (row 172) x5$' "$T/err"; then
    e2e_ok "synth: stories260k q4_0 falls back (ffn_down q4_0->f16), one line"
else
    e2e_fail "synth: stories260k q4_0 falls back" "exit $rc: $(e2e_first_line "$T/err")"
fi
e2e_kite "$T/out" "$T/err" run -m "$T/s-q4.gguf" -p "hello" -n 2 --temp 0 -t 1
if [ "$rc" -eq 0 ]; then e2e_ok "synth: the fallback file runs"; else
    e2e_fail "synth: the fallback file runs" "exit $rc: $(e2e_first_line "$T/err")"; fi
# the same types as kite quantize gives the f32 synth file
e2e_kite "$T/out" "$T/err" synth --shape stories260k --type f32 -o "$T/s-f32.gguf" -t 1
e2e_kite "$T/out" "$T/err" quantize -m "$T/s-f32.gguf" -o "$T/s-q4q.gguf" --type q4_0 --pure -t 1
"$KITE" info "$T/s-q4.gguf" | awk '$2 ~ /weight$/ { print $2, $3 }' >"$T/types-synth"
"$KITE" info "$T/s-q4q.gguf" | awk '$2 ~ /weight$/ { print $2, $3 }' >"$T/types-quant"
if [ -s "$T/types-synth" ] && cmp -s "$T/types-synth" "$T/types-quant" && grep -q '^blk.0.ffn_down.weight f16$' "$T/types-synth"; then
    e2e_ok "synth: per-tensor types equal kite quantize's (q4_0)"
else
    e2e_fail "synth: per-tensor types equal kite quantize's (q4_0)" "$(diff "$T/types-synth" "$T/types-quant" | head -n 2 | tr '\n' '|')"
fi
e2e_kite "$T/out" "$T/err" synth --shape tiny-qwen2 --type q4_k_m -o "$T/s-km.gguf" -t 1
if [ "$rc" -eq 0 ] && grep -q '^kite synth: [0-9]* tensors fell back .*token_embd q4_K->q5_0 (row 64).*attn_v q6_K->q8_0 (row 64)' "$T/err"; then
    e2e_ok "synth: tiny-qwen2 q4_k_m falls back (q4_K->q5_0, q6_K->q8_0)"
else
    e2e_fail "synth: tiny-qwen2 q4_k_m falls back" "exit $rc: $(e2e_first_line "$T/err")"
fi
e2e_kite "$T/out" "$T/err" synth --shape tiny-qwen2 --type f32 -o "$T/s-f32b.gguf" -t 1
if [ "$rc" -eq 0 ] && [ ! -s "$T/err" ]; then e2e_ok "synth: no fallback, no line"; else
    e2e_fail "synth: no fallback, no line" "exit $rc: $(e2e_first_line "$T/err")"; fi
# one prefix for the quantizer's own messages (an already-quantized input)
e2e_expect_error "quantize: one prefix" 1 "kite quantize: token_embd.weight: input is already quantized" "" \
    quantize -m "$T/s-q4.gguf" -o "$T/s-rq.gguf" --type q8_0 -t 1
rm -f "$T/s-q4.gguf" "$T/s-q4q.gguf" "$T/s-f32.gguf" "$T/s-km.gguf" "$T/s-f32b.gguf"

# ---- bench --------------------------------------------------------------------

# (the cache file, not the file tests/run.sh pins for the suite: KITE_PROBE_FILE)
pinned=${KITE_PROBE_FILE:-}
unset KITE_PROBE_FILE
e2e_kite "$T/out" "$T/err" bench --probe
if [ "$rc" -ne 0 ]; then
    e2e_fail "bench --probe" "exit $rc: $(e2e_first_line "$T/err")"
elif ! grep -q "read bandwidth, 1 thread: [0-9.]* GB/s (core availability [0-9]*%" "$T/out" ||
    ! grep -q "FP32 FMA peak: [0-9]" "$T/out"; then
    e2e_fail "bench --probe" "output: $(e2e_first_line "$T/out")"
elif ! grep -q "^read_gbs 1 [0-9]" "$XDG_CACHE_HOME/kite/probe.txt" 2>/dev/null; then
    e2e_fail "bench --probe" "no cache file $XDG_CACHE_HOME/kite/probe.txt"
else
    e2e_ok "bench --probe (measures and caches)"
fi
# each read probe comes with the core availability around it and the busy tries (0..3)
e2e_kite "$T/out" "$T/err" bench --probe --json
if [ "$rc" -eq 0 ] && grep -q '"measured": true, "read_avail_pct": \[[0-9.]*[],]' "$T/out" &&
    grep -q '"read_busy_tries": \[[0-3][],]' "$T/out"; then
    e2e_ok "bench --probe --json: read_avail_pct, read_busy_tries"
else
    e2e_fail "bench --probe --json: availability fields" "exit $rc: $(e2e_first_line "$T/out")"
fi
# KITE_PROBE_FILE: a busy probe there is used as it is, unchanged (a cached busy one is measured again)
# (7 s older than the cache's, so that the run's probe_measured_at tells which one it used)
at=$(($(sed -n 's/^measured_at //p' "$XDG_CACHE_HOME/kite/probe.txt") - 7))
sed "s/^read_avail 1 .*/read_avail 1 0.100/; s/^read_busy 1 .*/read_busy 1 3/; s/^measured_at .*/measured_at $at/" \
    "$XDG_CACHE_HOME/kite/probe.txt" >"$T/busy-probe.txt"
cp "$T/busy-probe.txt" "$T/busy-probe.orig"
KITE_PROBE_FILE=$T/busy-probe.txt "$KITE" bench -m models/stories260K.gguf -p 4 -n 2 -r 1 -t 1 --no-check --json \
    </dev/null >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && [ -n "$at" ] && grep -q "\"probe_measured_at\": $at," "$T/out" &&
    cmp -s "$T/busy-probe.txt" "$T/busy-probe.orig"; then
    e2e_ok "KITE_PROBE_FILE: a busy probe there is used, not measured again"
else
    e2e_fail "KITE_PROBE_FILE" "exit $rc, measured_at $at: $(grep -o '"probe_measured_at": [0-9]*' "$T/out" | head -n 1) $(e2e_first_line "$T/err")"
fi
[ -n "$pinned" ] && KITE_PROBE_FILE=$pinned && export KITE_PROBE_FILE

e2e_kite "$T/out" "$T/err" bench -m "$T/a.gguf" -p 8 -n 4 -r 2 -t 1 --json
if [ "$rc" -ne 0 ]; then
    e2e_fail "bench --json" "exit $rc: $(e2e_first_line "$T/err")"
elif [ "$(wc -l <"$T/out")" -ne 2 ]; then
    e2e_fail "bench --json" "expected 2 lines, got $(wc -l <"$T/out")"
else
    sed -n 1p "$T/out" >"$T/pp.json"
    sed -n 2p "$T/out" >"$T/tg.json"
    bad=
    for k in model type test threads tok_s tok_s_min tok_s_max gb_s roofline_pct kernels residency; do
        grep -q "\"$k\": " "$T/pp.json" || bad="$bad $k"
        grep -q "\"$k\": " "$T/tg.json" || bad="$bad $k"
    done
    if [ -n "$bad" ]; then
        e2e_fail "bench --json" "missing keys:$bad"
    elif [ "$(json_str "$T/pp.json" test)" != pp8 ] || [ "$(json_str "$T/tg.json" test)" != tg4 ]; then
        e2e_fail "bench --json" "tests '$(json_str "$T/pp.json" test)', '$(json_str "$T/tg.json" test)'"
    elif [ "$(json_str "$T/pp.json" residency)" != heap ] || [ "$(json_str "$T/pp.json" type)" != F32 ]; then
        e2e_fail "bench --json" "residency/type: $(cat "$T/pp.json")"
    elif ! awk -v a="$(json_num "$T/tg.json" tok_s)" -v lo="$(json_num "$T/tg.json" tok_s_min)" \
        -v hi="$(json_num "$T/tg.json" tok_s_max)" -v g="$(json_num "$T/tg.json" gb_s)" \
        'BEGIN { exit !(a > 0 && lo > 0 && lo <= a && a <= hi && g > 0) }'; then
        e2e_fail "bench --json" "speeds not positive/ordered: $(cat "$T/tg.json")"
    else
        e2e_ok "bench --json (pp8, tg4, every key)"
    fi
fi

# -d N: the tests run after N cached positions (named tg4@d40), the JSON says the depth and the KV
# bytes a step reads (f16 KV: 2 caches x layers x the KV row of a position x the mean position);
# a depth beyond a sliding-window model's ring cache is refused in one line
e2e_kite "$T/out" "$T/err" bench -m "$T/a.gguf" -p 4 -n 4 -r 1 -t 1 -d 40 --kv-type f16 --json --no-check
if [ "$rc" -eq 0 ] && grep -q '"test": "pp4@d40"' "$T/out" && grep -q '"test": "tg4@d40"' "$T/out" &&
    grep -q '"depth": 40' "$T/out" && sed -n 2p "$T/out" | grep -q '"kv_bytes_per_token": [1-9]'; then
    e2e_ok "bench -d 40 (pp4@d40, tg4@d40, depth and KV bytes in the JSON)"
else
    e2e_fail "bench -d" "exit $rc: $(e2e_first_line "$T/out") $(e2e_first_line "$T/err")"
fi
e2e_kite "$T/out" "$T/err" synth --shape tiny-mistral --layers 1 --type f32 -o "$T/swa.gguf" -q
e2e_kite "$T/out" "$T/err" bench -m "$T/swa.gguf" -p 0 -n 2 -r 1 -t 1 -d 2000 --no-check
if [ "$rc" -ne 0 ] && tail -n 1 "$T/err" | grep -q "^kite bench: -d 2000: .*sliding-window"; then
    e2e_ok "bench -d on a sliding-window model: refused in one line"
else
    e2e_fail "bench -d, sliding window" "exit $rc: $(cat "$T/err")"
fi

# --profile --json: every line gets an "ops" object of the 16 op types, seconds per token, >= 0
e2e_kite "$T/out" "$T/err" bench -m "$T/a.gguf" -p 8 -n 4 -r 2 -t 1 --json --profile --no-check
ops_ok=yes
[ "$rc" -eq 0 ] && [ "$(wc -l <"$T/out")" -eq 2 ] || ops_ok=no
while IFS= read -r line; do
    o=$(printf '%s\n' "$line" | sed -n 's/.*"ops": {\([^}]*\)}.*/\1/p')
    [ "$(printf '%s\n' "$o" | tr ',' '\n' | grep -c '"[a-z_]*": [0-9][-+.0-9e]*$')" -eq 16 ] || ops_ok=no
    for k in embed attn_norm q_proj k_proj v_proj rope attention o_proj ffn_norm ffn_gate ffn_up ffn_act ffn_down out_norm output other; do
        printf '%s\n' "$o" | grep -q "\"$k\": [0-9]" || ops_ok=no
    done
done <"$T/out"
if [ "$ops_ok" = yes ]; then
    e2e_ok "bench --profile --json (ops object, 16 non-negative op times)"
else
    e2e_fail "bench --profile --json" "exit $rc: $(e2e_first_line "$T/out") $(e2e_first_line "$T/err")"
fi
e2e_kite "$T/out" "$T/err" bench -m "$T/a.gguf" -p 4 -n 2 -r 1 -t 1 --profile --no-check
if [ "$rc" -eq 0 ] && grep -q "^per-op time per token" "$T/out" && grep -q "^| ffn_down " "$T/out"; then
    e2e_ok "bench --profile table"
else
    e2e_fail "bench --profile table" "exit $rc: $(e2e_first_line "$T/err")"
fi

# roofline --compare runs the model with the per-op profile: every op type gets a row
e2e_kite "$T/out" "$T/err" roofline -m "$T/a.gguf" --hw H200 --prompt 8 --gen 4 -t 1 --compare
if [ "$rc" -eq 0 ] && [ "$(grep -c '^| \*\*total\*\* | [0-9.]* | [0-9.]* | [0-9.]* |$' "$T/out")" -eq 2 ] &&
    [ "$(grep -c '^| ffn_down | ' "$T/out")" -eq 2 ] && grep -q '^| other (not modelled) | - | ' "$T/out"; then
    e2e_ok "roofline --compare (real forward pass, prefill and decode per op)"
else
    e2e_fail "roofline --compare" "exit $rc: $(e2e_first_line "$T/err")"
fi
expect_error "roofline --compare without a model" 2 "--compare" roofline --shape stories260k --hw H200 --compare
# every KV type kite stores is accepted, and priced: the JSON line names it
kv_ok=yes
for kv in f32 f16 q8_0 q4_0; do
    e2e_kite "$T/out" "$T/err" roofline --shape stories260k --hw H200 --kvtype "$kv" --json
    [ "$rc" -eq 0 ] && grep -q "\"kvtype\": \"$kv\"" "$T/out" || kv_ok="no ($kv: exit $rc)"
done
if [ "$kv_ok" = yes ]; then e2e_ok "roofline --kvtype f32|f16|q8_0|q4_0"; else e2e_fail "roofline --kvtype" "$kv_ok"; fi
expect_error "roofline --kvtype q5_1 (not a KV type)" 2 "q4_0" roofline --shape stories260k --hw H200 --kvtype q5_1
# gpt2 and the MoE shapes are costed (fused QKV, no RoPE; router and experts)
e2e_kite "$T/out" "$T/err" roofline --shape gpt2-124m --hw H200 --json
if [ "$rc" -eq 0 ] && grep -q '"name": "qkv_proj"' "$T/out" && ! grep -q '"name": "rope"' "$T/out"; then
    e2e_ok "roofline --shape gpt2-124m"
else
    e2e_fail "roofline gpt2" "exit $rc: $(e2e_first_line "$T/err")"
fi
e2e_kite "$T/out" "$T/err" roofline --shape mixtral-8x7b --hw H200 --batch 4 --json
if [ "$rc" -eq 0 ] && grep -q '"name": "ffn_router"' "$T/out"; then
    e2e_ok "roofline --shape mixtral-8x7b (router and top-k experts)"
else
    e2e_fail "roofline mixtral" "exit $rc: $(e2e_first_line "$T/err")"
fi

# --png without gnuplot is an error naming it (PATH without gnuplot: a wrapper)
printf '#!/bin/sh\nPATH=/nonexistent exec "%s" "$@"\n' "$(pwd)/$KITE" >"$T/kite-nogp"
chmod +x "$T/kite-nogp"
KITE_REAL=$KITE
KITE=$T/kite-nogp
e2e_expect_error "roofline --png without gnuplot is an error" 1 "kite roofline: --png $T/r0.png needs gnuplot" \
    "not installed" roofline --shape stories260k --hw H200 --png "$T/r0.png"
KITE=$KITE_REAL
if [ -e "$T/r0.png" ]; then e2e_fail "roofline --png without gnuplot: no file" "$T/r0.png exists"; else
    e2e_ok "roofline --png without gnuplot: no file"; fi

# --png needs gnuplot; without it the check is skipped (not counted)
if command -v gnuplot >/dev/null 2>&1; then
    e2e_kite "$T/out" "$T/err" roofline -m "$T/a.gguf" --hw H200 --png "$T/r.png"
    if [ "$rc" -eq 0 ] && [ "$(head -c 8 "$T/r.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; then
        e2e_ok "roofline --png (gnuplot, PNG signature)"
    else
        e2e_fail "roofline --png" "exit $rc: $(e2e_first_line "$T/err")"
    fi
else
    echo "  note  roofline --png: gnuplot not installed, PNG check skipped (not counted)"
fi

e2e_kite "$T/out" "$T/err" bench -m "$T/a.gguf" -p 0 -n 2 -r 1 -t 1 --json --mmap --no-check
if [ "$rc" -eq 0 ] && [ "$(wc -l <"$T/out")" -eq 1 ] && [ "$(json_str "$T/out" residency)" = mmap ]; then
    e2e_ok "bench --mmap (-p 0 skips prefill)"
else
    e2e_fail "bench --mmap (-p 0 skips prefill)" "exit $rc: $(e2e_first_line "$T/out") $(e2e_first_line "$T/err")"
fi

e2e_kite "$T/out" "$T/err" bench -m "$T/a.gguf" -p 4 -n 2 -r 1 -t 1,2 --no-check
if [ "$rc" -eq 0 ] && grep -q "^| model" "$T/out" && [ "$(grep -c "^| a.gguf" "$T/out")" -eq 4 ] &&
    grep -q "weights heap" "$T/err"; then
    e2e_ok "bench table (-t 1,2)"
else
    e2e_fail "bench table (-t 1,2)" "exit $rc: $(e2e_first_line "$T/err")"
fi

# no -m: the bundled model, as run and chat (issue 28; it used to be a usage error)
e2e_kite "$T/out" "$T/err" bench -p 4 -n 2 -r 1 -t 1 --no-check
if [ "$rc" -eq 0 ] && grep -q "^| stories260K.gguf" "$T/out" && grep -q "models/stories260K.gguf: load" "$T/err"; then
    e2e_ok "bench: no model benchmarks the bundled one"
else
    e2e_fail "bench: no model benchmarks the bundled one" "exit $rc: $(e2e_first_line "$T/err")"
fi
expect_error "bench: -t 0" 2 "-t" bench -m "$T/a.gguf" -t 0
expect_error "bench: -r 0" 2 "-r" bench -m "$T/a.gguf" -r 0
expect_error "bench: missing file" 1 "$T/none.gguf" bench -m "$T/none.gguf"

# ---- speculative decoding (cli/bench_spec.c) ----------------------------------

e2e_kite "$T/out" "$T/err" bench -m "$T/a.gguf" --spec-verify --n-past 8 --k 1,2,4 -r 2 -t 1
if [ "$rc" -eq 0 ] && grep -q "^spec-verify: a.gguf, 1 layers, n_past 8, threads 1, 2 repetitions" "$T/out" &&
    grep -q "^|   k | tokens |" "$T/out" && [ "$(grep -c '^| *[124] | *[235] | ' "$T/out")" -eq 3 ]; then
    e2e_ok "bench --spec-verify table (k = 1, 2, 4)"
else
    e2e_fail "bench --spec-verify" "exit $rc: $(e2e_first_line "$T/out") $(e2e_first_line "$T/err")"
fi
e2e_kite "$T/out" "$T/err" bench -m models/stories260K.gguf --spec lookup 3 -n 24 -r 1 -t 1
if [ "$rc" -eq 0 ] && grep -q "^| plain  *| *[0-9.]* |" "$T/out" && grep -q "^| speculative  *| *[0-9.]* |" "$T/out" &&
    grep -q "^speedup [0-9.]*x .*acceptance [0-9.]*% .*tokens/pass .*identical to plain greedy decoding" "$T/out"; then
    e2e_ok "bench --spec lookup 3 (plain vs speculative, same output)"
else
    e2e_fail "bench --spec lookup 3" "exit $rc: $(e2e_first_line "$T/out") $(e2e_first_line "$T/err")"
fi
expect_error "bench: --spec with an unknown drafter" 2 "unknown drafter" bench -m "$T/a.gguf" --spec magic 3
expect_error "bench: --spec lookup 0" 2 "expected N in 1..64" bench -m "$T/a.gguf" --spec lookup 0
expect_error "bench: --parallel with a bad list" 2 "--parallel" bench -m "$T/a.gguf" --parallel 1,x
expect_error "bench: --spec-verify and --spec together" 2 "either" bench -m "$T/a.gguf" --spec-verify --spec lookup 3
expect_error "bench: --spec-verify --k 17" 2 "--k" bench -m "$T/a.gguf" --spec-verify --k 17

# ---- bench/render.sh: one probe per model, each model against its own ---------
# two probes (40 and 80 GB/s on 2 threads), one 1 GB/token model measured after
# each; llama.cpp beside the first.  Each roofline must use its model's probe.
cat >"$T/res.jsonl" <<'EOF_RES'
{"probe": true, "cpu": "TestCPU", "n_cpu": 2, "isa": "avx512", "fma_gflops_per_thread": 100.00, "read_gb_s": [20.00, 40.00], "measured": true, "read_avail_pct": [99.0, 55.5], "read_busy_tries": [0, 3]}
{"model": "tinyllama-1.1b-L2-q8_0.gguf", "type": "Q8_0", "test": "tg32", "threads": 2, "tok_s": 30.000, "tok_s_min": 29.000, "tok_s_max": 31.000, "gb_s": 30.000, "roofline_pct": 75.00, "gflops": 1.00, "kernels": "avx512", "residency": "heap", "load_ms": 1.0, "reps": 3, "noisy_reps": 0, "redone": 0, "avail_pct": 99.0, "bytes_per_token": 1000000000, "n_layer": 2, "read_gb_s": 40.00}
{"engine": "llama.cpp", "model_filename": "/x/tinyllama-1.1b-L2-q8_0.gguf", "n_prompt": 0, "n_gen": 32, "n_threads": 2, "use_mmap": false, "samples_ts": [20.0, 20.0, 20.0], "build_commit": "abc", "build_number": 1}
{"probe": true, "cpu": "TestCPU", "n_cpu": 2, "isa": "avx512", "fma_gflops_per_thread": 100.00, "read_gb_s": [30.00, 80.00], "measured": true, "read_avail_pct": [97.0, 91.0], "read_busy_tries": [0, 1]}
{"model": "tinyllama-1.1b-L2-q4_0.gguf", "type": "Q4_0", "test": "tg32", "threads": 2, "tok_s": 60.000, "tok_s_min": 59.000, "tok_s_max": 61.000, "gb_s": 60.000, "roofline_pct": 75.00, "gflops": 1.00, "kernels": "avx512", "residency": "heap", "load_ms": 1.0, "reps": 3, "noisy_reps": 0, "redone": 0, "avail_pct": 99.0, "bytes_per_token": 1000000000, "n_layer": 2, "read_gb_s": 80.00}
EOF_RES
printf 'date test\ncommit test\nnproc 2\nlayers 2\nreps 3\n' >"$T/meta.txt"
if ! sh bench/render.sh "$T/res.jsonl" "$T/meta.txt" >"$T/gen.md" 2>"$T/err"; then
    e2e_fail "bench/render.sh" "$(e2e_first_line "$T/err")"
elif ! grep -q "2 probes, one before each model; min-max): read bandwidth 20.0-30.0 GB/s (1 thread), 40.0-80.0 GB/s" "$T/gen.md"; then
    e2e_fail "bench/render.sh" "machine line: $(grep Machine "$T/gen.md")"
elif ! grep -q "Core availability around the 2-thread read probes: 56-91% (1 probe busy in all 3 tries: may read low)" "$T/gen.md"; then
    e2e_fail "bench/render.sh" "probe availability: $(grep Machine "$T/gen.md")"
elif ! grep -q "^| Q8_0 | 1.00 | - | - | - | 30.00 | 20.00 | - | 40.0 tok/s | 75% | 50% |" "$T/gen.md" ||
    ! grep -q "^| Q4_0 | 1.00 | - | - | - | 60.00 | - | - | 80.0 tok/s | 75% |" "$T/gen.md"; then
    e2e_fail "bench/render.sh" "side-by-side rows: $(grep '^| Q' "$T/gen.md" | tr '\n' ' ')"
else
    e2e_ok "bench/render.sh (probe range and availability; each model's roofline from the probe before it)"
fi

# ---- bench/render.sh: runs taken in turns (-r 1 each) give one row of medians --
# three kite runs of one test (20 and 30 tok/s around a slow 10) and three
# llama-bench -r 1 lines: the row shows the medians, the extremes of the
# min-max and the summed counts.
cat >"$T/res2.jsonl" <<'EOF_RES'
{"probe": true, "cpu": "TestCPU", "n_cpu": 2, "isa": "avx512", "fma_gflops_per_thread": 100.00, "read_gb_s": [20.00, 40.00], "measured": true}
{"model": "tinyllama-1.1b-L2-q8_0.gguf", "type": "Q8_0", "test": "tg32", "threads": 2, "tok_s": 30.125, "tok_s_min": 30.125, "tok_s_max": 30.125, "gb_s": 30.125, "roofline_pct": 75.31, "gflops": 1.00, "kernels": "avx512", "residency": "heap", "load_ms": 1.0, "reps": 1, "noisy_reps": 0, "redone": 1, "avail_pct": 99.0, "bytes_per_token": 1000000000, "n_layer": 2, "read_gb_s": 40.00}
{"engine": "llama.cpp", "model_filename": "/x/tinyllama-1.1b-L2-q8_0.gguf", "n_prompt": 0, "n_gen": 32, "n_threads": 2, "use_mmap": false, "samples_ts": [20.0], "build_commit": "abc", "build_number": 1}
{"model": "tinyllama-1.1b-L2-q8_0.gguf", "type": "Q8_0", "test": "tg32", "threads": 2, "tok_s": 10.000, "tok_s_min": 10.000, "tok_s_max": 10.000, "gb_s": 10.000, "roofline_pct": 25.00, "gflops": 1.00, "kernels": "avx512", "residency": "heap", "load_ms": 1.0, "reps": 1, "noisy_reps": 1, "redone": 0, "avail_pct": 50.0, "bytes_per_token": 1000000000, "n_layer": 2, "read_gb_s": 40.00}
{"engine": "llama.cpp", "model_filename": "/x/tinyllama-1.1b-L2-q8_0.gguf", "n_prompt": 0, "n_gen": 32, "n_threads": 2, "use_mmap": false, "samples_ts": [26.0], "build_commit": "abc", "build_number": 1}
{"model": "tinyllama-1.1b-L2-q8_0.gguf", "type": "Q8_0", "test": "tg32", "threads": 2, "tok_s": 20.000, "tok_s_min": 20.000, "tok_s_max": 20.000, "gb_s": 20.000, "roofline_pct": 50.00, "gflops": 1.00, "kernels": "avx512", "residency": "heap", "load_ms": 1.0, "reps": 1, "noisy_reps": 0, "redone": 1, "avail_pct": 90.0, "bytes_per_token": 1000000000, "n_layer": 2, "read_gb_s": 40.00}
{"engine": "llama.cpp", "model_filename": "/x/tinyllama-1.1b-L2-q8_0.gguf", "n_prompt": 0, "n_gen": 32, "n_threads": 2, "use_mmap": false, "samples_ts": [23.0], "build_commit": "abc", "build_number": 1}
EOF_RES
printf 'date test\ncommit test\nnproc 2\nlayers 2\nreps 3\npaired 1\n' >"$T/meta2.txt"
if ! sh bench/render.sh "$T/res2.jsonl" "$T/meta2.txt" >"$T/gen2.md" 2>"$T/err"; then
    e2e_fail "bench/render.sh, runs in turns" "$(e2e_first_line "$T/err")"
elif ! grep -q "^| Q8_0 | 1.00 | - | - | - | 20.00 | 23.00 | - | 40.0 tok/s | 50% | 58% |" "$T/gen2.md"; then
    e2e_fail "bench/render.sh, runs in turns" "side-by-side row: $(grep '^| Q8_0' "$T/gen2.md")"
elif ! grep -q "| tg32 | 20.00 | 10.00-30.12 | 20.00 | 50.0% bandwidth | 1.0 | avx512 | heap | 90% | 2 (1) |" "$T/gen2.md"; then
    e2e_fail "bench/render.sh, runs in turns" "kite row: $(grep 'tg32' "$T/gen2.md" | tail -n 1)"
elif ! grep -q "take turns, one repetition each" "$T/gen2.md"; then
    e2e_fail "bench/render.sh, runs in turns" "no sentence on the alternation"
else
    e2e_ok "bench/render.sh (runs taken in turns: medians, extremes, summed counts)"
fi

e2e_summary
