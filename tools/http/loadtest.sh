#!/bin/sh
# tools/http/loadtest.sh BUILD - `make loadtest`: starts `kite serve` on
# 127.0.0.1 (a port chosen by the system, loopback only) and runs a bounded
# load against it with tools/http/loadtest.mjs (node's built-in fetch, no
# npm packages).  Knobs (environment): LOADTEST_CLIENTS (16),
# LOADTEST_REQUESTS (64), LOADTEST_TOKENS (64), LOADTEST_MODEL (bundled),
# LOADTEST_PARALLEL (engine slots, = clients), LOADTEST_THREADS (0 = all).
# LOADTEST_HOSTILE=1: hostile mode (tools/http/hostile.mjs bench: honest
# p50/p99 alone and beside LOADTEST_SLOW (1000) slowloris sockets and a 10x
# flood, LOADTEST_SECONDS (10) per phase; docs/http.md).
set -u
build=${1:-build}
clients=${LOADTEST_CLIENTS:-16}
parallel=${LOADTEST_PARALLEL:-$clients}
if ! command -v node >/dev/null 2>&1; then
    echo "loadtest: node is not installed (needed for the load client)" >&2
    exit 1
fi
log=$(mktemp "${TMPDIR:-/tmp}/kite-loadtest.XXXXXX")
set -- serve --port 0 --parallel "$parallel" -t "${LOADTEST_THREADS:-0}" -q
# hostile mode: the issue-23 layout (16 slots, a 64-place queue) and room for
# 1000 slow sockets plus the flood
[ -n "${LOADTEST_HOSTILE:-}" ] && set -- serve --port 0 --parallel "${LOADTEST_PARALLEL:-16}" --queue 64 \
    --max-conns 4096 -t "${LOADTEST_THREADS:-0}" -q
[ -n "${LOADTEST_MODEL:-}" ] && set -- "$@" -m "$LOADTEST_MODEL"
"$build/kite" "$@" </dev/null 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT INT TERM
port=
i=0
while [ $i -lt 300 ] && [ -z "$port" ]; do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
    kill -0 $pid 2>/dev/null || break
    [ -n "$port" ] || sleep 0.1
    i=$((i + 1))
done
if [ -z "$port" ]; then
    echo "loadtest: the server did not start: $(cat "$log")" >&2
    exit 1
fi
if [ -n "${LOADTEST_HOSTILE:-}" ]; then
    node tools/http/hostile.mjs bench "$port" "${LOADTEST_SECONDS:-10}" "${LOADTEST_SLOW:-1000}" "$clients"
else
    node tools/http/loadtest.mjs "http://127.0.0.1:$port" "$clients" "${LOADTEST_REQUESTS:-64}" "${LOADTEST_TOKENS:-64}"
fi
