#!/bin/sh
# tests/run.sh BUILD_DIR - runs every unit test binary in BUILD_DIR/tests and
# every end-to-end script tests/e2e/test_*.sh (given KITE_BUILD) from
# the repository root and prints one closing line "N passed, N failed" (tests
# counted over all binaries).  Exit status is non-zero if any test failed or
# any binary crashed.
#
# Test files run KITE_TEST_JOBS at a time (default: the number of CPUs), each
# file's output printed whole when it ends; the scripts in SOLO below, whose
# checks involve wall-clock deadlines (idle timeouts, watchdogs), run alone
# afterwards.  KITE_TEST_JOBS=1 is the old one-at-a-time order.
set -u
# Built-in matmul variants only (src/kernels/tune.h): results never depend on
# the variant, but a developer's ~/.cache/kite/tune-*.txt must not change what
# the suite runs or times.  tests/e2e/test_tune.sh turns tuning back on itself.
KITE_TUNE=off
export KITE_TUNE
build=${1:-build}
jobs=${KITE_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
case "$jobs" in '' | *[!0-9]* | 0) jobs=1 ;; esac
SOLO="tests/e2e/test_serve.sh tests/e2e/test_serve_hostile.sh tests/e2e/test_mpi.sh"
# the longest files start first, so that the pool does not end on one of them
FIRST="tests/e2e/test_offload.sh $build/tests/test_scale tests/e2e/test_embed.sh tests/e2e/test_serve_tools.sh"
# The user's cache folder is neither read nor written: the unit binaries get
# an empty read-only HOME and XDG_CACHE_HOME (the library reads no file it is
# not given, include/kite.h; checked empty afterwards, which also holds for
# root, whom the mode does not stop), the CLI in each e2e script a temporary
# cache folder of its own (probe and roofline caches, tune tables).
scratch=$(mktemp -d "${TMPDIR:-/tmp}/kite-test-run.XXXXXX") || exit 1
trap 'chmod -R u+w "$scratch"; rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM
mkdir "$scratch/home" "$scratch/cache" "$scratch/res"
chmod 555 "$scratch/home"

# run_one I FILE: runs one test file; its output, exit status and seconds go to
# $scratch/res/I.{out,rc,sec}, and the output is printed whole under a lock.
run_one() {
    _t0=$(date +%s)
    case "$2" in
    *.sh) mkdir "$scratch/cache/$1" && KITE_PROBE_FILE=$probe XDG_CACHE_HOME="$scratch/cache/$1" KITE_BUILD="$build" sh "$2" >"$scratch/res/$1.out" 2>&1 ;;
    *) HOME="$scratch/home" XDG_CACHE_HOME="$scratch/home" "$2" >"$scratch/res/$1.out" 2>&1 ;;
    esac
    echo $? >"$scratch/res/$1.rc"
    echo "$(($(date +%s) - _t0))" >"$scratch/res/$1.sec"
    flock "$scratch/lock" cat "$scratch/res/$1.out"
}

# One bandwidth/FMA probe for the whole run, used as it is (KITE_PROBE_FILE,
# tools/config/config.h): a cached probe taken under load is otherwise measured
# again by every kite bench call (1-2 s of CPU each, 64 calls in test_bench.sh
# alone), and the suite's checks never judge the probe's figures.
# Given to the e2e scripts only: the unit tests check the CLI's configuration
# from a known environment.
probe=$scratch/probe.txt
KITE_PROBE_FILE=$probe "$build/kite" bench --probe >/dev/null 2>&1 ||
    echo "tests/run.sh: kite bench --probe failed (the scripts measure their own)"

# The e2e clients' npm packages, installed once before the scripts run side by
# side: an npm install rewrites node_modules, and a client of another script
# loading from it meanwhile fails (CI: four "openai client" failures).
node_dir=${KITE_NODE_DIR:-tests/e2e/.node}
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    missing=
    for p in openai ajv playwright-core; do [ -d "$node_dir/node_modules/$p" ] || missing="$missing $p"; done
    if [ -n "$missing" ]; then
        mkdir -p "$node_dir"
        [ -f "$node_dir/package.json" ] || echo '{"private": true}' >"$node_dir/package.json"
        # shellcheck disable=SC2086 # one word per package
        (cd "$node_dir" && timeout 300 npm install --no-audit --no-fund --silent $missing) >"$scratch/npm.log" 2>&1 ||
            echo "tests/run.sh: npm install$missing failed (the scripts that need them say so): $(tail -n 1 "$scratch/npm.log")"
    fi
fi

# the order: FIRST, the rest, then SOLO
list=""
for t in $FIRST; do [ -f "$t" ] && list="$list $t"; done
for t in "$build"/tests/test_* tests/e2e/test_*.sh; do
    case "$t" in *.d) continue ;; esac
    [ -f "$t" ] || continue
    case " $FIRST $SOLO " in *" $t "*) continue ;; esac
    list="$list $t"
done
for t in $SOLO; do [ -f "$t" ] && list="$list $t"; done

# A pool of $jobs tokens in a FIFO (as make's jobserver): a file starts when it
# takes a token and gives it back when it ends.  POSIX sh has no `wait -n`.
mkfifo "$scratch/pool"
exec 3<>"$scratch/pool"
k=0
while [ "$k" -lt "$jobs" ]; do echo >&3; k=$((k + 1)); done
i=0
for t in $list; do
    i=$((i + 1))
    case " $SOLO " in
    *" $t "*)
        wait # every pooled file has ended
        run_one "$i" "$t"
        ;;
    *)
        read -r _ <&3
        { run_one "$i" "$t"; echo >&3; } &
        ;;
    esac
done
wait
exec 3>&-

passed=0
failed=0
status=0
: >"$scratch/fails"
: >"$scratch/times"
i=0
for t in $list; do
    i=$((i + 1))
    out=$scratch/res/$i.out
    rc=$(cat "$scratch/res/$i.rc" 2>/dev/null || echo 255)
    echo "$(cat "$scratch/res/$i.sec" 2>/dev/null || echo 0) $t" >>"$scratch/times"
    # failures are repeated at the end, under the test that printed them
    # (CI shows only that part: .ci/run)
    grep -E '^  FAIL  |^    [^ ]+:[0-9]+: ' "$out" | head -n 20 | sed "s|^|FAILED $t: |" >>"$scratch/fails"
    line=$(tail -n 1 "$out")
    p=$(printf '%s' "$line" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
    f=$(printf '%s' "$line" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
    if [ -z "$p" ]; then
        echo "$t: crashed or exited early (status $rc)"
        echo "FAILED $t: crashed or exited early (status $rc): $line" >>"$scratch/fails"
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
    echo "FAILED tests/run.sh: the unit tests wrote to their HOME" >>"$scratch/fails"
    failed=$((failed + 1))
    status=1
else
    echo "  ok    tests/run.sh: the unit tests left their HOME empty"
    passed=$((passed + 1))
fi
# where the time goes (issue 28: make test should stay under 3 minutes); the
# whole table is kept in the build tree
sort -rn "$scratch/times" >"$build/test-times.txt" 2>/dev/null
echo "  slowest ($jobs at a time): $(sort -rn "$scratch/times" | head -n 6 | awk '{ printf "%s%s %ss", (NR > 1 ? ", " : ""), $2, $1 }')"
cat "$scratch/fails"
echo "$passed passed, $failed failed"
exit $status
