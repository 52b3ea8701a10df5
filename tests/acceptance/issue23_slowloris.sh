#!/bin/sh
# tests/acceptance/issue23_slowloris.sh [BUILD] - issue 23, acceptance 1 (and
# RSS of acceptance 3): with 1000 slowloris sockets held for 60 s, /health and
# a real completion (16 tokens) are answered with p99 under 1 s; afterwards
# the server's RSS returns to its idle level (within 10% + 16 MiB).
#
# The server: --parallel 16 --queue 64 --max-conns 2048 and the default
# 10 s header deadline, so every slow socket is timed out (408) and opened
# again by the attacker several times.  The attackers connect from
# 127.0.0.22-26 (all of 127/8 is loopback), the timed client from 127.0.0.1.
# Environment: A23_SLOW (1000), A23_SECONDS (60).  Prints "N passed, N
# failed"; about 70 s.
set -u
. tests/acceptance/issue23.lib
a23_init issue23_slowloris "${1:-build}"
N=${A23_SLOW:-1000}
S=${A23_SECONDS:-60}
echo "issue23_slowloris: $N slowloris sockets for $S s (ulimit -n $(ulimit -n), uptime: $(uptime | sed 's/.*load/load/'))"
a23_start --ctx 256 --parallel 16 --queue 64 --max-conns 2048
[ -n "$PORT" ] || { echo "issue23_slowloris: the server did not start: $(cat "$T/server.log")"; exit 1; }
# idle level: after a few requests have run
for i in 1 2 3 4; do curl -s -o /dev/null "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":16}'; done
sleep 1
rss0=$(a23_rss)
KITE_SECTIONS=slow KITE_PORT_BIG=$PORT KITE_SLOW_N=$N KITE_SLOW_S=$S KITE_P99_MS=1000 \
    timeout $((S + 120)) node tests/e2e/serve_load.mjs >"$T/node.out" 2>&1
cat "$T/node.out"
passed=$((passed + $(grep -c '^  ok    ' "$T/node.out")))
failed=$((failed + $(grep -c '^  FAIL  ' "$T/node.out")))
# RSS back at its idle level once the sockets are gone (bounded wait: 15 s)
i=0
rss1=$(a23_rss)
while [ $i -lt 15 ] && [ "$rss1" -gt $((rss0 + rss0 / 10 + 16384)) ]; do sleep 1; rss1=$(a23_rss); i=$((i + 1)); done
peak=$(sed -n 's/^VmHWM:[^0-9]*\([0-9]*\).*/\1/p' "/proc/$SPID/status")
a23_check "RSS returns to its idle level: idle $rss0 KiB, peak $peak KiB, after $rss1 KiB" \
    "$([ "$rss1" -le $((rss0 + rss0 / 10 + 16384)) ] && echo 0 || echo 1)" "after $i s"
a23_stop
a23_check "the server exits 0 on SIGTERM" $? "$(tail -n 2 "$T/server.log")"
echo "issue23_slowloris: $passed passed, $failed failed"
[ "$failed" = 0 ]
