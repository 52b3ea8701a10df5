// tests/e2e/serve_hostile.mjs - hostile-client checks of `kite serve` (issue 23),
// run by tests/e2e/test_serve_hostile.sh against servers it started on loopback.
//
// Environment: KITE_PORT (server with --api-key KITE_KEY, --ctx 256,
// --max-body 65536, --cors http://good.example, --allowed-hosts api.example),
// KITE_KEY, KITE_PORT2 (server without a key and without --cors, with
// --allowed-hosts '*').  Everything goes over raw sockets (node:net) so that
// malformed requests reach the server exactly as written and every byte of
// every answer is seen.  Every response body received is checked: one status
// line, valid UTF-8 (fatal decoder), JSON.parse (or, for SSE, every data
// line) - the "strict output" check at the end counts them.
//
// Output: one "  ok    name" / "  FAIL  name: details" line per check; the
// shell wrapper counts them.  Every wait is bounded (REQ_MS per request).
import net from 'node:net';

const PORT = +process.env.KITE_PORT;
const PORT2 = +process.env.KITE_PORT2;
const KEY = process.env.KITE_KEY;
const REQ_MS = 20000;

let nResponses = 0;
const strictFailures = [];

function ok(name) { console.log(`  ok    ${name}`); }
function fail(name, why) { console.log(`  FAIL  ${name}: ${String(why).replace(/\s+/g, ' ').slice(0, 300)}`); }
function check(name, cond, why) { if (cond) ok(name); else fail(name, why); }

// Sends bytes (string: latin1, so "\xff" is one byte; or a Buffer) and reads
// until the server closes or `ms` passes.  halfClose: shutdown(SHUT_WR) after
// the request.  Resolves to the raw answer as a Buffer.
function raw(port, bytes, { halfClose = false, ms = REQ_MS, untilComplete = true } = {}) {
    return new Promise((resolve) => {
        const s = net.connect(port, '127.0.0.1');
        let buf = Buffer.alloc(0);
        let done = false;
        const finish = () => {
            if (done) return;
            done = true;
            clearTimeout(timer);
            s.destroy();
            resolve(buf);
        };
        const timer = setTimeout(finish, ms);
        s.on('data', (d) => {
            buf = Buffer.concat([buf, d]);
            if (untilComplete && complete(buf)) finish();
        });
        s.on('error', finish);
        s.on('close', finish);
        s.on('connect', () => {
            s.write(typeof bytes === 'string' ? Buffer.from(bytes, 'latin1') : bytes);
            if (halfClose) s.end();
        });
    });
}

// Parses one HTTP response at the start of b: {status, headers, body, rest}
// or null if incomplete.  Handles Content-Length and chunked bodies.
function parseResponse(b) {
    const he = b.indexOf('\r\n\r\n');
    if (he < 0) return null;
    const head = b.subarray(0, he).toString('latin1').split('\r\n');
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(head[0]);
    if (!m) return { bad: `not a status line: ${head[0].slice(0, 60)}` };
    const headers = {};
    for (const line of head.slice(1)) {
        const i = line.indexOf(':');
        if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
    }
    let p = he + 4;
    let body;
    if (/chunked/i.test(headers['transfer-encoding'] || '')) {
        const parts = [];
        for (;;) {
            const le = b.indexOf('\r\n', p);
            if (le < 0) return null;
            const n = parseInt(b.subarray(p, le).toString('latin1'), 16);
            if (Number.isNaN(n)) return { bad: 'bad chunk size' };
            if (b.length < le + 2 + n + 2) return null;
            parts.push(b.subarray(le + 2, le + 2 + n));
            p = le + 2 + n + 2;
            if (n === 0) break;
        }
        body = Buffer.concat(parts);
    } else if (headers['content-length'] !== undefined) {
        const n = +headers['content-length'];
        if (b.length < p + n) return null;
        body = b.subarray(p, p + n);
        p += n;
    } else {
        body = b.subarray(p); // until close
        p = b.length;
    }
    return { status: +m[1], headers, body, rest: b.subarray(p) };
}

function complete(b) {
    const r = parseResponse(b);
    return r && !r.bad && (r.headers['content-length'] !== undefined || /chunked/i.test(r.headers['transfer-encoding'] || ''));
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

// The strict check of every answer: one response, valid UTF-8, JSON (or SSE
// of JSON).  Returns the parsed response with .text and .json / .events.
function strict(name, b) {
    nResponses++;
    const r = parseResponse(b);
    const bad = (why) => { strictFailures.push(`${name}: ${why}`); return r && !r.bad ? r : { status: 0, headers: {}, body: Buffer.alloc(0), text: '' }; };
    if (!r) return bad(`incomplete or no response (${b.length} bytes)`);
    if (r.bad) return bad(r.bad);
    if (r.rest.length) return bad(`${r.rest.length} bytes after the response: ${r.rest.toString('latin1').slice(0, 40)}`);
    try {
        r.text = utf8.decode(r.body);
    } catch {
        return bad('body is not valid UTF-8');
    }
    const ct = r.headers['content-type'] || '';
    if (r.status === 204 || (r.status === 200 && /^text\/html|javascript|text\/css/.test(ct))) return r;
    if (/^text\/event-stream/.test(ct)) {
        r.events = [];
        for (const line of r.text.split('\n')) {
            if (!line.startsWith('data: ')) continue;
            const d = line.slice(6);
            if (d === '[DONE]') { r.events.push('[DONE]'); continue; }
            try { r.events.push(JSON.parse(d)); } catch { return bad(`SSE data line is not JSON: ${d.slice(0, 60)}`); }
        }
        return r;
    }
    if (!/^application\/json/.test(ct)) return bad(`status ${r.status} with Content-Type '${ct}'`);
    try { r.json = JSON.parse(r.text); } catch { return bad(`body is not JSON: ${r.text.slice(0, 60)}`); }
    if (r.status >= 400) {
        const e = r.json && r.json.error;
        if (!e || typeof e.message !== 'string' || typeof e.type !== 'string' || !('param' in e) || !('code' in e))
            return bad(`error body is not OpenAI-shaped: ${r.text.slice(0, 80)}`);
    }
    return r;
}

// A request with a JSON body (Buffer or latin1 string) and the usual headers.
function post(path, body, { key = KEY, ctype = 'application/json', host = '127.0.0.1', extra = '' } = {}) {
    const b = typeof body === 'string' ? Buffer.from(body, 'latin1') : body;
    let h = `POST ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\nContent-Length: ${b.length}\r\n`;
    if (ctype !== null) h += `Content-Type: ${ctype}\r\n`;
    if (key) h += `Authorization: Bearer ${key}\r\n`;
    return Buffer.concat([Buffer.from(h + extra + '\r\n', 'latin1'), b]);
}
function get(path, { key = KEY, host = '127.0.0.1', method = 'GET', extra = '' } = {}) {
    let h = `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n`;
    if (key) h += `Authorization: Bearer ${key}\r\n`;
    return h + extra + '\r\n';
}

async function ask(name, bytes, opts) { return strict(name, await raw(opts && opts.port ? opts.port : PORT, bytes, opts)); }

function errCode(r) { return r.json && r.json.error ? r.json.error.code : undefined; }

// ---- 1. strict output -----------------------------------------------------

async function strictOutput() {
    // the request's model echoed: invalid bytes replaced by U+FFFD
    let r = await ask('model echo', post('/v1/completions', '{"model":"m\xff\xfe\xe2\x82","prompt":"Once","max_tokens":3,"temperature":0}'));
    check('invalid UTF-8 in "model" is echoed as U+FFFD', r.status === 200 && r.json && r.json.model === 'm\ufffd\ufffd\ufffd', r.text);
    r = await ask('model echo, stream', post('/v1/chat/completions', '{"model":"\xc0\xaf","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}'));
    check('invalid UTF-8 in "model" is echoed as U+FFFD in every SSE chunk',
        r.status === 200 && r.events && r.events.length > 2 && r.events.every((e) => e === '[DONE]' || e.model === '\ufffd\ufffd'), r.text.slice(0, 200));
    // raw URL bytes in the 404 message, also past the 160-byte copy
    r = await ask('404 bytes', get('/%FF%FEx'));
    check('404 for a URL with invalid bytes is UTF-8 JSON', r.status === 404 && errCode(r) === 'unknown_url' && r.json.error.message.includes('\ufffd'), r.text);
    r = await ask('404 truncation', get('/' + 'a'.repeat(150) + '%E2%82%AC'.repeat(20)));
    check('404 message truncating a long URL never splits a character',
        r.status === 404 && !r.json.error.message.includes('\ufffd') && r.json.error.message.includes('aaa\u20ac'), r.text.slice(0, 400));
    // invalid bytes in the prompt and in a message: served, output valid
    r = await ask('prompt bytes', post('/v1/completions', '{"prompt":"Once \xff\xfe upon","max_tokens":4,"temperature":0}'));
    check('a prompt with invalid UTF-8 is served with valid output', r.status === 200 && typeof r.json.choices[0].text === 'string', r.text);
    r = await ask('tokenize bytes', post('/tokenize', '{"content":"a\xffb"}'));
    check('/tokenize with invalid UTF-8 answers valid JSON', r.status === 200 || r.status === 400, r.text);
    r = await ask('detokenize bytes', post('/detokenize', '{"tokens":[3,200,4,5,6]}'));
    check('/detokenize answers valid JSON', r.status === 200 && typeof r.json.content === 'string', r.text);
    // unknown role: the truncated role never splits a character
    const role = 'r'.repeat(38) + '\u20ac\u20ac';
    r = await ask('role', post('/v1/chat/completions', Buffer.from(JSON.stringify({ messages: [{ role, content: 'x' }] }))));
    check('unknown role -> 400 naming it, cut on a character boundary',
        r.status === 400 && /unsupported role/.test(r.json.error.message) && !r.json.error.message.includes('\ufffd'), r.text);
    // messages: missing content, null content, NUL
    r = await ask('missing content', post('/v1/chat/completions', '{"messages":[{"role":"user"}]}'));
    check('a message without content -> 400 missing_required_parameter', r.status === 400 && errCode(r) === 'missing_required_parameter', r.text);
    r = await ask('null content', post('/v1/chat/completions', '{"messages":[{"role":"system","content":null},{"role":"user","content":"hi"}]}'));
    check('a system message with null content -> 400', r.status === 400 && errCode(r) === 'missing_required_parameter', r.text);
    r = await ask('assistant null', post('/v1/chat/completions', '{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null},{"role":"user","content":"again"}],"max_tokens":2}'));
    check('an assistant message with null content is still accepted', r.status === 200, r.text);
    r = await ask('nul message', post('/v1/chat/completions', '{"messages":[{"role":"user","content":"a\\u0000b"}]}'));
    check('\\u0000 in a message -> 400', r.status === 400 && /U\+0000/.test(r.json.error.message), r.text);
    r = await ask('nul prompt', post('/v1/completions', '{"prompt":"x\\u0000","max_tokens":2}'));
    check('\\u0000 in a prompt -> 400', r.status === 400 && /U\+0000/.test(r.json.error.message), r.text);
    r = await ask('escaped backslash', post('/v1/completions', '{"prompt":"x\\\\u0000","max_tokens":2}'));
    check('an escaped backslash before u0000 is plain text (200)', r.status === 200, r.text);
}

// ---- 2. every error is OpenAI JSON with the right status and headers -------

async function errors() {
    let r = await ask('414', get('/v1/models?x=' + 'a'.repeat(20000)));
    check('a 20 KB URI -> 414 JSON (not libmicrohttpd HTML)', r.status === 414 && errCode(r) === 'uri_too_long', r.status + ' ' + r.text.slice(0, 100));
    r = await ask('431', get('/v1/models', { extra: 'X-Big: ' + 'b'.repeat(40000) + '\r\n' }));
    check('40 KB of headers -> 431 JSON', r.status === 431 && errCode(r) === 'request_header_fields_too_large', r.status + ' ' + r.text.slice(0, 100));
    r = await ask('431 many', get('/v1/models', { extra: 'X-Many: 0123456789012345678901234567890123\r\n'.repeat(1000) }));
    check('1000 header lines (40 KB) -> 431 JSON', r.status === 431, r.status + ' ' + r.text.slice(0, 100));
    r = await ask('413', post('/v1/completions', '{}', { extra: '' }).toString('latin1').replace('Content-Length: 2', 'Content-Length: 99999999'));
    check('a Content-Length over --max-body -> 413 JSON', r.status === 413 && errCode(r) === 'request_too_large', r.text);
    r = await ask('405', get('/v1/completions'));
    check('GET on a POST route -> 405 with Allow: POST', r.status === 405 && /POST/.test(r.headers.allow || '') && errCode(r) === 'method_not_allowed', JSON.stringify(r.headers));
    r = await ask('405 get', get('/health', { method: 'DELETE' }));
    check('DELETE /health -> 405 with Allow: GET, HEAD', r.status === 405 && /GET/.test(r.headers.allow || ''), JSON.stringify(r.headers));
    r = await ask('401', get('/v1/models', { key: null }));
    check('no key -> 401 with WWW-Authenticate: Bearer', r.status === 401 && /^Bearer/.test(r.headers['www-authenticate'] || '') && errCode(r) === 'invalid_api_key', JSON.stringify(r.headers));
    r = await ask('401 wrong', get('/v1/models', { key: 'wrong' }));
    check('a wrong key -> 401 with WWW-Authenticate', r.status === 401 && r.headers['www-authenticate'], r.text);
    r = await ask('bad json', post('/v1/completions', '{"prompt": '));
    check('truncated JSON -> 400 invalid_json', r.status === 400 && errCode(r) === 'invalid_json', r.text);
    // libmicrohttpd 0.9.75 answers these itself, before any callback runs
    // (HTML bodies; a malformed Content-Length even gets its status line
    // twice).  Not fixable without owning the socket reads or a newer MHD:
    // listed, not counted.
    for (const [what, bytes] of [
        ['malformed Content-Length', 'POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n'],
        ['malformed chunked body', post('/v1/completions', '').toString('latin1').replace('Content-Length: 0', 'Transfer-Encoding: chunked') + 'ZZ\r\n'],
    ]) {
        const b = await raw(PORT, bytes, { ms: 3000, untilComplete: false });
        const lines = (b.toString('latin1').match(/^HTTP\/1\.1 \d+/gm) || []).join(', ');
        console.log(`  skip  ${what}: answered by libmicrohttpd 0.9.75 itself (${lines || 'nothing'})`);
    }
}

const sections = { strictOutput, errors };

for (const [name, fn] of Object.entries(sections)) {
    try {
        await fn();
    } catch (e) {
        fail(name, e && e.stack ? e.stack : e);
    }
}
check(`every response (${nResponses}) is one well-formed, strict UTF-8 JSON (or SSE of JSON) answer`,
    strictFailures.length === 0 && nResponses > 0, strictFailures.join(' | '));
