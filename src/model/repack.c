/*
 * repack.c - load-time repacking of a model's matrices into the kernels'
 * interleaved layouts, in place in the heap file image: q4_0, q5_0, q8_0,
 * iq4_nl, q4_K, q5_K, q6_K and iq4_xs (kern_x16_type) into 16-row groups
 * (kernels/gemm_x16.h), f16 and bf16 into 32-row groups (kernels/gemm_x32.h).
 *
 * Which weights: every matrix kern_matmul multiplies (attention, FFN, MoE
 * experts one expert at a time, the classifier) of a type with a layout,
 * when the active kernel level has the fast kernel for it.  The token
 * embedding is repacked only when it is the tied classifier; its rows are
 * then read through kern_get_row, which understands the layout.  A view
 * shared by two weights (tied classifier) is repacked once.
 * Set kite_model_params.no_repack (the kite CLI does for KITE_REPACK=0) to
 * keep the file's layout, e.g. to measure the difference; the loader then
 * does not call model_repack.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/gemm_x32.h"
#include "kernels/gemm_x16.h"
#include "model/model.h"
#include "tensor/dtype.h"

typedef struct repack_state {
    const void **done; /* data pointers already repacked */
    int n_done, cap;
    void *tmp;         /* the pack functions' scratch (the largest needed so far) */
    size_t tmp_bytes;
} repack_state;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static bool seen(const repack_state *s, const void *p) {
    for (int i = 0; i < s->n_done; i++)
        if (s->done[i] == p) return true;
    return false;
}

/* The layout w gains from at this level: X16, X32, or PLAIN (none). */
static uint32_t target_layout(const weight *w, kern_level level) {
    if (kern_x16_type(w->type) && kern_x16_pays_type(level, w->type) && w->ne[1] >= X16_ROWS) return WEIGHT_LAYOUT_X16;
    if (kern_x32_pays(level, w->type, w->ne[0], w->ne[1])) return WEIGHT_LAYOUT_X32;
    return WEIGHT_LAYOUT_PLAIN;
}

/* Repacks the n_views views of w (n_views > 1: experts at model_expert
 * offsets) and marks w.  Returns a kite_status. */
static int repack_weight(kite_model *m, repack_state *s, weight *w, int n_views) {
    const uint32_t layout = target_layout(w, kern_table()->level);
    if (!w->data || layout == WEIGHT_LAYOUT_PLAIN || w->layout != WEIGHT_LAYOUT_PLAIN) return KITE_OK;
    if (seen(s, w->data)) {
        w->layout = layout;
        return KITE_OK;
    }
    const bool x16 = layout == WEIGHT_LAYOUT_X16;
    const size_t need =
        x16 ? kern_x16_pack_tmp_bytes(w->type, w->ne[1], w->ne[0]) : kern_x32_pack_tmp_bytes(w->ne[0]);
    if (need > s->tmp_bytes) {
        free(s->tmp);
        s->tmp_bytes = 0;
        /* one group's plain rows (and for x16 a bit per group): without the memory for them,
         * this weight keeps the file's layout (the plain kernels run it) */
        if (!(s->tmp = malloc(need))) return KITE_OK;
        s->tmp_bytes = need;
    }
    if (s->n_done == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 64;
        const void **d = realloc(s->done, (size_t)cap * sizeof *d);
        if (!d) return err_set(KITE_E_NOMEM, "%s: out of memory repacking weights", m->path);
        s->done = d;
        s->cap = cap;
    }
    s->done[s->n_done++] = w->data;
    for (int e = 0; e < n_views; e++) {
        const weight v = model_expert(w, e);
        /* the heap image is private memory owned by the model (heap residency) */
        void *data = (void *)(uintptr_t)v.data;
        if (x16) kern_x16_pack(w->type, data, v.ne[1], v.ne[0], s->tmp);
        else kern_x32_pack(w->type, data, v.ne[1], v.ne[0], s->tmp);
    }
    w->layout = layout;
    m->n_repacked += n_views;
    return KITE_OK;
}

uint32_t model_repack_matrix(weight *w) {
    const uint32_t layout = target_layout(w, kern_table()->level);
    if (!w->data || layout == WEIGHT_LAYOUT_PLAIN || w->layout != WEIGHT_LAYOUT_PLAIN) return w->layout;
    const bool x16 = layout == WEIGHT_LAYOUT_X16;
    const size_t need =
        x16 ? kern_x16_pack_tmp_bytes(w->type, w->ne[1], w->ne[0]) : kern_x32_pack_tmp_bytes(w->ne[0]);
    void *tmp = malloc(need ? need : 1);
    if (!tmp) return w->layout;
    void *data = (void *)(uintptr_t)w->data;
    if (x16) kern_x16_pack(w->type, data, w->ne[1], w->ne[0], tmp);
    else kern_x32_pack(w->type, data, w->ne[1], w->ne[0], tmp);
    free(tmp);
    w->layout = layout;
    return layout;
}

static void layer_weight_list(layer_weights *L, weight **w);

/* ---- f16_compute BF16: F16 matrices rounded to bf16 in place -------------------- */

void model_f16_to_bf16_row(void *data, size_t n) {
    uint16_t *h = data;
    for (size_t i = 0; i < n; i++) h[i] = fp32_to_bf16_inline(fp16_to_fp32_inline(h[i])); /* exact, then RNE */
}

/* Rounds w (n_views views: experts) to bf16 when it is an F16 matrix in the plain layout. */
static bool weight_to_bf16(weight *w, int n_views) {
    if (!w->data || w->type != KITE_DTYPE_F16 || w->layout != WEIGHT_LAYOUT_PLAIN) return false;
    /* the views are contiguous (model_expert): one run over all of them */
    model_f16_to_bf16_row((void *)(uintptr_t)w->data, (size_t)n_views * (size_t)w->ne[1] * (size_t)w->ne[0]);
    w->type = KITE_DTYPE_BF16;
    return true;
}

int model_layer_to_bf16(layer_weights *L, int n_exp) {
    weight *w[10];
    layer_weight_list(L, w);
    int n = 0;
    for (int i = 0; i < 10; i++) n += weight_to_bf16(w[i], i >= 7 ? n_exp : 1);
    return n;
}

/* Scratch of one weight's repacking at this level (0: it stays plain). */
static size_t weight_tmp(const weight *w, uint32_t layout) {
    if (!w->data || layout == WEIGHT_LAYOUT_PLAIN) return 0;
    return layout == WEIGHT_LAYOUT_X16 ? kern_x16_pack_tmp_bytes(w->type, w->ne[1], w->ne[0])
                                       : kern_x32_pack_tmp_bytes(w->ne[0]);
}

static void layer_weight_list(layer_weights *L, weight **w) {
    weight *v[10] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                     &L->gate_exps, &L->up_exps, &L->down_exps};
    memcpy(w, v, sizeof v);
}

size_t model_repack_layer_tmp(const layer_weights *L) {
    const kern_level level = kern_table()->level;
    weight *w[10];
    layer_weight_list((layer_weights *)(uintptr_t)L, w);
    size_t need = 0;
    for (int i = 0; i < 10; i++) {
        const size_t t = weight_tmp(w[i], target_layout(w[i], level));
        if (t > need) need = t;
    }
    return need;
}

void model_repack_layer(layer_weights *L, int n_exp, void *tmp, size_t tmp_bytes) {
    const kern_level level = kern_table()->level;
    weight *w[10];
    layer_weight_list(L, w);
    for (int i = 0; i < 10; i++) {
        const uint32_t layout = target_layout(w[i], level);
        if (!w[i]->data || layout == WEIGHT_LAYOUT_PLAIN || w[i]->layout != WEIGHT_LAYOUT_PLAIN) continue;
        if (weight_tmp(w[i], layout) > tmp_bytes) continue; /* as repack_weight without its scratch */
        const int nv = i >= 7 ? n_exp : 1;
        for (int e = 0; e < nv; e++) {
            const weight v = model_expert(w[i], e);
            void *data = (void *)(uintptr_t)v.data;
            if (layout == WEIGHT_LAYOUT_X16) kern_x16_pack(w[i]->type, data, v.ne[1], v.ne[0], tmp);
            else kern_x32_pack(w[i]->type, data, v.ne[1], v.ne[0], tmp);
        }
        w[i]->layout = layout;
    }
}

/* Whether the classifier's bytes may be rewritten in place. A split model's file is mapped read-only:
 * rank 0 has its own copy of the classifier (shard.c), the other ranks never read theirs; under a memory
 * budget the classifier was copied into the resident arena (offload.c), so it is treated like an unbounded
 * heap model's: the same kernels, the same bits. */
static bool output_writable(const kite_model *m) {
    return strcmp(gguf_residency(m->gguf), "heap") == 0 || m->offload != NULL || (m->tp_size > 1 && m->tp_rank == 0);
}

int model_to_bf16(kite_model *m) {
    const int n_exp = m->hp.n_expert > 0 ? m->hp.n_expert : 1;
    for (int l = 0; l < m->n_resident; l++) m->n_f16_as_bf16 += model_layer_to_bf16(&m->layers[l], n_exp);
    /* streamed layers are rounded in their ring slot after every read (offload.c); counted here once */
    for (int l = m->n_resident; l < m->hp.n_layer; l++) {
        weight *w[10];
        layer_weight_list(&m->layers[l], w);
        for (int i = 0; i < 10; i++) m->n_f16_as_bf16 += w[i]->data && w[i]->type == KITE_DTYPE_F16;
    }
    /* the classifier where model_repack may rewrite it; a tied token embedding goes with it (its rows are
     * read through kern_get_row, which reads bf16 as well) */
    if (output_writable(m) && weight_to_bf16(&m->output, 1)) {
        m->n_f16_as_bf16++;
        if (m->tok_embd.data == m->output.data) m->tok_embd.type = KITE_DTYPE_BF16;
    }
    return KITE_OK;
}

int model_repack(kite_model *m) {
    const kern_level level = kern_table()->level;
    if (!(kern_x16_pays(level) || kern_x32_pays(level, KITE_DTYPE_F16, 2, X32_ROWS))) return KITE_OK;
    const double t0 = now_ms();
    repack_state s = {0};
    int rc = KITE_OK;
    const int n_exp = m->hp.n_expert > 0 ? m->hp.n_expert : 1;
    for (int l = 0; l < m->n_resident && !rc; l++) { /* streamed layers: model_repack_layer, per read */
        layer_weights *L = &m->layers[l];
        weight *dense[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof dense / sizeof *dense && !rc; i++) rc = repack_weight(m, &s, dense[i], 1);
        weight *experts[] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (size_t i = 0; i < sizeof experts / sizeof *experts && !rc; i++)
            rc = repack_weight(m, &s, experts[i], n_exp);
    }
    if (!rc && output_writable(m)) rc = repack_weight(m, &s, &m->output, 1);
    if (!rc && m->tok_embd.data == m->output.data) m->tok_embd.layout = m->output.layout; /* tied classifier */
    free(s.tmp);
    free(s.done);
    m->repack_ms = now_ms() - t0;
    return rc;
}
