# tests/e2e/lib.sh - helpers for the end-to-end shell tests (sourced, not run).
#
# POSIX sh only (dash on Debian).  A test script sources this file, calls
# e2e_ok / e2e_fail once per check, and ends with e2e_summary, whose last line
# "SCRIPT: N passed, M failed" is what tests/run.sh reads.  The check lines
# have the C harness's shape: "  ok    name" and "  FAIL  name: details".
#
# e2e_init creates $E2E_TMP (removed on exit, also on INT/TERM) and sets
# $KITE, the binary under test ($KITE_BUILD/kite, default build/kite); if it
# is missing, the script ends there with a failed check and the summary.

E2E_PASS=0
E2E_FAIL=0
E2E_TMP=
# shellcheck disable=SC2034 # used by the scripts that source this file
TAB=$(printf '\t')

# e2e_init: checks the binary exists and makes the scratch directory.
e2e_init() {
    KITE_BUILD=${KITE_BUILD:-build}
    KITE=$KITE_BUILD/kite
    E2E_TMP=$(mktemp -d "${TMPDIR:-/tmp}/kite-e2e.XXXXXX") || exit 1
    trap 'rm -rf "$E2E_TMP"' EXIT
    trap 'rm -rf "$E2E_TMP"; exit 130' INT TERM
    if [ ! -x "$KITE" ]; then
        e2e_fail "binary" "$KITE not found or not executable (build it first)"
        e2e_summary
        exit 1
    fi
}

e2e_ok() {
    E2E_PASS=$((E2E_PASS + 1))
    printf '  ok    %s\n' "$1"
}

# e2e_fail NAME DETAILS
e2e_fail() {
    E2E_FAIL=$((E2E_FAIL + 1))
    printf '  FAIL  %s: %s\n' "$1" "$2"
}

# e2e_summary: prints the closing line; returns non-zero if any check failed.
e2e_summary() {
    printf '%s: %d passed, %d failed\n' "$0" "$E2E_PASS" "$E2E_FAIL"
    [ "$E2E_FAIL" -eq 0 ]
}

# e2e_one_line FILE: true if FILE holds exactly one newline-terminated line.
e2e_one_line() {
    [ "$(wc -l <"$1")" -eq 1 ] && [ "$(awk 'END { print NR }' "$1")" -eq 1 ]
}

# e2e_first_line FILE: the first line of FILE, for failure details.
e2e_first_line() {
    head -n 1 "$1" | cut -c 1-200
}

# e2e_kite OUT ERR ARGS...: runs $KITE ARGS with stdin from /dev/null,
# stdout to OUT, stderr to ERR; sets $rc.
e2e_kite() {
    _out=$1
    _err=$2
    shift 2
    "$KITE" "$@" </dev/null >"$_out" 2>"$_err"
    # shellcheck disable=SC2034 # read by the caller
    rc=$?
}

# e2e_expect_error NAME EXIT PREFIX NEEDLE ARGS...: kite ARGS (stdout and
# stderr in $E2E_TMP/out and $E2E_TMP/err) must exit with EXIT and print
# exactly one stderr line that starts with PREFIX (a fixed string; empty =
# any "kite CMD: ") and contains NEEDLE (a fixed string; empty = anything).
e2e_expect_error() {
    _name=$1
    _want=$2
    _prefix=$3
    _needle=$4
    shift 4
    e2e_kite "$E2E_TMP/out" "$E2E_TMP/err" "$@"
    _line=$(e2e_first_line "$E2E_TMP/err")
    if [ "$rc" -ne "$_want" ]; then
        e2e_fail "$_name" "exit $rc (expected $_want): $_line"
    elif ! e2e_one_line "$E2E_TMP/err"; then
        e2e_fail "$_name" "stderr has $(wc -l <"$E2E_TMP/err") lines, expected 1: $_line"
    elif [ -n "$_prefix" ] && [ "${_line#"$_prefix"}" = "$_line" ]; then
        e2e_fail "$_name" "message does not start with '$_prefix': $_line"
    elif [ -z "$_prefix" ] && ! grep -q "^kite [a-z]*: " "$E2E_TMP/err"; then
        e2e_fail "$_name" "message does not start with 'kite CMD: ': $_line"
    elif [ -n "$_needle" ] && ! grep -qF -e "$_needle" "$E2E_TMP/err"; then
        e2e_fail "$_name" "message lacks '$_needle': $_line"
    else
        e2e_ok "$_name"
    fi
}

# e2e_max_abs_diff A.f32 B.f32: prints "COUNT_A COUNT_B MAXDIFF BAD" for two
# raw float32 files.  od -t f4 prints 8-9 significant digits, i.e. an error
# below 1e-6 for |x| < 100, far under the 1e-4 tolerances used here.  BAD
# counts values that are not finite numbers (nan, inf) on either side, since
# awk comparisons with NaN are always false and would hide them.
e2e_max_abs_diff() {
    od -An -v -t f4 -w4 "$1" | tr -d ' ' >"$E2E_TMP/_a.txt"
    od -An -v -t f4 -w4 "$2" | tr -d ' ' >"$E2E_TMP/_b.txt"
    _na=$(wc -l <"$E2E_TMP/_a.txt")
    _nb=$(wc -l <"$E2E_TMP/_b.txt")
    paste "$E2E_TMP/_a.txt" "$E2E_TMP/_b.txt" | awk -v na="$_na" -v nb="$_nb" '
        function num(s) { return s ~ /^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ }
        {
            if (!num($1) || !num($2)) { bad++; next }
            d = $1 - $2
            if (d < 0) d = -d
            if (d > m) m = d
        }
        END { printf "%d %d %.9g %d\n", na, nb, m + 0, bad + 0 }'
}

# ---- JSON / SSE readers for the server tests (awk and sed, no jq) ----------

# json_raw FILE KEY: the first string value of KEY, still JSON-escaped.
json_raw() {
    awk -v key="\"$2\":\"" '
        {
            s = $0; k = index(s, key); if (!k) next
            s = substr(s, k + length(key)); out = ""
            while (length(s)) {
                c = substr(s, 1, 1)
                if (c == "\"") break
                if (c == "\\") { out = out substr(s, 1, 2); s = substr(s, 3); continue }
                out = out c; s = substr(s, 2)
            }
            printf "%s", out; exit
        }' "$1"
}

# json_num FILE KEY: the first numeric value of KEY.
json_num() { sed -n "s/.*\"$2\":\([0-9.eE+-]*\).*/\1/p" "$1" | head -n 1; }

# sse_text FILE: the generated text of an SSE stream (the "text" or
# delta "content" strings of every data event, still JSON-escaped).
sse_text() {
    awk '
        /^data: \{/ {
            s = $0; k = index(s, "\"content\":\""); key = "\"content\":\""
            if (!k) { k = index(s, "\"text\":\""); key = "\"text\":\"" }
            if (!k) next
            s = substr(s, k + length(key)); out = ""
            while (length(s)) {
                c = substr(s, 1, 1)
                if (c == "\"") break
                if (c == "\\") { out = out substr(s, 1, 2); s = substr(s, 3); continue }
                out = out c; s = substr(s, 2)
            }
            printf "%s", out
        }' "$1"
}

# e2e_serve_port LOG PID: waits (at most 10 s) for the "listening on
# http://127.0.0.1:PORT" line of a `kite serve` started with --port 0 and
# logging to LOG; sets $PORT to the port, or to "" if PID exits first or the
# time runs out.
e2e_serve_port() {
    PORT=
    _w=0
    while [ $_w -lt 100 ]; do
        PORT=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$1")
        [ -n "$PORT" ] && break
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
        _w=$((_w + 1))
    done
}

# e2e_stop_servers: SIGTERM to every process id in $PIDS, waits for each,
# empties $PIDS.
e2e_stop_servers() {
    for _p in $PIDS; do
        kill "$_p" 2>/dev/null
        wait "$_p" 2>/dev/null
    done
    PIDS=
}

# e2e_npm_ready DIR PACKAGE LOG: installs the npm PACKAGE into DIR (outside git,
# kept across builds: one install per clone) unless it is there; false when npm
# is missing or the install fails (its output in LOG).
e2e_npm_ready() {
    [ -d "$1/node_modules/$2" ] && return 0
    command -v npm >/dev/null 2>&1 || return 1
    mkdir -p "$1"
    [ -f "$1/package.json" ] || echo '{"private": true}' >"$1/package.json"
    # one install at a time (scripts run side by side); tests/run.sh installs them all first
    (cd "$1" && flock .install.lock sh -c '[ -d "node_modules/$1" ] ||
        timeout 120 npm install --no-audit --no-fund --silent "$1"' sh "$2" >"$3" 2>&1)
}
