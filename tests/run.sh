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
# The user's cache folder is neither read nor written: the unit binaries get
# an empty read-only HOME and XDG_CACHE_HOME (the library reads no file it is
# not given, include/kite.h; checked empty afterwards, which also holds for
# root, whom the mode does not stop), the CLI in the e2e scripts a temporary
# cache folder (probe and roofline caches, tune tables).
scratch=$(mktemp -d "${TMPDIR:-/tmp}/kite-test-run.XXXXXX") || exit 1
trap 'chmod -R u+w "$scratch"; rm -rf "$scratch"' EXIT
mkdir "$scratch/home" "$scratch/cache"
chmod 555 "$scratch/home"
for t in "$build"/tests/test_* tests/e2e/test_*.sh; do
    case "$t" in *.d) continue ;; esac
    [ -f "$t" ] || continue
    t0=$(date +%s)
    case "$t" in
    *.sh) out=$(XDG_CACHE_HOME="$scratch/cache" KITE_BUILD="$build" sh "$t" 2>&1) ;;
    *) out=$(HOME="$scratch/home" XDG_CACHE_HOME="$scratch/home" "$t" 2>&1) ;;
    esac
    rc=$?
    printf '%s\n' "$out"
    echo "$(($(date +%s) - t0)) $t" >>"$scratch/times"
    # failures are repeated at the end, under the test that printed them
    # (CI shows only that part: .ci/run)
    printf '%s\n' "$out" | grep -E '^  FAIL  |^    [^ ]+:[0-9]+: ' | head -n 20 |
        sed "s|^|FAILED $t: |" >>"$scratch/fails"
    line=$(printf '%s\n' "$out" | tail -n 1)
    p=$(printf '%s' "$line" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
    f=$(printf '%s' "$line" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
    if [ -z "$p" ]; then
        echo "$t: crashed or exited early (status $rc)"
        echo "FAILED $t: crashed or exited early (status $rc): $(printf '%s\n' "$out" | tail -n 1)" >>"$scratch/fails"
        failed=$((failed + 1))
        status=1
        continue
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    [ "$rc" -eq 0 ] || status=1
done
if [ -n "$(ls -A "$scratch/home")" ]; then
    echo "tests/run.sh: the unit tests wrote to their HOME: $(ls -A "$scratch/home" | tr '\n' ' ')"
    failed=$((failed + 1))
    status=1
else
    echo "  ok    tests/run.sh: the unit tests left their HOME empty"
    passed=$((passed + 1))
fi
# where the time goes (issue 28: make test should stay under 3 minutes)
echo "  slowest: $(sort -rn "$scratch/times" | head -n 6 | awk '{ printf "%s%s %ss", (NR > 1 ? ", " : ""), $2, $1 }')"
[ -s "$scratch/fails" ] && cat "$scratch/fails"
echo "$passed passed, $failed failed"
exit $status
