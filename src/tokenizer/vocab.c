/*
 * vocab.c - building the vocabulary (from a GGUF file or plain arrays), the
 * piece -> id hash map, token_to_piece, and the dispatch to the encoder.
 *
 * DESIGN
 *   vocab_load_gguf() only reads and checks the tokenizer.ggml.* keys and
 *   fills a vocab_spec; vocab_build() does the model-independent work once:
 *     - copies scores and token types (types are inferred when absent:
 *       bos/eos/pad CONTROL, unk UNKNOWN, "<0xNN>" BYTE, the rest NORMAL);
 *     - builds an open-addressing hash map (FNV-1a, load <= 1/2) from raw
 *       piece text to id.  If two tokens share a text, a mergeable one
 *       (normal/user-defined/unused) wins over a special one, else the lower id;
 *     - the byte-fallback table byte_id[256] from BYTE tokens "<0xNN>";
 *     - the decoded form of every piece for token_to_piece: U+2581 -> ' ' for
 *       text tokens (SPM) or each GPT-2 character -> its byte (BPE; user-
 *       defined tokens stay raw text), the raw byte for BYTE tokens, "" for CONTROL, and
 *       sentencepiece's surface " \u2047 " for UNKNOWN (see docs/tokenizer.md);
 *     - the end-of-generation set (eos, eot, eom and well-known end tokens);
 *     - for BPE ("gpt2"), the merge table and pre-tokenizer (bpe_init, bpe.c).
 *
 * OWNERSHIP
 *   Piece texts point into the GGUF image (the caller keeps it alive); every
 *   other table is owned by the vocab and freed by vocab_free().
 *
 * THREAD SAFETY
 *   Immutable after build.
 */
#include "tokenizer/vocab_internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tokenizer/pretok.h"

#define VOCAB_MAX_PIECE_LEN (1u << 20) /* bytes; far above any real vocabulary (llama2: 16) */

static const char unk_surface[] = " \xE2\x81\x87 "; /* " ⁇ ", sentencepiece's default */

vocab_spec vocab_spec_default(void) {
    vocab_spec s;
    memset(&s, 0, sizeof s);
    s.name = "vocab";
    s.model = VOCAB_MODEL_SPM;
    s.bos = s.eos = s.unk = s.pad = s.eot = s.eom = -1;
    s.add_bos = true;
    s.add_eos = false;
    s.add_space_prefix = true;
    return s;
}

/* ---- hash map ------------------------------------------------------------ */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a 64 */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static bool piece_eq(gguf_str p, const char *s, size_t n) {
    return p.len == n && (n == 0 || memcmp(p.ptr, s, n) == 0);
}

int32_t vocab_find(const vocab *v, const char *s, size_t n) {
    if (n == 0 || n > v->max_piece_len) return -1;
    uint64_t i = hash_bytes(s, n) & v->map_mask;
    for (;;) {
        int32_t id = v->map[i];
        if (id < 0) return -1;
        if (piece_eq(v->pieces[id], s, n)) return id;
        i = (i + 1) & v->map_mask;
    }
}

/* Inserts id; a duplicate text keeps the better of the two (see header). */
static void map_insert(vocab *v, int32_t id) {
    gguf_str p = v->pieces[id];
    uint64_t i = hash_bytes(p.ptr, p.len) & v->map_mask;
    for (;;) {
        int32_t cur = v->map[i];
        if (cur < 0) {
            v->map[i] = id;
            return;
        }
        if (piece_eq(v->pieces[cur], p.ptr, p.len)) {
            if (!vocab_type_mergeable(v->types[cur]) && vocab_type_mergeable(v->types[id])) v->map[i] = id;
            return;
        }
        i = (i + 1) & v->map_mask;
    }
}

/* ---- helpers ------------------------------------------------------------- */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte of a "<0xNN>" piece, or -1. */
static int parse_byte_piece(gguf_str p) {
    if (p.len != 6 || memcmp(p.ptr, "<0x", 3) != 0 || p.ptr[5] != '>') return -1;
    int hi = hexval(p.ptr[3]), lo = hexval(p.ptr[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
}

/* Decoded length of a text piece: each U+2581 (3 bytes) becomes one space. */
static size_t unescape_piece(gguf_str p, char *dst /* NULL: only count */) {
    size_t n = 0;
    for (uint64_t i = 0; i < p.len;) {
        if (i + 3 <= p.len && (uint8_t)p.ptr[i] == 0xE2 && (uint8_t)p.ptr[i + 1] == 0x96 &&
            (uint8_t)p.ptr[i + 2] == 0x81) {
            if (dst) dst[n] = ' ';
            n++;
            i += 3;
        } else {
            if (dst) dst[n] = p.ptr[i];
            n++;
            i++;
        }
    }
    return n;
}

static void add_eog(vocab *v, int64_t id) {
    if (id < 0 || v->n_eog >= VOCAB_MAX_EOG) return;
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return;
    v->eog[v->n_eog++] = (kite_token)id;
}

static int check_id(const vocab_spec *s, const char *field, int64_t id) {
    if (id < -1 || id >= s->n_tokens)
        return err_set(KITE_E_FORMAT, "%s: tokenizer.ggml.%s = %lld is outside the vocabulary (%d tokens)",
                       s->name, field, (long long)id, (int)s->n_tokens);
    return KITE_OK;
}

/* ---- build --------------------------------------------------------------- */

int vocab_build(const vocab_spec *s, vocab **out) {
    int rc = KITE_OK;
    vocab *v = NULL;
    if (!s || !out || !s->pieces || s->n_tokens <= 0 || s->n_tokens > INT32_MAX / 2)
        return err_set(KITE_E_ARG, "vocab_build: bad spec (n_tokens %d)", s ? (int)s->n_tokens : 0);
    if (s->model != VOCAB_MODEL_SPM && s->model != VOCAB_MODEL_BPE)
        return err_set(KITE_E_UNSUPPORTED, "%s: tokenizer model %d not supported", s->name, s->model);
    if ((rc = check_id(s, "bos_token_id", s->bos)) || (rc = check_id(s, "eos_token_id", s->eos)) ||
        (rc = check_id(s, "unknown_token_id", s->unk)) || (rc = check_id(s, "padding_token_id", s->pad)) ||
        (rc = check_id(s, "eot_token_id", s->eot)) || (rc = check_id(s, "eom_token_id", s->eom)))
        return rc;

    const size_t n = (size_t)s->n_tokens;
    v = calloc(1, sizeof *v);
    if (!v) goto nomem;
    v->model = s->model;
    v->n_tokens = s->n_tokens;
    v->pieces = s->pieces;
    v->bos = (kite_token)s->bos;
    v->eos = (kite_token)s->eos;
    v->unk = (kite_token)s->unk;
    v->pad = (kite_token)s->pad;
    v->add_bos = s->add_bos;
    v->add_eos = s->add_eos;
    v->add_space_prefix = s->add_space_prefix;
    v->scores = malloc(n * sizeof *v->scores);
    v->types = malloc(n);
    v->dec_off = malloc(n * sizeof *v->dec_off);
    v->dec_len = malloc(n * sizeof *v->dec_len);
    if (!v->scores || !v->types || !v->dec_off || !v->dec_len) goto nomem;

    /* types, scores, piece lengths */
    for (size_t i = 0; i < n; i++) {
        gguf_str p = s->pieces[i];
        if (p.len > VOCAB_MAX_PIECE_LEN) {
            rc = err_set(KITE_E_FORMAT, "%s: tokenizer.ggml.tokens[%zu]: piece of %llu bytes is too long (max %u)",
                         s->name, i, (unsigned long long)p.len, VOCAB_MAX_PIECE_LEN);
            goto fail;
        }
        if (p.len && !p.ptr) {
            rc = err_set(KITE_E_ARG, "%s: tokenizer.ggml.tokens[%zu]: NULL text", s->name, i);
            goto fail;
        }
        if (p.len > v->max_piece_len) v->max_piece_len = (size_t)p.len;
        v->scores[i] = s->scores ? s->scores[i] : 0.0f;
        if (s->types) {
            int32_t t = s->types[i];
            if (t < VOCAB_TT_UNDEFINED || t > VOCAB_TT_BYTE) {
                rc = err_set(KITE_E_FORMAT, "%s: tokenizer.ggml.token_type[%zu] = %d is not a token type (0..6)",
                             s->name, i, (int)t);
                goto fail;
            }
            v->types[i] = (uint8_t)t;
        } else {
            v->types[i] = parse_byte_piece(p) >= 0 ? VOCAB_TT_BYTE : VOCAB_TT_NORMAL;
        }
    }
    if (!s->types) {
        if (v->bos >= 0) v->types[v->bos] = VOCAB_TT_CONTROL;
        if (v->eos >= 0) v->types[v->eos] = VOCAB_TT_CONTROL;
        if (v->pad >= 0) v->types[v->pad] = VOCAB_TT_CONTROL;
        if (v->unk >= 0) v->types[v->unk] = VOCAB_TT_UNKNOWN;
    }

    /* byte fallback table */
    for (int b = 0; b < 256; b++) v->byte_id[b] = -1;
    int n_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (v->types[i] == VOCAB_TT_UNUSED) v->has_unused = true;
        if (v->types[i] != VOCAB_TT_BYTE) continue;
        int b = parse_byte_piece(s->pieces[i]);
        if (b < 0) {
            rc = err_set(KITE_E_FORMAT, "%s: tokenizer.ggml.tokens[%zu]: byte token '%.*s' is not of the form <0xNN>",
                         s->name, i, (int)(s->pieces[i].len > 32 ? 32 : s->pieces[i].len), s->pieces[i].ptr);
            goto fail;
        }
        if (v->byte_id[b] < 0) {
            v->byte_id[b] = (int32_t)i;
            n_bytes++;
        }
    }
    v->has_byte_fallback = n_bytes == 256;

    /* hash map, load factor <= 1/2 */
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n) cap <<= 1;
    v->map = malloc(cap * sizeof *v->map);
    if (!v->map) goto nomem;
    memset(v->map, 0xff, cap * sizeof *v->map);
    v->map_mask = cap - 1;
    for (size_t i = 0; i < n; i++)
        if (s->pieces[i].len > 0) map_insert(v, (int32_t)i);
    if (s->model == VOCAB_MODEL_BPE && (rc = bpe_init(v, s))) goto fail;

    /* decoded pieces */
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        switch (v->types[i]) {
        case VOCAB_TT_CONTROL: len = 0; break;
        case VOCAB_TT_BYTE: len = 1; break;
        case VOCAB_TT_UNKNOWN: len = sizeof unk_surface - 1; break;
        case VOCAB_TT_USER_DEFINED:
            len = v->model == VOCAB_MODEL_BPE ? (size_t)s->pieces[i].len : unescape_piece(s->pieces[i], NULL);
            break;
        default:
            len = v->model == VOCAB_MODEL_BPE ? bpe_decode_piece(s->pieces[i], NULL)
                                              : unescape_piece(s->pieces[i], NULL);
            break;
        }
        v->dec_off[i] = total;
        v->dec_len[i] = (uint32_t)len;
        if (len > v->max_dec_len) v->max_dec_len = len;
        total += len + 1;
    }
    v->dec = malloc(total ? total : 1);
    if (!v->dec) goto nomem;
    for (size_t i = 0; i < n; i++) {
        char *d = v->dec + v->dec_off[i];
        switch (v->types[i]) {
        case VOCAB_TT_CONTROL: break;
        case VOCAB_TT_BYTE: d[0] = (char)parse_byte_piece(s->pieces[i]); break;
        case VOCAB_TT_UNKNOWN: memcpy(d, unk_surface, sizeof unk_surface - 1); break;
        case VOCAB_TT_USER_DEFINED:
            if (v->model == VOCAB_MODEL_BPE) memcpy(d, s->pieces[i].ptr, v->dec_len[i]);
            else unescape_piece(s->pieces[i], d);
            break;
        default:
            if (v->model == VOCAB_MODEL_BPE) bpe_decode_piece(s->pieces[i], d);
            else unescape_piece(s->pieces[i], d);
            break;
        }
        d[v->dec_len[i]] = '\0';
    }

    /* end of generation */
    add_eog(v, s->eos);
    add_eog(v, s->eot);
    add_eog(v, s->eom);
    static const char *const eog_texts[] = {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>",
                                            "<end_of_turn>", "<|endoftext|>", "<EOT>"};
    for (size_t k = 0; k < sizeof eog_texts / sizeof eog_texts[0]; k++) {
        int32_t id = vocab_find(v, eog_texts[k], strlen(eog_texts[k]));
        if (id >= 0 && v->types[id] == VOCAB_TT_CONTROL) add_eog(v, id);
    }

    *out = v;
    return KITE_OK;
nomem:
    rc = err_set(KITE_E_NOMEM, "%s: out of memory building the vocabulary", s->name);
fail:
    vocab_free(v);
    return rc;
}

void vocab_free(vocab *v) {
    if (!v) return;
    bpe_free(v);
    free(v->dec);
    free(v->map);
    free(v->dec_len);
    free(v->dec_off);
    free(v->types);
    free(v->scores);
    free(v);
}

/* ---- GGUF ---------------------------------------------------------------- */

/* Optional token id: absent -> def; -1 / 0xFFFFFFFF -> none (-1). */
static int get_opt_id(const gguf_ctx *g, const char *name, const char *key, int64_t def, int64_t *out) {
    const gguf_value *val = gguf_get(g, key);
    if (!val) {
        *out = def;
        return KITE_OK;
    }
    int64_t id;
    switch (val->type) {
    case GGUF_VT_UINT8: id = val->v.u8; break;
    case GGUF_VT_INT8: id = val->v.i8; break;
    case GGUF_VT_UINT16: id = val->v.u16; break;
    case GGUF_VT_INT16: id = val->v.i16; break;
    case GGUF_VT_UINT32: id = val->v.u32 == UINT32_MAX ? -1 : (int64_t)val->v.u32; break;
    case GGUF_VT_INT32: id = val->v.i32; break;
    case GGUF_VT_UINT64: id = val->v.u64 == UINT64_MAX ? -1 : (val->v.u64 > INT32_MAX ? INT64_MAX : (int64_t)val->v.u64); break;
    case GGUF_VT_INT64: id = val->v.i64; break;
    default:
        return err_set(KITE_E_FORMAT, "%s: key '%s' has type %s, expected an integer token id", name, key,
                       gguf_vtype_name(val->type));
    }
    if (id < -1)
        return err_set(KITE_E_FORMAT, "%s: key '%s' = %lld is not a token id", name, key, (long long)id);
    *out = id;
    return KITE_OK;
}

static int get_opt_bool(const gguf_ctx *g, const char *name, const char *key, bool def, bool *out) {
    const gguf_value *val = gguf_get(g, key);
    if (!val) {
        *out = def;
        return KITE_OK;
    }
    if (val->type != GGUF_VT_BOOL)
        return err_set(KITE_E_FORMAT, "%s: key '%s' has type %s, expected bool", name, key,
                       gguf_vtype_name(val->type));
    *out = val->v.b;
    return KITE_OK;
}

/* Optional array of n elements of type vt; absent -> *data = NULL. */
static int get_opt_arr(const gguf_ctx *g, const char *name, const char *key, uint32_t vt, uint64_t n,
                       const void **data) {
    const gguf_value *val = gguf_get(g, key);
    *data = NULL;
    if (!val) return KITE_OK;
    if (val->type != GGUF_VT_ARRAY || val->v.arr.elem_type != vt)
        return err_set(KITE_E_FORMAT, "%s: key '%s' must be an array of %s", name, key, gguf_vtype_name(vt));
    if (val->v.arr.n != n)
        return err_set(KITE_E_FORMAT, "%s: key '%s' has %llu entries, tokenizer.ggml.tokens has %llu", name, key,
                       (unsigned long long)val->v.arr.n, (unsigned long long)n);
    *data = val->v.arr.data;
    return KITE_OK;
}

int vocab_load_gguf(const gguf_ctx *g, vocab **out) {
    if (!g || !out) return err_set(KITE_E_ARG, "vocab_load_gguf: NULL argument");
    const char *name = g->path ? g->path : "gguf";
    vocab_spec s = vocab_spec_default();
    s.name = name;
    int rc;

    const gguf_value *mv = gguf_get(g, "tokenizer.ggml.model");
    if (!mv) return err_set(KITE_E_NOT_FOUND, "%s: key 'tokenizer.ggml.model' is missing (no tokenizer)", name);
    if (mv->type != GGUF_VT_STRING)
        return err_set(KITE_E_FORMAT, "%s: key 'tokenizer.ggml.model' has type %s, expected string", name,
                       gguf_vtype_name(mv->type));
    gguf_str model = mv->v.str;
    if (gguf_str_eq(model, "llama")) {
        s.model = VOCAB_MODEL_SPM;
    } else if (gguf_str_eq(model, "gpt2")) {
        s.model = VOCAB_MODEL_BPE;
    } else {
        return err_set(KITE_E_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not supported (only 'llama', 'gpt2')", name,
                       (int)(model.len > 64 ? 64 : model.len), model.ptr);
    }

    const gguf_value *tv = gguf_get(g, "tokenizer.ggml.tokens");
    if (!tv) return err_set(KITE_E_NOT_FOUND, "%s: key 'tokenizer.ggml.tokens' is missing", name);
    if (tv->type != GGUF_VT_ARRAY || tv->v.arr.elem_type != GGUF_VT_STRING)
        return err_set(KITE_E_FORMAT, "%s: key 'tokenizer.ggml.tokens' must be an array of strings", name);
    uint64_t n = tv->v.arr.n;
    if (n == 0 || n > INT32_MAX / 2)
        return err_set(KITE_E_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries (need 1..%d)", name,
                       (unsigned long long)n, INT32_MAX / 2);
    s.n_tokens = (int32_t)n;
    s.pieces = tv->v.arr.data;

    const void *scores, *types;
    if ((rc = get_opt_arr(g, name, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, n, &scores))) return rc;
    if ((rc = get_opt_arr(g, name, "tokenizer.ggml.token_type", GGUF_VT_INT32, n, &types))) return rc;
    s.scores = scores;
    s.types = types;

    if (s.model == VOCAB_MODEL_BPE) {
        const gguf_value *mg = gguf_get(g, "tokenizer.ggml.merges");
        if (!mg) return err_set(KITE_E_NOT_FOUND, "%s: key 'tokenizer.ggml.merges' is missing (gpt2 tokenizer)", name);
        if (mg->type != GGUF_VT_ARRAY || mg->v.arr.elem_type != GGUF_VT_STRING)
            return err_set(KITE_E_FORMAT, "%s: key 'tokenizer.ggml.merges' must be an array of strings", name);
        s.merges = mg->v.arr.data;
        s.n_merges = mg->v.arr.n;
        s.pre = PRETOK_GPT2; /* absent: GPT-2's pattern */
        const gguf_value *pv = gguf_get(g, "tokenizer.ggml.pre");
        if (pv) {
            if (pv->type != GGUF_VT_STRING)
                return err_set(KITE_E_FORMAT, "%s: key 'tokenizer.ggml.pre' has type %s, expected string", name,
                               gguf_vtype_name(pv->type));
            int kind = pretok_kind_from_name(pv->v.str.ptr, (size_t)pv->v.str.len);
            if (kind < 0)
                return err_set(KITE_E_UNSUPPORTED,
                               "%s: tokenizer.ggml.pre '%.*s' is not supported (gpt-2, llama-bpe, qwen2, tekken)", name,
                               (int)(pv->v.str.len > 64 ? 64 : pv->v.str.len), pv->v.str.ptr);
            s.pre = kind;
        }
    }
    /* llama (SentencePiece) defaults: unk 0, bos 1, eos 2, when they exist; none for gpt2 */
    bool spm = s.model == VOCAB_MODEL_SPM;
    if ((rc = get_opt_id(g, name, "tokenizer.ggml.bos_token_id", spm && n > 1 ? 1 : -1, &s.bos)) ||
        (rc = get_opt_id(g, name, "tokenizer.ggml.eos_token_id", spm && n > 2 ? 2 : -1, &s.eos)) ||
        (rc = get_opt_id(g, name, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, &s.unk)) ||
        (rc = get_opt_id(g, name, "tokenizer.ggml.padding_token_id", -1, &s.pad)) ||
        (rc = get_opt_id(g, name, "tokenizer.ggml.eot_token_id", -1, &s.eot)) ||
        (rc = get_opt_id(g, name, "tokenizer.ggml.eom_token_id", -1, &s.eom)))
        return rc;
    if ((rc = get_opt_bool(g, name, "tokenizer.ggml.add_bos_token", spm, &s.add_bos)) ||
        (rc = get_opt_bool(g, name, "tokenizer.ggml.add_eos_token", false, &s.add_eos)) ||
        (rc = get_opt_bool(g, name, "tokenizer.ggml.add_space_prefix", spm, &s.add_space_prefix)))
        return rc;
    return vocab_build(&s, out);
}

/* ---- queries --------------------------------------------------------------- */

int32_t vocab_n_tokens(const vocab *v) { return v->n_tokens; }
kite_token vocab_bos(const vocab *v) { return v->bos; }
kite_token vocab_eos(const vocab *v) { return v->eos; }

bool vocab_is_eog(const vocab *v, kite_token t) {
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == t) return true;
    return false;
}

int vocab_tokenize(const vocab *v, const char *text, size_t len, bool add_bos, kite_token *out, size_t cap,
                   size_t *n_out) {
    if (!v || !n_out || (!text && len) || (!out && cap))
        return err_set(KITE_E_ARG, "kite_tokenize: NULL argument (text %p len %zu out %p cap %zu)", (const void *)text,
                       len, (void *)out, cap);
    switch (v->model) {
    case VOCAB_MODEL_SPM: return spm_tokenize(v, text, len, add_bos, out, cap, n_out);
    case VOCAB_MODEL_BPE: return bpe_tokenize(v, text, len, add_bos, out, cap, n_out);
    default: return err_set(KITE_E_UNSUPPORTED, "tokenizer model %d not supported", v->model);
    }
}

int vocab_token_to_piece(const vocab *v, kite_token t, const char **piece, char buf[8]) {
    (void)buf; /* every decoded piece lives in v->dec */
    if (!v || !piece) return err_set(KITE_E_ARG, "token_to_piece: NULL argument");
    if (t < 0 || t >= v->n_tokens)
        return err_set(KITE_E_RANGE, "token_to_piece: token id %d is outside the vocabulary (%d tokens)", (int)t,
                       (int)v->n_tokens);
    *piece = v->dec + v->dec_off[t];
    return (int)v->dec_len[t];
}
