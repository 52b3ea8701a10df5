/*
 * gguf_sniff.c - what a file looks like from its first bytes.
 *
 * DESIGN
 *   Error messages for a wrong file ("not a GGUF file", a llama2.c header
 *   with absurd sizes) should say what the file is instead.  The checks are
 *   cheap and ordered from the most specific signature to the loosest
 *   heuristic: magics first (GGUF, zip, llama2.c v1/v2), then structural
 *   patterns (safetensors' length + '{', SentencePiece's protobuf field
 *   tags, pickle's protocol opcode), then text, then the headers that are
 *   only numbers (llama2.c v0 checkpoint, llama2.c tokenizer) checked for
 *   plausible values.  A wrong guess costs only a message, never a decision:
 *   no caller refuses a file for its kind alone unless the file also fails
 *   that caller's own checks.
 *
 * THREAD SAFETY
 *   Pure functions.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gguf/gguf.h"

static uint32_t le32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static int32_t sle32(const uint8_t *b) {
    uint32_t u = le32(b);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* A protobuf varint at b[*pos..n); false if it does not end in 5 bytes. */
static bool varint(const uint8_t *b, size_t n, size_t *pos, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 5 && *pos < n; i++) {
        uint8_t c = b[(*pos)++];
        v |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* SentencePiece ModelProto: field 1 (pieces, length-delimited) holding a
 * SentencePiece message whose field 1 is the piece string and field 2 the
 * float score. */
static bool is_spm(const uint8_t *b, size_t n) {
    size_t pos = 0;
    uint64_t len, slen;
    if (n < 8 || b[pos++] != 0x0a || !varint(b, n, &pos, &len) || len < 7) return false;
    if (pos >= n || b[pos++] != 0x0a || !varint(b, n, &pos, &slen) || slen > len) return false;
    pos += (size_t)slen;
    return pos < n && b[pos] == 0x15;
}

static bool is_text(const uint8_t *b, size_t n) {
    if (n == 0) return false;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = b[i];
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f') return false;
        if (c == 0x7f) return false;
    }
    return true;
}

/* llama2.c v0: seven int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
 * vocab_size (negative: untied classifier), seq_len) of sane sizes. */
static bool is_llama2c_v0(const uint8_t *b, size_t n) {
    if (n < 28) return false;
    int32_t dim = sle32(b), hidden = sle32(b + 4), layers = sle32(b + 8), heads = sle32(b + 12);
    int32_t kv = sle32(b + 16), vocab = sle32(b + 20), seq = sle32(b + 24);
    if (vocab < 0 && vocab != INT32_MIN) vocab = -vocab;
    return dim > 0 && dim <= (1 << 16) && hidden > 0 && hidden <= (1 << 20) && layers > 0 && layers <= 1024 &&
           heads > 0 && heads <= 1024 && kv > 0 && kv <= heads && vocab > 0 && vocab <= (1 << 24) && seq > 0 &&
           seq <= (1 << 24) && dim % heads == 0 && heads % kv == 0;
}

/* llama2.c tokenizer.bin: int32 max_token_length, then (float score, int32
 * len, len bytes) per token. */
static bool is_llama2c_tok(const uint8_t *b, size_t n) {
    if (n < 12) return false;
    int32_t max_len = sle32(b);
    if (max_len <= 0 || max_len > 4096) return false;
    size_t pos = 4;
    for (int k = 0; k < 2 && pos + 8 <= n; k++) {
        float score;
        uint32_t u = le32(b + pos);
        memcpy(&score, &u, sizeof score);
        int32_t len = sle32(b + pos + 4);
        if (!isfinite(score) || len < 0 || len > max_len) return false;
        pos += 8 + (size_t)len;
    }
    return true;
}

int gguf_sniff(const void *head, size_t n) {
    const uint8_t *b = head;
    if (!b || n < 4) return GGUF_SNIFF_UNKNOWN;
    if (!memcmp(b, "GGUF", 4)) return GGUF_SNIFF_GGUF;
    if (!memcmp(b, "PK\x03\x04", 4)) return GGUF_SNIFF_ZIP;
    if (le32(b) == 0x616b3432u) return GGUF_SNIFF_LLAMA2C; /* "ak42" */
    if (n >= 9 && b[8] == '{' && le32(b + 4) == 0 && le32(b) > 1) return GGUF_SNIFF_SAFETENSORS;
    if (is_spm(b, n)) return GGUF_SNIFF_SPM;
    if (b[0] == 0x80 && b[1] >= 2 && b[1] <= 5) return GGUF_SNIFF_PICKLE;
    if (is_text(b, n)) return GGUF_SNIFF_TEXT;
    if (is_llama2c_v0(b, n)) return GGUF_SNIFF_LLAMA2C;
    if (is_llama2c_tok(b, n)) return GGUF_SNIFF_LLAMA2C_TOK;
    return GGUF_SNIFF_UNKNOWN;
}

const char *gguf_sniff_name(int kind) {
    switch (kind) {
    case GGUF_SNIFF_GGUF: return "a GGUF file";
    case GGUF_SNIFF_TEXT: return "a text file";
    case GGUF_SNIFF_SPM: return "a SentencePiece .model (protobuf)";
    case GGUF_SNIFF_ZIP: return "a zip archive (a PyTorch checkpoint?)";
    case GGUF_SNIFF_PICKLE: return "a Python pickle (a PyTorch checkpoint?)";
    case GGUF_SNIFF_SAFETENSORS: return "a safetensors file";
    case GGUF_SNIFF_LLAMA2C: return "a llama2.c checkpoint";
    case GGUF_SNIFF_LLAMA2C_TOK: return "a llama2.c tokenizer";
    default: return "";
    }
}
