#!/bin/sh
# tests/run-arm.sh ARM_BUILD TEST... - runs the AArch64 kernel test binaries
# (make test-arm) under qemu-aarch64, once per qemu CPU model in ARM_CPUS
# (default: cortex-a53, which lacks the dot product, so the active level is
# neon; max, which has it: dotprod), from the repository root, and prints
# one closing line "N passed, N failed" over all runs.  ARM_QEMU is the
# emulator command (default: qemu-aarch64 -L /usr/aarch64-linux-gnu).
# Exit status is non-zero if a test failed or a binary crashed.
set -u
build=$1
shift
qemu=${ARM_QEMU:-qemu-aarch64 -L /usr/aarch64-linux-gnu}
cpus=${ARM_CPUS:-cortex-a53 max}
KITE_TUNE=off
export KITE_TUNE
scratch=$(mktemp -d "${TMPDIR:-/tmp}/kite-test-arm.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
passed=0
failed=0
status=0
for cpu in $cpus; do
    for name in "$@"; do
        t="$build/tests/$name"
        # shellcheck disable=SC2086
        out=$(HOME="$scratch" XDG_CACHE_HOME="$scratch" $qemu -cpu "$cpu" "$t" 2>&1)
        rc=$?
        line=$(printf '%s\n' "$out" | tail -n 1)
        p=$(printf '%s' "$line" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p')
        f=$(printf '%s' "$line" | sed -n 's/.*: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p')
        if [ -z "$p" ]; then
            printf '%s\n' "$out" | tail -n 30
            echo "arm $cpu $name: crashed or exited early (status $rc)"
            failed=$((failed + 1))
            status=1
            continue
        fi
        # the failures in full, the levels checked, the summary line
        [ "$f" -eq 0 ] || printf '%s\n' "$out" | grep -v '^  ok' | head -n 60
        printf '%s\n' "$out" | grep -E '^    (level|cpu:)' | sed "s/^/arm $cpu /"
        echo "arm $cpu $line"
        passed=$((passed + p))
        failed=$((failed + f))
        [ "$rc" -eq 0 ] || status=1
    done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] || status=1
exit $status
