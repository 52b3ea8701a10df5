/*
 * batch.c - the throughput-mode cost model (`kite batch`, issue 27 item 4;
 * roofline.h, docs/offload.md): predicted time of many prompts run B at a
 * time, with the weights that do not fit the memory budget streamed from
 * disk once per forward pass.
 *
 * MODEL
 *   The prompts run in waves of B (ceil(N / B) of them; the engine's
 *   continuous batching refills freed places, which for prompts of equal
 *   lengths is the same).  A wave is its prefill, then `gen` decode steps of
 *   B sequences.  Compute comes from rl_predict (weights from memory): the
 *   prefill of B prompts, and one decode step of B sequences at the mean
 *   context.  Streaming costs stream_bytes / disk_gbs per forward pass; the
 *   I/O workers read ahead while the resident layers compute, so a pass
 *   takes the larger of the two (FlexGen's overlap), and a prefill takes
 *   ceil(B * prompt / RL_CHUNK) passes.
 */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "roofline/roofline.h"

int rl_batch_predict(const rl_shape *sh, const rl_hw *hw, const rl_setting *base, const rl_batch_in *in, int64_t block,
                     rl_batch_out *out) {
    if (block < 1 || in->n_seq < 1 || in->prompt < 1 || in->gen < 1 || (in->stream_bytes > 0 && !(in->disk_gbs > 0)))
        return err_set(KITE_E_ARG, "batch prediction: block %lld, %lld prompts of %lld tokens, %lld generated, "
                                   "%.0f bytes streamed at %.2f GB/s",
                       (long long)block, (long long)in->n_seq, (long long)in->prompt, (long long)in->gen,
                       in->stream_bytes, in->disk_gbs);
    const int64_t b = block < in->n_seq ? block : in->n_seq; /* a wave never holds more than the prompts */
    rl_setting st = *base;
    st.batch = b;
    st.prompt = in->prompt;
    st.gen = in->gen;
    rl_result r;
    const int rc = rl_predict(sh, hw, &st, &r);
    if (rc) return rc;
    const double t_pass = in->stream_bytes > 0 ? in->stream_bytes / (in->disk_gbs * 1e9) : 0.0;
    const double n_pf = ceil((double)(b * in->prompt) / RL_CHUNK);
    memset(out, 0, sizeof *out);
    out->block = b;
    out->waves = (in->n_seq + b - 1) / b;
    out->t_prefill = fmax(r.ttft_s, n_pf * t_pass);
    out->t_step = fmax(r.ph[RL_DECODE].time, t_pass);
    out->disk_bound = t_pass > r.ph[RL_DECODE].time;
    const double t = (double)out->waves * (out->t_prefill + (double)in->gen * out->t_step);
    out->time_s = t;
    out->tok_s = t > 0 ? (double)(in->n_seq * in->gen) / t : 0.0;
    return KITE_OK;
}

int rl_batch_choose(const rl_shape *sh, const rl_hw *hw, const rl_setting *base, const rl_batch_in *in,
                    int64_t max_block, rl_batch_out *best) {
    const int64_t hi = max_block < in->n_seq ? max_block : in->n_seq;
    bool have = false;
    /* powers of two, then hi itself (all prompts in one wave when they fit) */
    for (int64_t b = 1;; b *= 2) {
        if (b > hi) b = hi;
        rl_batch_out o;
        const int rc = rl_batch_predict(sh, hw, base, in, b, &o);
        if (rc) return rc;
        /* within 2% the larger block wins: past the ridge the roofline's compute term is flat in B,
         * where measured throughput kept rising with B (each weight read serving more rows of a GEMM;
         * BENCHMARKS.md, offloading), and the caller's max_block already bounds the KV memory */
        if (!have || o.tok_s >= best->tok_s * 0.98) {
            *best = o;
            have = true;
        }
        if (b == hi) break;
    }
    return KITE_OK;
}
