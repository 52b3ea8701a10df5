/*
 * test_roofline.c - the roofline model (src/roofline/): exact FLOP and byte
 * counts of a hand-worked shape, the decode crossover against the closed
 * form, the call-cost fit and its use in the predicted times, hardware
 * profile parsing, SVG well-formedness and the JSON line; the throughput-mode
 * cost model of kite batch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "kite.h"
#include "roofline/roofline.h"
#include "roofline_helpers.h"

/* Hand-worked shape: n_embd d = 8, n_ff = 16, 2 layers, 2 heads of 4 (dq = 8),
 * 1 KV head (dkv = 4), vocab 32; layer weights q8_0 (34 bytes per 32
 * elements = 1.0625 B/elt), output f32 (4 B/elt); activations and KV f32.
 * Setting: batch 1, prompt 4, gen 2. */
static rl_shape tiny_shape(void) {
    rl_shape s;
    memset(&s, 0, sizeof s);
    snprintf(s.name, sizeof s.name, "tiny");
    s.n_embd = 8, s.n_ff = 16, s.n_layer = 2, s.n_head = 2, s.n_head_kv = 1, s.head_dim = 4, s.n_vocab = 32;
    s.wtype = KITE_DTYPE_Q8_0;
    s.out_type = KITE_DTYPE_F32;
    return s;
}

#define CHECK_OP(ph, nm, fl, wb, ab, kb)                                                  \
    do {                                                                                  \
        const rl_op *o_ = find(ph, nm);                                                   \
        CHECK(o_ != NULL);                                                                \
        if (o_) {                                                                         \
            CHECK_NEAR(o_->flops, fl, 0);                                                 \
            CHECK_NEAR(o_->w_bytes, wb, 0);                                               \
            CHECK_NEAR(o_->act_bytes, ab, 0);                                             \
            CHECK_NEAR(o_->kv_bytes, kb, 0);                                              \
        }                                                                                 \
    } while (0)

TEST(test_counts_by_hand) {
    rl_shape s = tiny_shape();
    rl_hw h = synth_hw();
    rl_setting st = {.batch = 1, .prompt = 4, .gen = 2, .atype = RL_A_F32, .kvtype = KITE_DTYPE_F32};
    rl_result r;
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_OK);
    const rl_phase_result *p = &r.ph[RL_PREFILL], *d = &r.ph[RL_DECODE];
    /* prefill: T = 4 tokens, one chunk (weights read once), causal pairs
     * 4*5/2 = 10 per head, K/V rows read = 4 (the chunk's end).
     * attn_norm: 4 FLOP/elt * 4*8 = 128; gain 8*4 = 32 B; act 2*4*8*4 = 256 B */
    CHECK_OP(p, "attn_norm", 128, 32, 256, 0);
    /* q_proj: 2*4*8*8 = 512; W 8*8*1.0625 = 68; in 4*8*4 = 128 + out 4*8*4 = 128 */
    CHECK_OP(p, "q_proj", 512, 68, 256, 0);
    /* k_proj: 2*4*8*4 = 256; W 4*8*1.0625 = 34; in 128; K written 4*4*4 = 64 */
    CHECK_OP(p, "k_proj", 256, 34, 128, 64);
    /* rope: 3 FLOP/elt * 4*(8+4) = 144; q r+w 2*4*8*4 = 256; k r+w 2*4*4*4 = 128 */
    CHECK_OP(p, "rope", 144, 0, 256, 128);
    /* scores: 2 * 10 pairs * 2 heads * 4 = 160; q read 128; K read 4*4*4 = 64 */
    CHECK_OP(p, "attn_scores", 160, 0, 128, 64);
    /* softmax: 5 * 10 * 2 = 100, fused: no bytes */
    CHECK_OP(p, "softmax", 100, 0, 0, 0);
    CHECK_OP(p, "attn_values", 160, 0, 128, 64);
    /* ffn_gate: 2*4*8*16 = 1024; W 16*8*1.0625 = 136; in 128 + out 4*16*4 = 256 */
    CHECK_OP(p, "ffn_gate", 1024, 136, 384, 0);
    /* ffn_act: 5 * 4*16 = 320; gate, up read + out written: 3*4*16*4 = 768 */
    CHECK_OP(p, "ffn_act", 320, 0, 768, 0);
    /* output (last row only): 2*1*8*32 = 512; W 32*8*4 = 1024; in 32 + out 128 */
    CHECK_OP(p, "output", 512, 1024, 160, 0);
    /* embed: 4 rows of 8 q8_0 = 34 B; 4*8*4 = 128 B written */
    CHECK_OP(p, "embed", 0, 34, 128, 0);
    /* per layer: 128+512+256+256+144+160+100+160+512+128+1024+1024+320+1024 =
     * 5748; x2 layers + out_norm 4*8 = 32 + output 512 = 12040 */
    CHECK_NEAR(p->flops, 12040, 0);
    CHECK_EQ_INT(p->n_ops, 17);
    /* decode: T = 1 at context 4 + 2/2 + 1 = 6 positions.
     * q_proj: 2*8*8 = 128; W 68; act 32 + 32 */
    CHECK_OP(d, "q_proj", 128, 68, 64, 0);
    /* scores: 2 * 6 * 2 * 4 = 96; q 32; K 6*4*4 = 96 */
    CHECK_OP(d, "attn_scores", 96, 0, 32, 96);
    CHECK_EQ_INT(find(d, "ffn_down")->count, 2);
    CHECK_EQ_INT(find(d, "output")->count, 1);
    /* predicted times: q_proj decode is memory-bound: (68+64) B / 1e9 B/s */
    CHECK_NEAR(find(d, "q_proj")->time, 132e-9, 1e-15);
    CHECK(!find(d, "q_proj")->compute_bound);
    CHECK(isinf(find(p, "softmax")->intensity));
    CHECK_NEAR(r.ttft_s, p->time, 0);
    CHECK_NEAR(r.decode_tok_s, 1.0 / d->time, 1e-9);
    /* an attention rate of 0.1 GFLOP/s makes decode scores compute-bound: 96 / 1e8 s */
    h.attn_gflops = 0.1;
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_OK);
    CHECK(find(&r.ph[RL_DECODE], "attn_scores")->compute_bound);
    CHECK_NEAR(find(&r.ph[RL_DECODE], "attn_scores")->t_compute, 96e-8, 1e-15);
}

/* Windowed layers (Gemma 2: window W on half the layers) and Gemma 2's own
 * ops, by hand on the tiny shape (2 layers, one windowed, W = 2).  Prefill of
 * 4 tokens: a windowed layer sees 1+2+2+2 = 7 pairs per head and its one
 * chunk [0, 4) reads min(4, 4 + 2 - 1) = 4 rows; the mean with the
 * global layer's 10 is 8.5.  Decode at context 6: min(6, 2) = 2 and 6 give a
 * mean of 4 K rows.  Without windowed layers, or with W >= the context, the
 * counts are the unwindowed ones. */
TEST(test_window_and_gemma2_by_hand) {
    rl_shape s = tiny_shape();
    rl_hw h = synth_hw();
    rl_setting st = {.batch = 1, .prompt = 4, .gen = 2, .atype = RL_A_F32, .kvtype = KITE_DTYPE_F32};
    rl_result r;
    s.sliding_window = 2;
    s.n_swa_layers = 1;
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_OK);
    /* scores: 2 * 8.5 pairs * 2 heads * 4 = 136; K rows 4 (both) * 4 * 4 = 64 */
    CHECK_OP(&r.ph[RL_PREFILL], "attn_scores", 136, 0, 128, 64);
    /* decode: 2 * 4 * 2 * 4 = 64; K 4 * 4 * 4 = 64 */
    CHECK_OP(&r.ph[RL_DECODE], "attn_scores", 64, 0, 32, 64);
    s.sliding_window = 64; /* longer than every context: the unwindowed counts */
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_OK);
    CHECK_OP(&r.ph[RL_PREFILL], "attn_scores", 160, 0, 128, 64);
    CHECK_OP(&r.ph[RL_DECODE], "attn_scores", 96, 0, 32, 96);
    s.sliding_window = 0;
    s.n_swa_layers = 0;
    s.gemma2 = true;
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_OK);
    const rl_phase_result *p = &r.ph[RL_PREFILL];
    CHECK_OP(p, "attn_softcap", 200, 0, 0, 0);      /* 10 FLOPs * 10 pairs * 2 heads */
    CHECK_OP(p, "post_norms", 128, 32, 256, 0);     /* as attn_norm, twice per layer */
    CHECK_EQ_INT(find(p, "post_norms")->count, 4);
    CHECK_OP(p, "ffn_act", 9 * 4 * 16, 0, 768, 0);  /* tanh GELU (8) and the product */
    CHECK_OP(p, "logit_softcap", 10 * 32, 0, 2 * 32 * 4, 0); /* the last row's 32 logits */
    CHECK_OP(p, "embed", 32, 34, 128, 0);           /* x sqrt(n_embd) */
    CHECK_EQ_INT(p->n_ops, 20);
    /* gemma-2-2b from the shape table: the even 13 of 26 layers windowed (4096) */
    rl_shape g;
    CHECK_EQ_INT(rl_shape_from_name("gemma-2-2b", KITE_DTYPE_Q4_0, &g), KITE_OK);
    CHECK(g.gemma2 && g.sliding_window == 4096 && g.n_swa_layers == 13 && g.head_dim == 256);
}

TEST(test_decode_crossover_closed_form) {
    /* One matmul of K = N = 64 (q_proj of a 64-wide single-head model), f32
     * weights and activations, W = 1 GB/s, P = 10 GFLOP/s: ridge P/W = 10
     * FLOP/B.  At batch B: flops 2*B*64*64 = 8192 B, bytes 4*64*64 + 4*B*64
     * (in) + 4*B*64 (out) = 16384 + 512 B.  Compute-bound iff
     * 8192 B / 10 > 16384 + 512 B  <=>  307.2 B > 16384  <=>  B > 53.33:
     * B* = 54 (without activation bytes it would be ridge*4/2 = 20). */
    rl_shape s = tiny_shape();
    s.n_embd = 64, s.n_head = 1, s.n_head_kv = 1, s.head_dim = 64, s.n_ff = 64;
    s.wtype = s.out_type = KITE_DTYPE_F32;
    rl_hw h = synth_hw();
    rl_setting st = {.batch = 1, .prompt = 1, .gen = 0, .atype = RL_A_F32, .kvtype = KITE_DTYPE_F32};
    CHECK_EQ_INT(rl_decode_crossover(&s, &h, &st, "q_proj", 256), 54);
    rl_result r;
    st.batch = 54;
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_OK);
    CHECK_NEAR(r.ridge, 10.0, 1e-12);
    const rl_op *q = find(&r.ph[RL_DECODE], "q_proj");
    CHECK(q->intensity > r.ridge && q->compute_bound);
    st.batch = 53;
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_OK);
    q = find(&r.ph[RL_DECODE], "q_proj");
    CHECK(q->intensity < r.ridge && !q->compute_bound);
    /* a kernel rate below the bandwidth raises the memory time: crossover later */
    h.kern_gbs[KITE_DTYPE_F32] = 0.5;
    CHECK(rl_decode_crossover(&s, &h, &st, "q_proj", 256) > 54);
}

TEST(test_fit_line_by_hand) {
    /* Two decode matvecs: 0.5 MB in 30 us and 8.5 MB in 280 us.
     * slope: (8.5e6 - 0.5e6) B / (280e-6 - 30e-6) s = 8e6 / 250e-6 = 32e9 B/s;
     * intercept: 30e-6 - 0.5e6 / 32e9 = 30e-6 - 15.625e-6 = 14.375 us. */
    double c, rate;
    CHECK(rl_fit_line(0.5e6, 30e-6, 8.5e6, 280e-6, &c, &rate));
    CHECK_NEAR(rate, 32e9, 1e-3);
    CHECK_NEAR(c, 14.375e-6, 1e-15);
    /* noise that gives a negative intercept (the small call too fast):
     * 1 MB in 10 us, 9 MB in 300 us -> slope 8e6/290e-6 = 27.6e9, intercept
     * 10e-6 - 36.25e-6 < 0: fall back to the large point alone, 9e6/300e-6 = 30e9 */
    CHECK(rl_fit_line(1e6, 10e-6, 9e6, 300e-6, &c, &rate));
    CHECK_NEAR(c, 0, 0);
    CHECK_NEAR(rate, 30e9, 1e-3);
    /* the large call not slower than the small one: same fallback */
    CHECK(rl_fit_line(1e6, 300e-6, 9e6, 300e-6, &c, &rate));
    CHECK_NEAR(rate, 30e9, 1e-3);
    CHECK(!rl_fit_line(1e6, 10e-6, 9e6, 0, &c, &rate));
}

TEST(test_call_costs_by_hand) {
    /* The tiny shape of test_counts_by_hand, decode at context 6, on the
     * synthetic profile (1 GB/s, 10 GFLOP/s) plus: q8_0 effective bandwidth
     * 0.5 GB/s, 2 us per q8_0 matmul call, 3 us per attention call, launch
     * 7 us (used by the f32 output head, which has no call cost of its own).
     * q_proj: weights 68 B / 0.5e9 + act 64 B / 1e9 = 136 ns + 64 ns = 200 ns;
     * compute 128 / 1e10 = 12.8 ns; time = 200 ns + 2 us = 2.2 us.
     * attn_scores: compute 96 / 1e10 = 9.6 ns, memory (32 + 96) / 1e9 =
     * 128 ns; time = 128 ns + 3 us.  softmax carries no call cost.
     * output (f32): memory (1024 + 32 + 128) / 1e9 = 1184 ns, + 7 us. */
    rl_shape s = tiny_shape();
    rl_hw h = synth_hw();
    h.kern_gbs[KITE_DTYPE_Q8_0] = 0.5;
    h.kern_call_us[KITE_DTYPE_Q8_0] = 2;
    h.attn_call_us = 3;
    h.launch_us = 7;
    rl_setting st = {.batch = 1, .prompt = 4, .gen = 2, .atype = RL_A_F32, .kvtype = KITE_DTYPE_F32};
    rl_result r;
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_OK);
    const rl_phase_result *d = &r.ph[RL_DECODE];
    CHECK_NEAR(find(d, "q_proj")->t_memory, 200e-9, 1e-18);
    CHECK_NEAR(find(d, "q_proj")->time, 2.2e-6, 1e-15);
    CHECK_NEAR(find(d, "attn_scores")->time, 3.128e-6, 1e-15);
    CHECK_NEAR(find(d, "softmax")->time, 5 * 6 * 2 / 1e10, 1e-18);
    CHECK_NEAR(find(d, "output")->time, 8.184e-6, 1e-15);
    /* prefill of 4 tokens is one forward call: the same per-call costs once */
    CHECK_NEAR(find(&r.ph[RL_PREFILL], "q_proj")->time - fmax(find(&r.ph[RL_PREFILL], "q_proj")->t_compute,
                                                                find(&r.ph[RL_PREFILL], "q_proj")->t_memory),
               2e-6, 1e-15);
}

TEST(test_hw_profiles) {
    rl_hw h;
    CHECK_EQ_INT(rl_hw_parse("# box\nname = my box\nmem_bw_gbs = 50\nfp32_gflops=100 # peak\n"
                             "kern_gbs.q8_0 = 12.5\nthreads = 2\nattn_gflops = 2.5\nelem_gflops=1\n"
                             "kern_call_us.q4_0 = 9.5\nattn_call_us = 4\n",
                             "t", &h),
                 KITE_OK);
    CHECK_STR_EQ(h.name, "my box");
    CHECK_NEAR(h.mem_bw_gbs, 50, 0);
    CHECK_NEAR(h.kern_gbs[KITE_DTYPE_Q8_0], 12.5, 0);
    CHECK_EQ_INT(h.threads, 2);
    CHECK_NEAR(h.attn_gflops, 2.5, 0);
    CHECK_NEAR(h.elem_gflops, 1, 0);
    CHECK_NEAR(h.kern_call_us[KITE_DTYPE_Q4_0], 9.5, 0);
    CHECK_NEAR(h.attn_call_us, 4, 0);
    CHECK_EQ_INT(rl_hw_parse("mem_bw_gbs = 50\nfp32_gflops = 1\nkern_call_us.q9 = 1\n", "t", &h), KITE_E_FORMAT);
    CHECK_EQ_INT(rl_hw_parse("mem_bw_gbs = 50\nfp32_gflop = 1\n", "t", &h), KITE_E_FORMAT);
    CHECK_EQ_INT(rl_hw_parse("mem_bw_gbs = fast\nfp32_gflops = 1\n", "t", &h), KITE_E_FORMAT);
    CHECK_EQ_INT(rl_hw_parse("fp32_gflops = 1\n", "t", &h), KITE_E_FORMAT);
    CHECK(rl_hw_builtin("h200") != NULL);
    CHECK(rl_hw_builtin("A100") && rl_hw_builtin("A100")->mem_bw_gbs == 2039);
    CHECK(rl_hw_builtin("nope") == NULL);
    /* save + load round trip */
    char path[] = "/tmp/kite-test-roofline-hw-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    rl_hw a = *rl_hw_builtin("ddr5-desktop");
    a.kern_gbs[KITE_DTYPE_Q4_0] = 3.25;
    a.kern_call_us[KITE_DTYPE_Q4_0] = 11.5;
    a.attn_call_us = 6.25;
    CHECK_EQ_INT(rl_hw_save(path, &a), KITE_OK);
    CHECK_EQ_INT(rl_hw_load(path, &h), KITE_OK);
    CHECK_STR_EQ(h.name, "ddr5-desktop");
    CHECK_NEAR(h.int8_gops, 4608, 0);
    CHECK_NEAR(h.kern_gbs[KITE_DTYPE_Q4_0], 3.25, 0);
    CHECK_NEAR(h.kern_call_us[KITE_DTYPE_Q4_0], 11.5, 0);
    CHECK_NEAR(h.attn_call_us, 6.25, 0);
    remove(path);
}

/* Tiny XML well-formedness check: one prolog, balanced and properly nested
 * tags, every attribute value quoted, no raw '<' or '&' (other than entities)
 * in text or attributes. */
static bool xml_ok(const char *s, char *why, size_t cap) {
    char stack[64][32];
    int depth = 0, roots = 0;
    if (strncmp(s, "<?xml", 5) == 0) {
        const char *e = strstr(s, "?>");
        if (!e) return snprintf(why, cap, "prolog"), false;
        s = e + 2;
    }
    while (*s) {
        if (*s == '&') {
            const char *e = s + 1;
            while ((*e >= 'a' && *e <= 'z') || *e == '#' || (*e >= '0' && *e <= '9')) e++;
            if (*e != ';' || e == s + 1) return snprintf(why, cap, "bad entity"), false;
            s = e + 1;
            continue;
        }
        if (*s == '>') return snprintf(why, cap, "stray >"), false;
        if (*s != '<') {
            if ((*s == ' ' || *s == '\n') || depth > 0) {
                s++;
                continue;
            }
            return snprintf(why, cap, "text outside root"), false;
        }
        s++;
        bool close = *s == '/';
        if (close) s++;
        char name[32];
        size_t n = 0;
        while ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '-' ||
               *s == ':' || *s == '_')
            if (n < sizeof name - 1) name[n++] = *s++;
            else return snprintf(why, cap, "long name"), false;
        name[n] = 0;
        if (!n) return snprintf(why, cap, "empty tag name"), false;
        bool self = false;
        for (;;) { /* attributes */
            while (*s == ' ' || *s == '\n') s++;
            if (*s == '>') break;
            if (*s == '/' && s[1] == '>') {
                self = true;
                s++;
                break;
            }
            if (close) return snprintf(why, cap, "attribute on close tag"), false;
            while ((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == ':' ||
                   (*s >= 'A' && *s <= 'Z'))
                s++;
            if (*s != '=' || s[1] != '"') return snprintf(why, cap, "unquoted attribute in <%s>", name), false;
            s += 2;
            while (*s && *s != '"') {
                if (*s == '<') return snprintf(why, cap, "< in attribute"), false;
                if (*s == '&') {
                    const char *e = s + 1;
                    while ((*e >= 'a' && *e <= 'z') || *e == '#') e++;
                    if (*e != ';') return snprintf(why, cap, "bad entity in attribute"), false;
                }
                s++;
            }
            if (!*s) return snprintf(why, cap, "unterminated attribute"), false;
            s++;
        }
        if (!*s) return snprintf(why, cap, "unterminated tag"), false;
        s++; /* '>' */
        if (close) {
            if (depth == 0 || strcmp(stack[depth - 1], name))
                return snprintf(why, cap, "</%s> does not match", name), false;
            depth--;
        } else if (!self) {
            if (depth == 0) roots++;
            if (depth == 64) return snprintf(why, cap, "too deep"), false;
            snprintf(stack[depth++], sizeof stack[0], "%s", name);
        } else if (depth == 0) {
            roots++;
        }
    }
    if (depth != 0) return snprintf(why, cap, "unclosed <%s>", stack[depth - 1]), false;
    if (roots != 1) return snprintf(why, cap, "%d roots", roots), false;
    return true;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

TEST(test_svg_well_formed) {
    char why[128] = "";
    CHECK(xml_ok("<a x=\"1\"><b/>t &amp; u</a>", why, sizeof why));
    CHECK(!xml_ok("<a x=1></a>", why, sizeof why));
    CHECK(!xml_ok("<a><b></a></b>", why, sizeof why));
    CHECK(!xml_ok("<a>x < y</a>", why, sizeof why));
    CHECK(!xml_ok("<a>R&D</a>", why, sizeof why));
    rl_shape s = tiny_shape();
    snprintf(s.name, sizeof s.name, "a<b & \"c\"");   /* must be escaped */
    rl_hw h = synth_hw();
    h.kern_gbs[KITE_DTYPE_Q8_0] = 0.3;
    rl_setting st = {.batch = 2, .prompt = 64, .gen = 8, .atype = RL_A_INT8, .kvtype = KITE_DTYPE_F16};
    rl_result r;
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_OK);
    char path[] = "/tmp/kite-test-roofline-svg-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECK_EQ_INT(rl_svg_write(path, &s, &h, &st, &r), KITE_OK);
    char *svg = slurp(path);
    CHECK(svg != NULL);
    if (svg) {
        bool ok = xml_ok(svg, why, sizeof why);
        CHECK_MSG(ok, "SVG not well-formed: %s", why);
        CHECK_CONTAINS(svg, "<svg");
        CHECK_CONTAINS(svg, "a&lt;b &amp; &quot;c&quot;");
        CHECK_CONTAINS(svg, "q_proj");
        CHECK_CONTAINS(svg, ">Roofline: ");
        CHECK_CONTAINS(svg, "INT8");
        /* op labels (font-size 10) never overlap, by the box estimate svg.c places them with
         * (0.56 font sizes per character); every one lies inside the plot (x 80..936, y 40..580) */
        double bx[64][4];
        int nb = 0;
        for (const char *q = svg; (q = strstr(q, "<text x=\"")) != NULL && nb < 64; q++) {
            double x, y;
            char fill[16];
            int end = 0;
            if (sscanf(q, "<text x=\"%lf\" y=\"%lf\" font-size=\"10\" fill=\"%15[^\"]\">%n", &x, &y, fill, &end) < 3 ||
                !end)
                continue;
            const char *close = strstr(q + end, "</text>");
            const double len = close ? (double)(close - (q + end)) : 0;
            bx[nb][0] = x, bx[nb][1] = y - 10, bx[nb][2] = x + len * 5.6, bx[nb][3] = y + 3;
            CHECK_MSG(bx[nb][0] >= 80 && bx[nb][2] <= 936 && bx[nb][1] >= 40 && bx[nb][3] <= 580,
                      "label %d outside the plot", nb);
            nb++;
        }
        CHECK(nb >= 4);
        for (int i = 0; i < nb; i++)
            for (int j = 0; j < i; j++)
                CHECK_MSG(!(bx[i][0] < bx[j][2] && bx[j][0] < bx[i][2] && bx[i][1] < bx[j][3] && bx[j][1] < bx[i][3]),
                          "labels %d and %d overlap", i, j);
    }
    free(svg);
    remove(path);
}

TEST(test_json_line) {
    rl_shape s = tiny_shape();
    rl_hw h = synth_hw();
    rl_setting st = {.batch = 1, .prompt = 4, .gen = 2, .atype = RL_A_F32, .kvtype = KITE_DTYPE_F32};
    rl_result r;
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    if (!f) return;
    rl_print_json(f, &s, &h, &st, &r);
    fclose(f);
    CHECK(len > 2 && buf[0] == '{' && buf[len - 2] == '}' && buf[len - 1] == '\n');
    CHECK(memchr(buf, '\n', len - 1) == NULL); /* one line */
    CHECK_CONTAINS(buf, "\"prefill_tok_s\": ");
    CHECK_CONTAINS(buf, "\"decode_tok_s\": ");
    CHECK_CONTAINS(buf, "\"ttft_s\": ");
    CHECK_CONTAINS(buf, "\"ops\": [{\"phase\": \"prefill\", \"name\": \"embed\"");
    CHECK_CONTAINS(buf, "\"intensity\": null"); /* softmax: no bytes */
    int braces = 0, brackets = 0, ops = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (c == '"' && buf[i - 1] != '\\') in_str = !in_str;
        if (in_str) continue;
        braces += (c == '{') - (c == '}');
        brackets += (c == '[') - (c == ']');
        CHECK(braces >= 0 && brackets >= 0);
    }
    for (const char *p = buf; (p = strstr(p, "\"phase\"")); p++) ops++;
    CHECK_EQ_INT(braces, 0);
    CHECK_EQ_INT(brackets, 0);
    CHECK_EQ_INT(ops, 34);
    free(buf);
}

TEST(test_bad_input) {
    rl_shape s = tiny_shape();
    rl_hw h = synth_hw();
    rl_setting st = {.batch = 0, .prompt = 4, .gen = 2, .atype = RL_A_F32, .kvtype = KITE_DTYPE_F32};
    rl_result r;
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_E_ARG);
    st.batch = 1;
    s.wtype = 200;
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_E_ARG);
    rl_shape t;
    CHECK_EQ_INT(rl_shape_from_name("no-such-model", KITE_DTYPE_F16, &t), KITE_E_NOT_FOUND);
    CHECK_EQ_INT(rl_shape_from_name("tinyllama-1.1b", KITE_DTYPE_Q4_0, &t), KITE_OK);
    CHECK_EQ_INT(t.n_embd, 2048);
    CHECK_EQ_INT(t.head_dim, 64);
    CHECK_EQ_INT(rl_shape_from_file("/nonexistent/model.gguf", &t) != KITE_OK, 1);
}

/* The throughput-mode cost model (batch.c) against its definition: a step
 * is the larger of rl_predict's decode step and one pass's disk time, the
 * prefill the larger of its compute and its passes' reads, waves of B; the
 * choice is the best block (the larger within 2%), never above the prompts
 * or max_block; bad input is an error. */
TEST(test_batch_cost_model) {
    const rl_shape s = tiny_shape();
    const rl_hw h = synth_hw();
    const rl_setting base = {.atype = RL_A_F32, .kvtype = KITE_DTYPE_F32};
    /* disk-bound: 1 MB per pass at 0.001 GB/s = 1 s a pass, far above any compute of this shape */
    rl_batch_in in = {.n_seq = 100, .prompt = 4, .gen = 2, .stream_bytes = 1e6, .disk_gbs = 1e-3};
    rl_batch_out o;
    CHECK_EQ_INT(rl_batch_predict(&s, &h, &base, &in, 8, &o), KITE_OK);
    CHECK_EQ_INT((int)o.block, 8);
    CHECK_EQ_INT((int)o.waves, 13);
    CHECK(o.disk_bound);
    CHECK_NEAR(o.t_step, 1.0, 1e-12);
    CHECK_NEAR(o.t_prefill, 1.0, 1e-12); /* 8 * 4 tokens: one RL_CHUNK pass */
    CHECK_NEAR(o.time_s, 13 * (1.0 + 2 * 1.0), 1e-9);
    CHECK_NEAR(o.tok_s, 200 / o.time_s, 1e-12);
    rl_batch_in big = in;
    big.prompt = RL_CHUNK; /* B prompts of one chunk each: B passes of prefill */
    CHECK_EQ_INT(rl_batch_predict(&s, &h, &base, &big, 3, &o), KITE_OK);
    CHECK_NEAR(o.t_prefill, 3.0, 1e-12);
    /* without streaming: rl_predict's own figures */
    rl_batch_in mem = {.n_seq = 6, .prompt = 4, .gen = 2};
    CHECK_EQ_INT(rl_batch_predict(&s, &h, &base, &mem, 4, &o), KITE_OK);
    rl_setting st = base;
    st.batch = 4, st.prompt = 4, st.gen = 2;
    rl_result r;
    CHECK_EQ_INT(rl_predict(&s, &h, &st, &r), KITE_OK);
    CHECK_NEAR(o.t_step, r.ph[RL_DECODE].time, 0);
    CHECK_NEAR(o.t_prefill, r.ttft_s, 0);
    CHECK(!o.disk_bound);
    CHECK_EQ_INT((int)o.waves, 2);
    /* a block above the prompts is the prompts */
    CHECK_EQ_INT(rl_batch_predict(&s, &h, &base, &mem, 50, &o), KITE_OK);
    CHECK_EQ_INT((int)o.block, 6);
    /* disk-bound, throughput grows with B: the choice is the cap (max_block, then the prompts) */
    CHECK_EQ_INT(rl_batch_choose(&s, &h, &base, &in, 64, &o), KITE_OK);
    CHECK_EQ_INT((int)o.block, 64);
    CHECK_EQ_INT((int)o.waves, 2);
    CHECK_EQ_INT(rl_batch_choose(&s, &h, &base, &in, 1000, &o), KITE_OK);
    CHECK_EQ_INT((int)o.block, 100);
    rl_batch_out b1;
    CHECK_EQ_INT(rl_batch_predict(&s, &h, &base, &in, 1, &b1), KITE_OK);
    CHECK(o.tok_s > 50 * b1.tok_s); /* 100 sequences per read instead of 1 */
    /* the choice is never predicted slower than 98% of any candidate */
    for (int64_t b = 1; b <= 100; b++) {
        rl_batch_out x;
        CHECK_EQ_INT(rl_batch_predict(&s, &h, &base, &in, b, &x), KITE_OK);
        if (b == 1 || b == 2 || b == 4 || b == 8 || b == 16 || b == 32 || b == 64 || b == 100)
            CHECK(o.tok_s >= 0.98 * x.tok_s);
    }
    rl_batch_in bad = in;
    bad.disk_gbs = 0;
    CHECK_EQ_INT(rl_batch_predict(&s, &h, &base, &bad, 1, &o), KITE_E_ARG);
    CHECK_EQ_INT(rl_batch_predict(&s, &h, &base, &in, 0, &o), KITE_E_ARG);
    bad = in;
    bad.gen = 0;
    CHECK_EQ_INT(rl_batch_choose(&s, &h, &base, &bad, 8, &o), KITE_E_ARG);
}

int main(void) {
    RUN(test_counts_by_hand);
    RUN(test_window_and_gemma2_by_hand);
    RUN(test_decode_crossover_closed_form);
    RUN(test_fit_line_by_hand);
    RUN(test_call_costs_by_hand);
    RUN(test_hw_profiles);
    RUN(test_svg_well_formed);
    RUN(test_json_line);
    RUN(test_bad_input);
    RUN(test_batch_cost_model);
    return harness_summary(__FILE__);
}
