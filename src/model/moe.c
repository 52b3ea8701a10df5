/* moe.c - mixture-of-experts FFN: routing and expert-grouped matmuls (see moe.h). */
#include "model/moe.h"

#include <string.h>

#include "kernels/kernels.h"

void moe_route(kite_ctx *ctx, const layer_weights *L, const float *x, int32_t n) {
    const model_hparams *hp = &ctx->model->hp;
    const int32_t NE = hp->n_expert, K = hp->n_expert_used;
    float *p = ctx->moe_logits;
    kern_matmul(ctx->tp, &L->gate_inp, x, n, p, NE, ctx->mm_scratch);
    for (int32_t t = 0; t < n; t++) {
        float *pt = p + (size_t)t * NE;
        int32_t *sel = ctx->moe_sel + (size_t)t * K;
        float *w = ctx->moe_w + (size_t)t * K;
        kern_softmax(pt, NE);
        /* top-k by selection: k passes over the row, O(k * n_expert) per token */
        float sum = 0.0f;
        for (int32_t j = 0; j < K; j++) {
            int32_t best = -1;
            for (int32_t e = 0; e < NE; e++) {
                bool taken = false;
                for (int32_t i = 0; i < j; i++) taken |= sel[i] == e;
                if (!taken && (best < 0 || pt[e] > pt[best])) best = e;
            }
            sel[j] = best;
            w[j] = pt[best];
            sum += w[j];
        }
        if (hp->expert_norm)
            for (int32_t j = 0; j < K; j++) w[j] /= sum;
    }
}

void moe_experts(kite_ctx *ctx, const layer_weights *L, int32_t layer, const float *x, int32_t n, float *out) {
    const model_hparams *hp = &ctx->model->hp;
    const int32_t NE = hp->n_expert, K = hp->n_expert_used, E = hp->n_embd, FE = hp->n_ff_exp;
    memset(out, 0, sizeof(float) * (size_t)n * (size_t)E);
    for (int32_t e = 0; e < NE; e++) {
        int32_t cnt = 0;
        for (int32_t t = 0; t < n; t++)
            for (int32_t j = 0; j < K; j++)
                if (ctx->moe_sel[(size_t)t * K + j] == e) {
                    ctx->moe_tok[cnt] = t;
                    ctx->moe_tw[cnt] = ctx->moe_w[(size_t)t * K + j];
                    memcpy(ctx->moe_x + (size_t)cnt * E, x + (size_t)t * E, sizeof(float) * (size_t)E);
                    cnt++;
                }
        if (cnt == 0) continue; /* no token chose it: its weights are not read */
        const weight wg = model_expert(&L->gate_exps, e), wu = model_expert(&L->up_exps, e),
                     wd = model_expert(&L->down_exps, e);
        if (ctx->expert_tap) ctx->expert_tap(ctx->expert_tap_user, layer, e, TAP_FFN_IN, ctx->moe_x, cnt, E);
        kern_matmul(ctx->tp, &wg, ctx->moe_x, cnt, ctx->hb, FE, ctx->mm_scratch);
        kern_matmul(ctx->tp, &wu, ctx->moe_x, cnt, ctx->hb2, FE, ctx->mm_scratch);
        kern_swiglu(ctx->hb, ctx->hb2, (int64_t)cnt * FE);
        if (ctx->expert_tap) ctx->expert_tap(ctx->expert_tap_user, layer, e, TAP_DOWN_IN, ctx->hb, cnt, FE);
        kern_matmul(ctx->tp, &wd, ctx->hb, cnt, ctx->moe_x, E, ctx->mm_scratch);
        for (int32_t i = 0; i < cnt; i++) {
            float *o = out + (size_t)ctx->moe_tok[i] * E;
            const float *y = ctx->moe_x + (size_t)i * E;
            const float w = ctx->moe_tw[i];
            for (int32_t c = 0; c < E; c++) o[c] += w * y[c];
        }
    }
}
