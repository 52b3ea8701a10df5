#!/bin/sh
# tests/acceptance/issue23_fuzz.sh - issue 23, acceptance 4: the request-layer
# fuzz target (tests/fuzz/fuzz_oai.c: OpenAI request parsing and the gate's
# head checks) runs A23_FUZZ_SECONDS (600) with no finding, from its corpus.
# CI runs it briefly with the others (make fuzz in .ci/run).  Needs clang.
# Prints "N passed, N failed".
set -u
secs=${A23_FUZZ_SECONDS:-600}
make -j2 build-fuzz/fuzz_oai >/dev/null || { echo "issue23_fuzz: cannot build build-fuzz/fuzz_oai" >&2; exit 1; }
mkdir -p build-fuzz/corpus-fuzz_oai
log=$(mktemp)
trap 'rm -f "$log"' EXIT INT TERM
build-fuzz/fuzz_oai -seed=1 -max_total_time="$secs" -rss_limit_mb=2048 build-fuzz/corpus-fuzz_oai tests/fuzz/corpus/fuzz_oai >"$log" 2>&1
rc=$?
tail -n 3 "$log"
if [ "$rc" = 0 ] && grep -q "^Done" "$log"; then
    echo "  ok    fuzz_oai ran $secs s with no finding ($(grep -o 'Done [0-9]* runs' "$log"))"
    echo "issue23_fuzz: 1 passed, 0 failed"
else
    echo "  FAIL  fuzz_oai: exit $rc"
    echo "issue23_fuzz: 0 passed, 1 failed"
    exit 1
fi
