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
    FILE *f;
    char *path;          /* destination */
    char *tmp;           /* "<path>.tmp.<pid>" being written */
    eval_logits_header h;
    uint64_t rows;       /* rows written so far */
    uint8_t *buf;        /* [n_vocab * 4] encoding buffer */
};

struct eval_logits_reader {
    FILE *f;
    char *path;          /* for messages */
    eval_logits_header h;
    kite_token *ids;     /* [n_tokens] */
    uint64_t rows;       /* rows read so far */
    uint8_t *buf;        /* [n_vocab * 4] */
};

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
    size_t tmp_len = strlen(path) + 32;
    w->path = dup_str(path);
    w->tmp = malloc(tmp_len);
    w->buf = malloc((size_t)h->n_vocab * 4);
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

int eval_logits_write_row(eval_logits_writer *w, const float *logp) {
    if (!w || !logp) return err_set(KITE_E_ARG, "eval_logits_write_row: writer and row are required");
    if (w->rows >= w->h.n_tokens)
        return err_set(KITE_E_STATE, "%s: more than the %llu rows announced", w->path,
                       (unsigned long long)w->h.n_tokens);
    memcpy(w->buf, logp, (size_t)w->h.n_vocab * 4);
    if (!host_le()) swap4(w->buf, w->h.n_vocab);
    if (fwrite(w->buf, 4, w->h.n_vocab, w->f) != w->h.n_vocab)
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
    r->buf = malloc((size_t)h->n_vocab * 4);
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

int eval_logits_read_row(eval_logits_reader *r, float *out) {
    if (!r || !out) return err_set(KITE_E_ARG, "eval_logits_read_row: reader and out are required");
    if (r->rows >= r->h.n_tokens)
        return err_set(KITE_E_STATE, "%s: all %llu rows already read", r->path, (unsigned long long)r->h.n_tokens);
    if (fread(r->buf, 4, r->h.n_vocab, r->f) != r->h.n_vocab)
        return err_set(KITE_E_IO, "%s: short read in row %llu", r->path, (unsigned long long)r->rows);
    if (!host_le()) swap4(r->buf, r->h.n_vocab);
    memcpy(out, r->buf, (size_t)r->h.n_vocab * 4);
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
    if (h->flags != flags)
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
    free(r->buf);
    free(r->path);
    free(r);
}
