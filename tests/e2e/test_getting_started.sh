#!/bin/sh
# tests/e2e/test_getting_started.sh - docs/getting-started.md, command by command, on the
# build tree (issue 28: the newcomer script in CI): every command of the page in order, each
# checked against what the page says it prints (tests/e2e/getting_started.lib).  The
# fresh-clone run with `make run` and `make test` timed is
# tests/acceptance/issue28_newcomer.sh, which runs the same commands.
#
# Run from the repository root with KITE_BUILD=<build dir> (tests/run.sh does this).  POSIX
# sh + curl.  Everything is written in a scratch directory.
#
# The last line is "tests/e2e/test_getting_started.sh: N passed, M failed".
set -u
. tests/e2e/lib.sh
e2e_init
GS_PID=
trap '[ -n "$GS_PID" ] && kill "$GS_PID" 2>/dev/null; rm -rf "$E2E_TMP"' EXIT
trap '[ -n "$GS_PID" ] && kill "$GS_PID" 2>/dev/null; rm -rf "$E2E_TMP"; exit 130' INT TERM
. tests/e2e/getting_started.lib
ok() { e2e_ok "$1"; }
bad() { e2e_fail "$1" "$2"; }
if ! command -v curl >/dev/null 2>&1; then
    e2e_fail "curl" "not installed (make test installs it as root: scripts/install-deps.sh)"
    e2e_summary
    exit 1
fi
repo=$(pwd)
kite=$(cd "$(dirname "$KITE")" && pwd)/kite
GS_TMP=$E2E_TMP
mkdir "$E2E_TMP/work"
cd "$E2E_TMP/work" || exit 1
gs_run "$kite" "$repo"
cd "$repo" || exit 1
e2e_summary
