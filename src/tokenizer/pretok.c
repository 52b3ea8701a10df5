/*
 * pretok.c - pre-tokenizer split regexes for the byte-level BPE (see pretok.h).
 *
 * DESIGN
 *   One PCRE2 pattern per kind, written from the published pattern strings
 *   (GPT-2's encoder.py, Llama 3's and Qwen2's tokenizer.json, Mistral's
 *   tekken.json), compiled with PCRE2_UTF | PCRE2_UCP so \s, \p{L}, \p{N}
 *   are Unicode-aware, and PCRE2_MATCH_INVALID_UTF so ill-formed input is
 *   legal: the patterns never match an ill-formed byte, and pretok_split
 *   turns each run of unmatched bytes into a chunk of its own, so the chunks
 *   always cover the text and decode(encode(x)) == x holds for any bytes.
 *   The code is JIT-compiled when the library supports it.
 *
 * THREAD SAFETY
 *   pcre2_code is read-only during matching; each pretok_split call makes its
 *   own match data.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretok.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

struct pretok {
    int kind;          /* enum pretok_kind */
    pcre2_code *code;  /* compiled pattern, owned */
};

/* GPT-2 (openai/gpt-2 encoder.py) */
static const char pat_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* Llama 3 (tokenizer.json pre_tokenizer Split) */
static const char pat_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Qwen2 / Qwen3: Llama 3's with one digit per chunk */
static const char pat_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Mistral tekken (untested: no golden data) */
static const char pat_tekken[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const struct {
    const char *name;
    int kind;
} pretok_names[] = {
    {"gpt-2", PRETOK_GPT2},      {"phi-2", PRETOK_GPT2},     {"roberta-bpe", PRETOK_GPT2},
    {"llama-bpe", PRETOK_LLAMA3}, {"llama3", PRETOK_LLAMA3}, {"llama-v3", PRETOK_LLAMA3},
    {"qwen2", PRETOK_QWEN2},     {"deepseek-r1-qwen", PRETOK_QWEN2}, {"tekken", PRETOK_TEKKEN},
};

int pretok_kind_from_name(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof pretok_names / sizeof pretok_names[0]; i++)
        if (strlen(pretok_names[i].name) == n && memcmp(pretok_names[i].name, name, n) == 0)
            return pretok_names[i].kind;
    return -1;
}

const char *pretok_kind_name(int kind) {
    switch (kind) {
    case PRETOK_GPT2: return "gpt-2";
    case PRETOK_LLAMA3: return "llama-bpe";
    case PRETOK_QWEN2: return "qwen2";
    case PRETOK_TEKKEN: return "tekken";
    default: return "?";
    }
}

int pretok_new(int kind, pretok **out) {
    const char *pat;
    switch (kind) {
    case PRETOK_GPT2: pat = pat_gpt2; break;
    case PRETOK_LLAMA3: pat = pat_llama3; break;
    case PRETOK_QWEN2: pat = pat_qwen2; break;
    case PRETOK_TEKKEN: pat = pat_tekken; break;
    default: return err_set(KITE_E_ARG, "pretok_new: unknown pre-tokenizer kind %d", kind);
    }
    pretok *p = calloc(1, sizeof *p);
    if (!p) return err_set(KITE_E_NOMEM, "pretok_new: out of memory");
    int ec;
    PCRE2_SIZE eo;
    p->kind = kind;
    p->code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                            &ec, &eo, NULL);
    if (!p->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        free(p);
        return err_set(KITE_E_UNSUPPORTED, "pre-tokenizer '%s': PCRE2 rejects the pattern at %zu: %s",
                       pretok_kind_name(kind), (size_t)eo, (const char *)msg);
    }
    (void)pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
    *out = p;
    return KITE_OK;
}

void pretok_free(pretok *p) {
    if (!p) return;
    pcre2_code_free(p->code);
    free(p);
}

int pretok_split(const pretok *p, const char *s, size_t n, pretok_fn fn, void *ctx) {
    if (n == 0) return KITE_OK;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->code, NULL);
    if (!md) return err_set(KITE_E_NOMEM, "pre-tokenizer: out of memory");
    int rc = KITE_OK;
    size_t pos = 0; /* everything before pos has been emitted */
    while (pos < n) {
        int m = pcre2_match(p->code, (PCRE2_SPTR)s, n, pos, 0, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) { /* match limit etc.: should not happen; emit the rest as one chunk */
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (a > pos && (rc = fn(ctx, pos, a - pos))) goto done; /* unmatched (ill-formed) bytes */
        if (b <= a) { /* empty match: impossible with these patterns; step one byte */
            b = a + 1;
        }
        if ((rc = fn(ctx, a, b - a))) goto done;
        pos = b;
    }
    if (pos < n) rc = fn(ctx, pos, n - pos);
done:
    pcre2_match_data_free(md);
    return rc;
}
