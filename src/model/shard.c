/*
 * shard.c - one rank's share of a model for tensor parallelism
 * (Megatron-style; docs/distributed.md).
 *
 * DESIGN
 *   With N ranks, rank r keeps q heads [r*n_head/N, (r+1)*n_head/N) and the
 *   KV heads they read (the same fraction of n_head_kv, so a local q head
 *   still maps to its local KV head by the GQA ratio), and FFN columns
 *   [r*n_ff/N, (r+1)*n_ff/N).  The matrices that produce those features
 *   (q, k, v, gate, up: one row per output feature) keep their rows; the ones
 *   that consume them (o, down: one column per input feature) keep the
 *   matching columns, so each rank's o and down produce a partial sum of the
 *   full-width output that the forward pass all-reduces (llama.c).  The
 *   biases of o and down are added once, after the reduction.
 *
 *   Slices are copied into one owned buffer (m->shard_data), so that a rank
 *   holds only its share beside the replicated tensors (embeddings, norms,
 *   classifier) and model_repack can repack them in place afterwards; the
 *   file image's pages of the split tensors are then released.  The loader
 *   maps the file for a split model, so a rank reads from disk only the pages
 *   of its rows (q, k, v, gate, up: contiguous) and of the rows' column
 *   ranges (o, down: a page holding any of its columns is read whole).  A
 *   column slice keeps quantized blocks whole: its first column and width must
 *   be multiples of the type's block size, else the split fails naming the
 *   tensor.  hp becomes the share (n_head, n_head_kv, n_ff): the context then
 *   sizes its buffers and KV cache for this rank's heads only.
 *
 *   Not split (yet): mixture-of-experts layers (the split fails with a
 *   message), the classifier: only rank 0 computes logits, from its own copy
 *   of the classifier; the other ranks never read it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "model/model.h"
#include "tensor/dtype.h"

/* A planned slice: rows [r0, r0+nr) or, for cols, columns [c0, c0+nc) of every row. */
typedef struct slice_plan {
    weight *w;
    bool cols;
    int64_t first, count;
    const void *src;  /* the whole tensor's bytes in the file image, released after the copy */
    size_t src_bytes;
} slice_plan;

/* The file image's pages that lie wholly inside [p, p+n) go back to the
 * system: MADV_DONTNEED drops a mapping's pages from this process (they are
 * read again only if touched, and nothing touches them: the views now point
 * at the copies) and frees the pages of the heap image.  A page shared with
 * another tensor is kept. */
static void release_range(const void *p, size_t n) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), b = ((uintptr_t)p + n) & ~(page - 1);
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

/* Checks that columns [c0, c0+nc) of w are whole blocks; names the tensor. */
static int check_cols(const kite_model *m, const weight *w, int32_t l, const char *tensor, int64_t c0, int64_t nc) {
    const dtype_traits *tr = dtype_get(w->type);
    if (tr->row_extra != 0)
        return err_set(KITE_E_UNSUPPORTED,
                       "%s: tensor split: blk.%d.%s.weight has type %s, whose rows carry a per-row header and "
                       "cannot be split by columns",
                       m->path, l, tensor, tr->name);
    if (c0 % tr->block_size || nc % tr->block_size)
        return err_set(KITE_E_UNSUPPORTED,
                       "%s: tensor split over %d ranks: blk.%d.%s.weight (%s, %d elements per block): columns "
                       "%lld..%lld of this rank would cut a block",
                       m->path, m->tp_size, l, tensor, tr->name, tr->block_size, (long long)c0,
                       (long long)(c0 + nc - 1));
    return KITE_OK;
}

static size_t slice_bytes(const slice_plan *s) {
    if (!s->cols) return (size_t)s->count * s->w->row_bytes;
    return (size_t)s->w->ne[1] * dtype_row_size(s->w->type, s->count);
}

/* Copies the slice into dst and points the view at it. */
static void slice_apply(const slice_plan *s, char *dst) {
    weight *w = s->w;
    const char *src = w->data;
    if (!s->cols) {
        memcpy(dst, src + (size_t)s->first * w->row_bytes, (size_t)s->count * w->row_bytes);
        w->ne[1] = s->count;
    } else {
        const size_t off = dtype_row_size(w->type, s->first), rb = dtype_row_size(w->type, s->count);
        for (int64_t r = 0; r < w->ne[1]; r++) memcpy(dst + (size_t)r * rb, src + (size_t)r * w->row_bytes + off, rb);
        w->ne[0] = s->count;
        w->row_bytes = rb;
    }
    w->data = dst;
}

static int check_divides(const kite_model *m, const char *what, int32_t n, int32_t size, const char *hint) {
    if (n % size == 0) return KITE_OK;
    return err_set(KITE_E_UNSUPPORTED, "%s: tensor split over %d ranks: %s %d does not divide by %d%s", m->path, size,
                   what, n, size, hint);
}

int model_shard_tensor(kite_model *m, int32_t rank, int32_t size) {
    model_hparams *hp = &m->hp;
    m->tp_size = size;
    m->tp_rank = rank;
    m->hp_full = *hp;
    if (size <= 1) return KITE_OK;
    if (rank < 0 || rank >= size) return err_set(KITE_E_ARG, "%s: tensor split: rank %d of %d", m->path, rank, size);
    if (hp->n_expert > 0)
        return err_set(KITE_E_UNSUPPORTED, "%s: tensor split of mixture-of-experts models (%d experts) is not "
                       "supported yet", m->path, hp->n_expert);
    int rc;
    if ((rc = check_divides(m, "n_head", hp->n_head, size, "")) ||
        (rc = check_divides(m, "n_head_kv", hp->n_head_kv, size,
                            " (replicating KV heads is not supported yet: use a rank count that divides it)")) ||
        (rc = check_divides(m, "n_ff", hp->n_ff, size, "")))
        return rc;
    const int64_t HD = hp->head_dim, nh = hp->n_head / size, nkv = hp->n_head_kv / size, nf = hp->n_ff / size;
    const int64_t q0 = rank * nh * HD, kv0 = rank * nkv * HD, f0 = rank * nf;
    const int n_per_layer = 7;
    slice_plan *plan = calloc((size_t)hp->n_layer * n_per_layer + 1, sizeof *plan);
    if (!plan) return err_set(KITE_E_NOMEM, "%s: out of memory splitting the model", m->path);
    int n_plan = 0;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        layer_weights *L = &m->layers[l];
        if ((rc = check_cols(m, &L->wo, l, "attn_output", q0, nh * HD)) ||
            (rc = check_cols(m, &L->w_down, l, "ffn_down", f0, nf)))
            goto done;
        plan[n_plan++] = (slice_plan){&L->wq, false, q0, nh * HD, NULL, 0};
        plan[n_plan++] = (slice_plan){&L->wk, false, kv0, nkv * HD, NULL, 0};
        plan[n_plan++] = (slice_plan){&L->wv, false, kv0, nkv * HD, NULL, 0};
        plan[n_plan++] = (slice_plan){&L->wo, true, q0, nh * HD, NULL, 0};
        if (L->w_gate.data) plan[n_plan++] = (slice_plan){&L->w_gate, false, f0, nf, NULL, 0};
        plan[n_plan++] = (slice_plan){&L->w_up, false, f0, nf, NULL, 0};
        plan[n_plan++] = (slice_plan){&L->w_down, true, f0, nf, NULL, 0};
        if (L->bq) L->bq += q0;
        if (L->bk) L->bk += kv0;
        if (L->bv) L->bv += kv0;
        if (L->b_up) L->b_up += f0;
    }
    /* rank 0 alone computes logits: its own copy of the classifier (repackable); the other ranks never
     * touch it, so on a mapped file its pages are never read there */
    if (rank == 0) plan[n_plan++] = (slice_plan){&m->output, false, 0, m->output.ne[1], NULL, 0};
    /* each slice starts on a 64-byte boundary (row_bytes need not be a multiple of it) */
    size_t total = 0;
    for (int i = 0; i < n_plan; i++) total += (slice_bytes(&plan[i]) + 63) & ~(size_t)63;
    void *buf = NULL;
    if (posix_memalign(&buf, 64, total ? total : 64)) {
        rc = err_set(KITE_E_NOMEM, "%s: out of memory for this rank's %zu bytes of weights", m->path, total);
        goto done;
    }
    m->shard_data = buf;
    m->shard_bytes = total;
    char *p = buf;
    for (int i = 0; i < n_plan; i++) {
        const size_t b = slice_bytes(&plan[i]);
        plan[i].src = plan[i].w->data;
        plan[i].src_bytes = (size_t)plan[i].w->ne[1] * plan[i].w->row_bytes;
        if (plan[i].w != &m->output) m->shard_full_bytes += plan[i].src_bytes;
        slice_apply(&plan[i], p);
        p += (b + 63) & ~(size_t)63;
        /* at once, so that the peak is the copies plus one tensor; the views of a fused tensor are disjoint
         * byte ranges and release_range keeps their shared boundary pages */
        if (plan[i].src != m->tok_embd.data) release_range(plan[i].src, plan[i].src_bytes); /* tied: still read */
    }
    if (m->attn_phi) { /* [n_layer][n_head] -> this rank's heads */
        for (int32_t l = 0; l < hp->n_layer; l++)
            memmove(m->attn_phi + (size_t)l * nh, m->attn_phi + (size_t)l * hp->n_head + rank * nh,
                    sizeof(float) * (size_t)nh);
    }
    hp->n_head = (int32_t)nh;
    hp->n_head_kv = (int32_t)nkv;
    hp->n_ff = (int32_t)nf;
    rc = KITE_OK;
done:
    free(plan);
    return rc;
}
