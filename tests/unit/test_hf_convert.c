/*
 * test_hf_convert.c - Hugging Face directory -> GGUF (tools/convert/).
 *
 * Tiny Hugging Face directories (config.json, tokenizer.json,
 * tokenizer_config.json, model-0000k-of-00002.safetensors + index, or one
 * model.safetensors) are written to a mkdtemp() directory for llama, qwen2,
 * qwen3, mixtral, qwen3_moe, gpt2, gemma2 and phi3 shapes, converted with hf_convert(),
 * and read back with the GGUF reader:
 *   - metadata keys and types (llama.cpp names), vocabulary arrays;
 *   - every tensor equals its source, with the q/k row permutation (llama),
 *     expert stacking (MoE) and Conv1D transposition (gpt2) computed here
 *     independently of the converter;
 *   - llama: the converted model's logits in kite equal those of the same
 *     model written directly as GGUF in llama.cpp orientation (weights made
 *     in GGUF orientation first, the Hugging Face q/k derived with the
 *     inverse, Hugging Face-side permutation); a control GGUF with the
 *     unpermuted q/k gives different logits, so the check has teeth;
 *   - phi3: fused qkv/gate_up and LongRoPE factors; the logits equal a
 *     directly written phi3 GGUF with the short and the long factors;
 *   - --type f16/bf16/q8_0 types and values (q8_0 falls back to f16 for
 *     rows not a multiple of 32; norms stay f32);
 *   - malformed safetensors and directories fail with one-line messages
 *     naming the file and the field.
 * `test_hf_convert --write-fixture DIR` only writes the tiny llama directory
 * (used by tests/e2e/test_hf_convert.sh).
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "harness.h"
#include "convert/hf_convert.h"
#include "convert/hf_internal.h"
#include "convert/safetensors.h"
#include "kite.h"
#include "tensor/dtype.h"
#include "tokenizer/vocab.h"

static char tmpdir[256];

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* A path in tmpdir that stays valid for the whole scope (tpath's buffers rotate). */
#define TPATH(var, name)                                                                                        \
    char var[512];                                                                                              \
    snprintf(var, sizeof var, "%s/%s", tmpdir, name)

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot write %s", path);
    if (!f) return;
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

static void write_json(const char *path, cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    write_bytes(path, s, strlen(s));
    free(s);
    cJSON_Delete(j);
}

/* ---- source tensors ------------------------------------------------------ */

typedef struct src {
    char name[128];
    uint32_t dtype;  /* F32, F16, BF16 */
    int nd;          /* 1 or 2 */
    int64_t d0, d1;  /* PyTorch shape [d0] or [d0, d1] */
    float *v;        /* d0*d1 values, exactly representable in dtype */
    int shard;       /* 0 or 1 */
} src;

#define MAX_SRC 256
static src srcs[MAX_SRC];
static int n_srcs;
static uint64_t rng = 1;

static float frand(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) & 0xFFFFFF) / (float)0x1000000 - 0.5f;
}

static float round_to(uint32_t dt, float x) {
    if (dt == KITE_DTYPE_F16) return fp16_to_fp32(fp32_to_fp16(x));
    if (dt == KITE_DTYPE_BF16) return bf16_to_fp32(fp32_to_bf16(x));
    return x;
}

static void reset_srcs(void) {
    for (int i = 0; i < n_srcs; i++) free(srcs[i].v);
    n_srcs = 0;
}

/* Adds a source tensor; values random, or copied from init (d0*d1 floats). */
static src *add(const char *name, uint32_t dt, int nd, int64_t d0, int64_t d1, int shard, const float *init) {
    KITE_ASSERT(n_srcs < MAX_SRC);
    src *s = &srcs[n_srcs++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->dtype = dt;
    s->nd = nd;
    s->d0 = d0;
    s->d1 = nd == 1 ? 1 : d1;
    s->shard = shard;
    s->v = malloc(sizeof(float) * (size_t)(s->d0 * s->d1));
    for (int64_t i = 0; i < s->d0 * s->d1; i++) s->v[i] = round_to(dt, init ? init[i] : frand());
    return s;
}

static const src *find_src(const char *name) {
    for (int i = 0; i < n_srcs; i++)
        if (!strcmp(srcs[i].name, name)) return &srcs[i];
    return NULL;
}

/* Adds the source tensor sname to w as the F32 tensor gname (GGUF order:
 * columns first). */
static void add_src_f32(gguf_writer *w, const char *gname, const char *sname) {
    const src *s = find_src(sname);
    const int64_t ne[2] = {s->nd == 1 ? s->d0 : s->d1, s->nd == 1 ? 1 : s->d0};
    gguf_writer_add_tensor(w, gname, KITE_DTYPE_F32, (uint32_t)s->nd, ne, s->v);
}

static const char *st_dtype(uint32_t dt) { return dt == KITE_DTYPE_F32 ? "F32" : dt == KITE_DTYPE_F16 ? "F16" : "BF16"; }
static size_t el_size(uint32_t dt) { return dt == KITE_DTYPE_F32 ? 4 : 2; }

/* Writes the tensors of one shard as a .safetensors file. */
static void write_safetensors(const char *path, int shard) {
    cJSON *h = cJSON_CreateObject();
    size_t off = 0;
    for (int i = 0; i < n_srcs; i++) {
        const src *s = &srcs[i];
        if (s->shard != shard) continue;
        cJSON *e = cJSON_AddObjectToObject(h, s->name);
        cJSON_AddStringToObject(e, "dtype", st_dtype(s->dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)s->d0));
        if (s->nd == 2) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)s->d1));
        size_t n = (size_t)(s->d0 * s->d1) * el_size(s->dtype);
        cJSON *o = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off + n)));
        off += n;
    }
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    char *js = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t hl = strlen(js), pad = (8 - hl % 8) % 8;
    size_t total = 8 + hl + pad + off;
    uint8_t *buf = malloc(total);
    uint64_t hlen = hl + pad;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + 8, js, hl);
    memset(buf + 8 + hl, ' ', pad);
    free(js);
    uint8_t *d = buf + 8 + hlen;
    for (int i = 0; i < n_srcs; i++) {
        const src *s = &srcs[i];
        if (s->shard != shard) continue;
        for (int64_t k = 0; k < s->d0 * s->d1; k++) {
            if (s->dtype == KITE_DTYPE_F32) {
                memcpy(d, &s->v[k], 4);
                d += 4;
            } else {
                uint16_t x = s->dtype == KITE_DTYPE_F16 ? fp32_to_fp16(s->v[k]) : fp32_to_bf16(s->v[k]);
                memcpy(d, &x, 2);
                d += 2;
            }
        }
    }
    write_bytes(path, buf, total);
    free(buf);
}

/* Writes the weights: 2 shards + index, or one model.safetensors. */
static void write_weights(bool sharded) {
    if (!sharded) {
        for (int i = 0; i < n_srcs; i++) srcs[i].shard = 0;
        write_safetensors(tpath("model.safetensors"), 0);
        return;
    }
    const char *names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    write_safetensors(tpath(names[0]), 0);
    write_safetensors(tpath(names[1]), 1);
    cJSON *idx = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(idx, "metadata");
    cJSON_AddNumberToObject(meta, "total_size", 0);
    cJSON *wm = cJSON_AddObjectToObject(idx, "weight_map");
    for (int i = 0; i < n_srcs; i++) cJSON_AddStringToObject(wm, srcs[i].name, names[srcs[i].shard]);
    write_json(tpath("model.safetensors.index.json"), idx);
}

static void clean_dir(void) {
    const char *files[] = {"model.safetensors", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                           "model.safetensors.index.json", "config.json", "tokenizer.json", "tokenizer_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(tpath(files[i]));
}

/* ---- tokenizers ------------------------------------------------------------ */

/* SentencePiece-style BPE (Llama 2 layout): <unk> <s> </s>, 256 byte tokens,
 * then ▁ a b ▁a ab ▁ab with merges "▁ a", "a b", "▁a b". 265 tokens. */
static void write_spm_tokenizer(void) {
    cJSON *t = cJSON_CreateObject();
    cJSON *added = cJSON_AddArrayToObject(t, "added_tokens");
    const char *sp[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", i);
        cJSON_AddStringToObject(a, "content", sp[i]);
        cJSON_AddBoolToObject(a, "special", 1);
        cJSON_AddItemToArray(added, a);
    }
    cJSON *m = cJSON_AddObjectToObject(t, "model");
    cJSON_AddStringToObject(m, "type", "BPE");
    cJSON_AddBoolToObject(m, "byte_fallback", 1);
    cJSON_AddStringToObject(m, "unk_token", "<unk>");
    cJSON *v = cJSON_AddObjectToObject(m, "vocab");
    for (int i = 0; i < 3; i++) cJSON_AddNumberToObject(v, sp[i], i);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        cJSON_AddNumberToObject(v, s, 3 + b);
    }
    const char *pieces[6] = {"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81" "ab"};
    for (int i = 0; i < 6; i++) cJSON_AddNumberToObject(v, pieces[i], 259 + i);
    cJSON *mg = cJSON_AddArrayToObject(m, "merges");
    cJSON_AddItemToArray(mg, cJSON_CreateString("\xE2\x96\x81 a"));
    cJSON_AddItemToArray(mg, cJSON_CreateString("a b"));
    cJSON_AddItemToArray(mg, cJSON_CreateString("\xE2\x96\x81" "a b"));
    cJSON *dec = cJSON_AddObjectToObject(t, "decoder");
    cJSON_AddStringToObject(dec, "type", "Sequence");
    write_json(tpath("tokenizer.json"), t);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "bos_token", "<s>");
    cJSON *eos = cJSON_AddObjectToObject(c, "eos_token");
    cJSON_AddStringToObject(eos, "content", "</s>");
    cJSON_AddStringToObject(c, "unk_token", "<unk>");
    cJSON_AddBoolToObject(c, "add_bos_token", 1);
    cJSON_AddBoolToObject(c, "add_eos_token", 0);
    cJSON_AddStringToObject(c, "chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}");
    write_json(tpath("tokenizer_config.json"), c);
}

static const char re_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* Byte-level BPE (Qwen2 layout): printable ASCII '!'..'~' (ids 0..93),
 * "Ġ" 94, "Ġa" 95, "ab" 96, added <|endoftext|> 97 and <|im_end|> 98
 * (special) and <think> 99 (not special); merges in the [a, b] pair form.
 * pre_regex NULL: a plain GPT-2 ByteLevel pre-tokenizer. */
static void write_bpe_tokenizer(const char *pre_regex, bool pair_merges) {
    cJSON *t = cJSON_CreateObject();
    cJSON *added = cJSON_AddArrayToObject(t, "added_tokens");
    const char *sp[3] = {"<|endoftext|>", "<|im_end|>", "<think>"};
    for (int i = 0; i < 3; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", 97 + i);
        cJSON_AddStringToObject(a, "content", sp[i]);
        cJSON_AddBoolToObject(a, "special", i < 2);
        cJSON_AddItemToArray(added, a);
    }
    cJSON *pt = cJSON_AddObjectToObject(t, "pre_tokenizer");
    if (pre_regex) {
        cJSON_AddStringToObject(pt, "type", "Sequence");
        cJSON *seq = cJSON_AddArrayToObject(pt, "pretokenizers");
        cJSON *sp1 = cJSON_CreateObject();
        cJSON_AddStringToObject(sp1, "type", "Split");
        cJSON *pat = cJSON_AddObjectToObject(sp1, "pattern");
        cJSON_AddStringToObject(pat, "Regex", pre_regex);
        cJSON_AddStringToObject(sp1, "behavior", "Isolated");
        cJSON_AddItemToArray(seq, sp1);
        cJSON *bl = cJSON_CreateObject();
        cJSON_AddStringToObject(bl, "type", "ByteLevel");
        cJSON_AddBoolToObject(bl, "use_regex", 0);
        cJSON_AddItemToArray(seq, bl);
    } else {
        cJSON_AddStringToObject(pt, "type", "ByteLevel");
        cJSON_AddBoolToObject(pt, "add_prefix_space", 0);
        cJSON_AddBoolToObject(pt, "use_regex", 1);
    }
    cJSON *m = cJSON_AddObjectToObject(t, "model");
    cJSON_AddStringToObject(m, "type", "BPE");
    cJSON_AddBoolToObject(m, "byte_fallback", 0);
    cJSON *v = cJSON_AddObjectToObject(m, "vocab");
    for (int c = '!'; c <= '~'; c++) {
        char s[2] = {(char)c, 0};
        cJSON_AddNumberToObject(v, s, c - '!');
    }
    cJSON_AddNumberToObject(v, "\xC4\xA0", 94);
    cJSON_AddNumberToObject(v, "\xC4\xA0" "a", 95);
    cJSON_AddNumberToObject(v, "ab", 96);
    cJSON *mg = cJSON_AddArrayToObject(m, "merges");
    const char *pairs[2][2] = {{"\xC4\xA0", "a"}, {"a", "b"}};
    for (int i = 0; i < 2; i++) {
        if (pair_merges) {
            cJSON *p = cJSON_CreateArray();
            cJSON_AddItemToArray(p, cJSON_CreateString(pairs[i][0]));
            cJSON_AddItemToArray(p, cJSON_CreateString(pairs[i][1]));
            cJSON_AddItemToArray(mg, p);
        } else {
            char s[16];
            snprintf(s, sizeof s, "%s %s", pairs[i][0], pairs[i][1]);
            cJSON_AddItemToArray(mg, cJSON_CreateString(s));
        }
    }
    write_json(tpath("tokenizer.json"), t);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddBoolToObject(c, "add_bos_token", 0);
    cJSON_AddStringToObject(c, "eos_token", "<|im_end|>");
    cJSON_AddNullToObject(c, "bos_token");
    cJSON_AddStringToObject(c, "pad_token", "<|endoftext|>");
    write_json(tpath("tokenizer_config.json"), c);
}

/* ---- configs ---------------------------------------------------------------- */

typedef struct shape {
    const char *model_type;
    int E, F, L, H, KV, V, FE, NX, NXU; /* FE/NX/NXU: MoE expert ff, experts, used */
    bool tie;
} shape;

static void write_config(const shape *s) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "model_type", s->model_type);
    if (!strcmp(s->model_type, "gpt2")) {
        cJSON_AddNumberToObject(c, "n_embd", s->E);
        cJSON_AddNumberToObject(c, "n_layer", s->L);
        cJSON_AddNumberToObject(c, "n_head", s->H);
        cJSON_AddNumberToObject(c, "n_ctx", 64);
        cJSON_AddNumberToObject(c, "n_positions", 64);
        cJSON_AddNullToObject(c, "n_inner");
        cJSON_AddNumberToObject(c, "layer_norm_epsilon", 1e-5);
        cJSON_AddNumberToObject(c, "vocab_size", s->V);
    } else {
        cJSON_AddNumberToObject(c, "hidden_size", s->E);
        cJSON_AddNumberToObject(c, "intermediate_size", s->F);
        cJSON_AddNumberToObject(c, "num_hidden_layers", s->L);
        cJSON_AddNumberToObject(c, "num_attention_heads", s->H);
        cJSON_AddNumberToObject(c, "num_key_value_heads", s->KV);
        cJSON_AddNumberToObject(c, "max_position_embeddings", 64);
        cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-5);
        cJSON_AddNumberToObject(c, "rope_theta", 10000.0);
        cJSON_AddNumberToObject(c, "vocab_size", s->V);
        cJSON_AddBoolToObject(c, "tie_word_embeddings", s->tie);
        cJSON_AddNumberToObject(c, "bos_token_id", !strcmp(s->model_type, "llama") ? 1 : 97);
        cJSON_AddNumberToObject(c, "eos_token_id", !strcmp(s->model_type, "llama") ? 2 : 98);
        if (!strcmp(s->model_type, "mixtral")) {
            cJSON_AddNumberToObject(c, "num_local_experts", s->NX);
            cJSON_AddNumberToObject(c, "num_experts_per_tok", s->NXU);
        }
        if (!strcmp(s->model_type, "qwen3_moe")) {
            cJSON_AddNumberToObject(c, "num_experts", s->NX);
            cJSON_AddNumberToObject(c, "num_experts_per_tok", s->NXU);
            cJSON_AddNumberToObject(c, "moe_intermediate_size", s->FE);
        }
        if (!strncmp(s->model_type, "qwen3", 5)) cJSON_AddNumberToObject(c, "head_dim", s->E / s->H);
    }
    write_json(tpath("config.json"), c);
}

/* HF checkpoint tensors for a llama-like shape.  q/k values of layer l come
 * from gguf_q/gguf_k (GGUF orientation, [H*hd][E] and [KV*hd][E]) when given:
 * the HF rows are derived with the Hugging Face side permutation (row
 * h*hd + j*hd/2 + i of HF holds row h*hd + 2i + j of GGUF). */
static void hf_from_gguf_rows(const float *g, float *hf, int64_t n_head, int64_t hd, int64_t cols) {
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t j = 0; j < 2; j++)
            for (int64_t i = 0; i < hd / 2; i++)
                memcpy(hf + (h * hd + j * (hd / 2) + i) * cols, g + (h * hd + 2 * i + j) * cols, sizeof(float) * (size_t)cols);
}

static void add_llama_like(const shape *s, float **gguf_q, float **gguf_k) {
    const int E = s->E, hd = s->E / s->H, Q = s->H * hd, KV = s->KV * hd;
    bool qwen2 = !strcmp(s->model_type, "qwen2"), qwen3 = !strncmp(s->model_type, "qwen3", 5);
    bool mixtral = !strcmp(s->model_type, "mixtral"), qmoe = !strcmp(s->model_type, "qwen3_moe");
    char n[128];
    add("model.embed_tokens.weight", KITE_DTYPE_BF16, 2, s->V, E, 0, NULL);
    for (int l = 0; l < s->L; l++) {
        int sh = l == 0 ? 0 : 1;
#define A(suffix, dt, nd, d0, d1, init)                                                                         \
    do {                                                                                                        \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                                 \
        add(n, dt, nd, d0, d1, sh, init);                                                                       \
    } while (0)
        A("input_layernorm.weight", KITE_DTYPE_F32, 1, E, 1, NULL);
        float *hq = NULL, *hk = NULL;
        if (gguf_q) {
            hq = malloc(sizeof(float) * (size_t)Q * E);
            hk = malloc(sizeof(float) * (size_t)KV * E);
            hf_from_gguf_rows(gguf_q[l], hq, s->H, hd, E);
            hf_from_gguf_rows(gguf_k[l], hk, s->KV, hd, E);
        }
        A("self_attn.q_proj.weight", KITE_DTYPE_F32, 2, Q, E, hq);
        A("self_attn.k_proj.weight", KITE_DTYPE_F16, 2, KV, E, hk);
        free(hq);
        free(hk);
        A("self_attn.v_proj.weight", KITE_DTYPE_F32, 2, KV, E, NULL);
        A("self_attn.o_proj.weight", KITE_DTYPE_F32, 2, E, Q, NULL);
        if (qwen2) {
            A("self_attn.q_proj.bias", KITE_DTYPE_F32, 1, Q, 1, NULL);
            A("self_attn.k_proj.bias", KITE_DTYPE_F32, 1, KV, 1, NULL);
            A("self_attn.v_proj.bias", KITE_DTYPE_F32, 1, KV, 1, NULL);
        }
        if (qwen3) {
            A("self_attn.q_norm.weight", KITE_DTYPE_F32, 1, hd, 1, NULL);
            A("self_attn.k_norm.weight", KITE_DTYPE_F32, 1, hd, 1, NULL);
        }
        A("post_attention_layernorm.weight", KITE_DTYPE_F32, 1, E, 1, NULL);
        if (mixtral) {
            A("block_sparse_moe.gate.weight", KITE_DTYPE_F32, 2, s->NX, E, NULL);
            for (int x = 0; x < s->NX; x++) {
                char leaf[64];
                snprintf(leaf, sizeof leaf, "block_sparse_moe.experts.%d.w1.weight", x);
                A(leaf, KITE_DTYPE_F32, 2, s->F, E, NULL);
                snprintf(leaf, sizeof leaf, "block_sparse_moe.experts.%d.w2.weight", x);
                A(leaf, KITE_DTYPE_F32, 2, E, s->F, NULL);
                snprintf(leaf, sizeof leaf, "block_sparse_moe.experts.%d.w3.weight", x);
                A(leaf, KITE_DTYPE_F32, 2, s->F, E, NULL);
            }
        } else if (qmoe) {
            A("mlp.gate.weight", KITE_DTYPE_F32, 2, s->NX, E, NULL);
            for (int x = 0; x < s->NX; x++) {
                char leaf[64];
                snprintf(leaf, sizeof leaf, "mlp.experts.%d.gate_proj.weight", x);
                A(leaf, KITE_DTYPE_F32, 2, s->FE, E, NULL);
                snprintf(leaf, sizeof leaf, "mlp.experts.%d.up_proj.weight", x);
                A(leaf, KITE_DTYPE_F32, 2, s->FE, E, NULL);
                snprintf(leaf, sizeof leaf, "mlp.experts.%d.down_proj.weight", x);
                A(leaf, KITE_DTYPE_F32, 2, E, s->FE, NULL);
            }
        } else {
            A("mlp.gate_proj.weight", KITE_DTYPE_F32, 2, s->F, E, NULL);
            A("mlp.up_proj.weight", KITE_DTYPE_F32, 2, s->F, E, NULL);
            A("mlp.down_proj.weight", KITE_DTYPE_F32, 2, E, s->F, NULL);
        }
        snprintf(n, sizeof n, "model.layers.%d.self_attn.rotary_emb.inv_freq", l);
        add(n, KITE_DTYPE_F32, 1, hd / 2, 1, sh, NULL); /* ignored, as llama.cpp does */
#undef A
    }
    add("model.norm.weight", KITE_DTYPE_F32, 1, E, 1, 1, NULL);
    if (!s->tie) add("lm_head.weight", KITE_DTYPE_F32, 2, s->V, E, 1, NULL);
}

/* ---- reading the output ---------------------------------------------------- */

static gguf_ctx *open_out(const char *path) {
    gguf_ctx *g = NULL;
    int rc = gguf_open(path, NULL, &g);
    CHECK_MSG(rc == KITE_OK, "open %s: %s", path, kite_last_error());
    return g;
}

static int64_t get_int(const gguf_ctx *g, const char *key) {
    uint64_t v = 0;
    int rc = gguf_get_u64(g, key, &v);
    CHECK_MSG(rc == KITE_OK, "key %s: %s", key, kite_last_error());
    return (int64_t)v;
}

static void check_str(const gguf_ctx *g, const char *key, const char *want) {
    gguf_str s = {0};
    int rc = gguf_get_str(g, key, &s);
    CHECK_MSG(rc == KITE_OK && gguf_str_eq(s, want), "key %s: want '%s' (%s)", key, want, rc ? kite_last_error() : "differs");
}

/* Row r of a GGUF tensor as floats. */
static void gguf_row(const gguf_tensor *t, int64_t r, float *out) {
    size_t rs = dtype_row_size(t->type, t->ne[0]);
    dtype_get(t->type)->to_float((const uint8_t *)t->data + (size_t)r * rs, out, t->ne[0]);
}

/* GGUF tensor name equals HF source src_name; perm_hd > 0: destination row r
 * is source row perm(r) computed here (pair (i, i + hd/2) -> rows 2i, 2i+1).
 * tol 0: exact. */
static void check_tensor(const gguf_ctx *g, const char *name, const char *src_name, int64_t perm_hd, uint32_t want_type,
                         double tol) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    const src *s = find_src(src_name);
    CHECK_MSG(t != NULL, "tensor %s missing", name);
    CHECK_MSG(s != NULL, "source %s missing", src_name);
    if (!t || !s) return;
    CHECK_MSG(t->type == want_type, "%s: type %s, want %s", name, dtype_name(t->type), dtype_name(want_type));
    CHECK_EQ_INT(t->ne[0], s->nd == 1 ? s->d0 : s->d1);
    CHECK_EQ_INT(t->ne[1], s->nd == 1 ? 1 : s->d0);
    float *row = malloc(sizeof(float) * (size_t)t->ne[0]);
    double worst = 0;
    int64_t rows = t->ne[1], cols = t->ne[0];
    for (int64_t r = 0; r < rows; r++) {
        gguf_row(t, r, row);
        for (int64_t c = 0; c < cols; c++) {
            int64_t sr = r, sc = c;
            if (perm_hd && s->nd == 2) sr = (r / perm_hd) * perm_hd + (r % perm_hd % 2) * (perm_hd / 2) + (r % perm_hd) / 2;
            if (perm_hd && s->nd == 1) sc = (c / perm_hd) * perm_hd + (c % perm_hd % 2) * (perm_hd / 2) + (c % perm_hd) / 2;
            double d = fabs((double)row[c] - (double)s->v[sr * cols + sc]);
            if (d > worst) worst = d;
        }
    }
    CHECK_MSG(worst <= tol, "%s: max |diff| %g > %g", name, worst, tol);
    free(row);
}

/* ---- the llama model -------------------------------------------------------- */

static const shape llama_shape = {"llama", 32, 48, 2, 4, 2, 265, 0, 0, 0, false};

/* Writes the llama checkpoint; q/k made in GGUF orientation (kept in gq/gk). */
static void make_llama(float *gq[2], float *gk[2], bool sharded) {
    const shape *s = &llama_shape;
    const int hd = s->E / s->H;
    reset_srcs();
    rng = 7;
    for (int l = 0; l < s->L; l++) {
        gq[l] = malloc(sizeof(float) * (size_t)s->H * hd * s->E);
        gk[l] = malloc(sizeof(float) * (size_t)s->KV * hd * s->E);
        for (int i = 0; i < s->H * hd * s->E; i++) gq[l][i] = frand();
        /* k is stored as F16 in the checkpoint: make it exactly representable */
        for (int i = 0; i < s->KV * hd * s->E; i++) gk[l][i] = round_to(KITE_DTYPE_F16, frand());
    }
    add_llama_like(s, gq, gk);
    write_config(s);
    write_spm_tokenizer();
    write_weights(sharded);
}

static int convert(int type, const char *out, hf_convert_info *info) {
    hf_convert_params p = {.dir = tmpdir, .out_path = out, .out_type = type, .name = NULL};
    return hf_convert(&p, info);
}

TEST(test_llama_sharded_f32) {
    float *gq[2], *gk[2];
    make_llama(gq, gk, true);
    TPATH(out, "llama.gguf");
    hf_convert_info info;
    int rc = convert(KITE_DTYPE_F32, out, &info);
    CHECK_MSG(rc == KITE_OK, "convert: %s", kite_last_error());
    CHECK_STR_EQ(info.arch, "llama");
    CHECK_STR_EQ(info.tokenizer, "llama");
    CHECK_EQ_INT(info.n_vocab, 265);
    /* 2 globals + output + 9 per layer */
    CHECK_EQ_INT(info.n_tensors, 3 + 9 * 2);
    gguf_ctx *g = open_out(out);
    if (!g) goto done;
    check_str(g, "general.architecture", "llama");
    CHECK_EQ_INT(get_int(g, "general.file_type"), 0);
    CHECK_EQ_INT(get_int(g, "llama.block_count"), 2);
    CHECK_EQ_INT(get_int(g, "llama.context_length"), 64);
    CHECK_EQ_INT(get_int(g, "llama.embedding_length"), 32);
    CHECK_EQ_INT(get_int(g, "llama.feed_forward_length"), 48);
    CHECK_EQ_INT(get_int(g, "llama.attention.head_count"), 4);
    CHECK_EQ_INT(get_int(g, "llama.attention.head_count_kv"), 2);
    CHECK_EQ_INT(get_int(g, "llama.rope.dimension_count"), 8);
    CHECK_EQ_INT(get_int(g, "llama.vocab_size"), 265);
    float f = 0;
    CHECK(gguf_get_f32(g, "llama.rope.freq_base", &f) == KITE_OK && f == 10000.0f);
    CHECK(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f) == KITE_OK && f == 1e-5f);
    check_str(g, "tokenizer.ggml.model", "llama");
    CHECK_EQ_INT(get_int(g, "tokenizer.ggml.bos_token_id"), 1);
    CHECK_EQ_INT(get_int(g, "tokenizer.ggml.eos_token_id"), 2);
    CHECK_EQ_INT(get_int(g, "tokenizer.ggml.unknown_token_id"), 0);
    bool b = false;
    CHECK(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == KITE_OK && b);
    check_str(g, "tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}");
    gguf_array types, scores, toks;
    CHECK(gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_VT_INT32, &types) == KITE_OK && types.n == 265);
    CHECK(gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, &scores) == KITE_OK && scores.n == 265);
    CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_VT_STRING, &toks) == KITE_OK && toks.n == 265);
    if (types.n == 265 && scores.n == 265 && toks.n == 265) {
        const int32_t *tt = types.data;
        const float *sc = scores.data;
        const gguf_str *ts = toks.data;
        CHECK_EQ_INT(tt[0], 2); /* unknown */
        CHECK_EQ_INT(tt[1], 3); /* control */
        CHECK_EQ_INT(tt[3 + 0x41], 6); /* <0x41> byte */
        CHECK(gguf_str_eq(ts[3 + 0x41], "<0x41>"));
        CHECK_EQ_INT(tt[262], 1);
        /* merge ranks: "▁a" (rank 0) > "ab" (1) > "▁ab" (2) > tokens no merge makes */
        CHECK(sc[262] > sc[263] && sc[263] > sc[264] && sc[264] > sc[260]);
    }
    /* tensors: q/k permuted, the rest equal; k was F16 and embeddings BF16 in the checkpoint */
    check_tensor(g, "token_embd.weight", "model.embed_tokens.weight", 0, KITE_DTYPE_F32, 0);
    check_tensor(g, "output.weight", "lm_head.weight", 0, KITE_DTYPE_F32, 0);
    check_tensor(g, "output_norm.weight", "model.norm.weight", 0, KITE_DTYPE_F32, 0);
    for (int l = 0; l < 2; l++) {
        char gn[64], hn[96];
#define T(gg, hh, perm)                                                                                         \
    do {                                                                                                        \
        snprintf(gn, sizeof gn, "blk.%d.%s", l, gg);                                                            \
        snprintf(hn, sizeof hn, "model.layers.%d.%s", l, hh);                                                   \
        check_tensor(g, gn, hn, perm, KITE_DTYPE_F32, 0);                                                       \
    } while (0)
        T("attn_norm.weight", "input_layernorm.weight", 0);
        T("attn_q.weight", "self_attn.q_proj.weight", 8);
        T("attn_k.weight", "self_attn.k_proj.weight", 8);
        T("attn_v.weight", "self_attn.v_proj.weight", 0);
        T("attn_output.weight", "self_attn.o_proj.weight", 0);
        T("ffn_norm.weight", "post_attention_layernorm.weight", 0);
        T("ffn_gate.weight", "mlp.gate_proj.weight", 0);
        T("ffn_up.weight", "mlp.up_proj.weight", 0);
        T("ffn_down.weight", "mlp.down_proj.weight", 0);
#undef T
        /* and the permuted q equals the GGUF-orientation original exactly */
        snprintf(gn, sizeof gn, "blk.%d.attn_q.weight", l);
        const gguf_tensor *t = gguf_find_tensor(g, gn);
        CHECK(t && !memcmp(t->data, gq[l], sizeof(float) * 32 * 32));
        snprintf(gn, sizeof gn, "blk.%d.attn_k.weight", l);
        t = gguf_find_tensor(g, gn);
        CHECK(t && !memcmp(t->data, gk[l], sizeof(float) * 16 * 32));
    }
    /* the vocabulary loads in kite's tokenizer and SPM merges follow the scores */
    vocab *v = NULL;
    rc = vocab_load_gguf(g, &v);
    CHECK_MSG(rc == KITE_OK, "vocab: %s", kite_last_error());
    if (v) {
        kite_token ids[8];
        size_t n = 0;
        rc = vocab_tokenize(v, "ab a", 4, true, ids, 8, &n);
        CHECK_MSG(rc == KITE_OK, "tokenize: %s", kite_last_error());
        CHECK_EQ_INT(n, 3);
        if (n == 3) {
            CHECK_EQ_INT(ids[0], 1);
            CHECK_EQ_INT(ids[1], 264); /* ▁ab */
            CHECK_EQ_INT(ids[2], 262); /* ▁a */
        }
        vocab_free(v);
    }
    gguf_close(g);
done:
    for (int l = 0; l < 2; l++) free(gq[l]), free(gk[l]);
    unlink(out);
}

/* Writes the same model directly as GGUF in llama.cpp orientation: keys and
 * vocabulary copied from the converted file, tensors from the sources, with
 * q/k taken from gq/gk (GGUF orientation) - or, for the control, the HF
 * rows unpermuted. */
static int write_direct(const gguf_ctx *conv, const char *path, float *gq[2], float *gk[2], bool control) {
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < conv->n_kv; i++) {
        char *k = gguf_str_dup(conv->kv[i].key);
        gguf_writer_set_value(w, k, &conv->kv[i].value);
        free(k);
    }
    static const struct {
        const char *g, *h;
    } names[] = {{"attn_norm.weight", "input_layernorm.weight"}, {"attn_v.weight", "self_attn.v_proj.weight"},
                 {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
                 {"ffn_gate.weight", "mlp.gate_proj.weight"},     {"ffn_up.weight", "mlp.up_proj.weight"},
                 {"ffn_down.weight", "mlp.down_proj.weight"}};
    add_src_f32(w, "token_embd.weight", "model.embed_tokens.weight");
    add_src_f32(w, "output_norm.weight", "model.norm.weight");
    add_src_f32(w, "output.weight", "lm_head.weight");
    for (int l = 0; l < 2; l++) {
        char gn[64], hn[96];
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            snprintf(gn, sizeof gn, "blk.%d.%s", l, names[i].g);
            snprintf(hn, sizeof hn, "model.layers.%d.%s", l, names[i].h);
            add_src_f32(w, gn, hn);
        }
        int64_t qne[2] = {32, 32}, kne[2] = {32, 16};
        snprintf(gn, sizeof gn, "blk.%d.attn_q.weight", l);
        snprintf(hn, sizeof hn, "model.layers.%d.self_attn.q_proj.weight", l);
        gguf_writer_add_tensor(w, gn, KITE_DTYPE_F32, 2, qne, control ? find_src(hn)->v : gq[l]);
        snprintf(gn, sizeof gn, "blk.%d.attn_k.weight", l);
        snprintf(hn, sizeof hn, "model.layers.%d.self_attn.k_proj.weight", l);
        gguf_writer_add_tensor(w, gn, KITE_DTYPE_F32, 2, kne, control ? find_src(hn)->v : gk[l]);
    }
    int rc = gguf_writer_write(w, path);
    gguf_writer_free(w);
    return rc;
}

/* Logits of 6 tokens (all positions) in a fresh context. */
static float *run_logits(const char *path) {
    kite_model *m = NULL;
    kite_model_params mp = kite_model_default_params();
    int rc = kite_model_load(path, &mp, &m);
    CHECK_MSG(rc == KITE_OK, "load %s: %s", path, kite_last_error());
    if (rc) return NULL;
    kite_ctx *c = NULL;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = 16;
    cp.n_threads = 1;
    float *out = NULL;
    if ((rc = kite_ctx_new(m, &cp, &c)) == KITE_OK) {
        const kite_token toks[6] = {1, 264, 262, 100, 5, 260};
        if ((rc = kite_ctx_eval(c, toks, 6, true)) == KITE_OK) {
            out = malloc(sizeof(float) * 6 * 265);
            for (int i = 0; i < 6; i++) memcpy(out + i * 265, kite_ctx_logits(c, i), sizeof(float) * 265);
        }
    }
    CHECK_MSG(rc == KITE_OK, "eval %s: %s", path, kite_last_error());
    kite_ctx_free(c);
    kite_model_free(m);
    return out;
}

TEST(test_llama_logits_match_direct_gguf) {
    float *gq[2], *gk[2];
    make_llama(gq, gk, false); /* single model.safetensors this time */
    TPATH(conv, "conv.gguf");
    TPATH(direct, "direct.gguf");
    TPATH(control, "control.gguf");
    int rc = convert(KITE_DTYPE_F32, conv, NULL);
    CHECK_MSG(rc == KITE_OK, "convert: %s", kite_last_error());
    gguf_ctx *g = rc ? NULL : open_out(conv);
    if (g) {
        CHECK(write_direct(g, direct, gq, gk, false) == KITE_OK);
        CHECK(write_direct(g, control, gq, gk, true) == KITE_OK);
        gguf_close(g);
        float *a = run_logits(conv), *b = run_logits(direct), *c = run_logits(control);
        if (a && b && c) {
            double worst = 0, ctl = 0;
            for (int i = 0; i < 6 * 265; i++) {
                worst = fmax(worst, fabs((double)a[i] - b[i]));
                ctl = fmax(ctl, fabs((double)a[i] - c[i]));
            }
            CHECK_MSG(worst == 0, "converted vs direct GGUF logits differ by %g", worst);
            /* positions > 0 rotate: without the permutation the logits move */
            CHECK_MSG(ctl > 1e-3, "control (unpermuted q/k) differs by only %g", ctl);
        }
        free(a), free(b), free(c);
    }
    for (int l = 0; l < 2; l++) free(gq[l]), free(gk[l]);
    unlink(conv), unlink(direct), unlink(control);
}

TEST(test_llama_types) {
    float *gq[2], *gk[2];
    make_llama(gq, gk, true);
    for (int l = 0; l < 2; l++) free(gq[l]), free(gk[l]);
    static const struct {
        int type;
        uint32_t mat, down, ftype;
        double tol;
    } cases[] = {
        {KITE_DTYPE_F16, KITE_DTYPE_F16, KITE_DTYPE_F16, 1, 3e-4},
        {KITE_DTYPE_BF16, KITE_DTYPE_BF16, KITE_DTYPE_BF16, 32, 2e-3},
        /* ffn_down rows have n_ff = 48 columns: not a multiple of 32, so F16 */
        {KITE_DTYPE_Q8_0, KITE_DTYPE_Q8_0, KITE_DTYPE_F16, 7, 4e-3},
        /* auto: the token embedding is BF16 in the checkpoint */
        {HF_TYPE_AUTO, KITE_DTYPE_BF16, KITE_DTYPE_BF16, 32, 2e-3},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TPATH(out, "typed.gguf");
        int rc = convert(cases[i].type, out, NULL);
        CHECK_MSG(rc == KITE_OK, "convert type %d: %s", cases[i].type, kite_last_error());
        gguf_ctx *g = rc ? NULL : open_out(out);
        if (!g) continue;
        CHECK_EQ_INT(get_int(g, "general.file_type"), cases[i].ftype);
        check_tensor(g, "blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight", 0, KITE_DTYPE_F32, 0);
        check_tensor(g, "blk.1.attn_q.weight", "model.layers.1.self_attn.q_proj.weight", 8, cases[i].mat, cases[i].tol);
        check_tensor(g, "blk.1.attn_k.weight", "model.layers.1.self_attn.k_proj.weight", 8, cases[i].mat, cases[i].tol);
        check_tensor(g, "blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight", 0, cases[i].down, cases[i].tol);
        check_tensor(g, "token_embd.weight", "model.embed_tokens.weight", 0, cases[i].mat,
                     cases[i].mat == KITE_DTYPE_BF16 ? 0 : cases[i].tol);
        gguf_close(g);
        /* every type loads and runs in kite */
        float *a = run_logits(out);
        free(a);
        unlink(out);
    }
}

/* ---- tied embeddings ---------------------------------------------------------- */

/* Renames source tensor from -> to (the checkpoint then stores it under to). */
static void rename_src(const char *from, const char *to) {
    for (int i = 0; i < n_srcs; i++)
        if (!strcmp(srcs[i].name, from)) snprintf(srcs[i].name, sizeof srcs[i].name, "%s", to);
}

/* tie_word_embeddings: the one matrix may be stored as model.embed_tokens
 * or only as lm_head.weight (safetensors' save_model keeps one of two shared
 * tensors; TinyStories-656K keeps lm_head).  Either way it becomes
 * token_embd and no output.weight is written (llama.cpp's layout for tied
 * models); both stored: both written.  Untied without embed_tokens: error. */
TEST(test_tied_embeddings) {
    shape s = llama_shape;
    TPATH(out, "tied.gguf");
    TPATH(ref, "tied_ref.gguf");
    float *logits[2] = {NULL, NULL};
    for (int k = 0; k < 4; k++) {
        /* k 0: embed_tokens only; 1: lm_head only; 2: both; 3: lm_head only, untied */
        clean_dir();
        reset_srcs();
        rng = 41; /* same values every time */
        s.tie = true; /* no lm_head from add_llama_like */
        add_llama_like(&s, NULL, NULL);
        if (k == 2) add("lm_head.weight", KITE_DTYPE_F32, 2, s.V, s.E, 1, NULL);
        if (k == 1 || k == 3) rename_src("model.embed_tokens.weight", "lm_head.weight");
        s.tie = k != 3;
        write_config(&s);
        write_spm_tokenizer();
        write_weights(k == 1);
        const char *path = k == 0 ? ref : out;
        unlink(path);
        hf_convert_info info;
        int rc = convert(KITE_DTYPE_F32, path, &info);
        if (k == 3) {
            CHECK_EQ_INT(rc, KITE_E_NOT_FOUND);
            CHECK_MSG(strstr(kite_last_error(), "'model.embed_tokens.weight'") != NULL, "message: %s", kite_last_error());
            CHECK(access(out, F_OK) != 0);
            continue;
        }
        CHECK_MSG(rc == KITE_OK, "convert case %d: %s", k, kite_last_error());
        if (rc) continue;
        CHECK_EQ_INT(info.n_tensors, (k == 2 ? 3 : 2) + 9 * 2);
        gguf_ctx *g = open_out(path);
        if (!g) continue;
        check_tensor(g, "token_embd.weight", k == 1 ? "lm_head.weight" : "model.embed_tokens.weight", 0, KITE_DTYPE_F32, 0);
        if (k == 2) check_tensor(g, "output.weight", "lm_head.weight", 0, KITE_DTYPE_F32, 0);
        else CHECK(gguf_find_tensor(g, "output.weight") == NULL);
        gguf_close(g);
        if (k < 2) logits[k] = run_logits(path);
    }
    /* the same matrix under either name: the same model */
    if (logits[0] && logits[1]) CHECK(!memcmp(logits[0], logits[1], sizeof(float) * 6 * 265));
    free(logits[0]), free(logits[1]);
    unlink(out), unlink(ref);
    clean_dir();
}

/* ---- sliding windows ---------------------------------------------------------- */

/* Rewrites config.json as the llama shape's with model_type mt and the keys
 * of extra (a JSON object text) added. */
static void patch_config(const char *mt, const char *extra) {
    write_config(&llama_shape);
    cJSON *c = NULL;
    CHECK_EQ_INT(hf_json_load(tmpdir, "config.json", false, &c), KITE_OK);
    if (!c) return;
    cJSON_ReplaceItemInObjectCaseSensitive(c, "model_type", cJSON_CreateString(mt));
    cJSON *x = cJSON_Parse(extra);
    CHECK(x != NULL);
    for (cJSON *it = x ? x->child : NULL; it; it = it->next) {
        cJSON_DeleteItemFromObjectCaseSensitive(c, it->string);
        cJSON_AddItemToObject(c, it->string, cJSON_Duplicate(it, 1));
    }
    cJSON_Delete(x);
    write_json(tpath("config.json"), c);
}

/* Mistral-style configs keep their window (all layers); per-layer patterns
 * (layer_types, sliding_window_pattern, qwen2's max_window_layers) become
 * llama.cpp's bool array; a null window, plain llama and qwen2 with
 * use_sliding_window false write none.  The converted Mistral-style model
 * loads with the window on every layer; a patterned one with its global
 * layers unwindowed. */
TEST(test_sliding_window_config) {
    static const struct {
        const char *mt, *extra;
        int64_t window;     /* expected attention.sliding_window, 0: absent */
        int pattern;        /* expected pattern bits (layer 0 = bit 0), -1: no pattern key */
    } cases[] = {
        {"mistral", "{\"sliding_window\": 4096}", 4096, -1},
        {"mistral", "{\"sliding_window\": null}", 0, -1},
        {"llama", "{\"sliding_window\": 4096}", 0, -1},
        {"mistral", "{\"sliding_window\": 16, \"layer_types\": [\"sliding_attention\", \"full_attention\"]}", 16, 1},
        {"mistral", "{\"sliding_window\": 16, \"sliding_window_pattern\": 2}", 16, 1},
        {"mistral", "{\"sliding_window\": 16, \"layer_types\": [\"full_attention\", \"full_attention\"]}", 0, -1},
        {"qwen2", "{\"sliding_window\": 32768, \"use_sliding_window\": false, \"max_window_layers\": 1}", 0, -1},
        {"qwen2", "{\"sliding_window\": 32768, \"use_sliding_window\": true, \"max_window_layers\": 1}", 32768, 2},
    };
    float *gq[2], *gk[2];
    make_llama(gq, gk, false);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        patch_config(cases[i].mt, cases[i].extra);
        hf_config c;
        int rc = hf_config_load(tmpdir, &c);
        CHECK_MSG(rc == KITE_OK, "case %zu: %s", i, kite_last_error());
        if (rc) continue;
        CHECK_MSG(c.sliding_window == cases[i].window, "case %zu: window %lld, want %lld", i,
                  (long long)c.sliding_window, (long long)cases[i].window);
        const int bits = c.sliding_window ? c.swa_layers[0] | c.swa_layers[1] << 1 : 0;
        if (cases[i].pattern >= 0) CHECK_MSG(bits == cases[i].pattern, "case %zu: layers %d", i, bits);
        else if (c.sliding_window) CHECK_MSG(bits == 3, "case %zu: layers %d, want all", i, bits);
        hf_config_free(&c);
        if (strcmp(cases[i].mt, "mistral")) continue; /* qwen2 tensors differ: config only */
        TPATH(out, "swa.gguf");
        unlink(out);
        hf_convert_info info;
        rc = convert(KITE_DTYPE_F32, out, &info);
        CHECK_MSG(rc == KITE_OK, "case %zu convert: %s", i, kite_last_error());
        gguf_ctx *g = rc ? NULL : open_out(out);
        if (!g) continue;
        if (cases[i].window) CHECK_EQ_INT(get_int(g, "llama.attention.sliding_window"), cases[i].window);
        else CHECK(gguf_get(g, "llama.attention.sliding_window") == NULL);
        CHECK((gguf_get(g, "llama.attention.sliding_window_pattern") != NULL) == (cases[i].pattern >= 0 &&
                                                                                 cases[i].window));
        gguf_close(g);
        kite_model *m = NULL;
        CHECK_EQ_INT(kite_model_load(out, NULL, &m), KITE_OK);
        if (m) {
            kite_model_info mi;
            kite_model_get_info(m, &mi);
            CHECK_EQ_INT(mi.sliding_window, (int32_t)cases[i].window);
            CHECK_EQ_INT(mi.n_swa_layers, cases[i].window == 0 ? 0 : cases[i].pattern >= 0 ? 1 : 2);
            kite_model_free(m);
        }
        unlink(out);
    }
    for (int l = 0; l < 2; l++) free(gq[l]), free(gk[l]);
    clean_dir();
}

/* ---- qwen2, qwen3, MoE, gpt2 ------------------------------------------------ */

TEST(test_qwen2) {
    static const shape s = {"qwen2", 32, 48, 2, 4, 2, 100, 0, 0, 0, true};
    reset_srcs();
    rng = 11;
    add_llama_like(&s, NULL, NULL);
    write_config(&s);
    write_bpe_tokenizer(re_qwen2, true);
    write_weights(true);
    TPATH(out, "qwen2.gguf");
    hf_convert_info info;
    int rc = convert(KITE_DTYPE_F32, out, &info);
    CHECK_MSG(rc == KITE_OK, "convert: %s", kite_last_error());
    gguf_ctx *g = rc ? NULL : open_out(out);
    if (g) {
        check_str(g, "general.architecture", "qwen2");
        CHECK_EQ_INT(get_int(g, "qwen2.block_count"), 2);
        CHECK_EQ_INT(get_int(g, "qwen2.attention.head_count_kv"), 2);
        CHECK(gguf_find_key(g, "qwen2.vocab_size") < 0); /* llama-only key */
        check_str(g, "tokenizer.ggml.model", "gpt2");
        check_str(g, "tokenizer.ggml.pre", "qwen2");
        CHECK_EQ_INT(get_int(g, "tokenizer.ggml.eos_token_id"), 98);
        CHECK_EQ_INT(get_int(g, "tokenizer.ggml.bos_token_id"), 97); /* from config.json */
        CHECK_EQ_INT(get_int(g, "tokenizer.ggml.padding_token_id"), 97);
        gguf_array mg, tt;
        CHECK(gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_VT_STRING, &mg) == KITE_OK && mg.n == 2);
        if (mg.n == 2) CHECK(gguf_str_eq(((const gguf_str *)mg.data)[0], "\xC4\xA0 a"));
        CHECK(gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_VT_INT32, &tt) == KITE_OK && tt.n == 100);
        if (tt.n == 100) {
            const int32_t *t = tt.data;
            CHECK_EQ_INT(t[5], 1);
            CHECK_EQ_INT(t[97], 3);
            CHECK_EQ_INT(t[99], 4);
        }
        CHECK(gguf_find_tensor(g, "output.weight") == NULL); /* tied */
        check_tensor(g, "token_embd.weight", "model.embed_tokens.weight", 0, KITE_DTYPE_F32, 0);
        /* no permutation for qwen2 (NEOX RoPE in llama.cpp); biases stay F32 */
        check_tensor(g, "blk.1.attn_q.weight", "model.layers.1.self_attn.q_proj.weight", 0, KITE_DTYPE_F32, 0);
        check_tensor(g, "blk.1.attn_k.weight", "model.layers.1.self_attn.k_proj.weight", 0, KITE_DTYPE_F32, 0);
        check_tensor(g, "blk.1.attn_q.bias", "model.layers.1.self_attn.q_proj.bias", 0, KITE_DTYPE_F32, 0);
        check_tensor(g, "blk.0.attn_v.bias", "model.layers.0.self_attn.v_proj.bias", 0, KITE_DTYPE_F32, 0);
        vocab *v = NULL;
        rc = vocab_load_gguf(g, &v);
        CHECK_MSG(rc == KITE_OK, "vocab: %s", kite_last_error());
        if (v) {
            kite_token ids[8];
            size_t n = 0;
            /* <think> is user-defined: matched in plain text (control tokens are not) */
            rc = vocab_tokenize(v, "ab a<think>", 11, false, ids, 8, &n);
            CHECK_MSG(rc == KITE_OK, "tokenize: %s", kite_last_error());
            CHECK_EQ_INT(n, 3);
            if (n == 3) CHECK(ids[0] == 96 && ids[1] == 95 && ids[2] == 99);
            vocab_free(v);
        }
        gguf_close(g);
    }
    unlink(out);
    /* q8_0 on a BF16 embedding: rows of 32 -> Q8_0; biases stay F32 */
    rc = convert(KITE_DTYPE_Q8_0, out, NULL);
    CHECK_MSG(rc == KITE_OK, "convert q8_0: %s", kite_last_error());
    g = rc ? NULL : open_out(out);
    if (g) {
        check_tensor(g, "token_embd.weight", "model.embed_tokens.weight", 0, KITE_DTYPE_Q8_0, 4e-3);
        check_tensor(g, "blk.0.attn_k.bias", "model.layers.0.self_attn.k_proj.bias", 0, KITE_DTYPE_F32, 0);
        gguf_close(g);
    }
    unlink(out);
}

TEST(test_qwen3_and_moe) {
    static const shape q3 = {"qwen3", 32, 48, 2, 4, 2, 100, 0, 0, 0, true};
    static const shape mx = {"mixtral", 32, 48, 2, 4, 2, 265, 0, 4, 2, false};
    static const shape qm = {"qwen3_moe", 32, 48, 2, 4, 2, 100, 16, 4, 2, true};
    TPATH(out, "moe.gguf");
    for (int k = 0; k < 3; k++) {
        const shape *s = k == 0 ? &q3 : k == 1 ? &mx : &qm;
        clean_dir();
        reset_srcs();
        rng = 21 + (uint64_t)k;
        add_llama_like(s, NULL, NULL);
        write_config(s);
        if (k == 1) write_spm_tokenizer();
        else write_bpe_tokenizer(re_qwen2, false);
        write_weights(k != 2);
        hf_convert_info info;
        int rc = convert(KITE_DTYPE_F32, out, &info);
        CHECK_MSG(rc == KITE_OK, "convert %s: %s", s->model_type, kite_last_error());
        gguf_ctx *g = rc ? NULL : open_out(out);
        if (!g) continue;
        const char *arch = k == 0 ? "qwen3" : k == 1 ? "llama" : "qwen3moe";
        check_str(g, "general.architecture", arch);
        char key[96];
        if (k == 0) {
            CHECK_EQ_INT(get_int(g, "qwen3.attention.key_length"), 8);
            check_tensor(g, "blk.1.attn_q_norm.weight", "model.layers.1.self_attn.q_norm.weight", 0, KITE_DTYPE_F32, 0);
            check_tensor(g, "blk.0.attn_k_norm.weight", "model.layers.0.self_attn.k_norm.weight", 0, KITE_DTYPE_F32, 0);
            check_tensor(g, "blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", 0, KITE_DTYPE_F32, 0);
            gguf_close(g);
            continue;
        }
        snprintf(key, sizeof key, "%s.expert_count", arch);
        CHECK_EQ_INT(get_int(g, key), 4);
        snprintf(key, sizeof key, "%s.expert_used_count", arch);
        CHECK_EQ_INT(get_int(g, key), 2);
        if (k == 2) CHECK_EQ_INT(get_int(g, "qwen3moe.expert_feed_forward_length"), 16);
        const gguf_tensor *gi = gguf_find_tensor(g, "blk.1.ffn_gate_inp.weight");
        CHECK(gi && gi->type == KITE_DTYPE_F32 && gi->ne[0] == 32 && gi->ne[1] == 4);
        /* experts stacked: ne = [cols, rows, n_expert], expert e's rows at e*rows */
        static const char *const gnames[3] = {"ffn_gate_exps", "ffn_down_exps", "ffn_up_exps"};
        static const char *const mx_leaf[3] = {"w1", "w2", "w3"};
        static const char *const qm_leaf[3] = {"gate_proj", "down_proj", "up_proj"};
        for (int w = 0; w < 3; w++) {
            for (int l = 0; l < 2; l++) {
                snprintf(key, sizeof key, "blk.%d.%s.weight", l, gnames[w]);
                const gguf_tensor *t = gguf_find_tensor(g, key);
                CHECK_MSG(t != NULL, "%s missing", key);
                if (!t) continue;
                CHECK_EQ_INT(t->n_dims, 3);
                CHECK_EQ_INT(t->ne[2], 4);
                bool ok = true;
                for (int e = 0; e < 4; e++) {
                    char hn[128];
                    if (k == 1) snprintf(hn, sizeof hn, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", l, e, mx_leaf[w]);
                    else snprintf(hn, sizeof hn, "model.layers.%d.mlp.experts.%d.%s.weight", l, e, qm_leaf[w]);
                    const src *sr = find_src(hn);
                    ok = ok && sr && sr->d1 == t->ne[0] && sr->d0 == t->ne[1] &&
                         !memcmp((const float *)t->data + e * t->ne[0] * t->ne[1], sr->v,
                                 sizeof(float) * (size_t)(sr->d0 * sr->d1));
                }
                CHECK_MSG(ok, "%s: experts not stacked in order", key);
            }
        }
        if (k == 1) check_tensor(g, "blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", 8, KITE_DTYPE_F32, 0);
        gguf_close(g);
    }
    unlink(out);
    clean_dir();
}

TEST(test_gpt2) {
    static const shape s = {"gpt2", 16, 64, 1, 2, 2, 100, 0, 0, 0, true};
    const int E = 16, F = 64;
    clean_dir();
    reset_srcs();
    rng = 31;
    add("transformer.wte.weight", KITE_DTYPE_F32, 2, 100, E, 0, NULL);
    add("transformer.wpe.weight", KITE_DTYPE_F32, 2, 64, E, 0, NULL);
    add("transformer.h.0.ln_1.weight", KITE_DTYPE_F32, 1, E, 1, 0, NULL);
    add("transformer.h.0.ln_1.bias", KITE_DTYPE_F32, 1, E, 1, 0, NULL);
    add("transformer.h.0.attn.c_attn.weight", KITE_DTYPE_F32, 2, E, 3 * E, 0, NULL);
    add("transformer.h.0.attn.c_attn.bias", KITE_DTYPE_F32, 1, 3 * E, 1, 0, NULL);
    add("transformer.h.0.attn.c_proj.weight", KITE_DTYPE_F16, 2, E, E, 0, NULL);
    add("transformer.h.0.attn.c_proj.bias", KITE_DTYPE_F32, 1, E, 1, 0, NULL);
    add("transformer.h.0.attn.bias", KITE_DTYPE_F32, 2, 8, 8, 0, NULL); /* causal mask: ignored */
    add("transformer.h.0.ln_2.weight", KITE_DTYPE_F32, 1, E, 1, 0, NULL);
    add("transformer.h.0.ln_2.bias", KITE_DTYPE_F32, 1, E, 1, 0, NULL);
    add("transformer.h.0.mlp.c_fc.weight", KITE_DTYPE_F32, 2, E, F, 0, NULL);
    add("transformer.h.0.mlp.c_fc.bias", KITE_DTYPE_F32, 1, F, 1, 0, NULL);
    add("transformer.h.0.mlp.c_proj.weight", KITE_DTYPE_F32, 2, F, E, 0, NULL);
    add("transformer.h.0.mlp.c_proj.bias", KITE_DTYPE_F32, 1, E, 1, 0, NULL);
    add("transformer.ln_f.weight", KITE_DTYPE_F32, 1, E, 1, 0, NULL);
    add("transformer.ln_f.bias", KITE_DTYPE_F32, 1, E, 1, 0, NULL);
    write_config(&s);
    write_bpe_tokenizer(NULL, false);
    write_weights(false);
    TPATH(out, "gpt2.gguf");
    int rc = convert(KITE_DTYPE_F32, out, NULL);
    CHECK_MSG(rc == KITE_OK, "convert: %s", kite_last_error());
    gguf_ctx *g = rc ? NULL : open_out(out);
    if (g) {
        check_str(g, "general.architecture", "gpt2");
        check_str(g, "tokenizer.ggml.pre", "gpt-2");
        CHECK_EQ_INT(get_int(g, "gpt2.feed_forward_length"), 64);
        float eps = 0;
        CHECK(gguf_get_f32(g, "gpt2.attention.layer_norm_epsilon", &eps) == KITE_OK && eps == 1e-5f);
        check_tensor(g, "output.weight", "transformer.wte.weight", 0, KITE_DTYPE_F32, 0);
        check_tensor(g, "position_embd.weight", "transformer.wpe.weight", 0, KITE_DTYPE_F32, 0);
        check_tensor(g, "blk.0.attn_norm.bias", "transformer.h.0.ln_1.bias", 0, KITE_DTYPE_F32, 0);
        /* Conv1D [in, out] transposed to GGUF ne = [in, out]: row o holds column o */
        const gguf_tensor *t = gguf_find_tensor(g, "blk.0.attn_qkv.weight");
        const src *sq = find_src("transformer.h.0.attn.c_attn.weight");
        CHECK(t && t->ne[0] == E && t->ne[1] == 3 * E);
        if (t && sq) {
            bool ok = true;
            for (int o = 0; o < 3 * E; o++)
                for (int i = 0; i < E; i++) ok = ok && ((const float *)t->data)[o * E + i] == sq->v[i * 3 * E + o];
            CHECK_MSG(ok, "attn_qkv is not the transpose of c_attn");
        }
        t = gguf_find_tensor(g, "blk.0.ffn_down.weight");
        CHECK(t && t->ne[0] == F && t->ne[1] == E);
        gguf_close(g);
    }
    unlink(out);
    clean_dir();
}

/* ---- gemma2 ----------------------------------------------------------------------- */

/* Gemma2ForCausalLM: its four RMSNorm gains per layer (input, post-attention,
 * pre- and post-feedforward) and the final one come out as 1 + w under
 * llama.cpp's names (post_attention_layernorm is the attention's post-norm,
 * not the FFN's input norm), q/k unpermuted (NEOX rope), tied classifier, the
 * soft caps and window written, no pattern key for the even-layer default,
 * add_space_prefix false; the converted file loads and runs.  A
 * query_pre_attn_scalar GGUF cannot express is refused. */
TEST(test_gemma2) {
    const int E = 32, F = 48, H = 4, KV = 2, HD = 16, V = 265;
    clean_dir();
    reset_srcs();
    rng = 41;
    add("model.embed_tokens.weight", KITE_DTYPE_BF16, 2, V, E, 0, NULL);
    static const char *const norms[] = {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                                        "post_feedforward_layernorm"};
    for (int l = 0; l < 2; l++) {
        char n[128];
#define A(suffix, dt, nd, d0, d1)                                                                               \
    do {                                                                                                        \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                                 \
        add(n, dt, nd, d0, d1, l, NULL);                                                                        \
    } while (0)
        for (int k = 0; k < 4; k++) {
            char leaf[64];
            snprintf(leaf, sizeof leaf, "%s.weight", norms[k]);
            A(leaf, KITE_DTYPE_F32, 1, E, 1);
        }
        A("self_attn.q_proj.weight", KITE_DTYPE_F32, 2, H * HD, E);
        A("self_attn.k_proj.weight", KITE_DTYPE_F32, 2, KV * HD, E);
        A("self_attn.v_proj.weight", KITE_DTYPE_F32, 2, KV * HD, E);
        A("self_attn.o_proj.weight", KITE_DTYPE_F32, 2, E, H * HD);
        A("mlp.gate_proj.weight", KITE_DTYPE_F32, 2, F, E);
        A("mlp.up_proj.weight", KITE_DTYPE_F32, 2, F, E);
        A("mlp.down_proj.weight", KITE_DTYPE_F32, 2, E, F);
#undef A
    }
    add("model.norm.weight", KITE_DTYPE_F32, 1, E, 1, 1, NULL);
    write_spm_tokenizer();
    write_weights(true);
    patch_config("gemma2", "{\"architectures\": [\"Gemma2ForCausalLM\"], \"head_dim\": 16, "
                           "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"hidden_size\": 32, "
                           "\"intermediate_size\": 48, \"attn_logit_softcapping\": 50.0, "
                           "\"final_logit_softcapping\": 30.0, \"sliding_window\": 4, "
                           "\"query_pre_attn_scalar\": 16, \"hidden_activation\": \"gelu_pytorch_tanh\"}");
    /* tie_word_embeddings: llama_shape writes false; Gemma 2's checkpoints have no lm_head either way,
     * so drop the key and let Gemma2Config's default (true) apply */
    cJSON *c = NULL;
    CHECK_EQ_INT(hf_json_load(tmpdir, "config.json", false, &c), KITE_OK);
    if (c) {
        cJSON_DeleteItemFromObjectCaseSensitive(c, "tie_word_embeddings");
        write_json(tpath("config.json"), c);
    }
    TPATH(out, "gemma2.gguf");
    int rc = convert(KITE_DTYPE_F32, out, NULL);
    CHECK_MSG(rc == KITE_OK, "convert: %s", kite_last_error());
    gguf_ctx *g = rc ? NULL : open_out(out);
    if (g) {
        check_str(g, "general.architecture", "gemma2");
        float f = 0;
        CHECK(gguf_get_f32(g, "gemma2.attn_logit_softcapping", &f) == KITE_OK && f == 50.0f);
        CHECK(gguf_get_f32(g, "gemma2.final_logit_softcapping", &f) == KITE_OK && f == 30.0f);
        CHECK_EQ_INT(get_int(g, "gemma2.attention.sliding_window"), 4);
        CHECK_EQ_INT(get_int(g, "gemma2.attention.key_length"), 16);
        CHECK(gguf_find_key(g, "gemma2.attention.sliding_window_pattern") < 0);
        bool asp = true;
        CHECK(gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &asp) == KITE_OK && !asp);
        CHECK(gguf_find_tensor(g, "output.weight") == NULL);
        check_tensor(g, "blk.1.attn_q.weight", "model.layers.1.self_attn.q_proj.weight", 0, KITE_DTYPE_F32, 0);
        check_tensor(g, "blk.1.attn_k.weight", "model.layers.1.self_attn.k_proj.weight", 0, KITE_DTYPE_F32, 0);
        static const char *const gguf_norms[] = {"attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"};
        for (int l = 0; l < 2; l++)
            for (int k = 0; k < 5; k++) {
                if (k == 4 && l == 1) continue;
                char gn[64], hn[128];
                if (k == 4) {
                    snprintf(gn, sizeof gn, "output_norm.weight");
                    snprintf(hn, sizeof hn, "model.norm.weight");
                } else {
                    snprintf(gn, sizeof gn, "blk.%d.%s.weight", l, gguf_norms[k]);
                    snprintf(hn, sizeof hn, "model.layers.%d.%s.weight", l, norms[k]);
                }
                const gguf_tensor *t = gguf_find_tensor(g, gn);
                const src *sv = find_src(hn);
                CHECK_MSG(t && sv && t->type == KITE_DTYPE_F32 && t->ne[0] == E, "%s", gn);
                bool ok = t && sv;
                for (int i = 0; ok && i < E; i++) ok = ((const float *)t->data)[i] == sv->v[i] + 1.0f;
                CHECK_MSG(ok, "%s is not 1 + %s", gn, hn);
            }
        gguf_close(g);
    }
    kite_model *m = NULL;
    kite_model_params mp = kite_model_default_params();
    rc = rc ? rc : kite_model_load(out, &mp, &m);
    CHECK_MSG(rc == KITE_OK, "load: %s", kite_last_error());
    if (m) {
        kite_model_info mi;
        kite_model_get_info(m, &mi);
        CHECK(mi.sliding_window == 4 && mi.n_swa_layers == 1 && mi.n_layer == 2); /* layer 0 local, 1 global */
        kite_ctx *ctx = NULL;
        kite_ctx_params cp = {.n_ctx = 16, .n_threads = 1};
        CHECK(kite_ctx_new(m, &cp, &ctx) == KITE_OK);
        const kite_token tk[6] = {1, 100, 101, 5, 200, 7};
        CHECK(ctx && kite_ctx_eval(ctx, tk, 6, true) == KITE_OK);
        bool finite = ctx != NULL;
        for (int t = 0; finite && t < 6; t++)
            for (int i = 0; i < V; i++) finite = finite && fabsf(kite_ctx_logits(ctx, t)[i]) < 30.0f;
        CHECK_MSG(finite, "the converted gemma2 model's logits are not finite and within the cap of 30");
        kite_ctx_free(ctx);
        kite_model_free(m);
    }
    unlink(out);
    /* 27B's rule (46 layers: n_embd / n_head) or head_dim; anything else has no GGUF form */
    patch_config("gemma2", "{\"head_dim\": 16, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                           "\"hidden_size\": 32, \"intermediate_size\": 48, \"query_pre_attn_scalar\": 20}");
    rc = convert(KITE_DTYPE_F32, out, NULL);
    CHECK_EQ_INT(rc, KITE_E_UNSUPPORTED);
    CHECK_MSG(strstr(kite_last_error(), "query_pre_attn_scalar 20") != NULL, "%s", kite_last_error());
    unlink(out);
    clean_dir();
}

/* ---- phi3 ----------------------------------------------------------------------- */

/* Logits of 6 tokens (all positions) of the model at path in a context of n_ctx. */
static float *run_logits_ctx(const char *path, int n_ctx, int n_vocab) {
    kite_model *m = NULL;
    kite_model_params mp = kite_model_default_params();
    int rc = kite_model_load(path, &mp, &m);
    CHECK_MSG(rc == KITE_OK, "load %s: %s", path, kite_last_error());
    if (rc) return NULL;
    kite_ctx *c = NULL;
    kite_ctx_params cp = kite_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = 1;
    float *out = NULL;
    if ((rc = kite_ctx_new(m, &cp, &c)) == KITE_OK) {
        const kite_token toks[6] = {1, 264, 262, 100, 5, 260};
        if ((rc = kite_ctx_eval(c, toks, 6, true)) == KITE_OK) {
            out = malloc(sizeof(float) * 6 * (size_t)n_vocab);
            for (int i = 0; i < 6; i++) memcpy(out + i * n_vocab, kite_ctx_logits(c, i), sizeof(float) * (size_t)n_vocab);
        }
    }
    CHECK_MSG(rc == KITE_OK, "eval %s: %s", path, kite_last_error());
    kite_ctx_free(c);
    kite_model_free(m);
    return out;
}

static double max_abs_diff(const float *a, const float *b, int n) {
    double w = 0;
    for (int i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]));
    return w;
}

/* Phi3ForCausalLM as its checkpoints store it: qkv_proj (q, k, v rows) and
 * gate_up_proj (gate, up rows) fused, NEOX rope (nothing permuted), LongRoPE
 * factors in config.json.  The converted file's phi3.* keys equal the ones
 * llama.cpp's converter writes (attn_factor sqrt(1 + ln(64/8) / ln 8),
 * computed here), and its logits equal those of the same weights written
 * directly as a phi3 GGUF, both in a context of 8 (the original one: short
 * factors) and of 16 (long factors), which differ from each other.  Partial
 * rotary and a null window; bad LongRoPE configs fail with one line. */
TEST(test_phi3) {
    const int E = 32, F = 48, H = 4, KV = 2, HD = 8, V = 265, NR = HD / 2;
    clean_dir();
    reset_srcs();
    rng = 43;
    add("model.embed_tokens.weight", KITE_DTYPE_BF16, 2, V, E, 0, NULL);
    for (int l = 0; l < 2; l++) {
        char n[128];
#define A(suffix, dt, nd, d0, d1)                                                                               \
    do {                                                                                                        \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                                                 \
        add(n, dt, nd, d0, d1, 0, NULL);                                                                        \
    } while (0)
        A("input_layernorm.weight", KITE_DTYPE_F32, 1, E, 1);
        A("self_attn.qkv_proj.weight", KITE_DTYPE_F32, 2, (H + 2 * KV) * HD, E);
        A("self_attn.o_proj.weight", KITE_DTYPE_F32, 2, E, H * HD);
        A("post_attention_layernorm.weight", KITE_DTYPE_F32, 1, E, 1);
        A("mlp.gate_up_proj.weight", KITE_DTYPE_F16, 2, 2 * F, E);
        A("mlp.down_proj.weight", KITE_DTYPE_F32, 2, E, F);
#undef A
    }
    add("model.norm.weight", KITE_DTYPE_F32, 1, E, 1, 0, NULL);
    add("lm_head.weight", KITE_DTYPE_F32, 2, V, E, 0, NULL);
    write_spm_tokenizer();
    write_weights(false);
    /* factors far from 1 so that the two sets move the logits apart */
    const float lf[4] = {1.0f, 2.5f, 6.0f, 16.0f}, sf[4] = {1.0f, 1.25f, 1.5f, 2.0f};
    const char *cfg = "{\"architectures\": [\"Phi3ForCausalLM\"], \"num_attention_heads\": 4, "
                      "\"num_key_value_heads\": 2, \"hidden_size\": 32, \"intermediate_size\": 48, "
                      "\"max_position_embeddings\": 64, \"original_max_position_embeddings\": 8, "
                      "\"sliding_window\": 4, \"rope_scaling\": {\"type\": \"longrope\", "
                      "\"long_factor\": [1.0, 2.5, 6.0, 16.0], \"short_factor\": [1.0, 1.25, 1.5, 2.0]}}";
    patch_config("phi3", cfg);
    TPATH(out, "phi3.gguf");
    TPATH(direct, "phi3-direct.gguf");
    int rc = convert(KITE_DTYPE_F32, out, NULL);
    CHECK_MSG(rc == KITE_OK, "convert: %s", kite_last_error());
    gguf_ctx *g = rc ? NULL : open_out(out);
    const float attn_factor = (float)sqrt(1.0 + log(64.0 / 8.0) / log(8.0));
    if (g) {
        check_str(g, "general.architecture", "phi3");
        static const struct {
            const char *key;
            int64_t v;
        } ints[] = {{"phi3.block_count", 2},          {"phi3.context_length", 64},
                    {"phi3.embedding_length", 32},    {"phi3.feed_forward_length", 48},
                    {"phi3.attention.head_count", 4}, {"phi3.attention.head_count_kv", 2},
                    {"phi3.rope.dimension_count", 8}, {"phi3.rope.scaling.original_context_length", 8},
                    {"phi3.attention.sliding_window", 4}};
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
            CHECK_MSG(get_int(g, ints[i].key) == ints[i].v, "%s", ints[i].key);
        float f = 0;
        CHECK(gguf_get_f32(g, "phi3.rope.scaling.attn_factor", &f) == KITE_OK && f == attn_factor);
        CHECK(gguf_find_key(g, "phi3.rope.scaling.type") < 0); /* llama.cpp writes none for phi3 */
        CHECK(gguf_find_tensor(g, "blk.0.ffn_gate.weight") == NULL && gguf_find_tensor(g, "blk.0.attn_q.weight") == NULL);
        check_tensor(g, "blk.1.attn_qkv.weight", "model.layers.1.self_attn.qkv_proj.weight", 0, KITE_DTYPE_F32, 0);
        check_tensor(g, "blk.1.ffn_up.weight", "model.layers.1.mlp.gate_up_proj.weight", 0, KITE_DTYPE_F32, 0);
        check_tensor(g, "blk.0.ffn_norm.weight", "model.layers.0.post_attention_layernorm.weight", 0, KITE_DTYPE_F32, 0);
        const gguf_tensor *tl = gguf_find_tensor(g, "rope_factors_long.weight");
        const gguf_tensor *ts = gguf_find_tensor(g, "rope_factors_short.weight");
        CHECK(tl && ts && tl->type == KITE_DTYPE_F32 && ts->type == KITE_DTYPE_F32 && tl->ne[0] == NR && ts->ne[0] == NR);
        if (tl && ts) CHECK(!memcmp(tl->data, lf, sizeof lf) && !memcmp(ts->data, sf, sizeof sf));
        /* the same model written directly: phi3 keys set here, vocabulary copied */
        gguf_writer *w = gguf_writer_new();
        for (uint64_t i = 0; i < g->n_kv; i++) {
            char *k = gguf_str_dup(g->kv[i].key);
            if (strncmp(k, "phi3.", 5)) gguf_writer_set_value(w, k, &g->kv[i].value);
            free(k);
        }
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) gguf_writer_set_u32(w, ints[i].key, (uint32_t)ints[i].v);
        gguf_writer_set_f32(w, "phi3.rope.freq_base", 10000.0f);
        gguf_writer_set_f32(w, "phi3.attention.layer_norm_rms_epsilon", 1e-5f);
        gguf_writer_set_f32(w, "phi3.rope.scaling.attn_factor", attn_factor);
        int64_t ne[2] = {NR, 1};
        gguf_writer_add_tensor(w, "rope_factors_long.weight", KITE_DTYPE_F32, 1, ne, lf);
        gguf_writer_add_tensor(w, "rope_factors_short.weight", KITE_DTYPE_F32, 1, ne, sf);
        static const struct {
            const char *g, *h;
        } names[] = {{"attn_norm.weight", "input_layernorm.weight"},   {"attn_qkv.weight", "self_attn.qkv_proj.weight"},
                     {"attn_output.weight", "self_attn.o_proj.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
                     {"ffn_up.weight", "mlp.gate_up_proj.weight"},     {"ffn_down.weight", "mlp.down_proj.weight"}};
        add_src_f32(w, "token_embd.weight", "model.embed_tokens.weight");
        add_src_f32(w, "output_norm.weight", "model.norm.weight");
        add_src_f32(w, "output.weight", "lm_head.weight");
        for (int l = 0; l < 2; l++)
            for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
                char gn[64], hn[128];
                snprintf(gn, sizeof gn, "blk.%d.%s", l, names[i].g);
                snprintf(hn, sizeof hn, "model.layers.%d.%s", l, names[i].h);
                add_src_f32(w, gn, hn);
            }
        CHECK(gguf_writer_write(w, direct) == KITE_OK);
        gguf_writer_free(w);
        gguf_close(g);
        float *a8 = run_logits_ctx(out, 8, V), *b8 = run_logits_ctx(direct, 8, V);
        float *a16 = run_logits_ctx(out, 16, V), *b16 = run_logits_ctx(direct, 16, V);
        if (a8 && b8 && a16 && b16) {
            double d8 = max_abs_diff(a8, b8, 6 * V), d16 = max_abs_diff(a16, b16, 6 * V);
            CHECK_MSG(d8 == 0 && d16 == 0, "converted vs direct phi3 logits differ by %g (short) / %g (long)", d8, d16);
            /* positions > 0 rotate: the long and the short factors give different logits */
            double ls = max_abs_diff(a8, a16, 6 * V);
            CHECK_MSG(ls > 1e-3, "long vs short factors differ by only %g", ls);
        }
        free(a8), free(b8), free(a16), free(b16);
    }
    unlink(out), unlink(direct);
    /* partial rotary (Phi-4-mini style): half of head_dim rotates, factors for 4 dims; a null window is 0 */
    patch_config("phi3", "{\"architectures\": [\"Phi3ForCausalLM\"], \"num_attention_heads\": 4, "
                         "\"num_key_value_heads\": 2, \"hidden_size\": 32, \"intermediate_size\": 48, "
                         "\"original_max_position_embeddings\": 8, \"partial_rotary_factor\": 0.5, "
                         "\"sliding_window\": null, \"rope_scaling\": {\"rope_type\": \"longrope\", "
                         "\"long_factor\": [2.0, 4.0], \"short_factor\": [1.0, 1.5], \"attention_factor\": 1.25}}");
    rc = convert(KITE_DTYPE_F32, out, NULL);
    CHECK_MSG(rc == KITE_OK, "convert (partial rotary): %s", kite_last_error());
    g = rc ? NULL : open_out(out);
    if (g) {
        CHECK_EQ_INT(get_int(g, "phi3.rope.dimension_count"), 4);
        CHECK_EQ_INT(get_int(g, "phi3.attention.sliding_window"), 0);
        float f = 0;
        CHECK(gguf_get_f32(g, "phi3.rope.scaling.attn_factor", &f) == KITE_OK && f == 1.25f);
        const gguf_tensor *tl = gguf_find_tensor(g, "rope_factors_long.weight");
        CHECK(tl && tl->ne[0] == 2);
        gguf_close(g);
        float *a = run_logits_ctx(out, 16, V);
        CHECK(a != NULL);
        free(a);
    }
    unlink(out);
    /* bad LongRoPE configs: one line naming the field */
    static const struct {
        const char *rs, *needle;
        int code;
    } bad[] = {
        {"{\"type\": \"longrope\", \"long_factor\": [1, 2, 3, 4]}", "longrope needs 'short_factor', a list of 4 numbers",
         KITE_E_FORMAT},
        {"{\"type\": \"su\", \"long_factor\": [1, 2, 3], \"short_factor\": [1, 2, 3, 4]}",
         "'long_factor' has 3 entries, expected 4 (rotary dims 8 / 2)", KITE_E_FORMAT},
        {"{\"type\": \"longrope\", \"long_factor\": [1, 2, 3, 4], \"short_factor\": [1, 2, -3, 4]}",
         "short_factor[2] must be a positive number", KITE_E_FORMAT},
        {"{\"type\": \"yarn\", \"factor\": 4.0}", "type 'yarn' is not supported for phi3", KITE_E_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char extra[512];
        snprintf(extra, sizeof extra, "{\"architectures\": [\"Phi3ForCausalLM\"], \"num_attention_heads\": 4, "
                 "\"num_key_value_heads\": 2, \"hidden_size\": 32, \"intermediate_size\": 48, \"rope_scaling\": %s}",
                 bad[i].rs);
        patch_config("phi3", extra);
        rc = convert(KITE_DTYPE_F32, out, NULL);
        const char *msg = kite_last_error();
        CHECK_MSG(rc == bad[i].code, "case %zu: rc %d (%s)", i, rc, msg);
        CHECK_MSG(strstr(msg, bad[i].needle) && !strchr(msg, '\n'), "case %zu: %s", i, msg);
        CHECK_MSG(access(out, F_OK) != 0, "case %zu left %s behind", i, out);
    }
    clean_dir();
}

/* ---- malformed input ------------------------------------------------------------ */

/* A safetensors image with header text hdr and data_len bytes of data. */
static uint8_t *st_image(const char *hdr, size_t data_len, uint64_t hlen_override, size_t *size) {
    size_t hl = strlen(hdr);
    *size = 8 + hl + data_len;
    uint8_t *b = calloc(1, *size);
    uint64_t hlen = hlen_override ? hlen_override : hl;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(b + 8, hdr, hl);
    return b;
}

static void expect_st_error(const char *hdr, size_t data_len, uint64_t hlen_override, int code, const char *needle) {
    size_t size;
    uint8_t *b = st_image(hdr, data_len, hlen_override, &size);
    st_tensor *t = NULL;
    size_t n = 0;
    int rc = st_parse(b, size, "bad.safetensors", &t, &n);
    CHECK_MSG(rc == code, "'%s': rc %d, want %d (%s)", hdr, rc, code, kite_last_error());
    const char *msg = kite_last_error();
    CHECK_CONTAINS(msg, "bad.safetensors: ");
    CHECK_CONTAINS(msg, needle);
    CHECK_MSG(!strchr(msg, '\n'), "message is not one line: %s", msg);
    if (rc == KITE_OK) st_tensors_free(t, n);
    free(b);
}

TEST(test_safetensors_malformed) {
    /* a good one first */
    size_t size;
    uint8_t *b = st_image("{\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[16,20]},"
                          "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
                          20, 0, &size);
    st_tensor *t = NULL;
    size_t n = 0;
    int rc = st_parse(b, size, "ok.safetensors", &t, &n);
    CHECK_MSG(rc == KITE_OK, "%s", kite_last_error());
    if (rc == KITE_OK) {
        CHECK_EQ_INT(n, 2);
        CHECK_STR_EQ(t[0].name, "a");
        CHECK_EQ_INT(t[0].dtype, KITE_DTYPE_F32);
        CHECK_EQ_INT(t[1].shape[0], 2);
        CHECK(t[1].data == b + size - 4);
        st_tensors_free(t, n);
    }
    free(b);
    CHECK(st_parse("1234", 4, "bad.safetensors", &t, &n) == KITE_E_FORMAT);
    CHECK_CONTAINS(kite_last_error(), "too short");
    expect_st_error("{}", 0, 1000, KITE_E_FORMAT, "header length 1000");
    expect_st_error("{}", 0, 1, KITE_E_FORMAT, "header length 1 ");
    expect_st_error("{\"a\":", 0, 0, KITE_E_FORMAT, "not a JSON object");
    expect_st_error("[1,2]", 0, 0, KITE_E_FORMAT, "not a JSON object");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, 0, KITE_E_FORMAT,
                    "tensor 'a': data_offsets [0, 8] run past the end of the data (4 bytes)");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, 0, KITE_E_FORMAT,
                    "tensor 'a': data_offsets [0, 8] hold 8 bytes but F32 shape [3] needs 12");
    expect_st_error("{\"a\":{\"dtype\":\"F16\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,8]}}", 8, 0,
                    KITE_E_FORMAT, "tensor 'a': shape[0]");
    expect_st_error("{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, 0, KITE_E_UNSUPPORTED,
                    "dtype 'I64' is not supported");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 8, 0, KITE_E_FORMAT,
                    "end before they begin");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                    8, 0, KITE_E_FORMAT, "overlap another tensor");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, 0, KITE_E_FORMAT,
                    "leave a hole at byte 0");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, 0, KITE_E_FORMAT,
                    "tensors cover 4 bytes of data but the file has 8");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                    8, 0, KITE_E_FORMAT, "tensor 'a' is listed twice");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, 0, KITE_E_FORMAT,
                    "5 dims");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, 0, KITE_E_FORMAT,
                    "shape[0] is not a non-negative integer");
    expect_st_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, 0, KITE_E_FORMAT,
                    "'data_offsets' must be an array [begin, end]");
    expect_st_error("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, KITE_E_FORMAT, "'dtype' missing");
    expect_st_error("{\"__metadata__\":{\"x\":1}}", 0, 0, KITE_E_FORMAT, "__metadata__ 'x' is not a string");
}

/* Directory-level errors: each a one-line message naming the file. */
TEST(test_directory_errors) {
    float *gq[2], *gk[2];
    make_llama(gq, gk, true);
    for (int l = 0; l < 2; l++) free(gq[l]), free(gk[l]);
    TPATH(out, "err.gguf");
    /* a tensor missing from the shards but named by the index */
    TPATH(idx, "model.safetensors.index.json");
    cJSON *j = NULL;
    CHECK(hf_json_load(tmpdir, "model.safetensors.index.json", false, &j) == KITE_OK);
    cJSON_AddStringToObject(cJSON_GetObjectItem(j, "weight_map"), "extra.weight", "model-00002-of-00002.safetensors");
    write_json(idx, j);
    CHECK(convert(KITE_DTYPE_F32, out, NULL) == KITE_E_FORMAT);
    CHECK_CONTAINS(kite_last_error(), "weight_map names tensor 'extra.weight'");
    CHECK(access(out, F_OK) != 0);
    /* a truncated shard */
    write_weights(true);
    TPATH(shard, "model-00002-of-00002.safetensors");
    struct stat st;
    CHECK(stat(shard, &st) == 0);
    CHECK(truncate(shard, st.st_size - 3) == 0);
    CHECK(convert(KITE_DTYPE_F32, out, NULL) == KITE_E_FORMAT);
    CHECK_CONTAINS(kite_last_error(), "model-00002-of-00002.safetensors: ");
    CHECK_CONTAINS(kite_last_error(), "run past the end of the data");
    write_weights(true);
    /* config: unsupported model_type, missing field, heads not dividing */
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "model_type", "falcon");
    write_json(tpath("config.json"), c);
    CHECK(convert(KITE_DTYPE_F32, out, NULL) == KITE_E_UNSUPPORTED);
    CHECK_CONTAINS(kite_last_error(), "config.json: model_type 'falcon' (architectures[0] '(none)') is not supported");
    shape bad = llama_shape;
    bad.KV = 3;
    write_config(&bad);
    CHECK(convert(KITE_DTYPE_F32, out, NULL) == KITE_E_FORMAT);
    CHECK_CONTAINS(kite_last_error(), "num_attention_heads 4 is not a multiple of num_key_value_heads 3");
    /* shape disagreeing with config.json */
    bad = llama_shape;
    bad.F = 40;
    write_config(&bad);
    CHECK(convert(KITE_DTYPE_F32, out, NULL) == KITE_E_FORMAT);
    CHECK_CONTAINS(kite_last_error(), "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [48, 32], expected [40, 32]");
    write_config(&llama_shape);
    /* a tensor the architecture does not use, then a missing one */
    add("model.layers.0.mlp.extra.weight", KITE_DTYPE_F32, 1, 4, 1, 1, NULL);
    write_weights(true);
    CHECK(convert(KITE_DTYPE_F32, out, NULL) == KITE_E_UNSUPPORTED);
    CHECK_CONTAINS(kite_last_error(), "model-00002-of-00002.safetensors: tensor 'model.layers.0.mlp.extra.weight' "
                                      "is not used by the llama architecture");
    free(srcs[--n_srcs].v);
    src *up = (src *)find_src("model.layers.1.mlp.up_proj.weight");
    if (up) snprintf(up->name, sizeof up->name, "model.layers.1.mlp.up.weight");
    write_weights(true);
    CHECK(convert(KITE_DTYPE_F32, out, NULL) == KITE_E_NOT_FOUND);
    CHECK_CONTAINS(kite_last_error(), ": tensor 'model.layers.1.mlp.up_proj.weight' (needed by llama) is missing");
    if (up) snprintf(up->name, sizeof up->name, "model.layers.1.mlp.up_proj.weight");
    write_weights(true);
    CHECK(access(out, F_OK) != 0);
    /* tokenizer missing */
    unlink(tpath("tokenizer.json"));
    CHECK(convert(KITE_DTYPE_F32, out, NULL) == KITE_E_NOT_FOUND);
    CHECK_CONTAINS(kite_last_error(), "tokenizer.json: not found");
    /* no weights at all */
    clean_dir();
    write_config(&llama_shape);
    write_spm_tokenizer();
    CHECK(convert(KITE_DTYPE_F32, out, NULL) == KITE_E_NOT_FOUND);
    CHECK_CONTAINS(kite_last_error(), "no model.safetensors or model.safetensors.index.json");
    CHECK(access(out, F_OK) != 0);
    clean_dir();
}

/* Replays the fuzz corpus (seeds and any crash inputs added later): each file
 * must parse or fail with a one-line message naming it, never crash. */
TEST(test_fuzz_corpus_replay) {
    const char *dir = "tests/fuzz/corpus/fuzz_safetensors";
    DIR *d = opendir(dir);
    if (!d) {
        printf("    (%s absent: replay skipped)\n", dir);
        return;
    }
    int n_files = 0, n_ok = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n = 0;
        char *img = harness_read_file(path, &n);
        if (!img) continue;
        n_files++;
        st_tensor *t = NULL;
        size_t nt = 0;
        int rc = st_parse(img, n, e->d_name, &t, &nt);
        if (rc == KITE_OK) {
            n_ok++;
            for (size_t i = 0; i < nt; i++)
                CHECK(t[i].data >= (const uint8_t *)img && t[i].data + t[i].nbytes <= (const uint8_t *)img + n);
            st_tensors_free(t, nt);
        } else {
            CHECK_CONTAINS(kite_last_error(), e->d_name);
            CHECK(!strchr(kite_last_error(), '\n'));
        }
        free(img);
    }
    closedir(d);
    CHECK(n_files >= 7);
    CHECK(n_ok >= 3); /* two_tensors, scalar_and_empty, empty_header */
}

TEST(test_permute_helper) {
    /* head_dim 8: rows 0..7 of a head come from 0,4,1,5,2,6,3,7 */
    const int64_t want[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    for (int r = 0; r < 8; r++) CHECK_EQ_INT(hf_permute_src_row(r, 8), want[r]);
    CHECK_EQ_INT(hf_permute_src_row(9, 8), 12);
}

int main(int argc, char **argv) {
    /* `test_hf_convert --write-fixture DIR`: writes the tiny sharded llama
     * directory into DIR (which must exist) for tests/e2e/test_hf_convert.sh. */
    if (argc == 3 && !strcmp(argv[1], "--write-fixture")) {
        float *gq[2], *gk[2];
        snprintf(tmpdir, sizeof tmpdir, "%s", argv[2]);
        make_llama(gq, gk, true);
        for (int l = 0; l < 2; l++) free(gq[l]), free(gk[l]);
        reset_srcs();
        return harness_failed_checks ? 1 : 0;
    }
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kite-hf-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_permute_helper);
    RUN(test_safetensors_malformed);
    RUN(test_fuzz_corpus_replay);
    RUN(test_llama_sharded_f32);
    RUN(test_llama_logits_match_direct_gguf);
    RUN(test_llama_types);
    RUN(test_tied_embeddings);
    RUN(test_sliding_window_config);
    RUN(test_qwen2);
    RUN(test_qwen3_and_moe);
    RUN(test_gpt2);
    RUN(test_gemma2);
    RUN(test_phi3);
    RUN(test_directory_errors);
    clean_dir();
    reset_srcs();
    rmdir(tmpdir);
    return harness_summary(__FILE__);
}
