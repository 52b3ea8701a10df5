/*
 * llama2c.c - llama2.c model/tokenizer reader and converter to GGUF.
 *
 * DESIGN
 *   The model file is mapped read-only.  Its layout is described by a table
 *   of "kinds" (token_embedding, rms_att, wq, ...) in file order for each
 *   format version; walking that table with checked arithmetic gives the
 *   expected file size (compared exactly with the real one) and the offset of
 *   every tensor.  Float32 tensors written as F32 point straight into the
 *   mapping; v2 tensors are dequantized and F16/BF16 outputs converted into
 *   buffers owned by the llama2c_conv.  The gguf_writer borrows all of them,
 *   so the conv must outlive gguf_writer_write().
 *
 *   The tokenizer file is read into memory, parsed with bounds checks, and
 *   converted into tokens / scores / token types (see llama2c.h).
 *
 * INVARIANTS
 *   After llama2c_conv_new() returned KITE_OK every segment lies inside the
 *   mapping and every writer tensor has data of the right size.
 *
 * THREAD SAFETY
 *   None needed: a conv is used by one thread.
 */
#include "convert/llama2c.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "model/arch.h"
#include "tensor/dtype.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llama2c.c assumes a little-endian host, like llama2.c"
#endif

/* Tensor kinds of a llama2.c checkpoint. */
enum l2c_kind {
    K_EMB,       /* (vocab, dim) */
    K_RMS_ATT,   /* (layer, dim) */
    K_WQ,        /* (layer, n_heads*head_size, dim) */
    K_WK,        /* (layer, n_kv_heads*head_size, dim) */
    K_WV,        /* (layer, n_kv_heads*head_size, dim) */
    K_WO,        /* (layer, dim, n_heads*head_size) */
    K_RMS_FFN,   /* (layer, dim) */
    K_W1,        /* (layer, hidden_dim, dim) */
    K_W2,        /* (layer, dim, hidden_dim) */
    K_W3,        /* (layer, hidden_dim, dim) */
    K_RMS_FINAL, /* (dim) */
    K_FREQ,      /* v0 only: freq_cis_real + freq_cis_imag, (seq_len, head_size) in all */
    K_WCLS,      /* (vocab, dim), only when the classifier is not shared */
    K_COUNT
};

/* File order of the kinds, per version. */
static const int order_v0[] = {K_EMB, K_RMS_ATT, K_WQ, K_WK, K_WV, K_WO, K_RMS_FFN,
                               K_W1, K_W2, K_W3, K_RMS_FINAL, K_FREQ, K_WCLS};
static const int order_v12[] = {K_RMS_ATT, K_RMS_FFN, K_RMS_FINAL, K_EMB, K_WQ, K_WK,
                                K_WV, K_WO, K_W1, K_W2, K_W3, K_WCLS};

typedef struct l2c_seg {
    uint64_t rows, cols; /* matrix (rows = out, cols = in); vectors have rows == 1 */
    uint64_t offset;     /* byte offset in the file */
    bool q8;             /* v2 matrix: int8[rows*cols] then float32[rows*cols/group] */
} l2c_seg;

struct llama2c_conv {
    bool has_model;
    llama2c_config cfg;
    const uint8_t *map;  /* model file mapping */
    size_t map_size;
    l2c_seg *segs;       /* [K_COUNT * n_layers], index kind * n_layers + layer */
    const void **out;    /* [K_COUNT * n_layers] converted data per seg (memo) */
    void **bufs;         /* owned buffers */
    size_t n_bufs, cap_bufs;
    /* vocabulary */
    int32_t n_vocab;
    char *tok_text;      /* all converted token bytes */
    char **tokens;       /* [n_vocab] into tok_text */
    uint64_t *tok_lens;  /* [n_vocab] */
    float *scores;       /* [n_vocab] */
    int32_t *types;      /* [n_vocab] llama.cpp token types */
    int32_t id_unk, id_bos, id_eos; /* -1 if absent */
    gguf_writer *w;
};

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_BYTE = 6 };

static int32_t rd_i32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

static float rd_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* ---- header -------------------------------------------------------------- */

static bool is_per_layer(int kind) {
    return kind != K_EMB && kind != K_RMS_FINAL && kind != K_FREQ && kind != K_WCLS;
}

static void seg_shape(const llama2c_config *c, int kind, uint64_t *rows, uint64_t *cols) {
    uint64_t dim = (uint64_t)c->dim, hs = dim / (uint64_t)c->n_heads;
    uint64_t kv = hs * (uint64_t)c->n_kv_heads;
    switch (kind) {
    case K_EMB: case K_WCLS: *rows = (uint64_t)c->vocab_size; *cols = dim; break;
    case K_RMS_ATT: case K_RMS_FFN: case K_RMS_FINAL: *rows = 1; *cols = dim; break;
    case K_WQ: case K_WO: *rows = dim; *cols = dim; break;
    case K_WK: case K_WV: *rows = kv; *cols = dim; break;
    case K_W1: case K_W3: *rows = (uint64_t)c->hidden_dim; *cols = dim; break;
    case K_W2: *rows = dim; *cols = (uint64_t)c->hidden_dim; break;
    default: /* K_FREQ: two tables of seq_len * head_size / 2 */
        *rows = 1;
        *cols = (uint64_t)c->seq_len * hs;
        break;
    }
}

/* Walks the layout in file order from data_offset.  Fills segs when not NULL.
 * *end receives the offset after the last byte.  Returns false on overflow,
 * or (v2) when a matrix is not a multiple of the group size (*bad_kind). */
static bool walk_layout(const llama2c_config *c, uint64_t data_offset, l2c_seg *segs, uint64_t *end,
                        int *bad_kind) {
    const int *order = c->version == 0 ? order_v0 : order_v12;
    size_t n_order = c->version == 0 ? sizeof order_v0 / sizeof order_v0[0] : sizeof order_v12 / sizeof order_v12[0];
    uint64_t off = data_offset, L = (uint64_t)c->n_layers;
    *bad_kind = -1;
    for (size_t k = 0; k < n_order; k++) {
        int kind = order[k];
        if (kind == K_WCLS && c->shared_classifier) continue;
        uint64_t rows, cols, numel, bytes;
        seg_shape(c, kind, &rows, &cols);
        if (__builtin_mul_overflow(rows, cols, &numel)) return false;
        bool q8 = c->version == 2 && rows > 1;
        if (q8) {
            if (numel % (uint64_t)c->group_size != 0) {
                *bad_kind = kind;
                return false;
            }
            if (__builtin_add_overflow(numel, numel / (uint64_t)c->group_size * 4, &bytes)) return false;
        } else if (__builtin_mul_overflow(numel, 4, &bytes)) {
            return false;
        }
        uint64_t n = is_per_layer(kind) ? L : 1;
        for (uint64_t l = 0; l < n; l++) {
            if (segs) segs[(uint64_t)kind * L + l] = (l2c_seg){rows, cols, off, q8};
            if (__builtin_add_overflow(off, bytes, &off)) return false;
        }
    }
    *end = off;
    return true;
}

static const char *kind_name(int kind) {
    static const char *names[K_COUNT] = {"token_embedding", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn",
                                         "w1", "w2", "w3", "rms_final", "freq_cis", "wcls"};
    return kind >= 0 && kind < K_COUNT ? names[kind] : "?";
}

/* Parses and validates the header of an image of `size` bytes. */
static int parse_header(const char *path, const uint8_t *b, uint64_t size, llama2c_config *cfg,
                        uint64_t *data_offset) {
    llama2c_config c = {0};
    const uint8_t *p;
    int32_t vocab;
    const int kind = gguf_sniff(b, size < 256 ? (size_t)size : 256);
    if (kind != GGUF_SNIFF_UNKNOWN && kind != GGUF_SNIFF_LLAMA2C)
        return err_set(KITE_E_FORMAT, "%s: not a llama2.c checkpoint: it looks like %s%s", path, gguf_sniff_name(kind),
                       kind == GGUF_SNIFF_GGUF ? " (already converted: give it to -m as it is)" : "");
    if (size < 28)
        return err_set(KITE_E_FORMAT, "%s: file has %" PRIu64 " bytes, less than the 28-byte llama2.c header", path,
                       size);
    if (size >= 4 && (uint32_t)rd_i32(b) == LLAMA2C_MAGIC) {
        if (size < LLAMA2C_HEADER_SIZE)
            return err_set(KITE_E_FORMAT, "%s: file has %" PRIu64 " bytes, less than the %d-byte llama2.c header",
                           path, size, LLAMA2C_HEADER_SIZE);
        c.version = rd_i32(b + 4);
        if (c.version != 1 && c.version != 2)
            return err_set(KITE_E_UNSUPPORTED, "%s: llama2.c format version %d is not supported (0, 1, 2 are)",
                           path, (int)c.version);
        p = b + 8;
        if (b[36] > 1)
            return err_set(KITE_E_FORMAT, "%s: shared_classifier flag is %u, expected 0 or 1", path, b[36]);
        c.shared_classifier = b[36] == 1;
        if (c.version == 2) {
            c.group_size = rd_i32(b + 37);
            if (c.group_size <= 0)
                return err_set(KITE_E_FORMAT, "%s: group_size %d must be positive", path, (int)c.group_size);
        }
        *data_offset = LLAMA2C_HEADER_SIZE;
    } else {
        if (size < 28)
            return err_set(KITE_E_FORMAT, "%s: file has %" PRIu64 " bytes, less than the 28-byte llama2.c header",
                           path, size);
        c.version = 0;
        p = b;
        *data_offset = 28;
    }
    c.dim = rd_i32(p);
    c.hidden_dim = rd_i32(p + 4);
    c.n_layers = rd_i32(p + 8);
    c.n_heads = rd_i32(p + 12);
    c.n_kv_heads = rd_i32(p + 16);
    vocab = rd_i32(p + 20);
    c.seq_len = rd_i32(p + 24);
    if (c.version == 0) {
        /* legacy: a negative vocab_size flags an untied classifier at the end */
        c.shared_classifier = vocab > 0;
        if (vocab < 0 && vocab != INT32_MIN) vocab = -vocab;
    }
    c.vocab_size = vocab;
    const struct {
        const char *name;
        int32_t v;
    } f[] = {{"dim", c.dim}, {"hidden_dim", c.hidden_dim}, {"n_layers", c.n_layers}, {"n_heads", c.n_heads},
             {"n_kv_heads", c.n_kv_heads}, {"vocab_size", c.vocab_size}, {"seq_len", c.seq_len}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v <= 0)
            return err_set(KITE_E_FORMAT, "%s: %s = %d must be positive (not a llama2.c model?)", path, f[i].name,
                           (int)f[i].v);
    if (c.dim % c.n_heads != 0)
        return err_set(KITE_E_FORMAT, "%s: dim %d is not a multiple of n_heads %d", path, (int)c.dim, (int)c.n_heads);
    if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0)
        return err_set(KITE_E_FORMAT, "%s: n_heads %d is not a multiple of n_kv_heads %d", path, (int)c.n_heads,
                       (int)c.n_kv_heads);
    if ((c.dim / c.n_heads) % 2 != 0)
        return err_set(KITE_E_FORMAT, "%s: head size %d (dim/n_heads) must be even for RoPE", path,
                       (int)(c.dim / c.n_heads));
    *cfg = c;
    return KITE_OK;
}

/* Expected size of the file described by c, or an error for overflow/group. */
static int expected_size(const char *path, const llama2c_config *c, uint64_t data_offset, uint64_t *end) {
    int bad_kind;
    if (!walk_layout(c, data_offset, NULL, end, &bad_kind)) {
        if (bad_kind >= 0)
            return err_set(KITE_E_FORMAT, "%s: %s has a size that is not a multiple of group_size %d", path,
                           kind_name(bad_kind), (int)c->group_size);
        return err_set(KITE_E_FORMAT, "%s: model dimensions overflow 64-bit sizes (dim=%d n_layers=%d vocab_size=%d)",
                       path, (int)c->dim, (int)c->n_layers, (int)c->vocab_size);
    }
    return KITE_OK;
}

static int check_size(const char *path, const llama2c_config *c, uint64_t data_offset, uint64_t size) {
    uint64_t want;
    int rc = expected_size(path, c, data_offset, &want);
    if (rc) return rc;
    if (want != size)
        return err_set(KITE_E_FORMAT,
                       "%s: expected %" PRIu64 " bytes for dim=%d hidden_dim=%d n_layers=%d n_heads=%d n_kv_heads=%d "
                       "vocab_size=%d seq_len=%d (llama2.c v%d, %s classifier) but file has %" PRIu64,
                       path, want, (int)c->dim, (int)c->hidden_dim, (int)c->n_layers, (int)c->n_heads,
                       (int)c->n_kv_heads, (int)c->vocab_size, (int)c->seq_len, (int)c->version,
                       c->shared_classifier ? "shared" : "separate", size);
    return KITE_OK;
}

static int map_file(const char *path, const uint8_t **map, size_t *size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return err_set(KITE_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int rc = KITE_OK;
    if (fstat(fd, &st) != 0) {
        rc = err_set(KITE_E_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    if (st.st_size < 4) { /* parse_header checks the size (and what a short file looks like) */
        rc = err_set(KITE_E_FORMAT, "%s: file has %lld bytes, less than the 28-byte llama2.c header", path,
                     (long long)st.st_size);
        goto done;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        rc = err_set(KITE_E_FORMAT, "%s: file too large to map", path);
        goto done;
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
        rc = err_set(KITE_E_IO, "%s: cannot map: %s", path, strerror(errno));
        goto done;
    }
    *map = m;
    *size = (size_t)st.st_size;
done:
    close(fd);
    return rc;
}

int llama2c_read_config(const char *path, llama2c_config *out) {
    const uint8_t *map = NULL;
    size_t size = 0;
    llama2c_config c;
    uint64_t data_offset;
    int rc = map_file(path, &map, &size);
    if (rc) return rc;
    rc = parse_header(path, map, size, &c, &data_offset);
    if (!rc) rc = check_size(path, &c, data_offset, size);
    munmap((void *)map, size);
    if (!rc) *out = c;
    return rc;
}

/* ---- tokenizer ------------------------------------------------------------ */

static bool is_byte_token(const char *s, uint64_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return false;
    for (int i = 3; i < 5; i++) {
        char ch = s[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'F') || (ch >= 'a' && ch <= 'f'))) return false;
    }
    return true;
}

static bool text_is(const uint8_t *s, int32_t n, const char *lit) {
    return (size_t)n == strlen(lit) && memcmp(s, lit, (size_t)n) == 0;
}

/* Parses the tokenizer image.  want > 0: exactly want tokens (strict: no
 * trailing bytes) or at least want (strict false); want == 0: until the end. */
static int parse_vocab(llama2c_conv *cv, const char *path, const uint8_t *b, uint64_t size, int32_t want,
                       bool strict) {
    if (size < 4)
        return err_set(KITE_E_FORMAT, "%s: file has %" PRIu64 " bytes, too small for a llama2.c tokenizer", path, size);
    const int kind = gguf_sniff(b, size < 256 ? (size_t)size : 256);
    if (kind != GGUF_SNIFF_UNKNOWN && kind != GGUF_SNIFF_LLAMA2C_TOK)
        return err_set(KITE_E_FORMAT, "%s: not a llama2.c tokenizer: it looks like %s%s", path, gguf_sniff_name(kind),
                       kind == GGUF_SNIFF_SPM ? " (llama2.c's tokenizer.py exports it to tokenizer.bin)" : "");
    /* pass 1: count tokens and converted bytes */
    uint64_t pos = 4, text_bytes = 0;
    int64_t n = 0;
    while (want == 0 || n < want) {
        if (want == 0 && pos == size) break;
        if (size - pos < 8)
            return err_set(KITE_E_FORMAT, "%s: truncated at token %" PRId64 " (offset %" PRIu64 ", file has %" PRIu64
                           " bytes%s)", path, n, pos, size, want ? "; fewer tokens than vocab_size?" : "");
        int32_t len = rd_i32(b + pos + 4);
        if (len < 0 || (uint64_t)len > size - pos - 8)
            return err_set(KITE_E_FORMAT, "%s: token %" PRId64 ": length %d exceeds the file (offset %" PRIu64 ")",
                           path, n, (int)len, pos);
        const uint8_t *s = b + pos + 8;
        uint64_t out_len = (uint64_t)len;
        if (text_is(s, len, "\n<s>\n")) out_len = 3;
        else if (text_is(s, len, "\n</s>\n")) out_len = 4;
        else
            for (int32_t i = 0; i < len; i++) out_len += s[i] == ' ' ? 2 : 0;
        text_bytes += out_len;
        pos += 8 + (uint64_t)len;
        if (++n > INT32_MAX - 1) return err_set(KITE_E_FORMAT, "%s: too many tokens", path);
    }
    if (n == 0) return err_set(KITE_E_FORMAT, "%s: the tokenizer has no tokens", path);
    if (strict && pos != size)
        return err_set(KITE_E_FORMAT, "%s: %" PRIu64 " bytes left after %d tokens: the tokenizer has more tokens "
                       "than the model's vocab_size %d", path, size - pos, (int)want, (int)want);
    cv->n_vocab = (int32_t)n;
    cv->tok_text = malloc(text_bytes ? text_bytes : 1);
    cv->tokens = calloc((size_t)n, sizeof *cv->tokens);
    cv->tok_lens = calloc((size_t)n, sizeof *cv->tok_lens);
    cv->scores = calloc((size_t)n, sizeof *cv->scores);
    cv->types = calloc((size_t)n, sizeof *cv->types);
    if (!cv->tok_text || !cv->tokens || !cv->tok_lens || !cv->scores || !cv->types)
        return err_set(KITE_E_NOMEM, "%s: out of memory for %" PRId64 " tokens", path, n);
    /* pass 2: convert */
    cv->id_unk = cv->id_bos = cv->id_eos = -1;
    char *dst = cv->tok_text;
    pos = 4;
    for (int32_t t = 0; t < (int32_t)n; t++) {
        cv->scores[t] = rd_f32(b + pos);
        int32_t len = rd_i32(b + pos + 4);
        const uint8_t *s = b + pos + 8;
        char *start = dst;
        if (text_is(s, len, "\n<s>\n")) {
            memcpy(dst, "<s>", 3), dst += 3;
        } else if (text_is(s, len, "\n</s>\n")) {
            memcpy(dst, "</s>", 4), dst += 4;
        } else {
            for (int32_t i = 0; i < len; i++) {
                if (s[i] == ' ') {
                    memcpy(dst, "\xe2\x96\x81", 3); /* U+2581 LOWER ONE EIGHTH BLOCK */
                    dst += 3;
                } else {
                    *dst++ = (char)s[i];
                }
            }
        }
        uint64_t out_len = (uint64_t)(dst - start);
        cv->tokens[t] = start;
        cv->tok_lens[t] = out_len;
        int32_t type = TT_NORMAL;
        if (out_len == 5 && memcmp(start, "<unk>", 5) == 0) {
            type = TT_UNKNOWN;
            if (cv->id_unk < 0) cv->id_unk = t;
        } else if (out_len == 3 && memcmp(start, "<s>", 3) == 0) {
            type = TT_CONTROL;
            if (cv->id_bos < 0) cv->id_bos = t;
        } else if (out_len == 4 && memcmp(start, "</s>", 4) == 0) {
            type = TT_CONTROL;
            if (cv->id_eos < 0) cv->id_eos = t;
        } else if (is_byte_token(start, out_len)) {
            type = TT_BYTE;
        }
        cv->types[t] = type;
        pos += 8 + (uint64_t)len;
    }
    return KITE_OK;
}

static int load_vocab(llama2c_conv *cv, const char *path, int32_t want, bool strict) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(KITE_E_IO, "%s: cannot open: %s", path, strerror(errno));
    uint8_t *buf = NULL;
    int rc;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        rc = err_set(KITE_E_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto done;
    }
    uint64_t size = (uint64_t)st.st_size;
    buf = malloc(size ? size : 1);
    if (!buf) {
        rc = err_set(KITE_E_NOMEM, "%s: out of memory (%" PRIu64 " bytes)", path, size);
        goto done;
    }
    if (size && fread(buf, 1, size, f) != size) {
        rc = err_set(KITE_E_IO, "%s: read failed", path);
        goto done;
    }
    rc = parse_vocab(cv, path, buf, size, want, strict);
done:
    free(buf);
    fclose(f);
    return rc;
}

/* ---- tensors -------------------------------------------------------------- */

static void *conv_alloc(llama2c_conv *cv, size_t bytes) {
    if (cv->n_bufs == cv->cap_bufs) {
        size_t cap = cv->cap_bufs ? 2 * cv->cap_bufs : 32;
        void **nb = realloc(cv->bufs, cap * sizeof *nb);
        if (!nb) return NULL;
        cv->bufs = nb;
        cv->cap_bufs = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) cv->bufs[cv->n_bufs++] = p;
    return p;
}

/* Data of segment (kind, layer) in the output type (matrices) or F32 (vectors). */
static int seg_data(llama2c_conv *cv, int kind, int32_t layer, uint32_t type, const void **data) {
    uint64_t idx = (uint64_t)kind * (uint64_t)cv->cfg.n_layers + (uint64_t)layer;
    if (cv->out[idx]) {
        *data = cv->out[idx];
        return KITE_OK;
    }
    const l2c_seg *sg = &cv->segs[idx];
    uint64_t numel = sg->rows * sg->cols;
    const uint8_t *src = cv->map + sg->offset;
    const float *f32 = NULL;
    if (sg->q8) { /* dequantize: value = int8 * scale of its group */
        float *deq = conv_alloc(cv, (size_t)numel * sizeof(float));
        if (!deq) goto nomem;
        const int8_t *q = (const int8_t *)src;
        const uint8_t *scales = src + numel;
        uint64_t gs = (uint64_t)cv->cfg.group_size;
        for (uint64_t i = 0; i < numel; i++) deq[i] = (float)q[i] * rd_f32(scales + 4 * (i / gs));
        f32 = deq;
    }
    if (type == KITE_DTYPE_F32) {
        *data = f32 ? (const void *)f32 : (const void *)src;
    } else {
        uint16_t *h = conv_alloc(cv, (size_t)numel * sizeof(uint16_t));
        if (!h) goto nomem;
        for (uint64_t i = 0; i < numel; i++) {
            float x = f32 ? f32[i] : rd_f32(src + 4 * i);
            h[i] = type == KITE_DTYPE_F16 ? fp32_to_fp16(x) : fp32_to_bf16(x);
        }
        *data = h;
    }
    cv->out[idx] = *data;
    return KITE_OK;
nomem:
    return err_set(KITE_E_NOMEM, "out of memory converting %s", kind_name(kind));
}

#define TRY(expr)                                                                  \
    do {                                                                           \
        rc = (expr);                                                               \
        if (rc) goto fail;                                                         \
    } while (0)

/* Per-layer tensors: role (model/arch.h) and llama2.c kind, in llama.cpp's order. */
static const struct {
    int role;
    int kind;
} layer_tensors[] = {
    {TR_ATTN_NORM, K_RMS_ATT}, {TR_ATTN_Q, K_WQ},     {TR_ATTN_K, K_WK},    {TR_ATTN_V, K_WV},
    {TR_ATTN_OUT, K_WO},       {TR_FFN_NORM, K_RMS_FFN}, {TR_FFN_GATE, K_W1}, {TR_FFN_DOWN, K_W2},
    {TR_FFN_UP, K_W3},
};

/* Writes the tensor of a role (layer -1: a global one) from llama2.c segment kind of layer. */
static int put_tensor(llama2c_conv *cv, uint32_t out_type, int role, int32_t layer, int kind) {
    char name[ARCH_NAME_MAX];
    if (!arch_tensor_name(arch_find("llama"), role, layer, name, sizeof name))
        return err_set(KITE_E_STATE, "llama2c: no llama tensor of role %d, layer %d", role, (int)layer);
    if (layer < 0) layer = 0; /* global kinds have one segment */
    const l2c_seg *sg = &cv->segs[(uint64_t)kind * (uint64_t)cv->cfg.n_layers + (uint64_t)layer];
    bool vec = sg->rows == 1;
    uint32_t type = vec ? KITE_DTYPE_F32 : out_type; /* llama.cpp keeps 1-D tensors in F32 */
    const void *data = NULL;
    int rc = seg_data(cv, kind, layer, type, &data);
    if (rc) return rc;
    int64_t ne[2] = {(int64_t)sg->cols, (int64_t)sg->rows}; /* (out, in) row-major -> ne = [in, out] */
    return gguf_writer_add_tensor(cv->w, name, type, vec ? 1 : 2, ne, data);
}

static const char *base_name(const char *path, char *buf, size_t cap) {
    const char *s = strrchr(path, '/');
    s = s ? s + 1 : path;
    size_t n = strlen(s);
    if (n > 4 && strcmp(s + n - 4, ".bin") == 0) n -= 4;
    if (n >= cap) n = cap - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    return buf;
}

static int write_hparams(gguf_writer *w, const llama2c_hparams *h, bool model) {
    int rc;
    TRY(gguf_writer_set_u32(w, "llama.context_length", (uint32_t)h->seq_len));
    TRY(gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)h->dim));
    TRY(gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)h->hidden_dim));
    TRY(gguf_writer_set_u32(w, "llama.block_count", (uint32_t)h->n_layers));
    TRY(gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)h->n_heads));
    TRY(gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)h->n_kv_heads));
    TRY(gguf_writer_set_u32(w, "llama.rope.dimension_count", (uint32_t)(h->dim / h->n_heads)));
    if (model) TRY(gguf_writer_set_f32(w, "llama.rope.freq_base", LLAMA2C_ROPE_BASE));
    TRY(gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", LLAMA2C_RMS_EPS));
fail:
    return rc;
}

static int write_vocab(llama2c_conv *cv) {
    gguf_writer *w = cv->w;
    int rc;
    TRY(gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"));
    TRY(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)cv->tokens, cv->tok_lens,
                                (uint64_t)cv->n_vocab));
    TRY(gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, cv->scores, (uint64_t)cv->n_vocab));
    TRY(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, cv->types, (uint64_t)cv->n_vocab));
    if (cv->id_unk >= 0) TRY(gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)cv->id_unk));
    if (cv->id_bos >= 0) TRY(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)cv->id_bos));
    if (cv->id_eos >= 0) TRY(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)cv->id_eos));
    TRY(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    TRY(gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false));
fail:
    return rc;
}

static int validate_hparams(const llama2c_hparams *h) {
    if (h->dim <= 0 || h->hidden_dim <= 0 || h->n_layers <= 0 || h->n_heads <= 0 || h->n_kv_heads <= 0 ||
        h->seq_len <= 0)
        return err_set(KITE_E_ARG, "hparams: every value must be positive");
    if (h->dim % h->n_heads != 0 || h->n_heads % h->n_kv_heads != 0)
        return err_set(KITE_E_ARG, "hparams: dim must be a multiple of n_heads and n_heads of n_kv_heads");
    return KITE_OK;
}

int llama2c_conv_new(const llama2c_convert_params *p, llama2c_conv **out) {
    int rc;
    llama2c_conv *cv = NULL;
    char name[256];
    if (!p || !out || !p->tokenizer_path) return err_set(KITE_E_ARG, "llama2c: tokenizer path is required");
    if (p->out_type != KITE_DTYPE_F32 && p->out_type != KITE_DTYPE_F16 && p->out_type != KITE_DTYPE_BF16)
        return err_set(KITE_E_ARG, "llama2c: output type %s is not supported (f32, f16, bf16)", dtype_name(p->out_type));
    if (p->vocab_size < 0) return err_set(KITE_E_ARG, "llama2c: vocab_size %d is negative", (int)p->vocab_size);
    if (!p->model_path && p->hparams && (rc = validate_hparams(p->hparams)) != KITE_OK) return rc;
    cv = calloc(1, sizeof *cv);
    if (!cv) return err_set(KITE_E_NOMEM, "llama2c: out of memory");
    cv->w = gguf_writer_new();
    if (!cv->w) TRY(err_set(KITE_E_NOMEM, "llama2c: out of memory"));

    uint64_t data_offset = 0;
    if (p->model_path) {
        cv->has_model = true;
        TRY(map_file(p->model_path, &cv->map, &cv->map_size));
        TRY(parse_header(p->model_path, cv->map, cv->map_size, &cv->cfg, &data_offset));
        TRY(check_size(p->model_path, &cv->cfg, data_offset, cv->map_size));
        size_t n_seg = (size_t)K_COUNT * (size_t)cv->cfg.n_layers; /* bounded: the file holds 9 tensors per layer */
        cv->segs = calloc(n_seg, sizeof *cv->segs);
        cv->out = calloc(n_seg, sizeof *cv->out);
        if (!cv->segs || !cv->out) TRY(err_set(KITE_E_NOMEM, "llama2c: out of memory"));
        uint64_t end;
        int bad;
        KITE_ASSERT(walk_layout(&cv->cfg, data_offset, cv->segs, &end, &bad) && end == cv->map_size);
        TRY(load_vocab(cv, p->tokenizer_path, cv->cfg.vocab_size, true));
    } else {
        TRY(load_vocab(cv, p->tokenizer_path, p->vocab_size, false));
    }

    /* metadata, in llama.cpp's order */
    gguf_writer *w = cv->w;
    TRY(gguf_writer_set_str(w, "general.architecture", "llama"));
    TRY(gguf_writer_set_str(w, "general.name",
                            p->name ? p->name : base_name(p->model_path ? p->model_path : p->tokenizer_path, name,
                                                          sizeof name)));
    if (cv->has_model) {
        const llama2c_config *c = &cv->cfg;
        uint32_t ftype = p->out_type == KITE_DTYPE_F32 ? 0 : p->out_type == KITE_DTYPE_F16 ? 1 : 32;
        TRY(gguf_writer_set_u32(w, "general.file_type", ftype));
        llama2c_hparams h = {c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->seq_len};
        TRY(write_hparams(w, &h, true));
        TRY(gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)c->vocab_size));
    } else if (p->hparams) {
        TRY(write_hparams(w, p->hparams, false));
    }
    TRY(write_vocab(cv));

    if (cv->has_model) {
        TRY(put_tensor(cv, p->out_type, TR_TOKEN_EMBD, -1, K_EMB));
        TRY(put_tensor(cv, p->out_type, TR_OUTPUT_NORM, -1, K_RMS_FINAL));
        /* written even when tied, as llama.cpp's converter does */
        TRY(put_tensor(cv, p->out_type, TR_OUTPUT, -1, cv->cfg.shared_classifier ? K_EMB : K_WCLS));
        for (int32_t l = 0; l < cv->cfg.n_layers; l++)
            for (size_t i = 0; i < sizeof layer_tensors / sizeof layer_tensors[0]; i++)
                TRY(put_tensor(cv, p->out_type, layer_tensors[i].role, l, layer_tensors[i].kind));
    }
    *out = cv;
    return KITE_OK;
fail:
    llama2c_conv_free(cv);
    return rc;
}

gguf_writer *llama2c_conv_writer(llama2c_conv *c) { return c->w; }
const llama2c_config *llama2c_conv_config(const llama2c_conv *c) { return c->has_model ? &c->cfg : NULL; }
int32_t llama2c_conv_n_vocab(const llama2c_conv *c) { return c->n_vocab; }

void llama2c_conv_free(llama2c_conv *cv) {
    if (!cv) return;
    gguf_writer_free(cv->w);
    for (size_t i = 0; i < cv->n_bufs; i++) free(cv->bufs[i]);
    free(cv->bufs);
    free(cv->types);
    free(cv->scores);
    free(cv->tok_lens);
    free(cv->tokens);
    free(cv->tok_text);
    free(cv->out);
    free(cv->segs);
    if (cv->map) munmap((void *)cv->map, cv->map_size);
    free(cv);
}

int llama2c_convert(const llama2c_convert_params *p, const char *out_path) {
    llama2c_conv *cv = NULL;
    int rc = llama2c_conv_new(p, &cv);
    if (rc) return rc;
    rc = gguf_writer_write(cv->w, out_path);
    llama2c_conv_free(cv);
    return rc;
}
