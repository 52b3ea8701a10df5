/*
 * logits_file.c - the saved log-probabilities of a perplexity run
 * (`kite ppl --save-logits F`, read back by `--kld-base F`).
 *
 * DESIGN
 *   Layout in eval.h (EVAL_LOGITS_*): a 32-byte header, the target id of each
 *   scored position, then one float32 row of natural-log probabilities per
 *   scored position.  Everything is little-endian; the header is encoded
 *   byte by byte, rows are byte-swapped on a big-endian host.
 *
 *   The writer knows every id before the first row (the plan is computed
 *   before the run), writes to "<path>.tmp.<pid>" and renames on close, so an
 *   interrupted run leaves no half-written file at path.
 *
 *   The llama.cpp layout (llama-perplexity --kl-divergence-base, described
 *   in eval.h) is written and read by the same objects: only the header and
 *   the row encoding differ (16-bit entries over a 16-nat range instead of
 *   float32), so the scoring loop does not know which format it compares with.
 *
 *   The reader treats the file as untrusted: the header fields are range
 *   checked, the file size must equal the size the header implies (computed
 *   with overflow checks), every id must be in [0, n_vocab), and each row is
 *   checked for NaN / positive values as it is streamed in, so a file larger
 *   than memory can be compared row by row.
 *
 * OWNERSHIP / THREAD SAFETY
 *   A reader or writer owns its FILE and buffers; one thread at a time.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "eval/eval.h"

struct eval_logits_writer {
    int format;          /* enum eval_logits_format */
    FILE *f;
    char *path;          /* destination */
    char *tmp;           /* "<path>.tmp.<pid>" being written */
    eval_logits_header h;
    uint64_t rows;       /* rows written so far */
    uint8_t *buf;        /* [row_bytes] encoding buffer */
    size_t row_bytes;    /* bytes per row on disk */
};

struct eval_logits_reader {
    int format;          /* enum eval_logits_format */
    FILE *f;
    char *path;          /* for messages */
    eval_logits_header h;
    kite_token *ids;     /* [n_tokens] */
    kite_token *chunks;  /* llama.cpp: [n_chunk * n_ctx] text tokens; else NULL */
    int32_t n_chunk;
    uint64_t rows;       /* rows read so far */
    uint8_t *buf;        /* [row_bytes] */
    size_t row_bytes;
};

/* llama.cpp's row: nv u16 words, the first four holding two float32. */
#define LCPP_MAGIC "_logits_"
#define LCPP_HEADER_BYTES 20u
#define LCPP_FLOOR 16.0f /* nats below the row maximum that a row can hold */
static size_t lcpp_row_bytes(uint32_t n_vocab) { return 2u * (2u * ((n_vocab + 1u) / 2u) + 4u); }
static uint32_t lcpp_rows_per_chunk(uint32_t n_ctx) { return n_ctx - 1u - n_ctx / 2u; }

static bool host_le(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

static void put_f32(uint8_t *p, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    put_u32(p, u);
}

static float get_f32(const uint8_t *p) {
    const uint32_t u = get_u32(p);
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* Encodes one row of log-probs as llama-perplexity does from its logits
 * (which differ from these by a constant): entries within 16 nats of the
 * maximum on a 65535-step grid, the rest at step 0. */
static void lcpp_encode(uint8_t *dst, const float *logp, uint32_t n) {
    float mx = logp[0], mn = logp[0];
    for (uint32_t i = 1; i < n; i++) {
        if (logp[i] > mx) mx = logp[i];
        if (logp[i] < mn) mn = logp[i];
    }
    if (mn < mx - LCPP_FLOOR) mn = mx - LCPP_FLOOR;
    const float scale = (mx - mn) / 65535.0f;
    put_f32(dst, scale);
    put_f32(dst + 4, mn);
    uint8_t *q = dst + 8;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (uint32_t i = 0; i < n; i++) {
        long v = logp[i] > mn && scale > 0.0f ? lrintf(inv * (logp[i] - mn)) : 0;
        if (v > 65535) v = 65535;
        q[2 * i] = (uint8_t)v;
        q[2 * i + 1] = (uint8_t)(v >> 8);
    }
    if (n & 1u) q[2 * n] = q[2 * n + 1] = 0; /* the padding word */
}

/* Reverses each 4-byte group of buf[0..n*4) (big-endian hosts only). */
static void swap4(uint8_t *buf, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t *q = buf + 4 * i, t0 = q[0], t1 = q[1];
        q[0] = q[3];
        q[1] = q[2];
        q[2] = t1;
        q[3] = t0;
    }
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---- writer ------------------------------------------------------------ */

int eval_logits_write_open(const char *path, const eval_logits_header *h, const kite_token *ids,
                           eval_logits_writer **out) {
    if (!path || !h || !out || (!ids && h->n_tokens))
        return err_set(KITE_E_ARG, "eval_logits_write_open: path, header and ids are required");
    if (h->n_vocab < 1 || h->n_vocab > EVAL_LOGITS_MAX_VOCAB || h->n_ctx < 1 || (h->flags & ~EVAL_PLAN_KNOWN_FLAGS) ||
        h->n_tokens < 1)
        return err_set(KITE_E_ARG, "%s: invalid logits header (n_vocab %u, n_ctx %u, flags %u, n_tokens %llu)", path,
                       h->n_vocab, h->n_ctx, h->flags, (unsigned long long)h->n_tokens);
    for (uint64_t i = 0; i < h->n_tokens; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= h->n_vocab)
            return err_set(KITE_E_ARG, "%s: id %d at %llu outside the vocabulary", path, ids[i], (unsigned long long)i);

    int rc = KITE_E_NOMEM;
    eval_logits_writer *w = calloc(1, sizeof *w);
    if (!w) return err_set(KITE_E_NOMEM, "out of memory");
    w->h = *h;
    w->h.version = EVAL_LOGITS_VERSION;
    w->row_bytes = (size_t)h->n_vocab * 4;
    size_t tmp_len = strlen(path) + 32;
    w->path = dup_str(path);
    w->tmp = malloc(tmp_len);
    w->buf = malloc(w->row_bytes);
    if (!w->path || !w->tmp || !w->buf) {
        err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    snprintf(w->tmp, tmp_len, "%s.tmp.%ld", path, (long)getpid());
    if (!(w->f = fopen(w->tmp, "wb"))) {
        rc = err_set(KITE_E_IO, "%s: cannot create: %s", w->tmp, strerror(errno));
        goto fail;
    }
    uint8_t hdr[EVAL_LOGITS_HEADER_BYTES];
    memcpy(hdr, EVAL_LOGITS_MAGIC, 8);
    put_u32(hdr + 8, w->h.version);
    put_u32(hdr + 12, h->n_vocab);
    put_u32(hdr + 16, h->n_ctx);
    put_u32(hdr + 20, h->flags);
    put_u64(hdr + 24, h->n_tokens);
    if (fwrite(hdr, 1, sizeof hdr, w->f) != sizeof hdr) goto io_fail;
    for (uint64_t i = 0; i < h->n_tokens; i++) {
        uint8_t b[4];
        put_u32(b, (uint32_t)ids[i]);
        if (fwrite(b, 1, 4, w->f) != 4) goto io_fail;
    }
    *out = w;
    return KITE_OK;
io_fail:
    rc = err_set(KITE_E_IO, "%s: write failed: %s", w->tmp, strerror(errno));
fail:
    eval_logits_write_abort(w);
    return rc;
}

int eval_logits_write_open_llamacpp(const char *path, const eval_logits_header *h, const kite_token *tokens,
                                    int32_t n_chunk, eval_logits_writer **out) {
    if (!path || !h || !out || !tokens || n_chunk < 1)
        return err_set(KITE_E_ARG, "eval_logits_write_open_llamacpp: path, header, tokens and n_chunk are required");
    if (h->n_vocab < 1 || h->n_vocab > EVAL_LOGITS_MAX_VOCAB || h->n_ctx < 3 || h->n_ctx > (1u << 30) ||
        !(h->flags & EVAL_PLAN_LLAMACPP) || (h->flags & ~EVAL_PLAN_KNOWN_FLAGS) ||
        h->n_tokens != (uint64_t)n_chunk * lcpp_rows_per_chunk(h->n_ctx))
        return err_set(KITE_E_ARG, "%s: invalid llama.cpp logits header (n_vocab %u, n_ctx %u, flags %u, %llu rows, "
                       "%d chunks)", path, h->n_vocab, h->n_ctx, h->flags, (unsigned long long)h->n_tokens, n_chunk);
    const uint64_t n_tok = (uint64_t)n_chunk * h->n_ctx;
    for (uint64_t i = 0; i < n_tok; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= h->n_vocab)
            return err_set(KITE_E_ARG, "%s: token %d at %llu outside the vocabulary", path, tokens[i],
                           (unsigned long long)i);
    int rc = KITE_E_NOMEM;
    eval_logits_writer *w = calloc(1, sizeof *w);
    if (!w) return err_set(KITE_E_NOMEM, "out of memory");
    w->format = EVAL_LOGITS_LLAMACPP;
    w->h = *h;
    w->h.version = 0; /* the layout has no version field */
    w->row_bytes = lcpp_row_bytes(h->n_vocab);
    size_t tmp_len = strlen(path) + 32;
    w->path = dup_str(path);
    w->tmp = malloc(tmp_len);
    w->buf = malloc(w->row_bytes);
    if (!w->path || !w->tmp || !w->buf) {
        err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    snprintf(w->tmp, tmp_len, "%s.tmp.%ld", path, (long)getpid());
    if (!(w->f = fopen(w->tmp, "wb"))) {
        rc = err_set(KITE_E_IO, "%s: cannot create: %s", w->tmp, strerror(errno));
        goto fail;
    }
    uint8_t hdr[LCPP_HEADER_BYTES];
    memcpy(hdr, LCPP_MAGIC, 8);
    put_u32(hdr + 8, h->n_ctx);
    put_u32(hdr + 12, h->n_vocab);
    put_u32(hdr + 16, (uint32_t)n_chunk);
    if (fwrite(hdr, 1, sizeof hdr, w->f) != sizeof hdr) goto io_fail;
    for (uint64_t i = 0; i < n_tok; i++) {
        uint8_t b[4];
        put_u32(b, (uint32_t)tokens[i]);
        if (fwrite(b, 1, 4, w->f) != 4) goto io_fail;
    }
    *out = w;
    return KITE_OK;
io_fail:
    rc = err_set(KITE_E_IO, "%s: write failed: %s", w->tmp, strerror(errno));
fail:
    eval_logits_write_abort(w);
    return rc;
}

int eval_logits_write_row(eval_logits_writer *w, const float *logp) {
    if (!w || !logp) return err_set(KITE_E_ARG, "eval_logits_write_row: writer and row are required");
    if (w->rows >= w->h.n_tokens)
        return err_set(KITE_E_STATE, "%s: more than the %llu rows announced", w->path,
                       (unsigned long long)w->h.n_tokens);
    if (w->format == EVAL_LOGITS_LLAMACPP) {
        lcpp_encode(w->buf, logp, w->h.n_vocab);
    } else {
        memcpy(w->buf, logp, w->row_bytes);
        if (!host_le()) swap4(w->buf, w->h.n_vocab);
    }
    if (fwrite(w->buf, 1, w->row_bytes, w->f) != w->row_bytes)
        return err_set(KITE_E_IO, "%s: write failed: %s", w->tmp, strerror(errno));
    w->rows++;
    return KITE_OK;
}

static void writer_free(eval_logits_writer *w) {
    if (w->f) fclose(w->f);
    free(w->buf);
    free(w->tmp);
    free(w->path);
    free(w);
}

void eval_logits_write_abort(eval_logits_writer *w) {
    if (!w) return;
    if (w->f) {
        fclose(w->f);
        w->f = NULL;
    }
    if (w->tmp) remove(w->tmp);
    writer_free(w);
}

int eval_logits_write_close(eval_logits_writer *w) {
    if (!w) return err_set(KITE_E_ARG, "eval_logits_write_close: NULL writer");
    int rc;
    if (w->rows != w->h.n_tokens) {
        rc = err_set(KITE_E_STATE, "%s: %llu of %llu rows written", w->path, (unsigned long long)w->rows,
                     (unsigned long long)w->h.n_tokens);
        goto fail;
    }
    FILE *f = w->f;
    w->f = NULL;
    if (fflush(f) != 0 || ferror(f)) {
        rc = err_set(KITE_E_IO, "%s: write failed: %s", w->tmp, strerror(errno));
        fclose(f);
        goto fail;
    }
    if (fclose(f) != 0) {
        rc = err_set(KITE_E_IO, "%s: write failed: %s", w->tmp, strerror(errno));
        goto fail;
    }
    if (rename(w->tmp, w->path) != 0) {
        rc = err_set(KITE_E_IO, "%s: cannot rename %s: %s", w->path, w->tmp, strerror(errno));
        goto fail;
    }
    writer_free(w);
    return KITE_OK;
fail:
    eval_logits_write_abort(w);
    return rc;
}

/* ---- reader ------------------------------------------------------------ */

/* Reads 4-byte little-endian words into dst[n] (as int32).  KITE_E_IO on a
 * short read. */
static int read_words(eval_logits_reader *r, kite_token *dst, uint64_t n, const char *what) {
    if (fread(dst, 4, (size_t)n, r->f) != (size_t)n) return err_set(KITE_E_IO, "%s: short read of the %s", r->path, what);
    for (uint64_t i = 0; i < n; i++) dst[i] = (kite_token)get_u32((const uint8_t *)&dst[i]);
    return KITE_OK;
}

/* The rest of a llama.cpp file after its magic: header, exact size, tokens
 * in range; the target ids are derived from the chunks. */
static int lcpp_open(eval_logits_reader *r, uint64_t size) {
    uint8_t hdr[LCPP_HEADER_BYTES - 8];
    if (size < LCPP_HEADER_BYTES || fread(hdr, 1, sizeof hdr, r->f) != sizeof hdr)
        return err_set(KITE_E_FORMAT, "%s: truncated header (%llu bytes, need %u)", r->path, (unsigned long long)size,
                       LCPP_HEADER_BYTES);
    r->format = EVAL_LOGITS_LLAMACPP;
    eval_logits_header *h = &r->h;
    h->version = 0;
    h->n_ctx = get_u32(hdr);
    h->n_vocab = get_u32(hdr + 4);
    const uint32_t n_chunk = get_u32(hdr + 8);
    h->flags = EVAL_PLAN_LLAMACPP;
    if (h->n_vocab < 1 || h->n_vocab > EVAL_LOGITS_MAX_VOCAB)
        return err_set(KITE_E_FORMAT, "%s: n_vocab %d out of range [1, %u]", r->path, (int32_t)h->n_vocab,
                       EVAL_LOGITS_MAX_VOCAB);
    if (h->n_ctx < 3 || h->n_ctx > (1u << 24))
        return err_set(KITE_E_FORMAT, "%s: n_ctx %u out of range [3, %u]", r->path, h->n_ctx, 1u << 24);
    if (n_chunk < 1 || n_chunk > INT32_MAX)
        return err_set(KITE_E_FORMAT, "%s: n_chunk %d out of range", r->path, (int32_t)n_chunk);
    /* Every factor is bounded (n_ctx <= 2^24, n_chunk < 2^31, row bytes <=
     * 2^25 + 8), so per_chunk fits 64 bits and the division bounds n_chunk
     * before it is multiplied. */
    r->row_bytes = lcpp_row_bytes(h->n_vocab);
    const uint64_t per_chunk = 4ull * h->n_ctx + (uint64_t)lcpp_rows_per_chunk(h->n_ctx) * r->row_bytes;
    const uint64_t body = size - LCPP_HEADER_BYTES;
    if (n_chunk > body / per_chunk)
        return err_set(KITE_E_FORMAT, "%s: truncated: the header announces %u chunks of %u tokens x %u entries, the "
                       "file has %llu bytes", r->path, n_chunk, h->n_ctx, h->n_vocab, (unsigned long long)size);
    if (n_chunk * per_chunk != body)
        return err_set(KITE_E_FORMAT, "%s: %llu bytes of trailing data after %u chunks", r->path,
                       (unsigned long long)(body - n_chunk * per_chunk), n_chunk);
    const uint64_t n_tok = (uint64_t)n_chunk * h->n_ctx;
    h->n_tokens = (uint64_t)n_chunk * lcpp_rows_per_chunk(h->n_ctx);
    if (n_tok > SIZE_MAX / sizeof(kite_token))
        return err_set(KITE_E_FORMAT, "%s: %llu tokens too many", r->path, (unsigned long long)n_tok);
    r->n_chunk = (int32_t)n_chunk;
    r->chunks = malloc((size_t)n_tok * sizeof *r->chunks);
    r->ids = malloc((size_t)h->n_tokens * sizeof *r->ids);
    r->buf = malloc(r->row_bytes);
    if (!r->chunks || !r->ids || !r->buf)
        return err_set(KITE_E_NOMEM, "out of memory for %llu tokens", (unsigned long long)n_tok);
    int rc = read_words(r, r->chunks, n_tok, "tokens");
    if (rc != KITE_OK) return rc;
    uint64_t k = 0;
    for (uint64_t i = 0; i < n_tok; i++) {
        if (r->chunks[i] < 0 || (uint32_t)r->chunks[i] >= h->n_vocab)
            return err_set(KITE_E_FORMAT, "%s: tokens[%llu] = %d outside the vocabulary (%u)", r->path,
                           (unsigned long long)i, r->chunks[i], h->n_vocab);
        if (i % h->n_ctx > h->n_ctx / 2) r->ids[k++] = r->chunks[i]; /* the scored second half */
    }
    KITE_ASSERT(k == h->n_tokens);
    return KITE_OK;
}

int eval_logits_read_open(const char *path, eval_logits_reader **out) {
    if (!path || !out) return err_set(KITE_E_ARG, "eval_logits_read_open: path and out are required");
    int rc = KITE_E_NOMEM;
    eval_logits_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = dup_str(path))) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto fail;
    }
    if (!(r->f = fopen(path, "rb"))) {
        rc = err_set(KITE_E_IO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fileno(r->f), &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = err_set(KITE_E_IO, "%s: not a regular file", path);
        goto fail;
    }
    const uint64_t size = (uint64_t)st.st_size;
    uint8_t hdr[EVAL_LOGITS_HEADER_BYTES];
    if (size >= 8 && fread(hdr, 1, 8, r->f) == 8 && memcmp(hdr, LCPP_MAGIC, 8) == 0) {
        if ((rc = lcpp_open(r, size)) != KITE_OK) goto fail;
        *out = r;
        return KITE_OK;
    }
    rewind(r->f);
    if (size < sizeof hdr || fread(hdr, 1, sizeof hdr, r->f) != sizeof hdr) {
        rc = err_set(KITE_E_FORMAT, "%s: truncated header (%llu bytes, need %u)", path, (unsigned long long)size,
                     EVAL_LOGITS_HEADER_BYTES);
        goto fail;
    }
    rc = KITE_E_FORMAT;
    if (memcmp(hdr, EVAL_LOGITS_MAGIC, 8) != 0) {
        err_set(rc, "%s: bad magic (not a kite logits file)", path);
        goto fail;
    }
    eval_logits_header *h = &r->h;
    h->version = get_u32(hdr + 8);
    h->n_vocab = get_u32(hdr + 12);
    h->n_ctx = get_u32(hdr + 16);
    h->flags = get_u32(hdr + 20);
    h->n_tokens = get_u64(hdr + 24);
    if (h->version != EVAL_LOGITS_VERSION) {
        rc = err_set(KITE_E_UNSUPPORTED, "%s: version %u not supported (expected %u)", path, h->version,
                     EVAL_LOGITS_VERSION);
        goto fail;
    }
    if (h->n_vocab < 1 || h->n_vocab > EVAL_LOGITS_MAX_VOCAB) {
        err_set(rc, "%s: n_vocab %u out of range [1, %u]", path, h->n_vocab, EVAL_LOGITS_MAX_VOCAB);
        goto fail;
    }
    if (h->n_ctx < 1 || h->n_ctx > (1u << 30)) {
        err_set(rc, "%s: n_ctx %u out of range", path, h->n_ctx);
        goto fail;
    }
    if (h->flags & ~EVAL_PLAN_KNOWN_FLAGS) {
        err_set(rc, "%s: unknown flags 0x%x", path, h->flags);
        goto fail;
    }
    /* bytes per row with its id: 4 * (1 + n_vocab) <= 4 * (2^24 + 1), so the
     * division below cannot overflow and bounds n_tokens before multiplying. */
    const uint64_t per_tok = 4ull * (1ull + h->n_vocab);
    const uint64_t body = size - EVAL_LOGITS_HEADER_BYTES;
    if (h->n_tokens < 1) {
        err_set(rc, "%s: n_tokens is 0", path);
        goto fail;
    }
    if (h->n_tokens > body / per_tok) {
        err_set(rc, "%s: truncated: the header announces %llu tokens x %u entries, the file has %llu bytes", path,
                (unsigned long long)h->n_tokens, h->n_vocab, (unsigned long long)size);
        goto fail;
    }
    if (h->n_tokens * per_tok != body) {
        err_set(rc, "%s: %llu bytes of trailing data after %llu tokens x %u entries", path,
                (unsigned long long)(body - h->n_tokens * per_tok), (unsigned long long)h->n_tokens, h->n_vocab);
        goto fail;
    }
    if (h->n_tokens > SIZE_MAX / sizeof(kite_token)) {
        err_set(rc, "%s: n_tokens %llu too large", path, (unsigned long long)h->n_tokens);
        goto fail;
    }
    r->ids = malloc((size_t)h->n_tokens * sizeof *r->ids);
    r->row_bytes = (size_t)h->n_vocab * 4;
    r->buf = malloc(r->row_bytes);
    if (!r->ids || !r->buf) {
        rc = err_set(KITE_E_NOMEM, "out of memory for %llu ids", (unsigned long long)h->n_tokens);
        goto fail;
    }
    if (fread(r->ids, 4, (size_t)h->n_tokens, r->f) != (size_t)h->n_tokens) {
        rc = err_set(KITE_E_IO, "%s: short read of the ids", path);
        goto fail;
    }
    for (uint64_t i = 0; i < h->n_tokens; i++) {
        uint32_t v = get_u32((const uint8_t *)&r->ids[i]);
        if (v >= h->n_vocab) {
            err_set(rc, "%s: ids[%llu] = %u outside the vocabulary (%u)", path, (unsigned long long)i, v, h->n_vocab);
            goto fail;
        }
        r->ids[i] = (kite_token)v;
    }
    *out = r;
    return KITE_OK;
fail:
    eval_logits_read_close(r);
    return rc;
}

const eval_logits_header *eval_logits_read_header(const eval_logits_reader *r) { return &r->h; }

const kite_token *eval_logits_read_ids(const eval_logits_reader *r) { return r->ids; }

int eval_logits_read_format(const eval_logits_reader *r) { return r->format; }

const kite_token *eval_logits_read_chunks(const eval_logits_reader *r, int32_t *n_chunk) {
    *n_chunk = r->n_chunk;
    return r->chunks;
}

int eval_logits_read_row(eval_logits_reader *r, float *out) {
    if (!r || !out) return err_set(KITE_E_ARG, "eval_logits_read_row: reader and out are required");
    if (r->rows >= r->h.n_tokens)
        return err_set(KITE_E_STATE, "%s: all %llu rows already read", r->path, (unsigned long long)r->h.n_tokens);
    if (fread(r->buf, 1, r->row_bytes, r->f) != r->row_bytes)
        return err_set(KITE_E_IO, "%s: short read in row %llu", r->path, (unsigned long long)r->rows);
    if (r->format == EVAL_LOGITS_LLAMACPP) {
        const float scale = get_f32(r->buf), mn = get_f32(r->buf + 4);
        if (!isfinite(scale) || scale < 0.0f || !isfinite(mn) || mn > 1e-3f)
            return err_set(KITE_E_FORMAT, "%s: row %llu has scale %g and minimum %g, not a llama.cpp log-prob row",
                           r->path, (unsigned long long)r->rows, (double)scale, (double)mn);
        const uint8_t *q = r->buf + 8;
        const kite_token target = r->ids[r->rows];
        for (uint32_t i = 0; i < r->h.n_vocab; i++) {
            const float v = mn + scale * (float)((uint32_t)q[2 * i] | (uint32_t)q[2 * i + 1] << 8);
            out[i] = v <= -LCPP_FLOOR && (kite_token)i != target ? -INFINITY : v;
        }
    } else {
        if (!host_le()) swap4(r->buf, r->h.n_vocab);
        memcpy(out, r->buf, r->row_bytes);
    }
    for (uint32_t i = 0; i < r->h.n_vocab; i++)
        if (isnan(out[i]) || out[i] > 1e-3f)
            return err_set(KITE_E_FORMAT, "%s: row %llu, entry %u is %g, not a log-probability", r->path,
                           (unsigned long long)r->rows, i, (double)out[i]);
    r->rows++;
    return KITE_OK;
}

int eval_logits_read_match(const eval_logits_reader *r, uint32_t n_vocab, uint32_t n_ctx, uint32_t flags,
                           const kite_token *ids, uint64_t n) {
    const eval_logits_header *h = &r->h;
    if (h->n_vocab != n_vocab)
        return err_set(KITE_E_FORMAT, "%s: n_vocab %u, but the model has %u", r->path, h->n_vocab, n_vocab);
    if (h->n_ctx != n_ctx)
        return err_set(KITE_E_FORMAT, "%s: written with -c %u, this run uses %u", r->path, h->n_ctx, n_ctx);
    const uint32_t mask = r->format == EVAL_LOGITS_LLAMACPP ? EVAL_PLAN_LLAMACPP : ~0u;
    if ((h->flags & mask) != (flags & mask))
        return err_set(KITE_E_FORMAT, "%s: written with scoring flags 0x%x, this run uses 0x%x (--half/--docs/BOS)",
                       r->path, h->flags, flags);
    if (h->n_tokens != n)
        return err_set(KITE_E_FORMAT, "%s: %llu scored tokens, this run has %llu (different text?)", r->path,
                       (unsigned long long)h->n_tokens, (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++)
        if (r->ids[i] != ids[i])
            return err_set(KITE_E_FORMAT, "%s: token %llu is %d, this run has %d (different text or tokenizer)",
                           r->path, (unsigned long long)i, r->ids[i], ids[i]);
    return KITE_OK;
}

void eval_logits_read_close(eval_logits_reader *r) {
    if (!r) return;
    if (r->f) fclose(r->f);
    free(r->ids);
    free(r->chunks);
    free(r->buf);
    free(r->path);
    free(r);
}
