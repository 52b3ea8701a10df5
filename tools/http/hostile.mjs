// tools/http/hostile.mjs - hostile and honest load generators for `kite serve`
// (issue 23), over raw sockets (node:net, no packages), loopback only.
//
// Used by tests/e2e/serve_load.mjs (make test, short), the acceptance scripts
// tests/acceptance/issue23_*.sh (long) and `make loadtest` hostile mode
// (LOADTEST_HOSTILE=1: `node tools/http/hostile.mjs bench PORT`).
//
// Attackers connect from other loopback addresses (127.0.0.2 and up: all of
// 127/8 is local on Linux) so that the per-address connection limit applies
// to them and not to the honest clients on 127.0.0.1, as it would between
// real clients.  Every loop is bounded in time and count.
import net from 'node:net';
import { spawn } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

export function assertLoopback(host) {
    if (!/^127\.\d+\.\d+\.\d+$/.test(host)) throw new Error(`${host} is not a loopback address; refusing`);
}

export function pct(a, p) {
    if (!a.length) return NaN;
    const s = [...a].sort((x, y) => x - y);
    return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

// Parses one HTTP response at the start of b: {status, headers, body, nStatus}
// or null if incomplete (Content-Length bodies, or until close).
export function parseResponse(b, closed = false) {
    const he = b.indexOf('\r\n\r\n');
    if (he < 0) return null;
    const head = b.subarray(0, he).toString('latin1').split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(head[0]);
    if (!m) return { status: 0, bad: head[0].slice(0, 60), headers: {}, body: Buffer.alloc(0) };
    const headers = {};
    for (const line of head.slice(1)) {
        const i = line.indexOf(':');
        if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
    }
    let body = b.subarray(he + 4);
    if (headers['content-length'] !== undefined) {
        const n = +headers['content-length'];
        if (body.length < n) return null;
        body = body.subarray(0, n);
    } else if (!closed) {
        return null;
    }
    const nStatus = (b.toString('latin1').match(/^HTTP\/1\.[01] \d{3}/gm) || []).length;
    return { status: +m[1], headers, body, nStatus };
}

// One request: sends bytes, reads the answer.  Resolves to {status, headers,
// body, ms} or {error: 'reset' | 'timeout' | 'closed' | code, ms}.
// onData (optional) is called at the first bytes of the answer.
export function request(port, bytes, { localAddress = '127.0.0.1', ms = 30000, host = '127.0.0.1', onData = null } = {}) {
    return new Promise((resolve) => {
        const t0 = performance.now();
        const s = net.connect({ port, host, localAddress });
        let buf = Buffer.alloc(0);
        let done = false;
        const finish = (r) => {
            if (done) return;
            done = true;
            clearTimeout(timer);
            s.destroy();
            r.ms = performance.now() - t0;
            resolve(r);
        };
        const timer = setTimeout(() => finish({ error: 'timeout' }), ms);
        s.on('data', (d) => {
            if (onData && !buf.length) onData();
            buf = Buffer.concat([buf, d]);
            const r = parseResponse(buf);
            if (r) finish(r);
        });
        s.on('error', (e) => {
            const r = parseResponse(buf, true);
            finish(r || { error: e.code === 'ECONNRESET' || e.code === 'EPIPE' ? 'reset' : e.code || String(e) });
        });
        s.on('end', () => finish(parseResponse(buf, true) || { error: 'closed' }));
        s.on('connect', () => s.write(bytes));
    });
}

export function post(path, body, { host = '127.0.0.1', extra = '' } = {}) {
    const b = Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    return Buffer.concat([Buffer.from(`POST ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${b.length}\r\n${extra}\r\n`), b]);
}
export function get(path, { host = '127.0.0.1', extra = '' } = {}) {
    return Buffer.from(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n${extra}\r\n`);
}

export const completion = (tokens = 16, extra = {}) =>
    post('/v1/completions', { prompt: 'Once upon a time', max_tokens: tokens, temperature: 0, ignore_eos: true, ...extra });

// n sockets that send a request head one byte every byteMs and never finish
// it; a socket the server closes is opened again, so n stay open until stop().
// Sources cycle through addrs.  stop() resolves to counts.
export function slowloris({ port, n, addrs, byteMs = 1000 }) {
    const st = { opened: 0, closedByServer: 0, answers: {}, errors: 0 };
    const socks = new Set();
    let stopping = false;
    const head = 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ';
    function one(i) {
        if (stopping) return;
        const s = net.connect({ port, host: '127.0.0.1', localAddress: addrs[i % addrs.length] });
        let sent = 0, buf = '';
        st.opened++;
        socks.add(s);
        let timer = null;
        const tick = () => {
            if (stopping || s.destroyed) return;
            s.write(sent < head.length ? head[sent] : 'a');
            sent++;
            timer = setTimeout(tick, byteMs);
        };
        s.on('connect', tick);
        s.on('data', (d) => { buf += d.toString('latin1'); });
        let errCode = null;
        s.on('error', (e) => { st.errors++; errCode = e.code || 'error'; });
        s.on('close', () => {
            clearTimeout(timer);
            socks.delete(s);
            if (stopping) return;
            st.closedByServer++;
            const m = /^HTTP\/1\.1 (\d{3})/.exec(buf);
            const k = m ? m[1] : errCode ? 'error ' + errCode : 'closed without an answer';
            st.answers[k] = (st.answers[k] || 0) + 1;
            setTimeout(() => one(i), 20); // bounded: only until stop()
        });
    }
    for (let i = 0; i < n; i++) setTimeout(() => one(i), Math.floor(i / 100) * 10);
    return {
        stats: st,
        count: () => socks.size,
        async stop() {
            stopping = true;
            for (const s of socks) s.destroy();
            return st;
        },
    };
}

// n requests at once from addr; resolves to {byStatus, errors, missingRetry, results}.
export async function burst({ port, n, addr = '127.0.0.3', bytes = completion(4), ms = 60000 }) {
    const results = await Promise.all(Array.from({ length: n }, () => request(port, bytes, { localAddress: addr, ms })));
    return classify(results);
}

export function classify(results) {
    const byStatus = {}, errors = {};
    let missingRetry = 0;
    for (const r of results) {
        if (r.error) { errors[r.error] = (errors[r.error] || 0) + 1; continue; }
        byStatus[r.status] = (byStatus[r.status] || 0) + 1;
        if ((r.status === 429 || r.status === 503) && !(r.headers['retry-after'] && r.headers['retry-after-ms'])) missingRetry++;
    }
    return { byStatus, errors, missingRetry, results };
}

// workers loops sending bytes from addr until stop() (not honouring
// Retry-After: a hostile flood); counts like classify.
export function floodLoop({ port, workers, addr = '127.0.0.3', bytes = completion(16) }) {
    let stopping = false;
    const results = [];
    const loops = Array.from({ length: workers }, async () => {
        while (!stopping) results.push(await request(port, bytes, { localAddress: addr, ms: 60000 }));
    });
    return {
        async stop() {
            stopping = true;
            await Promise.all(loops);
            return classify(results);
        },
    };
}

// clients honest clients sending bytes in a loop for seconds (or requests in
// all), client i from addrs[i % addrs.length] (default 127.0.0.1); resolves
// to {latencies (ms, successes only), failures}.
export async function honest({ port, clients, seconds = 0, requests = 0, bytes = completion(16), addrs = ['127.0.0.1'] }) {
    const lat = [], failures = [];
    const t_end = performance.now() + seconds * 1000;
    let next = 0;
    await Promise.all(Array.from({ length: clients }, async (_, i) => {
        for (;;) {
            if (seconds ? performance.now() >= t_end : next >= requests) break;
            next++;
            const r = await request(port, bytes, { ms: 60000, localAddress: addrs[i % addrs.length] });
            if (!r.error && r.status === 200) lat.push(r.ms);
            else failures.push(r.error || r.status);
        }
    }));
    return { latencies: lat, failures };
}

export const addrRange = (from, count) => Array.from({ length: count }, (_, i) => `127.0.${Math.floor((from + i) / 250)}.${(from + i) % 250 + 2}`);

// `node tools/http/hostile.mjs bench PORT [SECONDS] [SLOW] [HONEST]` - make
// loadtest's hostile mode: honest p50/p99 alone, then beside SLOW slowloris
// sockets (from 10 addresses) and a flood of 10 x HONEST looping clients
// from one address (127.0.0.3).  Each honest client has its own address
// (127.0.1.x), as distinct users would.
// Runs `hostile.mjs MODE ARGS...` in a child process (its own event loop
// and CPU, so the honest clients' latencies are not the attackers' client
// overhead) at nice 19: on one machine the attackers' own client CPU would
// otherwise take the server's cores (on 2 cores the flood and slowloris
// processes used a core between them, honest p99 x3.9), where real attackers
// spend their own machines'; the server's work for every attack connection
// still counts.  stop() sends SIGTERM and resolves to the JSON it prints.
function child(mode, args) {
    const p = spawn(process.execPath, [fileURLToPath(import.meta.url), mode, ...args.map(String)], { stdio: ['ignore', 'pipe', 'inherit'] });
    try { os.setPriority(p.pid, 19); } catch { /* not permitted: the attackers keep equal priority */ }
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    const exited = new Promise((r) => p.on('exit', r));
    return {
        async stop() {
            p.kill('SIGTERM');
            await Promise.race([exited, new Promise((r) => setTimeout(r, 30000))]);
            try { return JSON.parse(out.trim().split('\n').at(-1)); } catch { return { error: 'no summary: ' + out.slice(-200) }; }
        },
    };
}

async function bench(port, seconds, nSlow, nHonest) {
    const row = (name, a) => `${name.padEnd(26)} n ${String(a.length).padStart(5)}  p50 ${pct(a, 50).toFixed(1).padStart(8)}  p99 ${pct(a, 99).toFixed(1).padStart(8)} ms`;
    const addrs = addrRange(250, nHonest);
    const base = await honest({ port, clients: nHonest, seconds, addrs });
    const slow = nSlow > 0 ? child('slowloris', [port, nSlow]) : null;
    const fl = child('flood', [port, 10 * nHonest, '127.0.0.3']);
    await new Promise((r) => setTimeout(r, 1000));
    const hot = await honest({ port, clients: nHonest, seconds, addrs });
    const flood = await fl.stop();
    const ss = slow ? await slow.stop() : { closedByServer: 0, answers: {}, maxHeld: 0 };
    console.log(`loadtest hostile: ${nHonest} honest clients (one address each), ${seconds} s per phase; ${nSlow} slowloris sockets (at most ${ss.maxHeld} open), flood of ${10 * nHonest} looping clients from 127.0.0.3 (attackers in their own processes)`);
    console.log(row('honest alone', base.latencies));
    console.log(row('honest under attack', hot.latencies));
    console.log(`honest failures: alone ${base.failures.length}, under attack ${hot.failures.length}; flood answers ${JSON.stringify(flood.byStatus)} errors ${JSON.stringify(flood.errors)}; slowloris closed by the server ${ss.closedByServer} ${JSON.stringify(ss.answers)}`);
    const out = {
        honest_clients: nHonest, seconds, slowloris: nSlow, flood_workers: 10 * nHonest,
        base_n: base.latencies.length, base_p50_ms: +pct(base.latencies, 50).toFixed(2), base_p99_ms: +pct(base.latencies, 99).toFixed(2),
        attack_n: hot.latencies.length, attack_p50_ms: +pct(hot.latencies, 50).toFixed(2), attack_p99_ms: +pct(hot.latencies, 99).toFixed(2),
        p99_ratio: +(pct(hot.latencies, 99) / pct(base.latencies, 99)).toFixed(3),
        honest_failures: hot.failures.length + base.failures.length, flood: flood.byStatus || {}, flood_errors: flood.errors || { summary: flood.error },
        flood_missing_retry_after: flood.missingRetry, slowloris_closed: ss.closedByServer, slowloris_max_open: ss.maxHeld,
    };
    console.log(JSON.stringify(out));
    return out;
}

// CLI: bench (above); flood PORT WORKERS ADDR and slowloris PORT N run until
// SIGTERM (bounded by 600 s), then print one JSON summary line.
const self = process.argv[1] && process.argv[1].endsWith('hostile.mjs');
const onStop = (fn) => {
    let done = false;
    const finish = async () => { if (done) return; done = true; console.log(JSON.stringify(await fn())); process.exit(0); };
    process.on('SIGTERM', finish);
    setTimeout(finish, 600000);
};
if (self && process.argv[2] === 'bench') {
    const [, , , port, seconds = '10', nSlow = '1000', nHonest = '16'] = process.argv;
    const out = await bench(+port, +seconds, +nSlow, +nHonest);
    process.exit(out.honest_failures || Object.keys(out.flood_errors).length ? 1 : 0);
} else if (self && process.argv[2] === 'flood') {
    const fl = floodLoop({ port: +process.argv[3], workers: +process.argv[4], addr: process.argv[5] || '127.0.0.3' });
    onStop(async () => { const c = await fl.stop(); delete c.results; return c; });
} else if (self && process.argv[2] === 'slowloris') {
    const sl = slowloris({ port: +process.argv[3], n: +process.argv[4], addrs: addrRange(20, 10) });
    let maxHeld = 0;
    const iv = setInterval(() => { maxHeld = Math.max(maxHeld, sl.count()); }, 200);
    onStop(async () => { clearInterval(iv); const st = await sl.stop(); return { ...st, maxHeld }; });
}
