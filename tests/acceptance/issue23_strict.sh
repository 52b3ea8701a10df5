#!/bin/sh
# tests/acceptance/issue23_strict.sh [BUILD] - issue 23, acceptance 3: every
# response of the hostile suite parses as strict UTF-8 JSON (or SSE of such
# JSON) and ASan/UBSan/LSan report nothing: tests/e2e/test_serve_hostile.sh
# (which checks both: every answer through its strict parser, and no
# sanitizer report in any server log) against the sanitizer build
# (make SAN=1 BUILD=build-san; built here if missing).  RSS is checked by
# issue23_slowloris.sh.  Prints "N passed, N failed".
set -u
san=${A23_SAN_BUILD:-build-san}
if [ ! -x "$san/kite" ]; then
    make -j2 SAN=1 BUILD="$san" "$san/kite" >/dev/null || { echo "issue23_strict: cannot build $san/kite" >&2; exit 1; }
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT INT TERM
ASAN_OPTIONS=detect_leaks=1 KITE_BUILD=$san sh tests/e2e/test_serve_hostile.sh >"$out" 2>&1
rc=$?
grep -v '^  ok    ' "$out"
p=$(grep -c '^  ok    ' "$out")
f=$(grep -c '^  FAIL  ' "$out")
[ "$rc" = 0 ] || f=$((f + 1))
grep -q "every response (.*) is one well-formed, strict UTF-8 JSON" "$out" || f=$((f + 1))
grep -q "no sanitizer report in the server logs" "$out" || f=$((f + 1))
echo "issue23_strict: $p passed, $f failed"
[ "$f" = 0 ]
