/* kv_cache.c - the context's KV cache rows: type check, row size, store in
 * the cache type, copy (see kv_cache.h). */
#include "model/kv_cache.h"

#include <string.h>

#include "core/error.h"
#include "tensor/dtype.h"

int ctx_kv_type_check(const kite_model *model, int32_t kv_type) {
    const int32_t hd = model->hp.head_dim;
    switch (kv_type) {
    case KITE_DTYPE_F32:
    case KITE_DTYPE_F16: return KITE_OK;
    case KITE_DTYPE_Q8_0:
    case KITE_DTYPE_Q4_0:
        if (hd % 32 == 0) return KITE_OK;
        return err_set(KITE_E_ARG,
                       "KV cache type %s needs head_dim to be a multiple of 32, but %s has head_dim %d "
                       "(f16 and f32 work for any head_dim)",
                       dtype_name((uint32_t)kv_type), model->path ? model->path : "the model", hd);
    default:
        return err_set(KITE_E_ARG, "KV cache type %d (%s) is not supported: use f32, f16, q8_0 or q4_0", kv_type,
                       dtype_name((uint32_t)kv_type));
    }
}

size_t ctx_kv_row_bytes(const kite_ctx *ctx) { return ctx->kv_row_bytes; }

const int32_t *ctx_kv_layer_table(const kite_ctx *ctx, int32_t layer, const int32_t *block_table,
                                  int32_t *block_size) {
    if (block_table) {
        *block_size = ctx->kv_block;
        return block_table;
    }
    if (ctx->kv_ring > 0 && !ctx->model->layers[layer].full_attn) {
        *block_size = ctx->kv_ring;
        return ctx->ring_table;
    }
    *block_size = 0;
    return NULL;
}

size_t ctx_kv_layer_offset(const kite_ctx *ctx, int32_t layer) { return ctx->kv_row0[layer] * ctx->kv_row_bytes; }

/* Cache row (layer-relative) of position p through a table of bs-row blocks (NULL: row p). */
static size_t kv_row(const int32_t *table, int32_t bs, int32_t p) {
    if (!table) return (size_t)p;
    const int32_t b = p / bs;
    return (size_t)table[b] * (size_t)bs + (size_t)(p - b * bs);
}

void ctx_kv_store(kite_ctx *ctx, int32_t layer, const int32_t *block_table, int32_t pos0, int32_t n_tok,
                  const float *k, const float *v) {
    const model_hparams *hp = &ctx->model->hp;
    const size_t KV = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    /* blocks of 32 never straddle two heads (head_dim % 32 == 0), so one
     * call over the whole row quantizes each kv head's row on its own */
    const dtype_from_float_fn from =
        ctx->kv_type == KITE_DTYPE_F32 ? NULL : dtype_get((uint32_t)ctx->kv_type)->from_float;
    int32_t bs;
    const int32_t *table = ctx_kv_layer_table(ctx, layer, block_table, &bs);
    for (int32_t i = 0; i < n_tok; i++, k += KV, v += KV) {
        const size_t row = kv_row(table, bs, pos0 + i);
        const size_t off = (ctx->kv_row0[layer] + row) * ctx->kv_row_bytes;
        if (!from) {
            memcpy(ctx->k_cache + off, k, sizeof(float) * KV);
            memcpy(ctx->v_cache + off, v, sizeof(float) * KV);
        } else {
            from(k, ctx->k_cache + off, (int64_t)KV);
            from(v, ctx->v_cache + off, (int64_t)KV);
        }
    }
}

void ctx_kv_copy_rows(kite_ctx *ctx, int32_t dst_row, int32_t src_row, int32_t n_rows) {
    KITE_ASSERT(n_rows >= 0 && dst_row >= 0 && src_row >= 0 && dst_row + n_rows <= ctx->n_ctx &&
                src_row + n_rows <= ctx->n_ctx && ctx->kv_ring == 0);
    const size_t rb = ctx->kv_row_bytes, n = (size_t)n_rows * rb;
    for (int32_t l = 0; l < ctx->model->hp.n_layer; l++) {
        const size_t base = ctx->kv_row0[l];
        const size_t d = (base + (size_t)dst_row) * rb, s = (base + (size_t)src_row) * rb;
        memmove(ctx->k_cache + d, ctx->k_cache + s, n);
        memmove(ctx->v_cache + d, ctx->v_cache + s, n);
    }
}
