/*
 * model.c - the roofline op model: FLOPs and bytes of every op of the LLaMA
 * forward pass in closed form, predicted times, crossovers, table and JSON.
 *
 * Counts follow roofline.h and docs/roofline.md exactly; test_roofline.c
 * checks them against a hand-worked shape, so any change here must change
 * the document and the test together.
 *
 * Thread safety: reentrant (no global state).
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "kite.h"
#include "roofline/roofline.h"

double rl_dtype_bpe(uint32_t t) {
    const dtype_traits *tr = dtype_get(t);
    if (!tr || !tr->name || tr->block_size <= 0) return 0;
    return (double)tr->type_size / (double)tr->block_size;
}

double rl_atype_bytes(int atype) { return atype == RL_A_INT8 ? 1.0 : atype == RL_A_BF16 ? 2.0 : 4.0; }

double rl_atype_peak(const rl_hw *hw, int atype) {
    double p = atype == RL_A_INT8 ? hw->int8_gops : atype == RL_A_BF16 ? hw->bf16_gflops : hw->fp32_gflops;
    return (p > 0 ? p : hw->fp32_gflops) * 1e9;
}

const char *rl_atype_name(int atype) { return atype == RL_A_INT8 ? "int8" : atype == RL_A_BF16 ? "bf16" : "f32"; }

int rl_atype_from_name(const char *s) {
    if (!strcmp(s, "f32")) return RL_A_F32;
    if (!strcmp(s, "bf16")) return RL_A_BF16;
    if (!strcmp(s, "int8")) return RL_A_INT8;
    return -1;
}

bool rl_fit_line(double x1, double t1, double x2, double t2, double *c, double *rate) {
    *c = 0;
    *rate = 0;
    if (!(t2 > 0) || !(x2 > 0)) return false;
    if (x2 > x1 && t2 > t1 && t1 > 0) {
        double r = (x2 - x1) / (t2 - t1), c0 = t1 - x1 / r;
        if (c0 >= 0) {
            *c = c0;
            *rate = r;
            return true;
        }
    }
    *rate = x2 / t2;
    return true;
}

/* Accumulates one op: fills intensity and times (per instance). */
typedef struct builder {
    rl_phase_result *ph;
    const rl_hw *hw;
    double peak_mm, peak_attn, peak_elem, bw;
    double calls;      /* forward calls of the phase: launches per op */
    bool prefill;      /* the phase is prefill: matmuls run at the measured GEMM rate of their type */
} builder;

static void add_op(builder *b, const char *name, int64_t count, bool matmul, uint32_t wtype, double flops,
                   double w_bytes, double act_bytes, double kv_bytes) {
    KITE_ASSERT(b->ph->n_ops < RL_MAX_OPS);
    rl_op *o = &b->ph->ops[b->ph->n_ops++];
    memset(o, 0, sizeof *o);
    o->name = name;
    o->count = count;
    o->matmul = matmul;
    o->flops = flops;
    o->w_bytes = w_bytes;
    o->act_bytes = act_bytes;
    o->kv_bytes = kv_bytes;
    double bytes = w_bytes + act_bytes + kv_bytes;
    o->intensity = bytes > 0 ? flops / bytes : INFINITY;
    double wrate = b->bw;
    if (matmul && wtype < KITE_DTYPE_COUNT && b->hw->kern_gbs[wtype] > 0)
        wrate = fmin(wrate, b->hw->kern_gbs[wtype] * 1e9);
    bool attn = !strcmp(name, "attn_scores") || !strcmp(name, "softmax") || !strcmp(name, "attn_values");
    double peak_mm = b->peak_mm;
    if (matmul && b->prefill && wtype < KITE_DTYPE_COUNT && b->hw->gemm_gops[wtype] > 0)
        peak_mm = b->hw->gemm_gops[wtype] * 1e9; /* the measured prefill GEMM of the type and its layout */
    o->t_compute = flops / (matmul ? peak_mm : attn ? b->peak_attn : b->peak_elem);
    o->t_memory = w_bytes / wrate + (act_bytes + kv_bytes) / b->bw;
    o->compute_bound = o->t_compute > o->t_memory;
    /* ops that go to the thread pool (matmuls, the fused attention kernel)
     * pay a fixed cost per forward call: the measured intercept of the
     * kernel (kern_call_us of the weight type, attn_call_us), else the bare
     * pool round trip (launch_us).  The fused attention is charged once, on
     * attn_scores. */
    double call_us = 0;
    if (matmul)
        call_us = wtype < KITE_DTYPE_COUNT && b->hw->kern_call_us[wtype] > 0 ? b->hw->kern_call_us[wtype]
                                                                             : b->hw->launch_us;
    else if (!strcmp(name, "attn_scores"))
        call_us = b->hw->attn_call_us > 0 ? b->hw->attn_call_us : b->hw->launch_us;
    o->time = fmax(o->t_compute, o->t_memory) + call_us * 1e-6 * b->calls;
    b->ph->flops += flops * (double)count;
    b->ph->bytes += bytes * (double)count;
    b->ph->time += o->time * (double)count;
    b->ph->t_compute += o->t_compute * (double)count;
    b->ph->t_memory += o->t_memory * (double)count;
}

/* The ops of one phase.  T: tokens in the phase; wreads: times each weight is
 * read (forward calls); pairs: (query, key) pairs per head summed over the
 * phase; kvpos: K (and V) rows read per layer; rows: logits rows. */
static void build_phase(builder *b, const rl_shape *s, const rl_setting *st, double T, double wreads, double pairs,
                        double kvpos, double rows, double out_reads) {
    const double a = rl_atype_bytes(st->atype), wb = rl_dtype_bpe(s->wtype), ob = rl_dtype_bpe(s->out_type);
    const double kb = rl_dtype_bpe(st->kvtype);
    const double d = (double)s->n_embd, ff = (double)s->n_ff, hd = (double)s->head_dim;
    const double dq = (double)s->n_head * hd, dkv = (double)s->n_head_kv * hd, nh = (double)s->n_head;
    const double V = (double)s->n_vocab;
    const int64_t L = s->n_layer;
    const uint32_t w = s->wtype;
    /* gpt2: LayerNorm (8 FLOPs per element: mean, centre, square-add, scale, gain, bias; gain and bias
     * read) in place of RMSNorm (4; gain) */
    const double nf = s->gpt2 ? 8 : 4, nw = s->gpt2 ? 8 : 4;

    add_op(b, "embed", 1, false, w, s->gemma2 ? T * d : 0, T * d * wb, T * d * a, 0); /* gemma2: x sqrt(d) */
    if (s->gpt2) add_op(b, "pos_embd", 1, false, w, T * d, T * d * 4, 2 * T * d * a, 0); /* f32 rows, added */
    add_op(b, "attn_norm", L, false, w, nf * T * d, d * nw * wreads, 2 * T * d * a, 0);
    if (s->gpt2) { /* one fused q|k|v matrix, no RoPE */
        add_op(b, "qkv_proj", L, true, w, 2 * T * d * (dq + 2 * dkv), (dq + 2 * dkv) * d * wb * wreads,
               T * d * a + T * dq * a, 2 * T * dkv * kb);
    } else {
        add_op(b, "q_proj", L, true, w, 2 * T * d * dq, dq * d * wb * wreads, T * d * a + T * dq * a, 0);
        add_op(b, "k_proj", L, true, w, 2 * T * d * dkv, dkv * d * wb * wreads, T * d * a, T * dkv * kb);
        add_op(b, "v_proj", L, true, w, 2 * T * d * dkv, dkv * d * wb * wreads, T * d * a, T * dkv * kb);
        add_op(b, "rope", L, false, w, 3 * T * (dq + dkv), 0, 2 * T * dq * a, 2 * T * dkv * kb);
    }
    add_op(b, "attn_scores", L, false, w, 2 * pairs * nh * hd, 0, T * dq * a, kvpos * dkv * kb);
    add_op(b, "softmax", L, false, w, 5 * pairs * nh, 0, 0, 0);
    if (s->gemma2) add_op(b, "attn_softcap", L, false, w, 10 * pairs * nh, 0, 0, 0); /* c tanh(s / c) */
    add_op(b, "attn_values", L, false, w, 2 * pairs * nh * hd, 0, T * dq * a, kvpos * dkv * kb);
    add_op(b, "o_proj", L, true, w, 2 * T * dq * d, d * dq * wb * wreads, T * dq * a + T * d * a, 0);
    if (s->gemma2) /* post_attention_norm and post_ffw_norm */
        add_op(b, "post_norms", 2 * L, false, w, nf * T * d, d * nw * wreads, 2 * T * d * a, 0);
    add_op(b, "ffn_norm", L, false, w, nf * T * d, d * nw * wreads, 2 * T * d * a, 0);
    if (s->n_expert > 0) {
        /* MoE: the router scores every expert for every token; each token then runs its top k
         * experts.  A forward call of t = T / wreads tokens reads the weights of the distinct
         * experts its tokens chose, at most min(n_expert, t * k) of them (the bound: tokens
         * choosing different experts). */
        const double E = (double)s->n_expert, k = (double)s->n_expert_used;
        const double fe = (double)(s->n_ff_exp > 0 ? s->n_ff_exp : s->n_ff), rb = rl_dtype_bpe(s->router_type);
        const double distinct = fmin(E, T / wreads * k) * wreads;
        add_op(b, "ffn_router", L, true, s->router_type, 2 * T * d * E, E * d * (rb > 0 ? rb : wb) * wreads,
               T * d * a + T * E * 4, 0);
        add_op(b, "ffn_gate", L, true, w, 2 * T * k * d * fe, distinct * fe * d * wb, T * k * (d + fe) * a, 0);
        add_op(b, "ffn_up", L, true, w, 2 * T * k * d * fe, distinct * fe * d * wb, T * k * (d + fe) * a, 0);
        add_op(b, "ffn_act", L, false, w, 5 * T * k * fe, 0, 3 * T * k * fe * a, 0);
        add_op(b, "ffn_down", L, true, w, 2 * T * k * fe * d, distinct * d * fe * wb, T * k * (fe + d) * a, 0);
    } else if (s->gpt2) { /* up, GELU (8 FLOPs per element, tanh form), down: no gate */
        add_op(b, "ffn_up", L, true, w, 2 * T * d * ff, ff * d * wb * wreads, T * d * a + T * ff * a, 0);
        add_op(b, "ffn_act", L, false, w, 8 * T * ff, 0, 2 * T * ff * a, 0);
        add_op(b, "ffn_down", L, true, w, 2 * T * ff * d, d * ff * wb * wreads, T * ff * a + T * d * a, 0);
    } else {
        add_op(b, "ffn_gate", L, true, w, 2 * T * d * ff, ff * d * wb * wreads, T * d * a + T * ff * a, 0);
        add_op(b, "ffn_up", L, true, w, 2 * T * d * ff, ff * d * wb * wreads, T * d * a + T * ff * a, 0);
        /* SwiGLU 5 FLOPs per element; GeGLU (gemma2) the tanh GELU's 8 and the product */
        add_op(b, "ffn_act", L, false, w, (s->gemma2 ? 9 : 5) * T * ff, 0, 3 * T * ff * a, 0);
        add_op(b, "ffn_down", L, true, w, 2 * T * ff * d, d * ff * wb * wreads, T * ff * a + T * d * a, 0);
    }
    add_op(b, "out_norm", 1, false, w, nf * rows * d, d * nw * out_reads, 2 * rows * d * a, 0);
    add_op(b, "output", 1, true, s->out_type, 2 * rows * d * V, V * d * ob * out_reads, rows * d * a + rows * V * a,
           0);
    if (s->gemma2) add_op(b, "logit_softcap", 1, false, w, 10 * rows * V, 0, 2 * rows * V * a, 0);
}

unsigned rl_hw_suspect(const rl_hw *hw, double now) {
    if (hw->threads == 0 && hw->measured_at <= 0) return 0;
    unsigned f = 0;
    if (!(hw->measured_at > 0) || now - hw->measured_at > RL_MAX_AGE_S) f |= RL_HW_STALE;
    if (hw->avail_pct > 0 && hw->avail_pct < RL_AVAIL_MIN_PCT) f |= RL_HW_BUSY;
    return f;
}

int rl_predict(const rl_shape *s, const rl_hw *hw, const rl_setting *st, rl_result *r) {
    if (s->n_embd <= 0 || s->n_ff <= 0 || s->n_layer <= 0 || s->n_head <= 0 || s->n_head_kv <= 0 ||
        s->head_dim <= 0 || s->n_vocab <= 0 || rl_dtype_bpe(s->wtype) <= 0 || rl_dtype_bpe(s->out_type) <= 0)
        return err_set(KITE_E_ARG, "shape '%s': sizes must be positive and types known", s->name);
    if (s->n_expert < 0 || (s->n_expert > 0 && (s->n_expert_used <= 0 || s->n_expert_used > s->n_expert)))
        return err_set(KITE_E_ARG, "shape '%s': experts used must be in 1..n_expert", s->name);
    if (st->batch <= 0 || st->prompt <= 0 || st->gen < 0 || rl_dtype_bpe(st->kvtype) <= 0)
        return err_set(KITE_E_ARG, "batch and prompt must be positive, gen >= 0");
    if (hw->mem_bw_gbs <= 0 || hw->fp32_gflops <= 0)
        return err_set(KITE_E_ARG, "hardware '%s' needs mem_bw_gbs and fp32_gflops > 0", hw->name);
    memset(r, 0, sizeof *r);
    builder b = {.hw = hw, .bw = hw->mem_bw_gbs * 1e9, .peak_mm = rl_atype_peak(hw, st->atype),
                 .peak_attn = (hw->attn_gflops > 0 ? hw->attn_gflops : hw->fp32_gflops) * 1e9,
                 .peak_elem = (hw->elem_gflops > 0 ? hw->elem_gflops : hw->fp32_gflops) * 1e9};
    const double B = (double)st->batch, P = (double)st->prompt;

    /* prefill: each sequence in chunks of RL_CHUNK; a chunk ending at
     * position e reads K/V rows 0..e-1 once (fused attention). */
    /* windowed layers (sliding_window W on n_swa_layers of them): a query at position p sees
     * min(p + 1, W) keys, and a chunk [s, e) reads rows from s - W + 1 on; the attention ops
     * take the layers' mean, so that their count times it is the total */
    const double W = s->sliding_window > 0 && s->n_swa_layers > 0 ? (double)s->sliding_window : 0;
    const double f_swa = W > 0 ? (double)s->n_swa_layers / (double)s->n_layer : 0;
    double chunks = 0, kvpos = 0, kvpos_w = 0;
    for (int64_t e = 0; e < st->prompt;) {
        const int64_t s0 = e;
        e = e + RL_CHUNK < st->prompt ? e + RL_CHUNK : st->prompt;
        chunks += 1;
        kvpos += (double)e;
        kvpos_w += W > 0 ? fmin((double)e, (double)(e - s0) + W - 1) : (double)e;
    }
    const double pairs_full = P * (P + 1) / 2;
    const double pairs_w = W <= 0 || P <= W ? pairs_full : W * (W + 1) / 2 + (P - W) * W;
    const double pairs_pf = (1 - f_swa) * pairs_full + f_swa * pairs_w;
    kvpos = (1 - f_swa) * kvpos + f_swa * kvpos_w;
    b.ph = &r->ph[RL_PREFILL];
    b.calls = B * chunks;
    b.prefill = true;
    build_phase(&b, s, st, B * P, B * chunks, B * pairs_pf, B * kvpos, B, B);

    /* decode: one step of B sequences at context prompt + gen/2 (the new
     * token's key included). */
    double ctx = P + (double)(st->gen / 2) + 1;
    b.ph = &r->ph[RL_DECODE];
    b.calls = 1;
    b.prefill = false;
    const double ctx_mean = W > 0 ? (1 - f_swa) * ctx + f_swa * fmin(ctx, W) : ctx;
    build_phase(&b, s, st, B, 1, B * ctx_mean, B * ctx_mean, B, 1);

    for (int p = 0; p < 2; p++) r->ph[p].compute_bound = r->ph[p].t_compute > r->ph[p].t_memory;
    r->ttft_s = r->ph[RL_PREFILL].time;
    r->prefill_tok_s = B * P / r->ph[RL_PREFILL].time;
    r->decode_tok_s = B / r->ph[RL_DECODE].time;
    r->ridge = b.peak_mm / b.bw;
    return KITE_OK;
}

int64_t rl_decode_crossover(const rl_shape *sh, const rl_hw *hw, const rl_setting *st, const char *op, int64_t max_b) {
    rl_setting s2 = *st;
    rl_result r;
    for (int64_t bsz = 1; bsz <= max_b; bsz++) {
        s2.batch = bsz;
        if (rl_predict(sh, hw, &s2, &r) != KITE_OK) return 0;
        const rl_phase_result *ph = &r.ph[RL_DECODE];
        if (!op) {
            if (ph->compute_bound) return bsz;
            continue;
        }
        for (int i = 0; i < ph->n_ops; i++)
            if (!strcmp(ph->ops[i].name, op) && ph->ops[i].compute_bound) return bsz;
    }
    return 0;
}

int64_t rl_prefill_crossover(const rl_shape *sh, const rl_hw *hw, const rl_setting *st, int64_t lo, int64_t hi) {
    rl_setting s2 = *st;
    rl_result r;
    for (int64_t p = lo; p <= hi; p *= 2) {
        s2.prompt = p;
        if (rl_predict(sh, hw, &s2, &r) != KITE_OK) return 0;
        if (r.ph[RL_PREFILL].compute_bound) return p;
    }
    return 0;
}

static const char *phase_name(int p) { return p == RL_PREFILL ? "prefill" : "decode"; }

void rl_print_table(FILE *f, const rl_shape *sh, const rl_hw *hw, const rl_setting *st, const rl_result *r) {
    fprintf(f, "model %s: %" PRId64 " layers, n_embd %" PRId64 ", n_ff %" PRId64 ", heads %" PRId64 "/%" PRId64
               ", vocab %" PRId64 ", weights %s, output %s\n",
            sh->name, sh->n_layer, sh->n_embd, sh->n_ff, sh->n_head, sh->n_head_kv, sh->n_vocab,
            dtype_name(sh->wtype), dtype_name(sh->out_type));
    fprintf(f, "hardware %s: %.1f GB/s, fp32 %.1f GFLOP/s, bf16 %.1f, int8 %.1f GOP/s", hw->name, hw->mem_bw_gbs,
            hw->fp32_gflops, hw->bf16_gflops, hw->int8_gops);
    if (sh->wtype < KITE_DTYPE_COUNT && hw->kern_gbs[sh->wtype] > 0)
        fprintf(f, ", %s effective %.1f GB/s", dtype_name(sh->wtype), hw->kern_gbs[sh->wtype]);
    if (sh->wtype < KITE_DTYPE_COUNT && hw->kern_call_us[sh->wtype] > 0)
        fprintf(f, " + %.1f us/call", hw->kern_call_us[sh->wtype]);
    if (hw->attn_gflops > 0) fprintf(f, ", attention %.1f GFLOP/s", hw->attn_gflops);
    if (hw->attn_call_us > 0) fprintf(f, " + %.1f us/call", hw->attn_call_us);
    fprintf(f, "\nsetting: batch %" PRId64 ", prompt %" PRId64 ", gen %" PRId64 ", atype %s, kv %s; ridge %.2f FLOP/B\n",
            st->batch, st->prompt, st->gen, rl_atype_name(st->atype), dtype_name(st->kvtype), r->ridge);
    for (int p = 0; p < 2; p++) {
        const rl_phase_result *ph = &r->ph[p];
        fprintf(f, "\n%s (per instance; x count for the model)\n", phase_name(p));
        fprintf(f, "%-12s %5s %11s %11s %11s %11s %9s %-7s %10s %8s\n", "op", "count", "MFLOP", "weight MB",
                "act MB", "kv MB", "FLOP/B", "bound", "time us", "model %");
        for (int i = 0; i < ph->n_ops; i++) {
            const rl_op *o = &ph->ops[i];
            char ai[32];
            if (isinf(o->intensity))
                snprintf(ai, sizeof ai, "inf");
            else
                snprintf(ai, sizeof ai, "%.2f", o->intensity);
            fprintf(f, "%-12s %5" PRId64 " %11.3f %11.3f %11.3f %11.3f %9s %-7s %10.2f %7.1f%%\n", o->name, o->count,
                    o->flops / 1e6, o->w_bytes / 1e6, o->act_bytes / 1e6, o->kv_bytes / 1e6, ai,
                    o->compute_bound ? "compute" : "memory", o->time * 1e6,
                    100.0 * o->time * (double)o->count / ph->time);
        }
        fprintf(f, "total: %.3f GFLOP, %.3f GB, compute %.3f ms vs memory %.3f ms -> %s-bound, %.3f ms\n",
                ph->flops / 1e9, ph->bytes / 1e9, ph->t_compute * 1e3, ph->t_memory * 1e3,
                ph->compute_bound ? "compute" : "memory", ph->time * 1e3);
    }
    fprintf(f, "\nTTFT %.4f s, prefill %.2f tok/s, decode %.2f tok/s\n", r->ttft_s, r->prefill_tok_s, r->decode_tok_s);
}

/* "", "stale", "busy" or "stale,busy" for rl_hw_suspect's flags. */
static const char *suspect_name(unsigned f) {
    return f == (RL_HW_STALE | RL_HW_BUSY) ? "stale,busy" : f == RL_HW_STALE ? "stale" : f == RL_HW_BUSY ? "busy" : "";
}

static void json_num(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fprintf(f, "null");
}

void rl_print_json(FILE *f, const rl_shape *sh, const rl_hw *hw, const rl_setting *st, const rl_result *r) {
    fprintf(f, "{\"model\": \"%s\", \"hw\": \"", sh->name);
    for (const char *c = hw->name; *c; c++)
        if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20) fputc(*c, f);
    fprintf(f, "\", \"hw_measured_at\": %.0f, \"hw_avail_pct\": %.1f, \"hw_suspect\": \"%s\"", hw->measured_at,
            hw->avail_pct, suspect_name(rl_hw_suspect(hw, (double)time(NULL))));
    fprintf(f, ", \"batch\": %" PRId64 ", \"prompt\": %" PRId64 ", \"gen\": %" PRId64
               ", \"wtype\": \"%s\", \"atype\": \"%s\", \"kvtype\": \"%s\", \"ridge\": ",
            st->batch, st->prompt, st->gen, dtype_name(sh->wtype), rl_atype_name(st->atype), dtype_name(st->kvtype));
    json_num(f, r->ridge);
    fprintf(f, ", \"prefill_tok_s\": ");
    json_num(f, r->prefill_tok_s);
    fprintf(f, ", \"decode_tok_s\": ");
    json_num(f, r->decode_tok_s);
    fprintf(f, ", \"ttft_s\": ");
    json_num(f, r->ttft_s);
    fprintf(f, ", \"ops\": [");
    bool first = true;
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < r->ph[p].n_ops; i++) {
            const rl_op *o = &r->ph[p].ops[i];
            fprintf(f, "%s{\"phase\": \"%s\", \"name\": \"%s\", \"count\": %" PRId64 ", \"flops\": ",
                    first ? "" : ", ", phase_name(p), o->name, o->count);
            json_num(f, o->flops);
            fprintf(f, ", \"w_bytes\": ");
            json_num(f, o->w_bytes);
            fprintf(f, ", \"act_bytes\": ");
            json_num(f, o->act_bytes);
            fprintf(f, ", \"kv_bytes\": ");
            json_num(f, o->kv_bytes);
            fprintf(f, ", \"intensity\": ");
            json_num(f, o->intensity);
            fprintf(f, ", \"bound\": \"%s\", \"time_s\": ", o->compute_bound ? "compute" : "memory");
            json_num(f, o->time);
            fprintf(f, "}");
            first = false;
        }
    fprintf(f, "]}\n");
}
