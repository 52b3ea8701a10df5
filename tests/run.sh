#!/bin/sh
# tests/run.sh BUILD_DIR - runs every unit test binary in BUILD_DIR/tests and
# every end-to-end script tests/e2e/test_*.sh (given KITE_BUILD) from
# the repository root and prints one closing line "N passed, N failed" (tests
# counted over all binaries).  Exit status is non-zero if any test failed or
# any binary crashed.
set -u
# Built-in matmul variants only (src/kernels/tune.h): results never depend on
# the variant, but a developer's ~/.cache/kite/tune-*.txt must not change what
# the suite runs or times.  tests/e2e/test_tune.sh turns tuning back on itself.
KITE_TUNE=off
export KITE_TUNE
build=${1:-build}
passed=0
failed=0
status=0
for t in "$build"/tests/test_* tests/e2e/test_*.sh; do
    case "$t" in *.d) continue ;; esac
    [ -f "$t" ] || continue
    case "$t" in
    *.sh) out=$(KITE_BUILD="$build" sh "$t" 2>&1) ;;
    *) out=$("$t" 2>&1) ;;
    esac
    rc=$?
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | tail -n 1)
    p=$(printf '%s' "$line" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
    f=$(printf '%s' "$line" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
    if [ -z "$p" ]; then
        echo "$t: crashed or exited early (status $rc)"
        failed=$((failed + 1))
        status=1
        continue
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    [ "$rc" -eq 0 ] || status=1
done
echo "$passed passed, $failed failed"
exit $status
