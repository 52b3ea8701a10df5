/*
 * synth.c - deterministic random-weight GGUF models of real shapes (see synth.h).
 *
 * Flow: check the parameters -> build the vocabulary and metadata in a
 * gguf_writer -> register every tensor with a fill callback -> write.  The
 * callback generates rows on a thread pool (rows split statically over the
 * threads, each row from its own PRNG stream) and converts them with the
 * dtype's from_float into the writer's chunk buffer.
 */
#include "roofline/synth.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"

/* ---- shapes ----------------------------------------------------------------- */

static const synth_shape shapes[] = {
    /* name              n_embd  n_ff   layers heads kv   vocab   ctx    rope base   rms eps */
    {"tinyllama-1.1b", 2048, 5632, 22, 32, 4, 32000, 2048, 10000.0f, 1e-5f, .arch = NULL},
    {"llama2-7b", 4096, 11008, 32, 32, 32, 32000, 4096, 10000.0f, 1e-5f, .arch = NULL},
    {"llama3-8b", 4096, 14336, 32, 32, 8, 128256, 8192, 500000.0f, 1e-5f, .arch = NULL},
    {"mistral-7b", 4096, 14336, 32, 32, 8, 32000, 32768, 1000000.0f, 1e-5f, .arch = NULL},
    {"stories260k", 64, 172, 5, 8, 4, 512, 512, 10000.0f, 1e-5f, .arch = NULL},
    /* other architectures and features: arch, head_dim, experts, used, n_ff_exp, window, llama3 ctx, tied */
    {"llama3.2-1b", 2048, 8192, 16, 32, 8, 128256, 131072, 500000.0f, 1e-5f, .rope_llama3_ctx = 8192, .tied = 1},
    {"mistral-7b-v0.1", 4096, 14336, 32, 32, 8, 32000, 32768, 10000.0f, 1e-5f, .sliding_window = 4096},
    {"mixtral-8x7b", 4096, 14336, 32, 32, 8, 32000, 32768, 1000000.0f, 1e-5f, .n_expert = 8, .n_expert_used = 2},
    {"qwen2-0.5b", 896, 4864, 24, 14, 2, 151936, 32768, 1000000.0f, 1e-6f, .arch = "qwen2", .tied = 1},
    {"qwen3-0.6b", 1024, 3072, 28, 16, 8, 151936, 40960, 1000000.0f, 1e-6f, .arch = "qwen3", .head_dim = 128,
     .tied = 1},
    {"qwen3moe-30b-a3b", 2048, 6144, 48, 32, 4, 151936, 40960, 1000000.0f, 1e-6f, .arch = "qwen3moe",
     .head_dim = 128, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768},
    {"gpt2-124m", 768, 3072, 12, 12, 12, 50257, 1024, 10000.0f, 1e-5f, .arch = "gpt2"},
    {"phi-3-mini", 3072, 8192, 32, 32, 32, 32064, 4096, 10000.0f, 1e-5f, .arch = "phi3", .sliding_window = 2047},
    {"phi-3-mini-128k", 3072, 8192, 32, 32, 32, 32064, 131072, 10000.0f, 1e-5f, .arch = "phi3",
     .sliding_window = 262144, .longrope_ctx = 4096},
    {"gemma-2-2b", 2304, 9216, 26, 8, 4, 256000, 8192, 10000.0f, 1e-6f, .arch = "gemma2", .head_dim = 256,
     .sliding_window = 4096, .tied = 1, .attn_softcap = 50.0f, .final_softcap = 30.0f},
    /* tiny test models (tests/unit/test_arch.c): 2 layers, 64 wide, 512 tokens */
    {"tiny-llama3", 64, 128, 2, 4, 2, 512, 128, 500000.0f, 1e-5f, .rope_llama3_ctx = 64},
    {"tiny-mistral", 64, 128, 2, 4, 2, 512, 128, 10000.0f, 1e-5f, .sliding_window = 8},
    /* rows of 256 and 768: every matrix fits the k-quants' 256-blocks (no fallback types) */
    {"tiny-k256", 256, 768, 2, 4, 2, 512, 256, 10000.0f, 1e-5f, .arch = NULL},
    /* interleaved local/global attention (layers 0, 2 windowed; 1, 3 global), head_dim 32 */
    {"tiny-swa", 64, 128, 4, 2, 1, 512, 128, 10000.0f, 1e-5f, .sliding_window = 4, .swa_period = 2},
    {"tiny-mixtral", 64, 96, 2, 4, 2, 512, 128, 1000000.0f, 1e-5f, .n_expert = 4, .n_expert_used = 2},
    {"tiny-qwen2", 64, 128, 2, 4, 2, 512, 128, 1000000.0f, 1e-6f, .arch = "qwen2"},
    {"tiny-qwen3", 64, 128, 2, 4, 2, 512, 128, 1000000.0f, 1e-6f, .arch = "qwen3", .head_dim = 32},
    {"tiny-qwen3moe", 64, 128, 2, 4, 2, 512, 128, 1000000.0f, 1e-6f, .arch = "qwen3moe", .head_dim = 32,
     .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 32},
    {"tiny-gpt2", 64, 256, 2, 4, 4, 512, 128, 10000.0f, 1e-5f, .arch = "gpt2"},
    /* GQA, a window of 16 and LongRoPE from 32 positions: every phi3 path in a tiny model */
    {"tiny-phi3", 64, 128, 2, 4, 2, 512, 128, 10000.0f, 1e-5f, .arch = "phi3", .sliding_window = 16,
     .longrope_ctx = 32},
    /* 26 layers, as llama.cpp build 4748 knows Gemma 2 only by its sizes (26, 42, 46 layers) and aborts
     * on others; head_dim 32 (not n_embd / n_head), window 8 on the even layers, soft caps that bite on
     * these weights (removing the attention cap moves the logits by 2.4% of their range, the final one
     * by 52%: tests/unit/test_arch.c) */
    {"tiny-gemma2", 64, 128, 26, 4, 2, 512, 128, 10000.0f, 1e-6f, .arch = "gemma2", .head_dim = 32,
     .sliding_window = 8, .tied = 1, .attn_softcap = 4.0f, .final_softcap = 30.0f},
};

const synth_shape *synth_shape_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (strcmp(shapes[i].name, name) == 0) return &shapes[i];
    return NULL;
}

const char *synth_shape_list(void) {
    return "tinyllama-1.1b|llama2-7b|llama3-8b|llama3.2-1b|mistral-7b|mistral-7b-v0.1|mixtral-8x7b|qwen2-0.5b|"
           "qwen3-0.6b|qwen3moe-30b-a3b|gpt2-124m|phi-3-mini|phi-3-mini-128k|gemma-2-2b|stories260k|"
           "tiny-llama3|tiny-mistral|tiny-k256|tiny-mixtral|tiny-qwen2|tiny-qwen3|tiny-qwen3moe|tiny-gpt2|tiny-phi3|"
           "tiny-gemma2";
}

static const char *shape_arch(const synth_shape *s) { return s->arch ? s->arch : "llama"; }
static int32_t shape_head_dim(const synth_shape *s) { return s->head_dim > 0 ? s->head_dim : s->n_embd / s->n_head; }

/* Llama 3 rope frequency factors for head size hd (llama.cpp's converter:
 * factor 8, low_freq_factor 1, high_freq_factor 4, original context ctx0). */
static void llama3_factors(const synth_shape *s, float *out) {
    const int32_t hd = shape_head_dim(s);
    const double factor = 8.0, low = 1.0, high = 4.0, ctx0 = (double)s->rope_llama3_ctx;
    const double low_wl = ctx0 / low, high_wl = ctx0 / high;
    for (int32_t i = 0; i < hd / 2; i++) {
        const double freq = 1.0 / pow((double)s->rope_base, (double)(2 * i) / (double)hd);
        const double wl = 2.0 * M_PI / freq;
        double f;
        if (wl < high_wl)
            f = 1.0;
        else if (wl > low_wl)
            f = factor;
        else {
            const double smooth = (ctx0 / wl - low) / (high - low);
            f = 1.0 / ((1.0 - smooth) / factor + smooth);
        }
        out[i] = (float)f;
    }
}

/* Made-up Phi-3 LongRoPE factors (real ones come from config.json): a smooth
 * ramp over the pairs, 1 .. 1.25 for short and 1 .. 8 for long, so that the
 * choice between them changes every logit. */
static void longrope_factors(const synth_shape *s, bool is_long, float *out) {
    const int32_t half = shape_head_dim(s) / 2;
    for (int32_t i = 0; i < half; i++) {
        const double x = half > 1 ? (double)i / (double)(half - 1) : 0.0;
        out[i] = (float)(is_long ? 1.0 + 7.0 * x * x : 1.0 + 0.25 * x);
    }
}

/* llama.cpp's converter's attn_factor for LongRoPE: sqrt(1 + ln(scale) / ln(orig)). */
static float longrope_attn_factor(const synth_shape *s) {
    const double scale = (double)s->n_ctx / (double)s->longrope_ctx;
    return scale > 1.0 ? (float)sqrt(1.0 + log(scale) / log((double)s->longrope_ctx)) : 1.0f;
}

/* ---- random numbers ----------------------------------------------------------- */

#define GOLDEN 0x9e3779b97f4a7c15ull

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Start of the stream of row `row` of tensor `ti`: a function of the three
 * numbers only, so rows can be generated in any order by any thread. */
static uint64_t row_stream(uint64_t seed, uint32_t ti, int64_t row) {
    return mix64(mix64(seed ^ GOLDEN) ^ mix64(((uint64_t)ti << 40) ^ (uint64_t)row ^ 0x5851f42d4c957f2dull));
}

/* Next value of a splitmix64 stream mapped to a bell-shaped unit-variance
 * number: the sum of the four 16-bit quarters of one draw (Irwin-Hall, 4
 * terms), centred and scaled; range +-2*sqrt(3). */
static float next_normalish(uint64_t *s) {
    uint64_t z = mix64(*s += GOLDEN);
    int64_t a = (int64_t)(z & 0xffff) + (int64_t)((z >> 16) & 0xffff) + (int64_t)((z >> 32) & 0xffff) +
                (int64_t)(z >> 48);
    /* mean 4 * 65535 / 2; std 65536 / sqrt(3) (variance of a 16-bit uniform ~ 65536^2 / 12, times 4) */
    return (float)(a - 131070) * (float)(1.7320508075688772 / 65536.0);
}

/* ---- tensor table ------------------------------------------------------------- */

typedef struct synth_job synth_job;

typedef struct synth_tensor {
    char name[ARCH_NAME_MAX];
    int role;          /* enum tensor_role */
    uint32_t type;     /* enum kite_dtype written: `wanted` after quant_fallback */
    uint32_t wanted;   /* what the type / mix asks for (== type unless the row length does not fit its block) */
    uint32_t index;    /* position in the file: part of the PRNG seed */
    int64_t ne[3];     /* ne[0] = row length (fan_in), ne[1] = rows, ne[2] = experts (1 otherwise) */
    float mean, std;   /* value distribution */
    const float *values; /* fixed values of a 1-D tensor instead (rope_freqs), or NULL */
    size_t row_bytes;
    synth_job *job;
} synth_tensor;

struct synth_job {
    uint64_t seed;
    threadpool *tp;
    float *scratch;    /* [n_threads][scratch_n] float rows */
    int64_t scratch_n; /* longest row */
    synth_tensor *t;   /* [n_t] */
    size_t n_t;
    float rope_freqs[1024]; /* Llama 3 factors (head_dim / 2 <= 1024) */
    float rope_long[1024], rope_short[1024]; /* Phi-3 LongRoPE factors */
};

/* One chunk of rows being filled (argument of the pool task). */
typedef struct fill_task {
    const synth_tensor *t;
    int64_t row0, n_rows;
    uint8_t *dst;
} fill_task;

static void fill_task_run(void *arg, int ith, int nth) {
    const fill_task *f = arg;
    const synth_tensor *t = f->t;
    const dtype_traits *tr = dtype_get(t->type);
    float *row = t->job->scratch + (size_t)ith * (size_t)t->job->scratch_n;
    long lo, hi;
    tp_split((long)f->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        uint64_t s = row_stream(t->job->seed, t->index, f->row0 + r);
        for (int64_t i = 0; i < t->ne[0]; i++) row[i] = t->values ? t->values[i] : t->mean + t->std * next_normalish(&s);
        tr->from_float(row, f->dst + (size_t)r * t->row_bytes, t->ne[0]);
    }
}

static int fill_rows(void *user, int64_t row0, int64_t n_rows, void *dst) {
    const synth_tensor *t = user;
    fill_task f = {.t = t, .row0 = row0, .n_rows = n_rows, .dst = dst};
    tp_run(t->job->tp, fill_task_run, &f);
    return KITE_OK;
}

/* llama.cpp's "use more bits" layer rule of its _M mixes. */
static bool more_bits(int layer, int n_layer) {
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

/* Type of a matrix of a role (model/arch.h) under the parameters' mix. */
static uint32_t matrix_type(const synth_params *p, int role, int layer) {
    if (p->mix != SYNTH_MIX_Q4_K_M && p->mix != SYNTH_MIX_Q5_K_M) return p->type;
    if (role == TR_OUTPUT) return KITE_DTYPE_Q6_K;
    if ((role == TR_ATTN_V || role == TR_FFN_DOWN) && more_bits(layer, p->shape.n_layer)) return KITE_DTYPE_Q6_K;
    return p->mix == SYNTH_MIX_Q5_K_M ? KITE_DTYPE_Q5_K : KITE_DTYPE_Q4_K;
}

/* Table row of the shape's architecture (an unknown one, refused by
 * synth_check, is counted as llama). */
static const arch_info *shape_info(const synth_shape *s) {
    const arch_info *ai = arch_find(shape_arch(s));
    return ai ? ai : arch_find("llama");
}

/* Builds the tensor table in file order (llama.cpp's: embeddings, then the
 * blocks, then the output norm and classifier), with the tensors the
 * architecture's row names.  Returns the count; t may be NULL to count only. */
static size_t build_tensors(const synth_params *p, synth_tensor *t) {
    const synth_shape *s = &p->shape;
    const arch_info *ai = shape_info(s);
    const bool biases = ai->biases;
    const int64_t E = s->n_embd, F = s->n_ff, V = s->n_vocab, HD = shape_head_dim(s);
    const int64_t Q = HD * s->n_head, KV = HD * s->n_head_kv, NE = s->n_expert;
    const int64_t FE = s->n_ff_exp > 0 ? s->n_ff_exp : F;
    size_t n = 0;
#define ADD3(type_, ne0_, ne1_, ne2_, mean_, std_, role_, layer_)                                                  \
    do {                                                                                                           \
        if (t) {                                                                                                   \
            synth_tensor *x = &t[n];                                                                               \
            const char *name_ = arch_tensor_name(ai, (role_), (layer_), x->name, sizeof x->name);                 \
            KITE_ASSERT(name_); /* the row has the role */                                                         \
            x->role = (role_);                                                                                     \
            x->wanted = (type_);                                                                                   \
            x->type = quant_fallback(x->wanted, (ne0_)); /* kite quantize's rule for rows a block does not fit */  \
            x->index = (uint32_t)n;                                                                                \
            x->ne[0] = (ne0_);                                                                                     \
            x->ne[1] = (ne1_);                                                                                     \
            x->ne[2] = (ne2_);                                                                                     \
            x->mean = (mean_);                                                                                     \
            x->std = (std_);                                                                                       \
            x->values = NULL;                                                                                      \
        }                                                                                                          \
        n++;                                                                                                       \
    } while (0)
#define ADD(type_, ne0_, ne1_, mean_, std_, role_, layer_) ADD3(type_, ne0_, ne1_, 1, mean_, std_, role_, layer_)
#define MAT(role, layer, ne0_, ne1_) ADD(matrix_type(p, role, layer), ne0_, ne1_, 0.0f, (float)(1.0 / sqrt((double)(ne0_))), role, layer)
#define EXPS(role, layer, ne0_, ne1_) ADD3(matrix_type(p, role, layer), ne0_, ne1_, NE, 0.0f, (float)(1.0 / sqrt((double)(ne0_))), role, layer)
#define NORM(role, layer) ADD(KITE_DTYPE_F32, E, 1, 1.0f, 0.02f, role, layer)
#define VEC(ne0_, mean_, std_, role, layer) ADD(KITE_DTYPE_F32, ne0_, 1, mean_, std_, role, layer)
    ADD(matrix_type(p, TR_TOKEN_EMBD, -1), E, V, 0.0f, 1.0f, TR_TOKEN_EMBD, -1);
    if (ai->pos_embd) ADD(KITE_DTYPE_F32, E, s->n_ctx, 0.0f, 0.5f, TR_POS_EMBD, -1);
    if (s->rope_llama3_ctx > 0) VEC(HD / 2, 1.0f, 0.0f, TR_ROPE_FREQS, -1); /* values: synth_write */
    if (s->longrope_ctx > 0) {
        VEC(HD / 2, 1.0f, 0.0f, TR_ROPE_FACTORS_LONG, -1);
        VEC(HD / 2, 1.0f, 0.0f, TR_ROPE_FACTORS_SHORT, -1);
    }
    for (int l = 0; l < s->n_layer; l++) {
        NORM(TR_ATTN_NORM, l);
        if (biases) VEC(E, 0.0f, 0.1f, TR_ATTN_NORM_B, l);
        if (ai->fused_qkv) {
            MAT(TR_ATTN_QKV, l, E, Q + 2 * KV);
            if (biases) VEC(Q + 2 * KV, 0.0f, 0.1f, TR_ATTN_QKV_B, l);
        } else {
            MAT(TR_ATTN_Q, l, E, Q);
            MAT(TR_ATTN_K, l, E, KV);
            MAT(TR_ATTN_V, l, E, KV);
        }
        if (ai->qkv_bias) {
            VEC(Q, 0.0f, 0.1f, TR_ATTN_Q_B, l);
            VEC(KV, 0.0f, 0.1f, TR_ATTN_K_B, l);
            VEC(KV, 0.0f, 0.1f, TR_ATTN_V_B, l);
        }
        if (ai->qk_norm) {
            VEC(HD, 1.0f, 0.1f, TR_ATTN_Q_NORM, l);
            VEC(HD, 1.0f, 0.1f, TR_ATTN_K_NORM, l);
        }
        MAT(TR_ATTN_OUT, l, Q, E);
        if (biases) VEC(E, 0.0f, 0.1f, TR_ATTN_OUT_B, l);
        if (ai->gemma2) NORM(TR_ATTN_POST_NORM, l);
        NORM(TR_FFN_NORM, l);
        if (biases) VEC(E, 0.0f, 0.1f, TR_FFN_NORM_B, l);
        if (NE > 0) {
            MAT(TR_FFN_GATE_INP, l, E, NE);
            EXPS(TR_FFN_GATE_EXPS, l, E, FE);
            EXPS(TR_FFN_UP_EXPS, l, E, FE);
            EXPS(TR_FFN_DOWN_EXPS, l, FE, E);
        } else {
            if (arch_has_role(ai, TR_FFN_GATE)) MAT(TR_FFN_GATE, l, E, F); /* SwiGLU; gpt2's GELU FFN has none */
            MAT(TR_FFN_UP, l, E, ai->fused_gate_up ? 2 * F : F);           /* phi3: gate rows, then up rows */
            if (biases) VEC(F, 0.0f, 0.1f, TR_FFN_UP_B, l);
            MAT(TR_FFN_DOWN, l, F, E);
            if (biases) VEC(E, 0.0f, 0.1f, TR_FFN_DOWN_B, l);
        }
        if (ai->gemma2) NORM(TR_FFN_POST_NORM, l);
    }
    NORM(TR_OUTPUT_NORM, -1);
    if (biases) VEC(E, 0.0f, 0.1f, TR_OUTPUT_NORM_B, -1);
    if (!s->tied) MAT(TR_OUTPUT, -1, E, V);
#undef VEC
#undef NORM
#undef EXPS
#undef MAT
#undef ADD
#undef ADD3
    return n;
}

/* ---- checks ----------------------------------------------------------------- */

static int check_type(uint32_t type, int64_t ne0, const char *what) {
    const dtype_traits *tr = dtype_get(type);
    if (!tr || !tr->name) return err_set(KITE_E_ARG, "unknown weight type id %" PRIu32, type);
    if (!tr->from_float)
        return err_set(KITE_E_UNSUPPORTED, "type %s has no reference quantizer (from_float) yet", tr->name);
    if (ne0 % tr->block_size != 0)
        return err_set(KITE_E_ARG, "%s row length %" PRId64 " is not a multiple of the %s block size %" PRId32,
                       what, ne0, tr->name, tr->block_size);
    return KITE_OK;
}

int synth_check(const synth_params *p) {
    if (!p) return err_set(KITE_E_ARG, "synth_check: NULL parameters");
    const synth_shape *s = &p->shape;
    if (s->n_embd <= 0 || s->n_ff <= 0 || s->n_layer <= 0 || s->n_head <= 0 || s->n_head_kv <= 0 ||
        s->n_ctx <= 0 || s->n_layer > 4096 || s->n_embd > (1 << 20) || s->n_ff > (1 << 22) || s->n_vocab > (1 << 24))
        return err_set(KITE_E_ARG, "shape '%s': sizes out of range", s->name ? s->name : "?");
    if (s->n_vocab < 259)
        return err_set(KITE_E_ARG, "n_vocab %d is below 259 (3 special + 256 byte tokens)", s->n_vocab);
    if ((s->head_dim <= 0 && s->n_embd % s->n_head != 0) || s->n_head % s->n_head_kv != 0 ||
        shape_head_dim(s) % 2 != 0 || shape_head_dim(s) / 2 > 1024)
        return err_set(KITE_E_ARG, "n_embd %d, n_head %d, n_head_kv %d: heads must divide evenly (even head size)",
                       s->n_embd, s->n_head, s->n_head_kv);
    if (s->n_expert < 0 || s->n_expert > 4096 || (s->n_expert > 0 && (s->n_expert_used < 1 ||
        s->n_expert_used > s->n_expert)) || s->n_ff_exp < 0 || s->n_ff_exp > (1 << 22) || s->sliding_window < 0 ||
        s->longrope_ctx < 0 || s->longrope_ctx == 1 || s->swa_period < 0)
        return err_set(KITE_E_ARG, "shape '%s': expert counts (%d, top %d) or window out of range",
                       s->name ? s->name : "?", s->n_expert, s->n_expert_used);
    const char *arch = shape_arch(s);
    const arch_info *ai = arch_find(arch);
    /* "mistral" is llama's graph under another name: synth writes Mistral shapes as llama, as their GGUFs are */
    if (!ai || !strcmp(arch, "mistral")) return err_set(KITE_E_ARG, "unknown architecture '%s'", arch);
    if (ai->gemma2 && !(s->attn_softcap > 0.0f && s->final_softcap > 0.0f))
        return err_set(KITE_E_ARG, "shape '%s': gemma2 needs both soft caps > 0", s->name ? s->name : "?");
    if ((ai->moe_required && s->n_expert == 0) || (s->n_expert > 0 && !arch_has_role(ai, TR_FFN_GATE_INP)))
        return err_set(KITE_E_ARG, "architecture '%s' with %d experts is not a kite model", arch, s->n_expert);
    size_t n = build_tensors(p, NULL);
    synth_tensor *t = malloc(n * sizeof *t);
    if (!t) return err_set(KITE_E_NOMEM, "out of memory");
    build_tensors(p, t);
    int rc = KITE_OK;
    for (size_t i = 0; i < n && !rc; i++) rc = check_type(t[i].type, t[i].ne[0], t[i].name);
    free(t);
    return rc;
}

int synth_fallbacks(const synth_params *p, char *buf, size_t cap) {
    if (cap) buf[0] = '\0';
    size_t n = build_tensors(p, NULL);
    synth_tensor *t = malloc(n * sizeof *t);
    if (!t) return -1;
    build_tensors(p, t);
    /* one group per (role, wanted, type, row length), in file order of first appearance */
    int n_fell = 0;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i].type == t[i].wanted) continue;
        n_fell++;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = t[j].type != t[j].wanted && t[j].role == t[i].role && t[j].wanted == t[i].wanted &&
                   t[j].type == t[i].type && t[j].ne[0] == t[i].ne[0];
        if (seen) continue;
        int count = 0;
        for (size_t j = i; j < n; j++)
            count += t[j].role == t[i].role && t[j].wanted == t[i].wanted && t[j].type == t[i].type &&
                     t[j].ne[0] == t[i].ne[0];
        char times[16] = "";
        if (count > 1) snprintf(times, sizeof times, " x%d", count);
        if (len < cap) {
            int w = snprintf(buf + len, cap - len, "%s%s %s->%s (row %" PRId64 ")%s", len ? ", " : "",
                             arch_role_stem(t[i].role), dtype_name(t[i].wanted), dtype_name(t[i].type), t[i].ne[0],
                             times);
            len = w < 0 ? cap : len + (size_t)w;
        }
    }
    free(t);
    return n_fell;
}

uint64_t synth_data_bytes(const synth_params *p) {
    size_t n = build_tensors(p, NULL);
    synth_tensor *t = malloc(n * sizeof *t);
    if (!t) return 0;
    build_tensors(p, t);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += (uint64_t)dtype_row_size(t[i].type, t[i].ne[0]) * (uint64_t)t[i].ne[1] * (uint64_t)t[i].ne[2];
    free(t);
    return total;
}

/* ---- vocabulary --------------------------------------------------------------- */

/* SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte-fallback
 * tokens <0x00>..<0xFF>, the bare word-start marker U+2581, then synthetic
 * pieces.  Piece k (from 0, id 260 + k) spells k / 2 in bijective base 26 ("a".."z", "aa", ...), with the word-start
 * marker U+2581 in front when k is even, so all pieces are distinct.
 * Scores decrease with the id (earlier merges first). */
typedef struct synth_vocab {
    char **tok;     /* [n] owned strings */
    float *score;   /* [n] */
    int32_t *type;  /* [n] llama.cpp token types: 1 normal, 2 unknown, 3 control, 6 byte */
    int32_t n;
} synth_vocab;

static void vocab_free(synth_vocab *v) {
    if (v->tok)
        for (int32_t i = 0; i < v->n; i++) free(v->tok[i]);
    free(v->tok);
    free(v->score);
    free(v->type);
}

/* Phi-3's added tokens in their order (ids 32000..32010 of the real
 * vocabulary): the chat template needs them, and llama.cpp sets attributes
 * on <|endoftext|> by name for any model named phi3. */
static const char *const phi3_added[] = {"<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>",
                                         "<|placeholder3|>", "<|placeholder4|>", "<|system|>", "<|end|>",
                                         "<|placeholder5|>", "<|placeholder6|>", "<|user|>"};
#define N_PHI3_ADDED ((int32_t)(sizeof phi3_added / sizeof phi3_added[0]))

/* Gemma's turn markers (ids 106, 107 of the real vocabulary): its chat template needs them. */
static const char *const gemma_added[] = {"<start_of_turn>", "<end_of_turn>"};
#define N_GEMMA_ADDED ((int32_t)(sizeof gemma_added / sizeof gemma_added[0]))

static int vocab_build(int32_t n, const char *arch, synth_vocab *v) {
    /* phi3 and gemma2: the last ids are the added tokens (the real phi3 file has exactly 32064 - 32011
     * padding after them) */
    const bool gemma = !strcmp(arch, "gemma2");
    const char *const *added = gemma ? gemma_added : phi3_added;
    const int32_t n_added = gemma ? N_GEMMA_ADDED : !strcmp(arch, "phi3") ? N_PHI3_ADDED : 0;
    const int32_t added0 = n_added > 0 && n >= 260 + n_added ? n - n_added : n;
    v->n = n;
    v->tok = calloc((size_t)n, sizeof *v->tok);
    v->score = calloc((size_t)n, sizeof *v->score);
    v->type = calloc((size_t)n, sizeof *v->type);
    if (!v->tok || !v->score || !v->type) return err_set(KITE_E_NOMEM, "out of memory for the vocabulary");
    for (int32_t i = 0; i < n; i++) {
        char buf[32];
        if (i < 3) {
            snprintf(buf, sizeof buf, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
            v->type[i] = i == 0 ? 2 : 3;
        } else if (i < 259) {
            snprintf(buf, sizeof buf, "<0x%02X>", i - 3);
            v->type[i] = 6;
        } else if (i >= added0) {
            snprintf(buf, sizeof buf, "%s", added[i - added0]);
            v->type[i] = 3;
        } else if (i == 259) {
            snprintf(buf, sizeof buf, "\xe2\x96\x81"); /* the bare word-start marker, as in real SPM vocabularies */
            v->type[i] = 1;
        } else {
            int64_t k = i - 260, q = k / 2 + 1;
            char rev[16];
            int len = 0;
            while (q > 0) { /* bijective base 26 */
                q--;
                rev[len++] = (char)('a' + q % 26);
                q /= 26;
            }
            int o = 0;
            if (k % 2 == 0) o += snprintf(buf, sizeof buf, "\xe2\x96\x81");
            while (len > 0) buf[o++] = rev[--len];
            buf[o] = '\0';
            v->type[i] = 1;
            v->score[i] = -(float)(k + 1);
        }
        if (!(v->tok[i] = strdup(buf))) return err_set(KITE_E_NOMEM, "out of memory for the vocabulary");
    }
    return KITE_OK;
}

/* ---- writing ---------------------------------------------------------------- */

/* llama.cpp's general.file_type for the matrix type (informational). */
static uint32_t file_type(const synth_params *p) {
    if (p->mix == SYNTH_MIX_Q4_K_M) return 15;
    if (p->mix == SYNTH_MIX_Q5_K_M) return 17;
    switch (p->type) {
    case KITE_DTYPE_F32: return 0;
    case KITE_DTYPE_F16: return 1;
    case KITE_DTYPE_Q4_0: return 2;
    case KITE_DTYPE_Q4_1: return 3;
    case KITE_DTYPE_Q8_0: return 7;
    case KITE_DTYPE_Q5_0: return 8;
    case KITE_DTYPE_Q5_1: return 9;
    case KITE_DTYPE_Q2_K: return 10;
    case KITE_DTYPE_Q3_K: return 11;
    case KITE_DTYPE_Q4_K: return 14;
    case KITE_DTYPE_Q5_K: return 16;
    case KITE_DTYPE_Q6_K: return 18;
    case KITE_DTYPE_IQ4_NL: return 25;
    case KITE_DTYPE_IQ4_XS: return 30;
    case KITE_DTYPE_BF16: return 32;
    default: return 0;
    }
}

#define TRY(x)                                                                                                     \
    do {                                                                                                           \
        if ((rc = (x)) != KITE_OK) goto done;                                                                      \
    } while (0)

static int set_metadata(gguf_writer *w, const synth_params *p, const synth_vocab *v) {
    const synth_shape *s = &p->shape;
    const char *arch = shape_arch(s);
    const bool gpt2 = !strcmp(arch, "gpt2");
    int rc;
    char name[96], desc[160], key[96];
    snprintf(name, sizeof name, "synth-%s", s->name ? s->name : "custom");
    snprintf(desc, sizeof desc, "kite synth: random weights (seed %" PRIu64 "), not a trained model", p->seed);
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, (suffix)), key)
    TRY(gguf_writer_set_str(w, "general.architecture", arch));
    TRY(gguf_writer_set_str(w, "general.name", p->name ? p->name : name));
    TRY(gguf_writer_set_str(w, "general.description", desc));
    TRY(gguf_writer_set_u32(w, "general.file_type", file_type(p)));
    TRY(gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)s->n_vocab));
    TRY(gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)s->n_ctx));
    TRY(gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd));
    TRY(gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)s->n_layer));
    TRY(gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff));
    if (!gpt2) TRY(gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)shape_head_dim(s)));
    TRY(gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head));
    TRY(gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv));
    if (s->head_dim > 0) {
        TRY(gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim));
        TRY(gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim));
    }
    if (!gpt2) TRY(gguf_writer_set_f32(w, KEY("rope.freq_base"), s->rope_base));
    TRY(gguf_writer_set_f32(w, KEY(gpt2 ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon"),
                            s->rms_eps));
    if (s->n_expert > 0) {
        TRY(gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)s->n_expert));
        TRY(gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)s->n_expert_used));
        if (s->n_ff_exp > 0) TRY(gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)s->n_ff_exp));
    }
    if (!strcmp(arch, "gemma2")) { /* as llama.cpp's converter: both caps, always */
        TRY(gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), s->attn_softcap));
        TRY(gguf_writer_set_f32(w, KEY("final_logit_softcapping"), s->final_softcap));
    }
    if (s->sliding_window > 0 || !strcmp(arch, "phi3")) /* phi3: 0 is written too, it means "none" (Phi-4) */
        TRY(gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)s->sliding_window));
    if (s->longrope_ctx > 0) {
        TRY(gguf_writer_set_f32(w, KEY("rope.scaling.attn_factor"), longrope_attn_factor(s)));
        TRY(gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)s->longrope_ctx));
    }
    if (s->sliding_window > 0 && s->swa_period > 0) { /* llama.cpp's per-layer form: one bool per layer */
        uint8_t swa[4096]; /* GGUF bools are bytes; n_layer <= 4096 (synth_check) */
        for (int32_t l = 0; l < s->n_layer; l++) swa[l] = l % s->swa_period < s->swa_period - 1;
        TRY(gguf_writer_set_arr(w, KEY("attention.sliding_window_pattern"), GGUF_VT_BOOL, swa, (uint64_t)s->n_layer));
    }
#undef KEY
    if (p->vocab_from) goto done; /* synth_write copies the tokenizer.* keys of that file */
    TRY(gguf_writer_set_str(w, "tokenizer.ggml.model", "llama"));
    TRY(gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, NULL, (uint64_t)v->n));
    TRY(gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, v->score, (uint64_t)v->n));
    TRY(gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, v->type, (uint64_t)v->n));
    TRY(gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0));
    TRY(gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1));
    TRY(gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2));
    TRY(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    TRY(gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false));
done:
    return rc;
}

int synth_vocab_size(const char *path, int32_t *n_vocab) {
    gguf_ctx *g = NULL;
    gguf_open_params op = {.use_mmap = true};
    int rc = gguf_open(path, &op, &g);
    if (rc) return rc;
    const gguf_value *t = gguf_get(g, "tokenizer.ggml.tokens");
    if (!t || t->type != GGUF_VT_ARRAY || t->v.arr.elem_type != GGUF_VT_STRING || t->v.arr.n > (1u << 24))
        rc = err_set(KITE_E_NOT_FOUND, "%s: no tokenizer.ggml.tokens string array (of at most 2^24)", path);
    else *n_vocab = (int32_t)t->v.arr.n;
    gguf_close(g);
    return rc;
}

/* Copies every tokenizer.* key of p->vocab_from (its token count must be shape.n_vocab). */
static int copy_vocab(gguf_writer *w, const synth_params *p) {
    int32_t n = 0;
    int rc = synth_vocab_size(p->vocab_from, &n);
    if (rc) return rc;
    if (n != p->shape.n_vocab)
        return err_set(KITE_E_ARG, "%s has %d tokens, the shape %d", p->vocab_from, n, p->shape.n_vocab);
    gguf_ctx *g = NULL;
    gguf_open_params op = {.use_mmap = true};
    if ((rc = gguf_open(p->vocab_from, &op, &g))) return rc;
    for (uint64_t i = 0; i < g->n_kv && !rc; i++) {
        const gguf_kv *kv = &g->kv[i];
        char key[256];
        if (kv->key.len < 10 || kv->key.len >= sizeof key || memcmp(kv->key.ptr, "tokenizer.", 10)) continue;
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        rc = gguf_writer_set_value(w, key, &kv->value);
    }
    gguf_close(g);
    return rc;
}

int synth_write(const synth_params *p, const char *path) {
    if (!p || !path) return err_set(KITE_E_ARG, "synth_write: NULL argument");
    int rc = synth_check(p);
    if (rc) return rc;
    struct stat st;
    /* the file is renamed into place: never over a device such as /dev/null */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return err_set(KITE_E_ARG, "%s exists and is not a regular file", path);
    synth_vocab v = {0};
    synth_job job = {.seed = p->seed};
    gguf_writer *w = NULL;
    int n_threads = p->n_threads > 0 ? p->n_threads : 1;

    job.n_t = build_tensors(p, NULL);
    job.t = calloc(job.n_t, sizeof *job.t);
    w = gguf_writer_new();
    if (!job.t || !w) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto done;
    }
    build_tensors(p, job.t);
    for (size_t i = 0; i < job.n_t; i++) /* longest row */
        if (job.t[i].ne[0] > job.scratch_n) job.scratch_n = job.t[i].ne[0];
    job.scratch = malloc(sizeof(float) * (size_t)job.scratch_n * (size_t)n_threads);
    if (!job.scratch) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto done;
    }
    if (p->shape.rope_llama3_ctx > 0) llama3_factors(&p->shape, job.rope_freqs);
    if (p->shape.longrope_ctx > 0) {
        longrope_factors(&p->shape, true, job.rope_long);
        longrope_factors(&p->shape, false, job.rope_short);
    }
    if (!(job.tp = tp_new(n_threads))) {
        rc = KITE_E_NOMEM;
        goto done;
    }
    if (!p->vocab_from) TRY(vocab_build(p->shape.n_vocab, shape_arch(&p->shape), &v));
    TRY(set_metadata(w, p, &v));
    if (p->vocab_from) TRY(copy_vocab(w, p));
    for (size_t i = 0; i < job.n_t; i++) {
        synth_tensor *t = &job.t[i];
        t->job = &job;
        t->row_bytes = dtype_row_size(t->type, t->ne[0]);
        if (t->role == TR_ROPE_FREQS) t->values = job.rope_freqs;
        if (t->role == TR_ROPE_FACTORS_LONG) t->values = job.rope_long;
        if (t->role == TR_ROPE_FACTORS_SHORT) t->values = job.rope_short;
        uint32_t n_dims = t->ne[2] > 1 ? 3 : t->ne[1] == 1 ? 1 : 2;
        TRY(gguf_writer_add_tensor_cb(w, t->name, t->type, n_dims, t->ne, fill_rows, t));
    }
    gguf_writer_set_progress(w, p->progress);
    rc = gguf_writer_write(w, path);
done:
    gguf_writer_free(w);
    tp_free(job.tp);
    vocab_free(&v);
    free(job.scratch);
    free(job.t);
    return rc;
}
