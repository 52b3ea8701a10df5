/*
 * test_quant.c - the reference quantizers/dequantizers (src/tensor/quant_*.c)
 * against ggml and against blocks worked out by hand.
 *
 *   - golden vectors (tests/data/quant, made by ggml; see index.json): for
 *     every type, quantizing q-input.f32 must give q-<type>.bin byte for byte
 *     and dequantizing q-<type>.bin must give q-<type>.dequant.f32 bit for
 *     bit; the reconstruction error must be within 5% of ggml's;
 *   - hand-worked blocks for q4_0, q8_0, q4_K, q6_K (decode and encode) and
 *     the activation types q8_1, q8_K, whose expected values are derived in
 *     the comments;
 *   - the stories260K GGUFs written by llama-quantize: each one converted to
 *     F32 with the traits' to_float must reproduce the reference logits
 *     (float32 forward of ggml-dequantized weights) within 1e-4, and the
 *     file as is must run and stay close (see test_quant_models_as_is).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "harness.h"
#include "json_mini.h"
#include "kite.h"
#include "model_helpers.h"
#include "tensor/blocks.h"
#include "tensor/dtype.h"
#include "tensor/quants.h"

#define QDIR "tests/data/quant/"
#define N_ROWS 8
#define N_COLS 256
#define GOLD_LOGITS_JSON "tests/data/golden/stories260K-logits-once.json"
#define N_VOCAB 512
#define N_POS 32

static char tmpdir[] = "/tmp/kite-test-quant-XXXXXX";

/* ---- helpers ------------------------------------------------------------- */

static void *read_exact(const char *path, size_t want) {
    size_t size = 0;
    char *buf = harness_read_file(path, &size);
    if (buf && size != want) {
        free(buf);
        buf = NULL;
    }
    CHECK_MSG(buf != NULL, "cannot read %s with %zu bytes", path, want);
    return buf;
}

static uint16_t h16(const void *p) { /* little-endian half at p */
    const uint8_t *b = p;
    return (uint16_t)(b[0] | b[1] << 8);
}

/* ggml's rel_rmse_vs_input for type name in index.json, or -1. */
static double golden_rel_rmse(const char *index, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "\"name\": \"%s\"", name);
    const char *p = strstr(index, key);
    if (!p) return -1;
    p = strstr(p, "\"rel_rmse_vs_input\":");
    if (!p) return -1;
    return strtod(p + strlen("\"rel_rmse_vs_input\":"), NULL);
}

static double rel_rmse(const float *x, const float *y, size_t n) {
    double se = 0, sx = 0;
    for (size_t i = 0; i < n; i++) {
        se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        sx += (double)x[i] * x[i];
    }
    return sqrt(se / sx);
}

/* ---- ggml golden vectors ---------------------------------------------------- */

static const char *const golden_types[] = {"f16",  "bf16", "q4_0", "q4_1", "q5_0",   "q5_1",   "q8_0",  "q2_K",
                                           "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs", "tq1_0", "tq2_0"};

TEST(test_golden_vectors) {
    float *in = read_exact(QDIR "q-input.f32", sizeof(float) * N_ROWS * N_COLS);
    char *index = harness_read_file(QDIR "index.json", NULL);
    CHECK(index != NULL);
    if (!in || !index) goto done;
    for (size_t k = 0; k < sizeof golden_types / sizeof *golden_types; k++) {
        const char *name = golden_types[k];
        const int t = dtype_from_name(name);
        const dtype_traits *tr = dtype_get((uint32_t)t);
        CHECK_MSG(tr && tr->to_float && tr->from_float, "%s: no row functions", name);
        if (!tr || !tr->to_float || !tr->from_float) continue;
        const size_t rs = dtype_row_size((uint32_t)t, N_COLS);
        char path[128];
        snprintf(path, sizeof path, QDIR "q-%s.bin", name);
        uint8_t *gold_q = read_exact(path, rs * N_ROWS);
        snprintf(path, sizeof path, QDIR "q-%s.dequant.f32", name);
        float *gold_f = read_exact(path, sizeof(float) * N_ROWS * N_COLS);
        uint8_t *q = calloc(N_ROWS, rs);
        float *f = malloc(sizeof(float) * N_ROWS * N_COLS);
        if (gold_q && gold_f && q && f) {
            for (int r = 0; r < N_ROWS; r++) {
                tr->from_float(in + r * N_COLS, q + r * rs, N_COLS);
                CHECK_MSG(!memcmp(q + r * rs, gold_q + r * rs, rs), "%s: row %d bytes differ from ggml", name, r);
                tr->to_float(gold_q + r * rs, f + r * N_COLS, N_COLS);
                CHECK_MSG(!memcmp(f + r * N_COLS, gold_f + r * N_COLS, sizeof(float) * N_COLS),
                          "%s: row %d dequantized floats differ from ggml", name, r);
            }
            /* reconstruction error of our own encoding, vs ggml's figure */
            for (int r = 0; r < N_ROWS; r++) tr->to_float(q + r * rs, f + r * N_COLS, N_COLS);
            const double ours = rel_rmse(in, f, (size_t)N_ROWS * N_COLS);
            const double ref = golden_rel_rmse(index, name);
            CHECK_MSG(ref > 0 && ours <= ref * 1.05, "%s: rel rmse %g, ggml %g", name, ours, ref);
        }
        free(gold_q);
        free(gold_f);
        free(q);
        free(f);
    }
done:
    free(in);
    free(index);
}

/* Every type with a to_float also encodes, and a row of several blocks
 * round-trips with an error below its format's step (smoke test of n > one
 * block and of the activation types without golden files). */
TEST(test_traits_round_trip) {
    enum { N = 512 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = sinf(0.37f * (float)i) * (1.0f + (float)(i % 7));
    for (uint32_t t = 0; t < KITE_DTYPE_COUNT; t++) {
        const dtype_traits *tr = dtype_get(t);
        if (!tr || !tr->to_float) continue;
        CHECK_MSG(tr->from_float != NULL, "%s: to_float without from_float", tr->name);
        if (!tr->from_float || N % tr->block_size) continue;
        uint8_t *q = malloc(dtype_row_size(t, N));
        tr->from_float(x, q, N);
        tr->to_float(q, y, N);
        free(q);
        const double e = rel_rmse(x, y, N);
        /* ternary types only keep the sign pattern; everything else >= 2 bits */
        const double limit = (t == KITE_DTYPE_TQ1_0 || t == KITE_DTYPE_TQ2_0) ? 0.9 : 0.45;
        CHECK_MSG(e <= limit, "%s: round-trip rel rmse %g > %g", tr->name, e, limit);
    }
}

/* ---- hand-worked blocks ------------------------------------------------------ */

/*
 * q4_0 decode.  d = 0.5 (fp16 0x3800); qs[j] = j | (15 - j) << 4, so
 * element j < 16 has code j and element 16 + j has code 15 - j, and
 * w = (code - 8) * d:
 *   element 0  -> (0 - 8) * 0.5 = -4.0      element 15 -> (15 - 8) * 0.5 = 3.5
 *   element 16 -> (15 - 8) * 0.5 = 3.5      element 31 -> (0 - 8) * 0.5 = -4.0
 *   element 8  -> 0.0                       element 20 -> (11 - 8) * 0.5 = 1.5
 */
TEST(test_q4_0_hand_decode) {
    block_q4_0 b;
    b.d = 0x3800;
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (15 - j) << 4);
    float y[32];
    dequantize_row_q4_0(&b, y, 32);
    CHECK(y[0] == -4.0f);
    CHECK(y[15] == 3.5f);
    CHECK(y[16] == 3.5f);
    CHECK(y[31] == -4.0f);
    CHECK(y[8] == 0.0f);
    CHECK(y[20] == 1.5f);
    for (int j = 0; j < 16; j++) {
        CHECK(y[j] == 0.5f * (float)(j - 8));
        CHECK(y[16 + j] == 0.5f * (float)(7 - j));
    }
}

/*
 * q4_0 encode.  x[j] = j - 8 for j < 16 (so x[0] = -8 is the largest
 * magnitude: d = -8 / -8 = 1.0, fp16 0x3C00, and 1/d = 1), and
 * x[16 + j] = 0.25 j - 2 (-2, -1.75, ..., 1.75).
 * code = min(15, trunc(x / d + 8.5)), i.e. round half up:
 *   j < 16:   trunc(j + 0.5) = j
 *   16 + j:   trunc(6.5 + 0.25 j) = 6 6 7 7 7 7 8 8 8 8 9 9 9 9 10 10
 *             (x = -1.5 -> 7.0 -> code 7 = -1: the tie goes up)
 * byte j = code(j) | code(16 + j) << 4.
 */
TEST(test_q4_0_hand_encode) {
    float x[32];
    for (int j = 0; j < 16; j++) {
        x[j] = (float)(j - 8);
        x[16 + j] = 0.25f * (float)j - 2.0f;
    }
    static const uint8_t hi[16] = {6, 6, 7, 7, 7, 7, 8, 8, 8, 8, 9, 9, 9, 9, 10, 10};
    block_q4_0 b;
    quantize_row_q4_0_ref(x, &b, 32);
    CHECK_EQ_INT(h16(&b.d), 0x3C00);
    for (int j = 0; j < 16; j++) CHECK_EQ_INT(b.qs[j], j | hi[j] << 4);
}

/*
 * q8_0 decode.  d = 0.25 (fp16 0x3400), qs[j] = j - 16: w = (j - 16) / 4,
 * element 0 -> -4.0, element 16 -> 0, element 31 -> 3.75.
 */
TEST(test_q8_0_hand_decode) {
    block_q8_0 b;
    b.d = 0x3400;
    for (int j = 0; j < 32; j++) b.qs[j] = (int8_t)(j - 16);
    float y[32];
    dequantize_row_q8_0(&b, y, 32);
    CHECK(y[0] == -4.0f);
    CHECK(y[16] == 0.0f);
    CHECK(y[31] == 3.75f);
    for (int j = 0; j < 32; j++) CHECK(y[j] == 0.25f * (float)(j - 16));
}

/*
 * q8_0 encode.  absmax 127 -> d = 127 / 127 = 1 (fp16 0x3C00), codes are
 * roundf(x), half away from zero:
 *   127 -> 127, -127 -> -127, 0.5 -> 1, -0.5 -> -1, 1.49 -> 1, 2.5 -> 3,
 *   -2.5 -> -3, 100.2 -> 100, 0.49 -> 0, the rest (j - 16) -> j - 16.
 */
TEST(test_q8_0_hand_encode) {
    float x[32];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    const float v[9] = {127, -127, 0.5f, -0.5f, 1.49f, 2.5f, -2.5f, 100.2f, 0.49f};
    const int8_t want[9] = {127, -127, 1, -1, 1, 3, -3, 100, 0};
    for (int j = 0; j < 9; j++) x[j] = v[j];
    block_q8_0 b;
    quantize_row_q8_0_ref(x, &b, 32);
    CHECK_EQ_INT(h16(&b.d), 0x3C00);
    for (int j = 0; j < 9; j++) CHECK_EQ_INT(b.qs[j], want[j]);
    for (int j = 9; j < 32; j++) CHECK_EQ_INT(b.qs[j], j - 16);
}

/*
 * q4_K decode.  d = 1.0 (0x3C00), dmin = 0.5 (0x3800).  Sub-block j (32
 * elements) has 6-bit scale sc = {1,2,3,4,5,6,7,40} and min m = j.
 * Packing: bytes 0..3 = sc[0..3] (low 6 bits), 4..7 = m[0..3]; bytes 8..11 =
 * sc[4+i] & 15 | (m[4+i] & 15) << 4; the top 2 bits of sc[4+i], m[4+i] go to
 * bits 6..7 of bytes i, 4+i.  Only sc[7] = 40 = 0b10'1000 has top bits (2):
 *   scales = 01 02 03 84 | 00 01 02 03 | 45 56 67 78
 * Codes: sub-block j lives in qs[32*(j/2) .. +32], low nibbles for even j,
 * high for odd; qs[i] = (i % 16) | (15 - i % 16) << 4.  w = d*sc*q - dmin*m:
 *   element 0   (j 0, q 0)  -> 0 - 0          = 0
 *   element 5   (j 0, q 5)  -> 1*5 - 0        = 5
 *   element 32  (j 1, q 15) -> 2*15 - 0.5*1   = 29.5
 *   element 224 (j 7, q 15) -> 40*15 - 0.5*7  = 596.5
 *   element 255 (j 7, q 0)  -> 0 - 3.5        = -3.5
 *   element 200 (j 6, q 8)  -> 7*8 - 0.5*6    = 53
 */
TEST(test_q4_K_hand_decode) {
    block_q4_K b;
    b.d = 0x3C00;
    b.dmin = 0x3800;
    const uint8_t sc[12] = {0x01, 0x02, 0x03, 0x84, 0x00, 0x01, 0x02, 0x03, 0x45, 0x56, 0x67, 0x78};
    memcpy(b.scales, sc, 12);
    for (int i = 0; i < 128; i++) b.qs[i] = (uint8_t)((i % 16) | (15 - i % 16) << 4);
    const int sub_scale[8] = {1, 2, 3, 4, 5, 6, 7, 40};
    for (int j = 0; j < 8; j++) {
        uint8_t s, m;
        kite_get_scale_min_k4(j, b.scales, &s, &m);
        CHECK_EQ_INT(s, sub_scale[j]);
        CHECK_EQ_INT(m, j);
    }
    float y[256];
    dequantize_row_q4_K(&b, y, 256);
    CHECK(y[0] == 0.0f);
    CHECK(y[5] == 5.0f);
    CHECK(y[32] == 29.5f);
    CHECK(y[224] == 596.5f);
    CHECK(y[255] == -3.5f);
    CHECK(y[200] == 53.0f);
    for (int e = 0; e < 256; e++) {
        const int j = e / 32, l = e % 32;
        const int q = j % 2 ? 15 - l % 16 : l % 16;
        CHECK(y[e] == (float)(sub_scale[j] * q) - 0.5f * (float)j);
    }
}

/*
 * q4_K encode.  x[i] = i % 16: every sub-block is 0..15 twice, min 0.  The
 * start of the search (scale (max - min) / 15 = 1, min 0) fits exactly, so
 * no trial can be strictly better: every scale is 1 and every min 0.
 *   scales quantized against the max: 63 * 1 / 1 = 63 each; mins all 0.
 *   d = fp16(1/63): 1/63 = 2^-6 * 1.01587, mantissa 0.01587 * 1024 = 16.25
 *     -> 16, so d = 2^-6 * (1 + 16/1024) = 0x2410 (biased exponent 9);
 *     dmin = fp16(0) = 0x0000.
 *   packed scales: bytes 0..3 = 63 | (63 >> 4) << 6 = 0xFF, bytes 4..7 = 0,
 *     bytes 8..11 = 63 & 15 = 0x0F.
 *   codes: decoded scale d*63 = 4095/4096, x / that rounds back to x, so
 *     code = i % 16; byte 32g + l = L[64g + l] | L[64g + l + 32] << 4
 *     = (l % 16) * 0x11.
 */
TEST(test_q4_K_hand_encode) {
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 16);
    block_q4_K b;
    quantize_row_q4_K_ref(x, &b, 256);
    CHECK_EQ_INT(h16(&b.d), 0x2410);
    CHECK_EQ_INT(h16(&b.dmin), 0x0000);
    static const uint8_t sc[12] = {0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0x0F, 0x0F, 0x0F, 0x0F};
    for (int i = 0; i < 12; i++) CHECK_EQ_INT(b.scales[i], sc[i]);
    for (int i = 0; i < 128; i++) CHECK_EQ_INT(b.qs[i], (i % 16) * 0x11);
}

/*
 * q6_K decode.  d = 0.5 (0x3800); scales[s] = s + 1, except scales[15] = -3.
 * Every ql byte is 0x21 (low nibble 1, high 2), every qh byte 0xE4 =
 * 0b11'10'01'00 (bits 2k..2k+1 = k).  Element 128h + 32k + l has its low 4
 * bits in ql[64h + l + 32*(k%2)] (low nibble for k < 2, high for k >= 2)
 * and bits 4..5 from qh[32h + l] >> 2k, so the 6-bit code and q = code - 32:
 *   k = 0: 1 | 0 << 4 = 1  -> -31        k = 1: 1 | 1 << 4 = 17 -> -15
 *   k = 2: 2 | 2 << 4 = 34 ->   2        k = 3: 2 | 3 << 4 = 50 ->  18
 * Sub-block = element / 16; w = d * scale * q:
 *   element 0   (sub 0, k 0)  -> 0.5 * 1 * -31  = -15.5
 *   element 40  (sub 2, k 1)  -> 0.5 * 3 * -15  = -22.5
 *   element 200 (sub 12, k 2) -> 0.5 * 13 * 2   = 13
 *   element 255 (sub 15, k 3) -> 0.5 * -3 * 18  = -27
 */
TEST(test_q6_K_hand_decode) {
    block_q6_K b;
    b.d = 0x3800;
    memset(b.ql, 0x21, sizeof b.ql);
    memset(b.qh, 0xE4, sizeof b.qh);
    for (int s = 0; s < 16; s++) b.scales[s] = (int8_t)(s + 1);
    b.scales[15] = -3;
    float y[256];
    dequantize_row_q6_K(&b, y, 256);
    CHECK(y[0] == -15.5f);
    CHECK(y[40] == -22.5f);
    CHECK(y[200] == 13.0f);
    CHECK(y[255] == -27.0f);
    static const int qk[4] = {-31, -15, 2, 18};
    for (int e = 0; e < 256; e++) CHECK(y[e] == 0.5f * (float)b.scales[e / 16] * (float)qk[(e / 32) % 4]);
}

/*
 * q6_K encode.  In every 16-element sub-block x[0] = -32 and x[i] = i - 8
 * (i = 1..15, so -7..7).  The search starts at 1/scale = -32 / max = 1,
 * codes x exactly.  The 18 trials scale that by 1 +- 0.1k/32 (at most
 * 2.8%): |x| <= 7 moves < 0.2 (same code); -32 stays -32 (clamped) for the
 * growing trials, which therefore tie, and becomes -31 for the shrinking
 * ones, which fit worse (exact codes are the least-squares optimum).  The
 * fitted scale sum(x^2 x l) / sum(x^2 l^2) = sum x^4 / sum x^4 = 1 exactly
 * (integers < 2^24).
 *   all 16 scales 1.0 -> max scale 1 -> 1/d = -128 / 1, d = -1/128 =
 *     -2^-7 -> fp16 0xA000; int8 scales = round(-128 * 1) = -128 (0x80).
 *   decode scale d * -128 = 1, so code = x + 32: i = 0 -> 0,
 *     i = 1..7 -> 25..31, i = 8..15 -> 32..39.
 * Since code depends on e % 16 = l % 16 only, the two ql nibbles of a byte
 * are equal: ql = (code & 15) * 0x11, i.e. i = 0: 0x00, 1..7: 0x11*(i+8)
 * (0x99..0xFF), 8..15: 0x11*(i-8) (0x00..0x77); qh = (code >> 4) * 0x55:
 * i = 0: 0x00, 1..7: 0x55, 8..15: 0xAA.
 */
TEST(test_q6_K_hand_encode) {
    float x[256];
    for (int e = 0; e < 256; e++) x[e] = e % 16 == 0 ? -32.0f : (float)(e % 16 - 8);
    block_q6_K b;
    quantize_row_q6_K_ref(x, &b, 256);
    CHECK_EQ_INT(h16(&b.d), 0xA000);
    for (int s = 0; s < 16; s++) CHECK_EQ_INT(b.scales[s], -128);
    for (int k = 0; k < 128; k++) {
        const int i = k % 16;
        const int want = i == 0 ? 0x00 : i < 8 ? 0x11 * (i + 8) : 0x11 * (i - 8);
        CHECK_EQ_INT(b.ql[k], want);
    }
    for (int k = 0; k < 64; k++) {
        const int i = k % 16;
        CHECK_EQ_INT(b.qh[k], i == 0 ? 0x00 : i < 8 ? 0x55 : 0xAA);
    }
    float y[256];
    dequantize_row_q6_K(&b, y, 256);
    for (int e = 0; e < 256; e++) CHECK(y[e] == x[e]); /* integers <= 32: exact */
}

/*
 * q8_1: like q8_0 plus s = d * sum(q) (unrounded d).  x = j - 16 with
 * x[31] = 127: d = 1, q = x, sum = (-16 + ... + 14) + 127 = -31 + 127 = 96
 * -> s = fp16(96) = 0x5600.
 * q8_K: float d = 1 / (-127 / max); with max = -127 (x[0]) d = 1 exactly,
 * q = x, and bsums[g] = sum of the 16 codes of group g.
 */
TEST(test_q8_1_q8_K_hand) {
    float x[256];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16);
    x[31] = 127;
    block_q8_1 b1;
    quantize_row_q8_1_ref(x, &b1, 32);
    CHECK_EQ_INT(h16(&b1.d), 0x3C00);
    CHECK_EQ_INT(h16(&b1.s), 0x5600);
    for (int e = 0; e < 256; e++) x[e] = (float)(e % 64 - 32);
    x[0] = -127;
    static block_q8_K bk; /* 292 bytes, float aligned */
    quantize_row_q8_K_ref(x, &bk, 256);
    CHECK(bk.d == 1.0f);
    for (int e = 0; e < 256; e++) CHECK_EQ_INT(bk.qs[e], (int)x[e]);
    /* groups of 16 of e % 64 - 32: sums -392, -136, 120, 376 (repeating),
     * group 0 has -127 in place of -32: -392 - 95 = -487 */
    static const int sums[4] = {-392, -136, 120, 376};
    for (int g = 0; g < 16; g++) CHECK_EQ_INT(bk.bsums[g], g == 0 ? -487 : sums[g % 4]);
    float y[256];
    dequantize_row_q8_K(&bk, y, 256);
    for (int e = 0; e < 256; e++) CHECK(y[e] == x[e]);
}

/* Zero blocks stay exact zeros in every type (ggml's special cases). */
TEST(test_zero_rows) {
    float z[256] = {0}, y[256];
    for (uint32_t t = 0; t < KITE_DTYPE_COUNT; t++) {
        const dtype_traits *tr = dtype_get(t);
        if (!tr || !tr->to_float || !tr->from_float) continue;
        float q[256]; /* room for the largest row (f32), float-aligned for q8_K */
        tr->from_float(z, q, 256);
        tr->to_float(q, y, 256);
        for (int e = 0; e < 256; e++) CHECK_MSG(y[e] == 0.0f, "%s: element %d = %g", tr->name, e, y[e]);
    }
}

/* ---- the stories260K files written by llama-quantize ----------------------- */

static const char *const model_ftypes[] = {"Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "TQ1_0"};

/* Logits [N_POS][N_VOCAB] of the golden ids in one batch (malloc), or NULL. */
static float *model_logits(const char *path, const int32_t *ids) {
    kite_model *m = NULL;
    kite_ctx *c = NULL;
    float *out = NULL;
    int rc = kite_model_load(path, NULL, &m);
    CHECK_MSG(rc == KITE_OK, "load %s: %s", path, kite_last_error());
    if (rc != KITE_OK) goto done;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_threads = 2;
    rc = kite_ctx_new(m, &cp, &c);
    CHECK_MSG(rc == KITE_OK, "ctx %s: %s", path, kite_last_error());
    if (rc != KITE_OK) goto done;
    rc = kite_ctx_eval(c, ids, N_POS, true);
    CHECK_MSG(rc == KITE_OK, "eval %s: %s", path, kite_last_error());
    if (rc != KITE_OK) goto done;
    out = malloc(sizeof(float) * N_POS * N_VOCAB);
    for (int i = 0; out && i < N_POS; i++) memcpy(out + i * N_VOCAB, kite_ctx_logits(c, i), sizeof(float) * N_VOCAB);
done:
    kite_ctx_free(c);
    kite_model_free(m);
    return out;
}

/* Writes a copy of src with every tensor converted to F32 by its to_float. */
static int write_dequantized(const char *src, const char *dst) {
    gguf_ctx *g = NULL;
    gguf_writer *w = NULL;
    float **bufs = NULL;
    int rc = gguf_open(src, NULL, &g);
    CHECK_MSG(rc == KITE_OK, "%s", kite_last_error());
    if (rc != KITE_OK) return rc;
    w = gguf_writer_new();
    bufs = calloc(g->n_tensors + 1, sizeof *bufs);
    rc = w && bufs ? KITE_OK : KITE_E_NOMEM;
    for (uint64_t i = 0; rc == KITE_OK && i < g->n_kv; i++) {
        char *key = gguf_str_dup(g->kv[i].key);
        rc = key ? gguf_writer_set_value(w, key, &g->kv[i].value) : KITE_E_NOMEM;
        free(key);
    }
    for (uint64_t i = 0; rc == KITE_OK && i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const dtype_traits *tr = dtype_get(t->type);
        CHECK_MSG(tr && tr->to_float, "%s: no to_float for type %u", src, t->type);
        if (!tr || !tr->to_float) {
            rc = KITE_E_UNSUPPORTED;
            break;
        }
        int64_t n = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
        bufs[i] = malloc(sizeof(float) * (size_t)n);
        if (!bufs[i]) {
            rc = KITE_E_NOMEM;
            break;
        }
        const int64_t n_rows = n / t->ne[0];
        const size_t rs = dtype_row_size(t->type, t->ne[0]);
        for (int64_t r = 0; r < n_rows; r++)
            tr->to_float((const uint8_t *)t->data + (size_t)r * rs, bufs[i] + r * t->ne[0], t->ne[0]);
        char *name = gguf_str_dup(t->name);
        rc = name ? gguf_writer_add_tensor(w, name, KITE_DTYPE_F32, t->n_dims, t->ne, bufs[i]) : KITE_E_NOMEM;
        free(name);
    }
    if (rc == KITE_OK) rc = gguf_writer_write(w, dst);
    CHECK_MSG(rc == KITE_OK, "writing %s: %s", dst, kite_last_error());
    for (uint64_t i = 0; bufs && i < g->n_tensors; i++) free(bufs[i]);
    free(bufs);
    gguf_writer_free(w);
    gguf_close(g);
    return rc;
}

/* Dequantize-then-f32: each file, converted to F32 by kite's to_float, must
 * give the reference logits (float32 forward of ggml's dequantized weights)
 * within the 1e-4 of the golden README: this pins every to_float of the
 * types these files use (F16, Q8_0, Q5_0, Q5_1, Q4_0, IQ4_NL) end to end. */
TEST(test_quant_models_dequantized) {
    int32_t ids[N_POS];
    CHECK(golden_input_ids(GOLD_LOGITS_JSON, ids, N_POS) == 0);
    for (size_t k = 0; k < sizeof model_ftypes / sizeof *model_ftypes; k++) {
        char src[256], dst[256], gold_path[256];
        snprintf(src, sizeof src, "tests/data/quant-models/stories260K-%s.gguf", model_ftypes[k]);
        snprintf(dst, sizeof dst, "%s/%s-f32.gguf", tmpdir, model_ftypes[k]);
        snprintf(gold_path, sizeof gold_path, "tests/data/golden/stories260K-%s-logits-once.f32", model_ftypes[k]);
        float *gold = read_exact(gold_path, sizeof(float) * N_POS * N_VOCAB);
        float *got = NULL;
        if (gold && write_dequantized(src, dst) == KITE_OK) got = model_logits(dst, ids);
        if (gold && got) {
            double m = 0;
            for (int i = 0; i < N_POS * N_VOCAB; i++) {
                double d = fabs((double)got[i] - gold[i]);
                if (!(d <= m)) m = d; /* NaN propagates */
            }
            printf("    %-7s dequantized-f32 max abs error %.3g\n", model_ftypes[k], m);
            CHECK_MSG(m <= 1e-4, "%s: max abs error %g > 1e-4", model_ftypes[k], m);
        }
        unlink(dst);
        free(gold);
        free(got);
    }
}

/* The files as they are.  The matmul may quantize activations to 8 bits for
 * quantized weights (as llama.cpp does): llama.cpp itself differs from the
 * reference by up to 0.243 on these files (llamacpp_vs_reference_max_abs_diff
 * in stories260K-quant-logits-once.json) with 32/32 argmax agreement.  0.5
 * is twice that; 28/32 leaves room for near-ties flipped by that error.
 * With a float matmul the error is ~1e-5 and these checks hold trivially. */
TEST(test_quant_models_as_is) {
    int32_t ids[N_POS];
    CHECK(golden_input_ids(GOLD_LOGITS_JSON, ids, N_POS) == 0);
    for (size_t k = 0; k < sizeof model_ftypes / sizeof *model_ftypes; k++) {
        char src[256], gold_path[256];
        snprintf(src, sizeof src, "tests/data/quant-models/stories260K-%s.gguf", model_ftypes[k]);
        snprintf(gold_path, sizeof gold_path, "tests/data/golden/stories260K-%s-logits-once.f32", model_ftypes[k]);
        float *gold = read_exact(gold_path, sizeof(float) * N_POS * N_VOCAB);
        float *got = gold ? model_logits(src, ids) : NULL;
        if (gold && got) {
            double m = 0;
            int agree = 0;
            for (int p = 0; p < N_POS; p++) {
                int a = 0, b = 0;
                for (int v = 0; v < N_VOCAB; v++) {
                    const int i = p * N_VOCAB + v;
                    double d = fabs((double)got[i] - gold[i]);
                    if (!(d <= m)) m = d;
                    if (got[i] > got[p * N_VOCAB + a]) a = v;
                    if (gold[i] > gold[p * N_VOCAB + b]) b = v;
                }
                agree += a == b;
            }
            printf("    %-7s as-is max abs error %.3g, argmax agreement %d/32\n", model_ftypes[k], m, agree);
            CHECK_MSG(m <= 0.5, "%s: max abs error %g > 0.5", model_ftypes[k], m);
            CHECK_MSG(agree >= 28, "%s: argmax agreement %d/32", model_ftypes[k], agree);
        }
        free(gold);
        free(got);
    }
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_golden_vectors);
    RUN(test_traits_round_trip);
    RUN(test_q4_0_hand_decode);
    RUN(test_q4_0_hand_encode);
    RUN(test_q8_0_hand_decode);
    RUN(test_q8_0_hand_encode);
    RUN(test_q4_K_hand_decode);
    RUN(test_q4_K_hand_encode);
    RUN(test_q6_K_hand_decode);
    RUN(test_q6_K_hand_encode);
    RUN(test_q8_1_q8_K_hand);
    RUN(test_zero_rows);
    RUN(test_quant_models_dequantized);
    RUN(test_quant_models_as_is);
    rmdir(tmpdir);
    return harness_summary(__FILE__);
}
