#!/bin/sh
# tests/acceptance/issue28_newcomer.sh [REPO] - issue 28, "a newcomer's first hour": on a
# fresh clone of REPO (default: this checkout) in a temporary directory,
#   1. `make run` (timed: under NEWCOMER_RUN_S seconds, default 45) prints the story the
#      README promises (llama2.c's, tests/data/golden/greedy/stories260K-0.text) and the
#      statistics line;
#   2. every command of docs/getting-started.md in order, each checked against what the
#      page says it prints (convert, run, info, serve + /health + /v1/completions +
#      /v1/chat/completions, quantize Q8_0 and Q4_K_M, ppl --save-logits / --kld-base, eval,
#      bench, synth);
#   3. `make test` (timed: under NEWCOMER_TEST_S seconds, default 180) ends "N passed, 0 failed".
# The times are printed as `time` would; they depend on the machine's load (say so when
# reporting).  Prints "issue28_newcomer: N passed, M failed"; exits 1 on a failure.
set -u
repo=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
case "$repo" in build*) repo=$(cd "$(dirname "$0")/../.." && pwd) ;; esac # make acceptance passes BUILD
RUN_S=${NEWCOMER_RUN_S:-45}
TEST_S=${NEWCOMER_TEST_S:-180}
W=$(mktemp -d "${TMPDIR:-/tmp}/kite-newcomer.XXXXXX") || exit 1
PID=
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$W"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); printf '  ok    %s\n' "$1"; }
bad() { fail=$((fail + 1)); printf '  FAIL  %s: %s\n' "$1" "$2"; }
# check NAME FILE NEEDLE: FILE contains the fixed string NEEDLE
check() { if grep -qF -e "$3" "$2"; then ok "$1"; else bad "$1" "'$3' not in: $(head -c 300 "$2" | tr '\n' ' ')"; fi; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
below() { awk -v t="$1" -v l="$2" 'BEGIN { exit !(t < l) }'; }

git clone -q "$repo" "$W/kite" || { bad "git clone" "$repo"; exit 1; }
cd "$W/kite" || exit 1
echo "load before make run: $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(now)
make run >"$W/run.out" 2>"$W/run.err"
rc=$?
t_run=$(since "$t0")
echo "make run: real ${t_run}s (limit ${RUN_S}s)"
[ "$rc" -eq 0 ] && ok "make run exits 0" || bad "make run" "exit $rc: $(tail -n 3 "$W/run.err")"
if below "$t_run" "$RUN_S"; then ok "make run under ${RUN_S}s (${t_run}s)"; else bad "make run time" "${t_run}s"; fi
check "make run prints llama2.c's story" "$W/run.out" "$(head -c 120 tests/data/golden/greedy/stories260K-0.text)"
check "make run prints the statistics line" "$W/run.err" "kite run: load"
n_cc=$(grep -c '^  CC ' "$W/run.out")
if [ "$n_cc" -gt 50 ] && ! grep -q -- '-Wall' "$W/run.out"; then ok "one short line per file ($n_cc CC lines, no compiler commands)"
else bad "short build lines" "$n_cc CC lines"; fi

K=build/kite
S=tests/data/eval/tinystories-valid-sample.txt
# 2. docs/getting-started.md, in order
$K convert --hf tests/data/hf-tinystories656k -o ts.gguf >"$W/o" 2>&1
check "convert --hf" "$W/o" "kite convert: wrote ts.gguf (llama from llama: 2 layers, 2048 tokens (llama), 20 tensors, f16)"
$K run -m ts.gguf -p "Once upon a time, " -n 30 --temp 0 >"$W/o" 2>/dev/null
check "run the converted model" "$W/o" "Once upon a time, there was a little girl named Lily. She loved to eat yummy food."
$K info ts.gguf >"$W/o" 2>&1
check "info" "$W/o" "n_tensors:  20"
port=$((20000 + $$ % 20000))
$K serve -m ts.gguf --alias ts --port "$port" -t 1 >"$W/serve.out" 2>"$W/serve.err" &
PID=$!
i=0
while [ $i -lt 100 ] && ! curl -s "localhost:$port/health" >"$W/o" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
check "serve: /health names the model" "$W/o" '{"status":"ok","model":"ts"'
curl -s "localhost:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Once upon a time, ", "max_tokens": 30, "temperature": 0}' >"$W/o"
check "serve: /v1/completions" "$W/o" '"text":"there was a little girl named Lily. She loved to eat yummy food.'
curl -s "localhost:$port/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}' >"$W/o"
check "serve: /v1/chat/completions" "$W/o" '"object":"chat.completion"'
if command -v python3 >/dev/null && python3 -c 'import openai' 2>/dev/null; then
    python3 - "$port" >"$W/o" 2>&1 <<'PY'
import sys
from openai import OpenAI
client = OpenAI(base_url=f"http://localhost:{sys.argv[1]}/v1", api_key="none")
r = client.completions.create(model="ts", prompt="Once upon a time, ", max_tokens=30, temperature=0)
print(r.choices[0].text)
PY
    check "serve: the openai Python client" "$W/o" "there was a little girl named Lily. She loved to eat yummy food."
else
    echo "  note  the openai Python package is not installed: its snippet not run (curl covers the same requests)"
fi
kill "$PID" 2>/dev/null
wait "$PID" 2>/dev/null
PID=
$K quantize ts.gguf ts-q8_0.gguf Q8_0 >"$W/o" 2>&1
check "quantize Q8_0" "$W/o" "ts-q8_0.gguf: q8_0, file_type 7"
$K quantize ts.gguf ts-q4_k_m.gguf Q4_K_M >"$W/o" 2>&1
check "quantize Q4_K_M" "$W/o" "ts-q4_k_m.gguf: q4_k_m, file_type 15, 15 of 20 tensors converted (14 fell back), tensor data 1.31 MB -> 0.57 MB"
check "quantize: per-tensor fallback lines" "$W/o" "fallback: row length 128 is not a multiple of the q4_K block (256)"
$K ppl -m ts.gguf -f "$S" --save-logits base.kl >"$W/o" 2>&1
check "ppl --save-logits" "$W/o" "saved: base.kl"
$K ppl -m ts-q4_k_m.gguf -f "$S" --kld-base base.kl >"$W/o" 2>&1
# "about +2%" (docs/getting-started.md): the last digits depend on the CPU and its kernels
# (+0.89 on earlier sessions' AVX2-only machines; +0.904, 2.05%, on an AVX-512 EPYC)
pct=$(sed -n 's/.*delta ppl = +[0-9.]* (+\([0-9.]*\)%).*/\1/p' "$W/o")
if [ -n "$pct" ] && awk -v p="$pct" 'BEGIN { exit !(p >= 1.5 && p <= 2.5) }'; then ok "ppl --kld-base: delta ppl +$pct%"
else bad "ppl --kld-base: delta ppl" "'+${pct:-?}%' is not about +2%: $(tr '\n' ' ' <"$W/o" | head -c 300)"; fi
check "ppl --kld-base: top-1 agreement" "$W/o" "top-1 agreement = 91.5"
$K eval -m ts-q4_k_m.gguf --task tests/data/eval/tinystories-mc.jsonl >"$W/o" 2>&1
check "eval" "$W/o" "acc_norm = "
$K bench -m ts-q4_k_m.gguf -p 64 -n 16 -r 2 >"$W/o" 2>&1
check "bench pp64" "$W/o" "pp64"
check "bench tg16" "$W/o" "tg16"
$K synth --shape tinyllama-1.1b --layers 2 --type q4_k_m -o t.gguf >"$W/o" 2>&1
check "synth" "$W/o" "t.gguf: shape tinyllama-1.1b, 2 layers, type q4_k_m"

# 3. make test
t0=$(now)
make test >"$W/test.out" 2>&1
t_test=$(since "$t0")
echo "make test: real ${t_test}s (limit ${TEST_S}s)"
last=$(tail -n 1 "$W/test.out")
case "$last" in *" passed, 0 failed"*) ok "make test: $last" ;; *) bad "make test" "$last" ;; esac
if below "$t_test" "$TEST_S"; then ok "make test under ${TEST_S}s (${t_test}s)"; else bad "make test time" "${t_test}s"; fi

printf 'issue28_newcomer: %d passed, %d failed\n' "$pass" "$fail"
[ "$fail" -eq 0 ]
