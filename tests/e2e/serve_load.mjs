// tests/e2e/serve_load.mjs - `kite serve` under hostile load (issue 23 items
// 1, 2, 3, 7), run by tests/e2e/test_serve_hostile.sh (short) and the
// acceptance scripts (long: KITE_SLOW_N, KITE_SLOW_S).  Load generators:
// tools/http/hostile.mjs.
//
// Environment: KITE_SECTIONS (comma-separated, below), and per section:
//   limits   KITE_PORT_LIM: --ctx 512 --parallel 1 --queue 2 --max-conns 16 --max-conns-per-ip 8 --header-timeout 6
//   slow     KITE_PORT_BIG: --parallel 16 --queue 64 --header-timeout 3; KITE_SLOW_N sockets for KITE_SLOW_S s,
//            p99 bound KITE_P99_MS (1000)
//   flood    KITE_PORT_BIG; KITE_FLOOD_N requests at once
//   fair     KITE_PORT_FAIR: --parallel 1 --queue 16 (fair queueing across client addresses)
//   drain    KITE_PORT_DRAIN, KITE_PID_DRAIN: --ctx 512 --parallel 1 --queue 40 --drain-timeout 1 (this script sends SIGTERM)
// Output: one "  ok    name" / "  FAIL  name: details" line per check.
import net from 'node:net';
import * as H from '../../tools/http/hostile.mjs';

const env = process.env;
const sections = (env.KITE_SECTIONS || 'limits,slow,flood').split(',');

function ok(name) { console.log(`  ok    ${name}`); }
function fail(name, why) { console.log(`  FAIL  ${name}: ${String(why).replace(/\s+/g, ' ').slice(0, 400)}`); }
function check(name, cond, why) { if (cond) ok(name); else fail(name, why); }
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const utf8 = new TextDecoder('utf-8', { fatal: true });
function json(r) {
    try { return JSON.parse(utf8.decode(r.body)); } catch { return null; }
}
const code = (r) => { const j = r && !r.error ? json(r) : null; return j && j.error ? j.error.code : undefined; };
const show = (r) => r.error ? `error ${r.error}` : `${r.status} ${r.body.toString().slice(0, 200)}`;
const hasRetry = (r) => !r.error && /^\d+$/.test(r.headers['retry-after'] || '') && /^\d+$/.test(r.headers['retry-after-ms'] || '');

// An idle socket (connected, sends nothing) from addr; resolves once
// connected.  It keeps what the server sends (s.buf) and when it closed
// (s.closedAt, performance.now()), so that no answer is missed between checks.
function idle(port, addr) {
    return new Promise((resolve) => {
        const s = net.connect({ port, host: '127.0.0.1', localAddress: addr }, () => resolve(s));
        s.buf = '';
        s.closedAt = null;
        s.on('data', (d) => { s.buf += d; });
        s.on('close', () => { s.closedAt = performance.now(); });
        s.on('error', () => resolve(s));
    });
}

// n idle sockets from addr that the server took: one it answered at once
// (no data and no close within 100 ms: taken) is replaced.  The server counts
// a connection until libmicrohttpd has closed it, which on a loaded machine is
// a while after its client read the whole answer; such a count can refuse a
// socket near the limit.  Bounded: 20 rounds.
async function held(port, addr, n) {
    const out = [];
    for (let round = 0; round < 20 && out.length < n; round++) {
        const fresh = [];
        while (out.length + fresh.length < n) fresh.push(await idle(port, addr));
        await sleep(100);
        for (const s of fresh) {
            if (!s.buf && s.closedAt === null && !s.destroyed) out.push(s);
            else s.destroy();
        }
    }
    return out;
}

async function metricsText(port) {
    const r = await H.request(port, H.get('/metrics'));
    return r.error ? '' : r.body.toString();
}
const metric = (text, name) => { const m = new RegExp('^' + name.replace(/[{}"]/g, (c) => '\\' + c) + ' (\\S+)$', 'm').exec(text); return m ? +m[1] : NaN; };

// ---- limits: connection limits, header deadline, head checks, queue, deadlines ----

async function limits() {
    const port = +env.KITE_PORT_LIM;
    // per-address limit (8): the 9th idle socket from one address gets a
    // fast 429 with Retry-After; another address is still served
    const idle5 = await held(port, '127.0.0.5', 8);
    let r = await H.request(port, H.get('/health'), { localAddress: '127.0.0.5', ms: 5000 });
    check(`a 9th connection from one address -> fast 429 JSON with Retry-After (${r.ms.toFixed(0)} ms)`,
        r.status === 429 && code(r) === 'too_many_connections' && hasRetry(r) && r.ms < 1000, show(r));
    r = await H.request(port, H.get('/health'), { localAddress: '127.0.0.1', ms: 5000 });
    check('... while another address is served', r.status === 200, show(r));
    // trickling does not extend the header deadline: one byte per 200 ms
    const t0 = performance.now();
    const trickling = new Promise((res) => {
        const s = net.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.8' });
        const head = 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Trickle: ' + 'a'.repeat(200);
        let i = 0, buf = '';
        const iv = setInterval(() => { if (i < head.length) s.write(head[i++]); }, 200);
        s.on('data', (d) => { buf += d; });
        s.on('error', () => {});
        s.on('close', () => { clearInterval(iv); res({ ms: performance.now() - t0, buf, sent: i }); });
        setTimeout(() => s.destroy(), 14000);
    });
    // global limit (16): 7 more idle from a second address fill it; a third
    // address gets 503 (not a reset)
    const idle6 = await held(port, '127.0.0.6', 7);
    const all = [...idle5, ...idle6];
    r = await H.request(port, H.get('/health'), { localAddress: '127.0.0.7', ms: 5000 });
    check(`over --max-conns -> fast 503 JSON with Retry-After, not a reset (${r.ms.toFixed(0)} ms)`,
        r.status === 503 && code(r) === 'server_overloaded' && hasRetry(r) && r.ms < 1000, show(r));
    // header deadline (6 s): the idle ones are answered 408 and closed
    const tWait = performance.now();
    for (let i = 0; i < 140 && all.some((s) => s.closedAt === null); i++) await sleep(100);
    const closedAt = all.map((s) => ({ ms: s.closedAt === null ? Infinity : s.closedAt - tWait, buf: s.buf }));
    all.forEach((s) => s.destroy());
    check(`idle sockets are answered 408 JSON and closed at the header deadline (${all.length} of 15 held)`,
        all.length === 15 && closedAt.every((c) => c.ms < 12000 && /^HTTP\/1\.1 408 /.test(c.buf) && /"request_timeout"/.test(c.buf)),
        JSON.stringify(closedAt.filter((c) => !(c.ms < 12000 && /^HTTP\/1\.1 408 /.test(c.buf))).slice(0, 3).map((c) => [c.ms, c.buf.slice(0, 40)])));
    const trickle = await trickling;
    check(`a head trickled one byte per 200 ms gets 408 at the deadline (${trickle.ms.toFixed(0)} ms, ${trickle.sent} bytes sent)`,
        trickle.ms > 5500 && trickle.ms < 12000 && /^HTTP\/1\.1 408 /.test(trickle.buf), JSON.stringify(trickle).slice(0, 200));

    // heads libmicrohttpd 0.9.75 would answer itself (HTML; a malformed
    // Content-Length with its status line twice): the gate answers JSON
    for (const [what, bytes, want] of [
        ['malformed Content-Length', 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n', 400],
        ['negative Content-Length', 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n', 400],
        ['two different Content-Lengths', 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}', 400],
        ['Content-Length with Transfer-Encoding', 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}', 400],
        ['Transfer-Encoding gzip', 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n', 501],
        ['HTTP/2.0 request line', 'GET /health HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n', 505],
        ['folded header', 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\r\n b\r\n\r\n', 400],
    ]) {
        r = await H.request(port, Buffer.from(what === 'x' ? '' : bytes, 'latin1'), { ms: 5000 });
        check(`${what} -> ${want} JSON with one status line`,
            r.status === want && r.nStatus === 1 && r.headers['content-type'] === 'application/json' && json(r) && json(r).error, show(r));
    }

    // the queue (1 slot + 2 places): 8 long requests at once -> 3 admitted,
    // the rest 503 with Retry-After; /health says saturated meanwhile
    const long = H.completion(480);
    let h, hj, polling = true;
    const poller = (async () => { // until an answer shows the queue full (bounded: 200 polls)
        for (let i = 0; i < 200 && polling; i++) {
            const a = await H.request(port, H.get('/health'));
            const aj = json(a) || {};
            if (!h || aj.status === 'saturated') { h = a; hj = aj; }
            if (aj.status === 'saturated') break;
        }
    })();
    const pending = Array.from({ length: 8 }, () => H.request(port, long, { localAddress: '127.0.0.9', ms: 30000 }));
    const res = H.classify(await Promise.all(pending));
    polling = false;
    await poller;
    check(`8 requests against --parallel 1 --queue 2: 3 served, 5 get 503 with Retry-After (${JSON.stringify(res.byStatus)})`,
        res.byStatus[200] === 3 && res.byStatus[503] === 5 && res.missingRetry === 0 && !Object.keys(res.errors).length,
        JSON.stringify(res.byStatus) + JSON.stringify(res.errors));
    check(`/health is 503 while saturated, with queued and running counts (${JSON.stringify(hj).slice(0, 100)})`,
        h.status === 503 && hj.status === 'saturated' && hj.running + hj.queued === 3 && hj.running <= 1 && hasRetry(h), show(h));
    const m = await metricsText(port);
    const want = {
        queue_full: metric(m, 'kite_requests_rejected_total{reason="queue_full"}') >= 5,
        ttft: /kite_time_to_first_token_seconds_bucket\{le="\+Inf"\} [1-9]/.test(m),
        queue_time: /kite_request_queue_time_seconds_count [1-9]/.test(m),
        itl: /kite_inter_token_latency_seconds_count [1-9]/.test(m),
        e2e: /kite_e2e_request_latency_seconds_count [1-9]/.test(m),
        header_timeouts: metric(m, 'kite_http_header_timeouts_total') >= 16,
        per_ip: metric(m, 'kite_http_connections_rejected_total{reason="max_conns_per_ip"}') >= 1,
        max_conns: metric(m, 'kite_http_connections_rejected_total{reason="max_conns"}') >= 1,
    };
    check('/metrics counts the rejections and timeouts and has the latency histograms', Object.values(want).every(Boolean),
        'missing: ' + Object.keys(want).filter((k) => !want[k]).join(', '));
    const h2 = await H.request(port, H.get('/health'));
    check('/health is 200 again once the queue drained', h2.status === 200 && (json(h2) || {}).status === 'ok', show(h2));

    // deadlines: a request queued behind two long ones with a 50 ms
    // t_max_predict_ms is answered 503 timeout; one that gets tokens in time
    // ends with finish_reason length
    const occupy = [H.request(port, long), H.request(port, long)];
    // both admitted (one running, one queued) before the short one is sent:
    // a fixed pause was too short on a loaded machine (bounded: 250 polls)
    for (let i = 0; i < 250; i++) {
        const a = json(await H.request(port, H.get('/health'))) || {};
        if (a.running + a.queued >= 2) break;
        await sleep(20);
    }
    r = await H.request(port, H.completion(8, { t_max_predict_ms: 20 }), { ms: 10000 });
    check(`queued past t_max_predict_ms (20) -> 503 timeout with Retry-After (${r.ms.toFixed(0)} ms)`,
        r.status === 503 && code(r) === 'timeout' && hasRetry(r) && r.ms < 1500, show(r));
    await Promise.all(occupy);
    r = await H.request(port, H.completion(240, { t_max_predict_ms: 5, stream: false }), { ms: 10000 });
    const j = json(r);
    check(`a generation past t_max_predict_ms (5) ends early: finish_reason length, fewer tokens (${j && j.usage ? j.usage.completion_tokens : '?'} of 240, ${r.ms.toFixed(0)} ms)`,
        (r.status === 200 && j.choices[0].finish_reason === 'length' && j.usage.completion_tokens < 240) || (r.status === 503 && code(r) === 'timeout'), show(r));
    const m2 = await metricsText(port);
    check('/metrics counts the timeouts', metric(m2, 'kite_requests_timed_out_total{phase="queue"}') >= 1, m2.split('\n').filter((l) => /timed_out/.test(l)).join(' '));

    // embeddings take admission places like completions: with the slot and
    // both queue places held by long completions, an embedding request (either
    // route) gets 503 server_overloaded with Retry-After; afterwards it is served
    const embHeld = Array.from({ length: 3 }, () => H.request(port, long, { localAddress: '127.0.0.9', ms: 30000 }));
    let sat = false;
    for (let i = 0; i < 200 && !sat; i++) { // bounded: 200 polls
        sat = (json(await H.request(port, H.get('/health'))) || {}).status === 'saturated';
        if (!sat) await sleep(10);
    }
    const rejBefore = metric(await metricsText(port), 'kite_requests_rejected_total{reason="queue_full"}');
    const e1 = await H.request(port, H.post('/v1/embeddings', { input: ['Once upon a time', 'a cat sat'] }), { ms: 10000 });
    const e2 = await H.request(port, H.post('/embedding', { content: 'Once upon a time' }), { ms: 10000 });
    const rejAfter = metric(await metricsText(port), 'kite_requests_rejected_total{reason="queue_full"}');
    check(`embeddings while --parallel 1 --queue 2 is full -> 503 server_overloaded with Retry-After, counted as queue_full (${show(e1).slice(0, 80)})`,
        sat && e1.status === 503 && code(e1) === 'server_overloaded' && hasRetry(e1) && e2.status === 503 &&
        code(e2) === 'server_overloaded' && hasRetry(e2) && rejAfter - rejBefore >= 2, `saturated ${sat} / ${show(e2)} / rejected ${rejBefore} -> ${rejAfter}`);
    const heldRes = H.classify(await Promise.all(embHeld));
    const e3 = await H.request(port, H.post('/v1/embeddings', { input: ['Once upon a time', 'a cat sat'] }), { ms: 10000 });
    const e3j = json(e3);
    check(`... and served once the queue drained (${JSON.stringify(heldRes.byStatus)})`,
        heldRes.byStatus[200] === 3 && e3.status === 200 && e3j && e3j.data && e3j.data.length === 2, show(e3));
}

// ---- fair: the waiting queue is fair per client (peer address) ----
// --parallel 1: client A (127.0.0.21) queues 6 long requests, then client B
// (127.0.0.22) sends one.  Admission is round-robin across clients, so B's
// is admitted second or third (FIFO would put it last): at least three of
// A's end after it.
async function fair() {
    const port = +env.KITE_PORT_FAIR;
    const req = H.completion(480);
    const ends = {};
    const send = (name, addr) => H.request(port, req, { localAddress: addr, ms: 60000 }).then((r) => { ends[name] = { t: performance.now(), r }; });
    const pending = [];
    for (let i = 0; i < 6; i++) pending.push(send(`A${i}`, '127.0.0.21'));
    let queued = 0;
    for (let i = 0; i < 200 && queued < 6; i++) { // until all six are in (bounded: 200 polls)
        const hj = json(await H.request(port, H.get('/health'))) || {};
        queued = (hj.running || 0) + (hj.queued || 0);
        if (queued < 6) await sleep(5);
    }
    await sleep(10);
    pending.push(send('B', '127.0.0.22'));
    await Promise.all(pending);
    const order = Object.keys(ends).sort((a, b) => ends[a].t - ends[b].t);
    const allOk = Object.values(ends).every((e) => e.r.status === 200);
    const after = order.length - 1 - order.indexOf('B');
    check(`--parallel 1, client A queues 6 requests (${queued} seen in), then client B one: B's ends before at least 3 of A's (order ${order.join(' ')})`,
        allOk && queued >= 6 && order.includes('B') && after >= 3,
        Object.entries(ends).map(([k, e]) => `${k} ${show(e.r).slice(0, 40)}`).join(' | '));
}

// ---- slowloris: N sockets trickling heads while a real client is timed ----

async function slow() {
    const port = +env.KITE_PORT_BIG;
    const n = +(env.KITE_SLOW_N || 300), secs = +(env.KITE_SLOW_S || 4);
    const sl = H.slowloris({ port, n, addrs: H.addrRange(20, Math.max(1, Math.ceil(n / 200))), byteMs: 500 });
    await sleep(Math.min(3000, 200 + n * 2));
    const held = sl.count();
    const hl = [], cl = [], bad = [];
    const t_end = performance.now() + secs * 1000;
    let maxHeld = held;
    while (performance.now() < t_end) {
        const a = await H.request(port, H.get('/health'), { ms: 10000 });
        if (a.status === 200) hl.push(a.ms); else bad.push('health ' + show(a));
        const b = await H.request(port, H.completion(16), { ms: 10000 });
        if (b.status === 200) cl.push(b.ms); else bad.push('completion ' + show(b));
        maxHeld = Math.max(maxHeld, sl.count());
    }
    const st = await sl.stop();
    const p99h = H.pct(hl, 99), p99c = H.pct(cl, 99);
    console.log(`  info  slowloris ${n} sockets (${held} open after ramp-up, ${st.opened} opened in all, ${st.closedByServer} closed by the server: ${JSON.stringify(st.answers)}), ${secs} s: ` +
        `/health p50 ${H.pct(hl, 50).toFixed(1)} p99 ${p99h.toFixed(1)} ms (n=${hl.length}), completion p50 ${H.pct(cl, 50).toFixed(1)} p99 ${p99c.toFixed(1)} ms (n=${cl.length})`);
    const lim = +(env.KITE_P99_MS || 1000);
    check(`${n} slowloris sockets held (${held} open): /health and a real completion answered, p99 under ${lim} ms`,
        bad.length === 0 && hl.length > 0 && cl.length > 0 && p99h < lim && p99c < lim && held >= 0.9 * n, bad.slice(0, 3).join(' | ') + ` held ${held}`);
    const m = await metricsText(port);
    check('the server timed the slow heads out (408) and reconnected sockets were accepted',
        metric(m, 'kite_http_header_timeouts_total') >= (secs >= 3 ? 0.5 * n : 0) && st.opened >= n, `timeouts ${metric(m, 'kite_http_header_timeouts_total')} opened ${st.opened}`);
}

// ---- flood: N requests at once against --parallel 16 --queue 64 ----

async function flood() {
    const port = +env.KITE_PORT_BIG;
    const n = +(env.KITE_FLOOD_N || 500);
    const res = await H.burst({ port, n, addr: '127.0.0.3', bytes: H.completion(8) });
    const other = Object.keys(res.byStatus).filter((s) => !['200', '429', '503'].includes(s));
    check(`${n} requests at once: only 200/429/503, zero resets or timeouts, Retry-After on every 429/503 (${JSON.stringify(res.byStatus)})`,
        !Object.keys(res.errors).length && !other.length && res.missingRetry === 0 && (res.byStatus[200] || 0) >= 80,
        JSON.stringify(res.byStatus) + ' errors ' + JSON.stringify(res.errors) + ' missing Retry-After ' + res.missingRetry);
    const r = await H.request(port, H.completion(4));
    check('the server serves normally after the flood', r.status === 200, show(r));
}

// ---- drain: SIGTERM with running, queued and half-sent requests ----

function sseOutcome(r) {
    if (r.error) return 'error ' + r.error;
    if (r.status !== 200) return `${r.status} ${code(r)}`; // not started before the drain
    const text = r.body.toString();
    const events = text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6));
    if (events.at(-1) !== '[DONE]') return 'no [DONE]';
    const last = events.length > 1 ? JSON.parse(events.at(-2)) : null;
    if (last && last.error) return 'error event ' + last.error.code;
    if (last && last.choices && last.choices[0] && last.choices[0].finish_reason) return 'finished';
    return 'odd: ' + text.slice(-120);
}

async function drain() {
    const port = +env.KITE_PORT_DRAIN, pid = +env.KITE_PID_DRAIN;
    const long = (stream) => H.completion(480, { stream });
    // running + queued on 1 slot: 2 streams, 24 plain requests, 38 streams -
    // more than the 1 s drain timeout can finish, so the first finish and the
    // last are cut (a 480-token stream took 64 ms on an idle EPYC core in the
    // clang build: 6 trailing streams all finished in time there)
    const reqs = [], started = [];
    const at = (i) => new Promise((r) => setTimeout(r, i)); // keep the queue order
    for (let i = 0; i < 64; i++) {
        const stream = i < 2 || i >= 26;
        let onData;
        started.push(stream ? new Promise((r) => { onData = r; }) : null);
        reqs.push(at(i).then(() => H.request(port, long(stream), { ms: 20000, onData })));
    }
    // a Skeleton-of-Thought answer queued behind them (its point requests cannot all run
    // within the drain timeout): the drain ends it with a 503 (it has sent nothing yet)
    const sot = at(70).then(() => H.request(port, H.post('/v1/chat/completions', {
        messages: [{ role: 'user', content: 'Tell me a story.' }], sot: true, max_tokens: 40, temperature: 1,
        sot_skeleton: '1. a\n2. b\n3. c\n4. d\n5. e\n6. f\n7. g\n8. h\n9. i\n10. j' }), { ms: 20000 }));
    // every stream has its 200 (sent at once, queued or not) before SIGTERM (bounded: 10 s)
    await Promise.race([Promise.all(started.filter(Boolean)), sleep(10000)]);
    // half-sent: a head without its end (gate), a body without its end (libmicrohttpd)
    const halfHead = new Promise((res) => {
        const s = net.connect(port, '127.0.0.1', () => s.write('POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n'));
        let buf = '';
        s.on('data', (d) => { buf += d; });
        s.on('error', () => {});
        s.on('close', () => res(buf));
        setTimeout(() => s.destroy(), 10000);
    });
    const body = Buffer.from(JSON.stringify({ prompt: 'Once', max_tokens: 4 }));
    const halfBody = new Promise((res) => {
        const s = net.connect(port, '127.0.0.1', () => {
            s.write(`POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
            s.write(body.subarray(0, 5));
            setTimeout(() => s.write(body.subarray(5)), 600); // the rest after SIGTERM
        });
        let buf = '';
        s.on('data', (d) => { buf += d; });
        s.on('error', () => {});
        s.on('close', () => res(buf));
        setTimeout(() => s.destroy(), 10000);
    });
    await sleep(100);
    const tKill = performance.now();
    process.kill(pid, 'SIGTERM');
    await sleep(200);
    const late = await H.request(port, H.completion(4), { ms: 5000 });
    const health = await H.request(port, H.get('/health'), { ms: 5000 });
    const outs = await Promise.all(reqs);
    const [hh, hb] = await Promise.all([halfHead, halfBody]);
    const streams = [...outs.slice(0, 2), ...outs.slice(26)].map(sseOutcome);
    const plain = outs.slice(2, 26).map((r) => r.error ? 'error ' + r.error : r.status === 200 ? 'finished' : `${r.status} ${code(r)}`);
    check(`after SIGTERM a new request gets 503 server_shutting_down with Retry-After (${show(late).slice(0, 60)})`,
        late.status === 503 && code(late) === 'server_shutting_down' && hasRetry(late), show(late));
    check('... and so does /health on a new connection', health.status === 503 && code(health) === 'server_shutting_down', show(health));
    const okEnd = (s) => s === 'finished' || s === '503 server_shutting_down';
    const tally = (l) => Object.entries(l.reduce((m, s) => ({ ...m, [s]: (m[s] || 0) + 1 }), {})).map(([s, n]) => `${n}x ${s}`).join(', ');
    check(`running and queued streams end with [DONE]: finished, or an error event when the drain timeout cut them (${tally(streams)})`,
        streams.every((s) => okEnd(s) || s === 'error event server_shutting_down') && streams.includes('error event server_shutting_down'),
        streams.join(', '));
    check(`running and queued plain requests finish or get 503 server_shutting_down (${plain.join(', ')})`, plain.every(okEnd), plain.join(', '));
    const so = await sot;
    check(`a Skeleton-of-Thought answer in progress ends with 503 server_shutting_down and Retry-After, or is finished (${show(so).slice(0, 60)})`,
        (so.status === 503 && code(so) === 'server_shutting_down' && hasRetry(so)) || (so.status === 200 && !so.error), show(so));
    check('a half-sent head gets 503 JSON at SIGTERM', /^HTTP\/1\.1 503 /.test(hh) && /server_shutting_down/.test(hh), hh.slice(0, 120));
    check('a body completed after SIGTERM gets 503 JSON', /^HTTP\/1\.1 503 /.test(hb) && /server_shutting_down/.test(hb), hb.slice(0, 120));
    // the process exits (status checked by the shell) soon after the drain timeout
    let alive = true;
    for (let i = 0; i < 100 && alive; i++) {
        try { process.kill(pid, 0); await sleep(50); } catch { alive = false; }
    }
    check(`the server exits after the drain (${((performance.now() - tKill) / 1000).toFixed(1)} s after SIGTERM, --drain-timeout 1)`, !alive, 'still running');
}

const all = { limits, slow, flood, drain, fair };
for (const name of sections) {
    const t0 = performance.now();
    try {
        await all[name]();
    } catch (e) {
        fail(name, e && e.stack ? e.stack : e);
    }
    console.log(`  info  section ${name}: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}
process.exit(0); // the sockets' safety timers (bounded) need not run out
