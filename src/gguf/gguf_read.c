/*
 * gguf_read.c - GGUF v2/v3 reader: open, validate, look up.
 *
 * DESIGN
 *   The file is mapped read-only (or read into 2 MiB-aligned anonymous
 *   memory with MADV_HUGEPAGE: "heap" residency, see read_to_anon; or
 *   borrowed from the caller for gguf_open_memory) and parsed once by a
 *   bounds-checked cursor.  Every length and count read from the file is
 *   untrusted: before any allocation a count is checked against the bytes
 *   that remain (an element needs at least its minimum encoded size), and all
 *   size arithmetic uses overflow-checked builtins.  The first problem stops
 *   the parse with a one-line "PATH: FIELD: problem" message.
 *
 *   After parsing, the key and tensor names are sorted into index tables
 *   (duplicates are adjacent there, and lookups are binary searches), and the
 *   tensors are sorted by offset to reject overlaps.
 *
 * INVARIANTS (after a successful open)
 *   - every gguf_str lies inside [base, base + size);
 *   - scalar arrays are copied into malloc'd (max_align_t aligned) memory;
 *   - every tensor has a known type, 1..4 positive dims whose product fits in
 *     int64, ne[0] a multiple of the block size, an offset that is a multiple
 *     of the alignment, and data inside the file not overlapping another
 *     tensor's data.
 *
 * ERROR CODES
 *   KITE_E_IO: cannot open/stat/map/read.  KITE_E_UNSUPPORTED: version other
 *   than 2/3 (incl. big-endian files) and tensor type ids with no dtype
 *   traits entry.  KITE_E_FORMAT: everything else malformed.  KITE_E_NOMEM.
 *
 * OWNERSHIP / THREAD SAFETY
 *   The gguf_ctx owns the mapping/heap copy, the kv and tensor tables, the
 *   copied arrays and the index tables; gguf_close() releases them.  A ctx is
 *   immutable after open, so concurrent lookups are safe.
 */
#include "gguf/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "tensor/dtype.h"

enum { IMG_BORROWED, IMG_MMAP, IMG_HEAP };

typedef struct gguf_priv {
    int img_kind;        /* IMG_* */
    void *img;           /* mapping or heap copy (NULL when borrowed) */
    size_t img_size;     /* bytes mapped/allocated */
    char *path;          /* owned copy, ctx->path points here */
    uint64_t *kv_order;  /* [n_kv] kv indices sorted by key */
    uint64_t *t_order;   /* [n_tensors] tensor indices sorted by name */
} gguf_priv;

/* Parser state: a cursor over the image plus the field being parsed, for messages. */
typedef struct parser {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
    const char *path;
    char field[192];     /* e.g. "kv[3] 'general.name'" */
} parser;

/* Minimum encoded sizes, used to bound counts before allocating. */
#define MIN_KV_BYTES 13      /* key length (8) + type (4) + 1-byte value */
#define MIN_TINFO_BYTES 32   /* name length (8) + n_dims (4) + ne (8) + type (4) + offset (8) */
#define MIN_ARRAY_BYTES 12   /* elem type (4) + count (8) */

static int perr(const parser *p, int code, const char *fmt, ...) KITE_PRINTF(3, 4);
static int perr(const parser *p, int code, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return err_set(code, "%s: %s: %s", p->path, p->field, what);
}

/* Copies up to 64 bytes of a name from the file into dst for messages,
 * replacing anything that is not printable ASCII (the message stays one line). */
static void safe_name(char *dst, size_t cap, gguf_str s) {
    size_t n = s.len < cap - 4 ? (size_t)s.len : cap - 4;
    if (n > 64) n = 64;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        dst[i] = (c >= 0x20 && c < 0x7f && c != '\'') ? (char)c : '?';
    }
    if (n < s.len) {
        memcpy(dst + n, "...", 3);
        n += 3;
    }
    dst[n] = '\0';
}

static uint64_t remaining(const parser *p) { return p->size - p->pos; }

static int need(parser *p, uint64_t n, const char *what) {
    if (n > remaining(p))
        return perr(p, KITE_E_FORMAT, "truncated %s (need %" PRIu64 " bytes at offset %" PRIu64 ", file has %" PRIu64 ")",
                    what, n, p->pos, p->size);
    return KITE_OK;
}

static uint32_t rd_u32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t rd_u64(const uint8_t *b) { return (uint64_t)rd_u32(b) | (uint64_t)rd_u32(b + 4) << 32; }

static int get_u32(parser *p, uint32_t *out, const char *what) {
    int rc = need(p, 4, what);
    if (rc) return rc;
    *out = rd_u32(p->base + p->pos);
    p->pos += 4;
    return KITE_OK;
}

static int get_u64(parser *p, uint64_t *out, const char *what) {
    int rc = need(p, 8, what);
    if (rc) return rc;
    *out = rd_u64(p->base + p->pos);
    p->pos += 8;
    return KITE_OK;
}

static int get_str(parser *p, gguf_str *out, const char *what) {
    uint64_t len;
    int rc = get_u64(p, &len, what);
    if (rc) return rc;
    if (len > remaining(p))
        return perr(p, KITE_E_FORMAT, "%s length %" PRIu64 " exceeds the %" PRIu64 " bytes left in the file", what,
                    len, remaining(p));
    out->ptr = (const char *)(p->base + p->pos);
    out->len = len;
    p->pos += len;
    return KITE_OK;
}

/* Reads one scalar of type vt (already known to be scalar) into v->v. */
static int get_scalar(parser *p, uint32_t vt, gguf_value *v) {
    size_t sz = gguf_vtype_size(vt);
    int rc = need(p, sz, gguf_vtype_name(vt));
    if (rc) return rc;
    const uint8_t *b = p->base + p->pos;
    if (vt == GGUF_VT_BOOL && b[0] > 1) return perr(p, KITE_E_FORMAT, "invalid bool value %u (must be 0 or 1)", b[0]);
    uint64_t bits = sz == 1 ? b[0] : sz == 2 ? (uint64_t)(b[0] | b[1] << 8) : sz == 4 ? rd_u32(b) : rd_u64(b);
    v->type = vt;
    switch (vt) {
    case GGUF_VT_UINT8: v->v.u8 = (uint8_t)bits; break;
    case GGUF_VT_INT8: v->v.i8 = (int8_t)(uint8_t)bits; break;
    case GGUF_VT_UINT16: v->v.u16 = (uint16_t)bits; break;
    case GGUF_VT_INT16: v->v.i16 = (int16_t)(uint16_t)bits; break;
    case GGUF_VT_UINT32: v->v.u32 = (uint32_t)bits; break;
    case GGUF_VT_INT32: v->v.i32 = (int32_t)(uint32_t)bits; break;
    case GGUF_VT_FLOAT32: {
        uint32_t w = (uint32_t)bits;
        memcpy(&v->v.f32, &w, 4);
        break;
    }
    case GGUF_VT_BOOL: v->v.b = bits != 0; break;
    case GGUF_VT_UINT64: v->v.u64 = bits; break;
    case GGUF_VT_INT64: v->v.i64 = (int64_t)bits; break;
    case GGUF_VT_FLOAT64: memcpy(&v->v.f64, &bits, 8); break;
    default: KITE_ASSERT(0);
    }
    p->pos += sz;
    return KITE_OK;
}

static int get_value(parser *p, uint32_t vt, int depth, gguf_value *v);

/* Reads an array body (elem type, count, elements) into v; depth is the
 * nesting level of this array (1 = top level). */
static int get_array(parser *p, int depth, gguf_value *v) {
    if (depth > GGUF_MAX_DEPTH)
        return perr(p, KITE_E_FORMAT, "arrays nested deeper than %d levels", GGUF_MAX_DEPTH);
    uint32_t et;
    uint64_t n;
    int rc = get_u32(p, &et, "array element type");
    if (rc) return rc;
    if (et >= GGUF_VT_COUNT) return perr(p, KITE_E_FORMAT, "unknown array element type %" PRIu32, et);
    rc = get_u64(p, &n, "array count");
    if (rc) return rc;
    size_t esz = gguf_vtype_size(et);
    uint64_t min_each = esz ? esz : et == GGUF_VT_STRING ? 8 : MIN_ARRAY_BYTES;
    if (n > remaining(p) / min_each)
        return perr(p, KITE_E_FORMAT,
                    "array count %" PRIu64 " of %s needs at least %" PRIu64 " bytes each, only %" PRIu64 " left in the file",
                    n, gguf_vtype_name(et), min_each, remaining(p));
    v->type = GGUF_VT_ARRAY;
    v->v.arr.elem_type = et;
    v->v.arr.n = 0; /* counts initialised elements while parsing, for cleanup */
    v->v.arr.data = NULL;
    if (n == 0) return KITE_OK;
    if (esz) {
        /* n * esz <= remaining, so it fits in size_t on a 64-bit host */
        void *d = malloc((size_t)(n * esz));
        if (!d) return perr(p, KITE_E_NOMEM, "out of memory for an array of %" PRIu64 " elements", n);
        v->v.arr.data = d;
        v->v.arr.n = n;
        if (et == GGUF_VT_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (p->base[p->pos + i] > 1)
                    return perr(p, KITE_E_FORMAT, "array element %" PRIu64 ": invalid bool value %u", i,
                                p->base[p->pos + i]);
        }
        /* stored little-endian in the file; this build targets little-endian hosts */
        memcpy(d, p->base + p->pos, (size_t)(n * esz));
        p->pos += n * esz;
        return KITE_OK;
    }
    if (et == GGUF_VT_STRING) {
        gguf_str *s = calloc((size_t)n, sizeof *s);
        if (!s) return perr(p, KITE_E_NOMEM, "out of memory for an array of %" PRIu64 " strings", n);
        v->v.arr.data = s;
        v->v.arr.n = n;
        for (uint64_t i = 0; i < n; i++) {
            rc = get_str(p, &s[i], "string");
            if (rc) return rc;
        }
        return KITE_OK;
    }
    gguf_value *sub = calloc((size_t)n, sizeof *sub);
    if (!sub) return perr(p, KITE_E_NOMEM, "out of memory for an array of %" PRIu64 " arrays", n);
    v->v.arr.data = sub;
    for (uint64_t i = 0; i < n; i++) {
        v->v.arr.n = i + 1;
        rc = get_value(p, GGUF_VT_ARRAY, depth + 1, &sub[i]);
        if (rc) return rc;
    }
    return KITE_OK;
}

static int get_value(parser *p, uint32_t vt, int depth, gguf_value *v) {
    if (vt >= GGUF_VT_COUNT) return perr(p, KITE_E_FORMAT, "unknown value type %" PRIu32, vt);
    if (vt == GGUF_VT_STRING) {
        v->type = vt;
        return get_str(p, &v->v.str, "string");
    }
    if (vt == GGUF_VT_ARRAY) return get_array(p, depth, v);
    return get_scalar(p, vt, v);
}

/* ---- sorted name index ---------------------------------------------------- */

typedef struct name_ref {
    gguf_str s;
    uint64_t idx;
} name_ref;

static int str_cmp(gguf_str a, gguf_str b) {
    uint64_t n = a.len < b.len ? a.len : b.len;
    int c = n ? memcmp(a.ptr, b.ptr, (size_t)n) : 0;
    if (c) return c;
    return a.len < b.len ? -1 : a.len > b.len;
}

static int name_ref_cmp(const void *x, const void *y) {
    const name_ref *a = x, *b = y;
    int c = str_cmp(a->s, b->s);
    if (c) return c;
    return a->idx < b->idx ? -1 : a->idx > b->idx; /* stable: first occurrence first */
}

/* Builds order[] (indices sorted by name); on a duplicate name, *dup_first /
 * *dup_second are set to the two indices and 1 is returned.  -1 on OOM. */
static int build_index(const gguf_str *(*get)(const gguf_ctx *, uint64_t), const gguf_ctx *ctx, uint64_t n,
                       uint64_t *order, uint64_t *dup_first, uint64_t *dup_second) {
    if (n == 0) return 0;
    name_ref *refs = malloc((size_t)n * sizeof *refs);
    if (!refs) return -1;
    for (uint64_t i = 0; i < n; i++) {
        refs[i].s = *get(ctx, i);
        refs[i].idx = i;
    }
    qsort(refs, (size_t)n, sizeof *refs, name_ref_cmp);
    int dup = 0;
    for (uint64_t i = 0; i < n; i++) {
        order[i] = refs[i].idx;
        if (!dup && i > 0 && str_cmp(refs[i - 1].s, refs[i].s) == 0) {
            *dup_first = refs[i - 1].idx;
            *dup_second = refs[i].idx;
            dup = 1;
        }
    }
    free(refs);
    return dup;
}

static const gguf_str *kv_name(const gguf_ctx *ctx, uint64_t i) { return &ctx->kv[i].key; }
static const gguf_str *tensor_name(const gguf_ctx *ctx, uint64_t i) { return &ctx->tensors[i].name; }

/* Binary search of name in the sorted index; -1 if absent. */
static int64_t index_find(const gguf_ctx *ctx, const uint64_t *order, uint64_t n,
                          const gguf_str *(*get)(const gguf_ctx *, uint64_t), const char *name) {
    if (!ctx || !name || n == 0 || !order) return -1;
    gguf_str key = {name, strlen(name)};
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = str_cmp(*get(ctx, order[mid]), key);
        if (c == 0) return (int64_t)order[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* ---- file image --------------------------------------------------------------- */

/* Unmaps the file mapping or the anonymous heap image (both are mmap'd). */
static void img_release(gguf_priv *pv) {
    if ((pv->img_kind == IMG_MMAP || pv->img_kind == IMG_HEAP) && pv->img) munmap(pv->img, pv->img_size);
    pv->img = NULL;
}

/* Huge-page size the heap image is rounded to (x86-64 and arm64 THP). */
#define IMG_HUGE_PAGE ((size_t)2 << 20)
/* Bytes per pread: large enough to reach disk / page-cache speed, small
 * enough to stay interruptible. */
#define IMG_READ_CHUNK ((size_t)64 << 20)

/* Reads the whole file into anonymous memory ("heap" residency): a private
 * mapping of size rounded up to 2 MiB, advised MADV_HUGEPAGE so the kernel
 * backs it with transparent huge pages where it can (fewer TLB misses when
 * decode streams every weight byte), filled with pread in 64 MiB chunks.
 * Unlike a file mapping, the pages are not page cache: they cannot be
 * dropped and re-read under memory pressure, and reads never take page-cache
 * faults.  To get a 2 MiB-aligned start on every kernel, 2 MiB more than
 * needed is mapped and the unaligned head and the tail are unmapped again.
 * On success pv owns the image (img_size bytes at img, munmap to free). */
static int read_to_anon(int fd, const char *path, uint64_t size, gguf_priv *pv) {
    size_t cap = ((size_t)size + IMG_HUGE_PAGE - 1) & ~(IMG_HUGE_PAGE - 1);
    if (cap == 0) cap = IMG_HUGE_PAGE;
    uint8_t *raw = mmap(NULL, cap + IMG_HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return err_set(KITE_E_NOMEM, "%s: cannot allocate %" PRIu64 " bytes for the weights: %s", path, size,
                       strerror(errno));
    size_t head = (IMG_HUGE_PAGE - (uintptr_t)raw % IMG_HUGE_PAGE) % IMG_HUGE_PAGE; /* page multiple */
    uint8_t *h = raw + head;
    if (head) munmap(raw, head);
    if (IMG_HUGE_PAGE - head) munmap(h + cap, IMG_HUGE_PAGE - head);
#ifdef MADV_HUGEPAGE
    (void)madvise(h, cap, MADV_HUGEPAGE); /* advisory: failure (no THP) is fine */
#endif
    pv->img_kind = IMG_HEAP;
    pv->img = h;
    pv->img_size = cap;
    size_t done = 0;
    while (done < size) {
        size_t want = (size_t)size - done < IMG_READ_CHUNK ? (size_t)size - done : IMG_READ_CHUNK;
        ssize_t got = pread(fd, (char *)h + done, want, (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return err_set(KITE_E_IO, "%s: read failed at offset %zu: %s", path, done,
                           got == 0 ? "unexpected end of file" : strerror(errno));
        done += (size_t)got;
    }
    return KITE_OK;
}

const char *gguf_residency(const gguf_ctx *ctx) {
    const gguf_priv *pv = ctx ? ctx->priv : NULL;
    if (!pv) return "none";
    return pv->img_kind == IMG_MMAP ? "mmap" : pv->img_kind == IMG_HEAP ? "heap" : "memory";
}

/* ---- parse ------------------------------------------------------------------ */

static void ctx_free(gguf_ctx *ctx) {
    if (!ctx) return;
    gguf_priv *pv = ctx->priv;
    if (ctx->kv)
        for (uint64_t i = 0; i < ctx->n_kv; i++) gguf_value_free(&ctx->kv[i].value, false);
    free(ctx->kv);
    free(ctx->tensors);
    if (pv) {
        img_release(pv);
        free(pv->kv_order);
        free(pv->t_order);
        free(pv->path);
        free(pv);
    }
    free(ctx);
}

static int tensor_off_cmp(const void *x, const void *y) {
    const gguf_tensor *a = *(const gguf_tensor *const *)x, *b = *(const gguf_tensor *const *)y;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

static int parse_header(parser *p, gguf_ctx *ctx) {
    snprintf(p->field, sizeof p->field, "header");
    int rc = need(p, 4, "magic");
    if (rc) return rc;
    if (memcmp(p->base, GGUF_MAGIC, 4) != 0) {
        snprintf(p->field, sizeof p->field, "magic");
        const int kind = gguf_sniff(p->base, p->size < 256 ? (size_t)p->size : 256);
        const char *hint = kind == GGUF_SNIFF_LLAMA2C ? "; convert it first: kite convert MODEL.bin --tokenizer "
                                                        "TOK.bin -o OUT.gguf"
                           : kind == GGUF_SNIFF_SAFETENSORS || kind == GGUF_SNIFF_ZIP || kind == GGUF_SNIFF_PICKLE
                               ? "; for a Hugging Face model directory: kite convert --hf DIR -o OUT.gguf"
                               : "";
        return perr(p, KITE_E_FORMAT, "not a GGUF file (expected \"GGUF\", found %02x %02x %02x %02x)%s%s%s",
                    p->base[0], p->base[1], p->base[2], p->base[3], kind ? ": it looks like " : "",
                    gguf_sniff_name(kind), hint);
    }
    p->pos = 4;
    snprintf(p->field, sizeof p->field, "version");
    if ((rc = get_u32(p, &ctx->version, "version"))) return rc;
    if (ctx->version == 1) return perr(p, KITE_E_UNSUPPORTED, "GGUF version 1 is not supported (only 2 and 3)");
    if (ctx->version != 2 && ctx->version != 3) {
        if ((ctx->version & 0xffff) == 0 && (ctx->version >> 24) >= 1 && (ctx->version >> 24) <= 3)
            return perr(p, KITE_E_UNSUPPORTED, "big-endian GGUF files are not supported");
        return perr(p, KITE_E_UNSUPPORTED, "unsupported GGUF version %" PRIu32 " (only 2 and 3)", ctx->version);
    }
    snprintf(p->field, sizeof p->field, "n_tensors");
    if ((rc = get_u64(p, &ctx->n_tensors, "tensor count"))) return rc;
    snprintf(p->field, sizeof p->field, "n_kv");
    if ((rc = get_u64(p, &ctx->n_kv, "key/value count"))) return rc;
    /* tensor infos follow the kvs, so both must fit into what is left */
    uint64_t rem = remaining(p);
    if (ctx->n_kv > rem / MIN_KV_BYTES)
        return perr(p, KITE_E_FORMAT, "%" PRIu64 " key/value pairs cannot fit in the %" PRIu64 " bytes left", ctx->n_kv,
                    rem);
    snprintf(p->field, sizeof p->field, "n_tensors");
    if (ctx->n_tensors > (rem - ctx->n_kv * MIN_KV_BYTES) / MIN_TINFO_BYTES)
        return perr(p, KITE_E_FORMAT, "%" PRIu64 " tensor infos cannot fit in the %" PRIu64 " bytes left",
                    ctx->n_tensors, rem);
    return KITE_OK;
}

static int parse_kvs(parser *p, gguf_ctx *ctx) {
    gguf_priv *pv = ctx->priv;
    if (ctx->n_kv) {
        ctx->kv = calloc((size_t)ctx->n_kv, sizeof *ctx->kv);
        pv->kv_order = malloc((size_t)ctx->n_kv * sizeof *pv->kv_order);
        if (!ctx->kv || !pv->kv_order) return err_set(KITE_E_NOMEM, "%s: n_kv: out of memory", p->path);
    }
    uint64_t n_kv = ctx->n_kv;
    ctx->n_kv = 0; /* counts parsed pairs, for cleanup on failure */
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &ctx->kv[i];
        snprintf(p->field, sizeof p->field, "kv[%" PRIu64 "]", i);
        int rc = get_str(p, &kv->key, "key");
        if (rc) return rc;
        char name[80];
        safe_name(name, sizeof name, kv->key);
        snprintf(p->field, sizeof p->field, "kv[%" PRIu64 "] '%s'", i, name);
        uint32_t vt;
        if ((rc = get_u32(p, &vt, "value type"))) return rc;
        ctx->n_kv = i + 1;
        if ((rc = get_value(p, vt, 1, &kv->value))) return rc;
    }
    uint64_t a, b;
    int dup = build_index(kv_name, ctx, ctx->n_kv, pv->kv_order, &a, &b);
    if (dup < 0) return err_set(KITE_E_NOMEM, "%s: n_kv: out of memory", p->path);
    if (dup) {
        char name[80];
        safe_name(name, sizeof name, ctx->kv[b].key);
        snprintf(p->field, sizeof p->field, "kv[%" PRIu64 "] '%s'", b, name);
        return perr(p, KITE_E_FORMAT, "duplicate key (first defined at kv[%" PRIu64 "])", a);
    }
    /* alignment */
    ctx->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = gguf_find_key(ctx, "general.alignment");
    if (ai >= 0) {
        const gguf_value *v = &ctx->kv[ai].value;
        snprintf(p->field, sizeof p->field, "kv[%" PRId64 "] 'general.alignment'", ai);
        if (v->type != GGUF_VT_UINT32)
            return perr(p, KITE_E_FORMAT, "must be uint32, found %s", gguf_vtype_name(v->type));
        if (v->v.u32 == 0 || (v->v.u32 & (v->v.u32 - 1)) != 0)
            return perr(p, KITE_E_FORMAT, "alignment %" PRIu32 " is not a non-zero power of two", v->v.u32);
        ctx->alignment = v->v.u32;
    }
    return KITE_OK;
}

static int parse_tensor_info(parser *p, gguf_ctx *ctx, uint64_t i) {
    gguf_tensor *t = &ctx->tensors[i];
    snprintf(p->field, sizeof p->field, "tensor[%" PRIu64 "]", i);
    int rc = get_str(p, &t->name, "name");
    if (rc) return rc;
    char name[80];
    safe_name(name, sizeof name, t->name);
    snprintf(p->field, sizeof p->field, "tensor[%" PRIu64 "] '%s'", i, name);
    if ((rc = get_u32(p, &t->n_dims, "n_dims"))) return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return perr(p, KITE_E_FORMAT, "n_dims %" PRIu32 " out of range 1..%d", t->n_dims, GGUF_MAX_DIMS);
    int64_t n_elem = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        if (d >= t->n_dims) {
            t->ne[d] = 1;
            continue;
        }
        uint64_t u;
        if ((rc = get_u64(p, &u, "ne"))) return rc;
        t->ne[d] = (int64_t)u;
        if (t->ne[d] <= 0) return perr(p, KITE_E_FORMAT, "ne[%" PRIu32 "] = %" PRId64 " is not positive", d, t->ne[d]);
        if (__builtin_mul_overflow(n_elem, t->ne[d], &n_elem))
            return perr(p, KITE_E_FORMAT, "ne[%" PRIu32 "]: element count overflows int64", d);
    }
    if ((rc = get_u32(p, &t->type, "type"))) return rc;
    const dtype_traits *tr = dtype_get(t->type);
    if (!tr) return perr(p, KITE_E_UNSUPPORTED, "unknown tensor type %" PRIu32, t->type);
    if (t->ne[0] % tr->block_size != 0)
        return perr(p, KITE_E_FORMAT, "ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRId32, t->ne[0],
                    tr->name, tr->block_size);
    uint64_t nbytes = (uint64_t)(t->ne[0] / tr->block_size), extra = 0;
    if (__builtin_mul_overflow(nbytes, (uint64_t)tr->type_size, &nbytes) ||
        __builtin_mul_overflow(nbytes, (uint64_t)t->ne[1], &nbytes) ||
        __builtin_mul_overflow(nbytes, (uint64_t)t->ne[2], &nbytes) ||
        __builtin_mul_overflow(nbytes, (uint64_t)t->ne[3], &nbytes) ||
        /* kite row-scaled types (dtype.h row_extra): a header per row */
        __builtin_mul_overflow((uint64_t)tr->row_extra, (uint64_t)t->ne[1], &extra) ||
        __builtin_mul_overflow(extra, (uint64_t)t->ne[2], &extra) ||
        __builtin_mul_overflow(extra, (uint64_t)t->ne[3], &extra) || __builtin_add_overflow(nbytes, extra, &nbytes))
        return perr(p, KITE_E_FORMAT, "data size overflows uint64");
    t->nbytes = nbytes;
    if ((rc = get_u64(p, &t->offset, "offset"))) return rc;
    if (t->offset % ctx->alignment != 0)
        return perr(p, KITE_E_FORMAT, "offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, t->offset,
                    ctx->alignment);
    return KITE_OK;
}

static int parse_tensors(parser *p, gguf_ctx *ctx) {
    gguf_priv *pv = ctx->priv;
    int rc = KITE_OK;
    gguf_tensor **by_off = NULL;
    if (ctx->n_tensors) {
        ctx->tensors = calloc((size_t)ctx->n_tensors, sizeof *ctx->tensors);
        pv->t_order = malloc((size_t)ctx->n_tensors * sizeof *pv->t_order);
        by_off = malloc((size_t)ctx->n_tensors * sizeof *by_off);
        if (!ctx->tensors || !pv->t_order || !by_off) {
            rc = err_set(KITE_E_NOMEM, "%s: n_tensors: out of memory", p->path);
            goto done;
        }
    }
    for (uint64_t i = 0; i < ctx->n_tensors; i++)
        if ((rc = parse_tensor_info(p, ctx, i))) goto done;

    /* data section: end of the infos rounded up to the alignment */
    uint64_t pad = (ctx->alignment - p->pos % ctx->alignment) % ctx->alignment;
    ctx->data_offset = p->pos + pad; /* p->pos <= size < 2^64 - alignment in practice */
    if (ctx->data_offset < p->pos) {
        snprintf(p->field, sizeof p->field, "data section");
        rc = perr(p, KITE_E_FORMAT, "offset overflows");
        goto done;
    }

    uint64_t a, b;
    int dup = build_index(tensor_name, ctx, ctx->n_tensors, pv->t_order, &a, &b);
    if (dup < 0) {
        rc = err_set(KITE_E_NOMEM, "%s: n_tensors: out of memory", p->path);
        goto done;
    }
    if (dup) {
        char name[80];
        safe_name(name, sizeof name, ctx->tensors[b].name);
        snprintf(p->field, sizeof p->field, "tensor[%" PRIu64 "] '%s'", b, name);
        rc = perr(p, KITE_E_FORMAT, "duplicate tensor name (first defined at tensor[%" PRIu64 "])", a);
        goto done;
    }

    for (uint64_t i = 0; i < ctx->n_tensors; i++) {
        gguf_tensor *t = &ctx->tensors[i];
        char name[80];
        safe_name(name, sizeof name, t->name);
        snprintf(p->field, sizeof p->field, "tensor[%" PRIu64 "] '%s'", i, name);
        uint64_t end;
        if (__builtin_add_overflow(ctx->data_offset, t->offset, &end) || __builtin_add_overflow(end, t->nbytes, &end) ||
            end > p->size) {
            rc = perr(p, KITE_E_FORMAT,
                      "data (offset %" PRIu64 ", %" PRIu64 " bytes) extends past end of file (%" PRIu64 " bytes)",
                      t->offset, t->nbytes, p->size);
            goto done;
        }
        t->data = p->base + ctx->data_offset + t->offset;
        by_off[i] = t;
    }
    if (ctx->n_tensors > 1) {
        qsort(by_off, (size_t)ctx->n_tensors, sizeof *by_off, tensor_off_cmp);
        for (uint64_t i = 1; i < ctx->n_tensors; i++) {
            const gguf_tensor *x = by_off[i - 1], *y = by_off[i];
            if (x->offset + x->nbytes > y->offset) {
                char n1[80], n2[80];
                safe_name(n1, sizeof n1, y->name);
                safe_name(n2, sizeof n2, x->name);
                snprintf(p->field, sizeof p->field, "tensor[%" PRIu64 "] '%s'", (uint64_t)(y - ctx->tensors), n1);
                rc = perr(p, KITE_E_FORMAT, "data (offset %" PRIu64 ") overlaps tensor '%s' (offset %" PRIu64
                          ", %" PRIu64 " bytes)", y->offset, n2, x->offset, x->nbytes);
                goto done;
            }
        }
    }
done:
    free(by_off);
    return rc;
}

/* Parses the image in pv (already set up) into a new ctx; takes ownership of pv. */
static int parse_image(const uint8_t *base, uint64_t size, gguf_priv *pv, gguf_ctx **out) {
    gguf_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        free(pv->path);
        img_release(pv);
        free(pv);
        return err_set(KITE_E_NOMEM, "out of memory");
    }
    ctx->priv = pv;
    ctx->path = pv->path;
    ctx->base = base;
    ctx->size = size;
    parser p = {.base = base, .size = size, .pos = 0, .path = pv->path};
    int rc = parse_header(&p, ctx);
    if (!rc) rc = parse_kvs(&p, ctx);
    if (!rc) rc = parse_tensors(&p, ctx);
    if (rc) {
        ctx_free(ctx);
        return rc;
    }
    *out = ctx;
    return KITE_OK;
}

static gguf_priv *priv_new(const char *name) {
    gguf_priv *pv = calloc(1, sizeof *pv);
    if (!pv) return NULL;
    pv->path = strdup(name ? name : "<memory>");
    if (!pv->path) {
        free(pv);
        return NULL;
    }
    return pv;
}

int gguf_open_memory(const void *buf, size_t size, const char *name, gguf_ctx **out) {
    if (!out || (!buf && size)) return err_set(KITE_E_ARG, "gguf_open_memory: NULL argument");
    gguf_priv *pv = priv_new(name);
    if (!pv) return err_set(KITE_E_NOMEM, "out of memory");
    pv->img_kind = IMG_BORROWED;
    static const uint8_t empty[1] = {0};
    return parse_image(buf ? buf : empty, size, pv, out);
}

int gguf_open(const char *path, const gguf_open_params *params, gguf_ctx **out) {
    if (!path || !out) return err_set(KITE_E_ARG, "gguf_open: NULL argument");
    bool use_mmap = params ? params->use_mmap : true;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(KITE_E_IO, "%s: cannot open: %s", path, strerror(errno));
    int rc = KITE_OK;
    gguf_priv *pv = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = err_set(KITE_E_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = err_set(KITE_E_IO, "%s: not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 64) use_mmap = false; /* also avoids mapping an empty file */
    if (size > SIZE_MAX / 2) {
        rc = err_set(KITE_E_IO, "%s: file too large", path);
        goto fail;
    }
    pv = priv_new(path);
    if (!pv) {
        rc = err_set(KITE_E_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (use_mmap) {
        void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            rc = err_set(KITE_E_IO, "%s: mmap failed: %s", path, strerror(errno));
            goto fail;
        }
        pv->img_kind = IMG_MMAP;
        pv->img = m;
        pv->img_size = (size_t)size;
    } else {
        if ((rc = read_to_anon(fd, path, size, pv))) goto fail;
    }
    close(fd);
    fd = -1;
    gguf_priv *owned = pv;
    pv = NULL;
    return parse_image(owned->img, size, owned, out);
fail:
    if (pv) {
        img_release(pv);
        free(pv->path);
        free(pv);
    }
    if (fd >= 0) close(fd);
    return rc;
}

void gguf_close(gguf_ctx *ctx) { ctx_free(ctx); }

/* ---- lookups -------------------------------------------------------------- */

int64_t gguf_find_key(const gguf_ctx *ctx, const char *key) {
    if (!ctx) return -1;
    const gguf_priv *pv = ctx->priv;
    return index_find(ctx, pv->kv_order, ctx->n_kv, kv_name, key);
}

const gguf_value *gguf_get(const gguf_ctx *ctx, const char *key) {
    int64_t i = gguf_find_key(ctx, key);
    return i < 0 ? NULL : &ctx->kv[i].value;
}

const gguf_tensor *gguf_find_tensor(const gguf_ctx *ctx, const char *name) {
    if (!ctx) return NULL;
    const gguf_priv *pv = ctx->priv;
    int64_t i = index_find(ctx, pv->t_order, ctx->n_tensors, tensor_name, name);
    return i < 0 ? NULL : &ctx->tensors[i];
}

/* Looks key up for a typed getter; sets the NOT_FOUND message. */
static int lookup(const gguf_ctx *ctx, const char *key, const gguf_value **v) {
    if (!ctx || !key) return err_set(KITE_E_ARG, "gguf_get: NULL argument");
    *v = gguf_get(ctx, key);
    if (!*v) return err_set(KITE_E_NOT_FOUND, "%s: key '%s': not found", ctx->path, key);
    return KITE_OK;
}

static int wrong_type(const gguf_ctx *ctx, const char *key, const char *want, const gguf_value *v) {
    return err_set(KITE_E_FORMAT, "%s: key '%s': expected %s, found %s", ctx->path, key, want,
                   gguf_vtype_name(v->type));
}

/* Integer value as (negative flag, magnitude); false if not an integer type. */
static bool int_value(const gguf_value *v, bool *neg, uint64_t *mag) {
    int64_t s;
    switch (v->type) {
    case GGUF_VT_UINT8: *neg = false, *mag = v->v.u8; return true;
    case GGUF_VT_UINT16: *neg = false, *mag = v->v.u16; return true;
    case GGUF_VT_UINT32: *neg = false, *mag = v->v.u32; return true;
    case GGUF_VT_UINT64: *neg = false, *mag = v->v.u64; return true;
    case GGUF_VT_INT8: s = v->v.i8; break;
    case GGUF_VT_INT16: s = v->v.i16; break;
    case GGUF_VT_INT32: s = v->v.i32; break;
    case GGUF_VT_INT64: s = v->v.i64; break;
    default: return false;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return true;
}

/* Fetches an integer in [-neg_max, pos_max]; neg_max is a magnitude. */
static int get_int(const gguf_ctx *ctx, const char *key, const char *want, uint64_t neg_max, uint64_t pos_max,
                   bool *neg, uint64_t *mag) {
    const gguf_value *v;
    int rc = lookup(ctx, key, &v);
    if (rc) return rc;
    if (!int_value(v, neg, mag)) return wrong_type(ctx, key, want, v);
    if ((*neg && *mag > neg_max) || (!*neg && *mag > pos_max))
        return err_set(KITE_E_FORMAT, "%s: key '%s': value %s%" PRIu64 " (%s) is out of range for %s", ctx->path, key,
                       *neg ? "-" : "", *mag, gguf_vtype_name(v->type), want);
    return KITE_OK;
}

int gguf_get_u32(const gguf_ctx *ctx, const char *key, uint32_t *out) {
    bool neg;
    uint64_t mag;
    int rc = get_int(ctx, key, "uint32", 0, UINT32_MAX, &neg, &mag);
    if (!rc) *out = (uint32_t)mag;
    return rc;
}

int gguf_get_i32(const gguf_ctx *ctx, const char *key, int32_t *out) {
    bool neg;
    uint64_t mag;
    int rc = get_int(ctx, key, "int32", (uint64_t)INT32_MAX + 1, INT32_MAX, &neg, &mag);
    if (!rc) *out = neg ? (int32_t)(-(int64_t)mag) : (int32_t)mag;
    return rc;
}

int gguf_get_u64(const gguf_ctx *ctx, const char *key, uint64_t *out) {
    bool neg;
    uint64_t mag;
    int rc = get_int(ctx, key, "uint64", 0, UINT64_MAX, &neg, &mag);
    if (!rc) *out = mag;
    return rc;
}

int gguf_get_f32(const gguf_ctx *ctx, const char *key, float *out) {
    const gguf_value *v;
    int rc = lookup(ctx, key, &v);
    if (rc) return rc;
    if (v->type == GGUF_VT_FLOAT32) {
        *out = v->v.f32;
        return KITE_OK;
    }
    if (v->type == GGUF_VT_FLOAT64) {
        if (isfinite(v->v.f64) && fabs(v->v.f64) > FLT_MAX)
            return err_set(KITE_E_FORMAT, "%s: key '%s': float64 value %g is out of range for float32", ctx->path,
                           key, v->v.f64);
        *out = (float)v->v.f64;
        return KITE_OK;
    }
    return wrong_type(ctx, key, "float32", v);
}

int gguf_get_bool(const gguf_ctx *ctx, const char *key, bool *out) {
    const gguf_value *v;
    int rc = lookup(ctx, key, &v);
    if (rc) return rc;
    if (v->type != GGUF_VT_BOOL) return wrong_type(ctx, key, "bool", v);
    *out = v->v.b;
    return KITE_OK;
}

int gguf_get_str(const gguf_ctx *ctx, const char *key, gguf_str *out) {
    const gguf_value *v;
    int rc = lookup(ctx, key, &v);
    if (rc) return rc;
    if (v->type != GGUF_VT_STRING) return wrong_type(ctx, key, "string", v);
    *out = v->v.str;
    return KITE_OK;
}

int gguf_get_arr(const gguf_ctx *ctx, const char *key, uint32_t elem_type, gguf_array *out) {
    const gguf_value *v;
    int rc = lookup(ctx, key, &v);
    if (rc) return rc;
    if (v->type != GGUF_VT_ARRAY) {
        char want[32];
        snprintf(want, sizeof want, "array of %s", elem_type == GGUF_VT_COUNT ? "any" : gguf_vtype_name(elem_type));
        return wrong_type(ctx, key, want, v);
    }
    if (elem_type != GGUF_VT_COUNT && v->v.arr.elem_type != elem_type)
        return err_set(KITE_E_FORMAT, "%s: key '%s': expected array of %s, found array of %s", ctx->path, key,
                       gguf_vtype_name(elem_type), gguf_vtype_name(v->v.arr.elem_type));
    *out = v->v.arr;
    return KITE_OK;
}
