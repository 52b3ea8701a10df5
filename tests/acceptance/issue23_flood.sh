#!/bin/sh
# tests/acceptance/issue23_flood.sh [BUILD] - issue 23, acceptance 2: a 10x
# flood gets only 2xx, 429 or 503 answers (zero resets, zero client
# timeouts, Retry-After on every 429/503), and the honest clients' p99
# latency rises by less than 2x.
#
# `make loadtest`'s hostile mode without the slowloris part
# (tools/http/hostile.mjs bench): 16 honest clients, each from its own
# loopback address (127.0.1.x), loop 16-token completions for A23_SECONDS
# (20) alone, then beside 160 looping clients from 127.0.0.3 that ignore
# Retry-After.  The server: --parallel 16 --queue 64 --max-conns-per-ip 4 (a
# per-client limit, nginx limit_conn style: without one a single address
# can take every queue place).  Then the same flood beside 1000 slowloris
# sockets (A23_SLOW), with the same checks.  The attackers run at nice 19
# (hostile.mjs child()).  Prints "N passed, N failed".
set -u
. tests/acceptance/issue23.lib
a23_init issue23_flood "${1:-build}"
S=${A23_SECONDS:-20}
echo "issue23_flood: uptime: $(uptime | sed 's/.*load/load/')"
a23_start --ctx 256 --parallel 16 --queue 64 --max-conns 4096 --max-conns-per-ip 4
[ -n "$PORT" ] || { echo "issue23_flood: the server did not start: $(cat "$T/server.log")"; exit 1; }
for slow in 0 "${A23_SLOW:-1000}"; do
    timeout $((2 * S + 120)) node tools/http/hostile.mjs bench "$PORT" "$S" "$slow" 16 >"$T/bench.out" 2>&1
    cat "$T/bench.out"
    j=$(tail -n 1 "$T/bench.out")
    verdict=$(printf '%s' "$j" | node -e '
        let s = ""; process.stdin.on("data", (d) => s += d).on("end", () => {
            let j; try { j = JSON.parse(s); } catch { console.log("no JSON line"); return; }
            const bad = [];
            if (Object.keys(j.flood_errors).length) bad.push("flood errors " + JSON.stringify(j.flood_errors));
            if (Object.keys(j.flood).some((k) => !/^(2\d\d|429|503)$/.test(k))) bad.push("flood statuses " + JSON.stringify(j.flood));
            if (j.flood_missing_retry_after) bad.push(j.flood_missing_retry_after + " answers without Retry-After");
            if (j.honest_failures) bad.push(j.honest_failures + " honest failures");
            if (!(j.p99_ratio < 2)) bad.push("honest p99 ratio " + j.p99_ratio);
            console.log(bad.length ? bad.join("; ") : "ok");
        });')
    a23_check "10x flood ($slow slowloris sockets beside it): only 2xx/429/503, no reset or timeout, honest p99 x$(printf '%s' "$j" | sed -n 's/.*"p99_ratio":\([0-9.]*\).*/\1/p')" \
        "$([ "$verdict" = ok ] && echo 0 || echo 1)" "$verdict"
done
a23_stop
a23_check "the server exits 0 on SIGTERM" $? "$(tail -n 2 "$T/server.log")"
echo "issue23_flood: $passed passed, $failed failed"
[ "$failed" = 0 ]
