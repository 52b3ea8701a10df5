/*
 * hf_vocab.c - tokenizer.json (+ tokenizer_config.json) -> tokenizer.ggml.*
 *
 * DESIGN
 *   Two kinds of Hugging Face BPE tokenizers are understood, told apart as
 *   llama.cpp's converter does, by model.byte_fallback:
 *     - byte-level BPE (GPT-2, Llama 3, Qwen): tokenizer.ggml.model "gpt2",
 *       tokens, token_type, merges ("a b"; the newer [a, b] pair form is
 *       joined with spaces inside parts written as U+0120), and
 *       tokenizer.ggml.pre chosen by comparing the Split regex of the
 *       pre-tokenizer with the known ones ("llama-bpe", "qwen2"), or "gpt-2"
 *       for a plain ByteLevel pre-tokenizer with its built-in regex;
 *     - SentencePiece-style BPE with byte fallback (Llama 2, Mistral):
 *       tokenizer.ggml.model "llama", tokens, scores, token_type.  The scores
 *       give the merge order SentencePiece would use: a token made by merge
 *       rank r scores -r, so the highest-priority merge wins (tokens no
 *       merge makes score below every merge result; byte, control and
 *       unknown tokens score 0).
 *   Ids missing from the vocabulary up to config.json's vocab_size become
 *   "[PAD<id>]" user-defined tokens, as llama.cpp writes them.  Added tokens
 *   marked special are CONTROL (3), the others USER_DEFINED (4); <0xNN> is
 *   BYTE (6) and model.unk_token UNKNOWN (2) in the "llama" kind.
 *
 *   Special ids: tokenizer_config.json's bos/eos/unk/sep/pad/cls/mask_token
 *   (a string or {"content": ...}) looked up in added_tokens, then
 *   config.json's *_token_id for the ones still unset; add_bos/add_eos from
 *   tokenizer_config.json, else from a TemplateProcessing post-processor that
 *   starts with a special token, else true for "llama-bpe" (llama.cpp's
 *   default for it).  chat_template is copied (a list of named templates is
 *   written as tokenizer.chat_template and tokenizer.chat_template.NAME).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "convert/hf_internal.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_BYTE = 6 };

static const char re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct vocab_build {
    const char *path;      /* DIR/tokenizer.json, for messages */
    int64_t n;
    const char **text;     /* [n] borrowed from the JSON or from pads */
    char **pads;           /* [n] owned "[PADi]" strings (NULL where unused) */
    int32_t *type;         /* [n] */
    float *score;          /* [n] (llama kind) */
} vocab_build;

typedef struct name_id {
    const char *s;
    int64_t id;
} name_id;

static int cmp_name_id(const void *a, const void *b) { return strcmp(((const name_id *)a)->s, ((const name_id *)b)->s); }

static bool is_byte_token(const char *s) {
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && s[5] == '>' && strchr("0123456789ABCDEFabcdef", s[3]) &&
           strchr("0123456789ABCDEFabcdef", s[4]) && s[3] && s[4];
}

/* Name of the pre-tokenizer, or NULL if it is not one kite/llama.cpp knows. */
static const char *detect_pre(const cJSON *pt) {
    if (!cJSON_IsObject(pt)) return NULL;
    const char *type = hf_json_str(pt, "type");
    if (!type) return NULL;
    if (!strcmp(type, "ByteLevel")) {
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(pt, "use_regex");
        return (!ur || cJSON_IsTrue(ur)) ? "gpt-2" : NULL;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        const char *found = NULL;
        const cJSON *e;
        cJSON_ArrayForEach(e, seq) {
            const char *t = hf_json_str(e, "type");
            if (!t) return NULL;
            if (!strcmp(t, "Split")) {
                const cJSON *pat = cJSON_GetObjectItemCaseSensitive(e, "pattern");
                const char *re = hf_json_str(pat, "Regex");
                if (!re || found) return NULL;
                if (!strcmp(re, re_llama3)) found = "llama-bpe";
                else if (!strcmp(re, re_qwen2)) found = "qwen2";
                else return NULL;
            } else if (!strcmp(t, "ByteLevel")) {
                const cJSON *ur = cJSON_GetObjectItemCaseSensitive(e, "use_regex");
                if (cJSON_IsTrue(ur) || !ur) {
                    if (found) return NULL;
                    found = "gpt-2";
                }
            } else {
                return NULL;
            }
        }
        return found;
    }
    return NULL;
}

/* "a b" merge string from a merges entry (string or [a, b] pair); *owned
 * receives a heap string when one was built. */
static const char *merge_text(const cJSON *m, char **owned) {
    *owned = NULL;
    if (cJSON_IsString(m)) return m->valuestring;
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2) return NULL;
    const cJSON *a = cJSON_GetArrayItem(m, 0), *b = cJSON_GetArrayItem(m, 1);
    if (!cJSON_IsString(a) || !cJSON_IsString(b)) return NULL;
    size_t la = strlen(a->valuestring), lb = strlen(b->valuestring);
    char *s = malloc(2 * (la + lb) + 2), *o = s;
    if (!s) return NULL;
    for (const char *p = a->valuestring; *p; p++) {
        if (*p == ' ') *o++ = (char)0xC4, *o++ = (char)0xA0; /* U+0120 */
        else *o++ = *p;
    }
    *o++ = ' ';
    for (const char *p = b->valuestring; *p; p++) {
        if (*p == ' ') *o++ = (char)0xC4, *o++ = (char)0xA0;
        else *o++ = *p;
    }
    *o = '\0';
    *owned = s;
    return s;
}

static void build_free(vocab_build *v) {
    if (v->pads)
        for (int64_t i = 0; i < v->n; i++) free(v->pads[i]);
    free(v->pads);
    free(v->text);
    free(v->type);
    free(v->score);
}

/* Fills text/type from model.vocab and added_tokens. */
static int collect_tokens(vocab_build *v, const cJSON *vocab, const cJSON *added, bool spm, const char *unk) {
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        char a[ST_PRINTABLE_MAX], b[ST_PRINTABLE_MAX];
        if (!(d >= 0 && d < (double)v->n) || d != (double)(int64_t)d)
            return err_set(KITE_E_FORMAT, "%s: model.vocab '%s' has id %g outside 0..%lld (vocab_size)", v->path,
                           st_printable(e->string, a), d, (long long)v->n - 1);
        int64_t id = (int64_t)d;
        if (v->text[id])
            return err_set(KITE_E_FORMAT, "%s: model.vocab ids %lld repeat ('%s' and '%s')", v->path, (long long)id,
                           st_printable(v->text[id], a), st_printable(e->string, b));
        v->text[id] = e->string;
        v->type[id] = TT_NORMAL;
        if (spm && is_byte_token(e->string)) v->type[id] = TT_BYTE;
        if (spm && unk && !strcmp(e->string, unk)) v->type[id] = TT_UNKNOWN;
    }
    cJSON_ArrayForEach(e, added) {
        int64_t id;
        const char *content = hf_json_str(e, "content");
        int rc = hf_json_int(e, v->path, "id", true, 0, v->n - 1, &id);
        if (rc) return err_set(rc, "%s: added_tokens: every entry needs an 'id' in 0..%lld (vocab_size)", v->path,
                               (long long)v->n - 1);
        if (!content) return err_set(KITE_E_FORMAT, "%s: added_tokens id %lld: 'content' missing", v->path, (long long)id);
        v->text[id] = content;
        if (spm && unk && !strcmp(content, unk)) v->type[id] = TT_UNKNOWN;
        else v->type[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) ? TT_CONTROL : TT_USER;
    }
    for (int64_t i = 0; i < v->n; i++) {
        if (v->text[i]) continue;
        char buf[32];
        snprintf(buf, sizeof buf, "[PAD%lld]", (long long)i);
        if (!(v->pads[i] = strdup(buf))) return err_set(KITE_E_NOMEM, "out of memory");
        v->text[i] = v->pads[i];
        v->type[i] = TT_USER;
    }
    return KITE_OK;
}

/* SentencePiece-style scores from the merge ranks (see the header comment). */
static int spm_scores(vocab_build *v, const cJSON *merges) {
    name_id *idx = malloc((size_t)v->n * sizeof *idx);
    char *buf = NULL;
    size_t cap = 0;
    int rc = KITE_OK;
    if (!idx) return err_set(KITE_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < v->n; i++) idx[i] = (name_id){v->text[i], i};
    qsort(idx, (size_t)v->n, sizeof *idx, cmp_name_id);
    int64_t n_merges = cJSON_GetArraySize(merges);
    for (int64_t i = 0; i < v->n; i++) v->score[i] = v->type[i] == TT_NORMAL ? -(float)(n_merges + i) : 0.0f;
    int64_t rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        char *owned;
        const char *s = merge_text(m, &owned);
        if (!s) {
            rc = err_set(KITE_E_FORMAT, "%s: model.merges[%lld] is not \"a b\" or [a, b]", v->path, (long long)rank);
            goto done;
        }
        /* the merged token is the text with the first separating space removed */
        size_t len = strlen(s);
        if (len + 1 > cap) {
            char *nb = realloc(buf, cap = 2 * len + 16);
            if (!nb) {
                free(owned);
                rc = err_set(KITE_E_NOMEM, "out of memory");
                goto done;
            }
            buf = nb;
        }
        const char *sp = strchr(s, ' ');
        if (sp) {
            size_t a = (size_t)(sp - s);
            memcpy(buf, s, a);
            memcpy(buf + a, sp + 1, len - a);
            name_id key = {buf, 0};
            const name_id *hit = bsearch(&key, idx, (size_t)v->n, sizeof *idx, cmp_name_id);
            if (hit && v->type[hit->id] == TT_NORMAL && v->score[hit->id] < -(float)rank)
                v->score[hit->id] = -(float)rank;
        }
        free(owned);
        rank++;
    }
done:
    free(buf);
    free(idx);
    return rc;
}

static int write_merges(vocab_build *v, const cJSON *merges, gguf_writer *w) {
    int64_t n = cJSON_GetArraySize(merges), i = 0;
    const char **s = calloc((size_t)(n ? n : 1), sizeof *s);
    char **owned = calloc((size_t)(n ? n : 1), sizeof *owned);
    int rc = KITE_OK;
    if (!s || !owned) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto done;
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        if (!(s[i] = merge_text(m, &owned[i]))) {
            rc = err_set(KITE_E_FORMAT, "%s: model.merges[%lld] is not \"a b\" or [a, b]", v->path, (long long)i);
            goto done;
        }
        i++;
    }
    if ((rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", s, NULL, (uint64_t)n)))
        rc = err_set(rc, "out of memory writing merges");
done:
    if (owned)
        for (int64_t k = 0; k < n; k++) free(owned[k]);
    free(owned);
    free(s);
    return rc;
}

/* id of the added token whose content is text, or -1 */
static int64_t added_id(const cJSON *added, const char *text) {
    const cJSON *e;
    cJSON_ArrayForEach(e, added) {
        const char *c = hf_json_str(e, "content");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (c && cJSON_IsNumber(id) && !strcmp(c, text)) return (int64_t)id->valuedouble;
    }
    return -1;
}

/* add_bos from a TemplateProcessing post-processor: 1 true, 0 false, -1 unknown */
static int post_processor_bos(const cJSON *pp) {
    const char *type = hf_json_str(pp, "type");
    if (!type) return -1;
    if (!strcmp(type, "Sequence")) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(pp, "processors")) {
            int r = post_processor_bos(e);
            if (r >= 0) return r;
        }
        return -1;
    }
    if (strcmp(type, "TemplateProcessing")) return -1;
    const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pp, "single"), 0);
    if (!first) return -1;
    return cJSON_GetObjectItemCaseSensitive(first, "SpecialToken") ? 1 : 0;
}

static int write_specials(const vocab_build *v, const hf_config *c, const cJSON *tok, const cJSON *tcfg,
                          const char *pre, gguf_writer *w) {
    static const char *const typ[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
    static const char *const key[] = {"bos_token_id", "eos_token_id", "unknown_token_id", "seperator_token_id",
                                      "padding_token_id", "cls_token_id", "mask_token_id"};
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tok, "added_tokens");
    int rc = KITE_OK;
    for (size_t i = 0; i < sizeof typ / sizeof typ[0]; i++) {
        char k[64];
        int64_t id = -1;
        snprintf(k, sizeof k, "%s_token", typ[i]);
        const cJSON *e = tcfg ? cJSON_GetObjectItemCaseSensitive(tcfg, k) : NULL;
        const char *content = cJSON_IsString(e) ? e->valuestring : hf_json_str(e, "content");
        if (content) id = added_id(added, content);
        if (id < 0 || id >= v->n) {
            snprintf(k, sizeof k, "%s_token_id", typ[i]);
            const cJSON *j = cJSON_GetObjectItemCaseSensitive(c->json, k);
            if (cJSON_IsNumber(j) && j->valuedouble >= 0 && j->valuedouble < (double)v->n) id = (int64_t)j->valuedouble;
        }
        if (id < 0 || id >= v->n) continue;
        snprintf(k, sizeof k, "tokenizer.ggml.%s", key[i]);
        if ((rc = gguf_writer_set_u32(w, k, (uint32_t)id))) return err_set(rc, "out of memory");
    }
    const cJSON *ab = tcfg ? cJSON_GetObjectItemCaseSensitive(tcfg, "add_bos_token") : NULL;
    const cJSON *ae = tcfg ? cJSON_GetObjectItemCaseSensitive(tcfg, "add_eos_token") : NULL;
    int add_bos = cJSON_IsBool(ab) ? cJSON_IsTrue(ab) : post_processor_bos(cJSON_GetObjectItemCaseSensitive(tok, "post_processor"));
    if (add_bos < 0 && pre && !strcmp(pre, "llama-bpe")) add_bos = 1;
    if (add_bos >= 0 && (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add_bos == 1)))
        return err_set(rc, "out of memory");
    if (cJSON_IsBool(ae) && (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", cJSON_IsTrue(ae))))
        return err_set(rc, "out of memory");
    const cJSON *asp = tcfg ? cJSON_GetObjectItemCaseSensitive(tcfg, "add_prefix_space") : NULL;
    if (!pre && (cJSON_IsBool(asp) || c->family == HF_GEMMA2) && /* gemma2: always false, as llama.cpp */
        (rc = gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", c->family != HF_GEMMA2 && cJSON_IsTrue(asp))))
        return err_set(rc, "out of memory");
    const cJSON *ct = tcfg ? cJSON_GetObjectItemCaseSensitive(tcfg, "chat_template") : NULL;
    if (cJSON_IsString(ct)) {
        if ((rc = gguf_writer_set_str(w, "tokenizer.chat_template", ct->valuestring))) return err_set(rc, "out of memory");
    } else if (cJSON_IsArray(ct)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, ct) {
            const char *name = hf_json_str(e, "name"), *tmpl = hf_json_str(e, "template");
            if (!name || !tmpl) continue;
            char k[256];
            if (!strcmp(name, "default")) snprintf(k, sizeof k, "tokenizer.chat_template");
            else snprintf(k, sizeof k, "tokenizer.chat_template.%.200s", name);
            if ((rc = gguf_writer_set_str(w, k, tmpl))) return err_set(rc, "out of memory");
        }
    }
    return KITE_OK;
}

int hf_vocab_write(const char *dir, const hf_config *c, gguf_writer *w, hf_vocab_info *info) {
    cJSON *tok = NULL, *tcfg = NULL;
    vocab_build v = {0};
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    v.path = path;
    int rc = hf_json_load(dir, "tokenizer.json", false, &tok);
    if (rc) {
        if (rc == KITE_E_NOT_FOUND) err_set(rc, "%s: not found (only tokenizer.json vocabularies are supported)", path);
        return rc;
    }
    rc = hf_json_load(dir, "tokenizer_config.json", true, &tcfg);
    if (rc == KITE_E_NOT_FOUND) rc = KITE_OK;
    if (rc) goto done;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tok, "model");
    const char *mtype = hf_json_str(model, "type");
    if (!mtype || strcmp(mtype, "BPE")) {
        char mt[ST_PRINTABLE_MAX];
        rc = err_set(KITE_E_UNSUPPORTED, "%s: model.type '%s' is not supported (only BPE)", path,
                     mtype ? st_printable(mtype, mt) : "(none)");
        goto done;
    }
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tok, "added_tokens");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        rc = err_set(KITE_E_FORMAT, "%s: model.vocab (object) and model.merges (array) are required", path);
        goto done;
    }
    if (added && !cJSON_IsArray(added)) {
        rc = err_set(KITE_E_FORMAT, "%s: 'added_tokens' is not an array", path);
        goto done;
    }
    bool spm = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    const char *pre = NULL;
    if (!spm && !(pre = detect_pre(cJSON_GetObjectItemCaseSensitive(tok, "pre_tokenizer")))) {
        rc = err_set(KITE_E_UNSUPPORTED,
                     "%s: pre_tokenizer is not one kite knows (byte-level with the GPT-2, Llama 3 or Qwen2 regex)", path);
        goto done;
    }
    /* vocabulary size: config.json's vocab_size, else the largest id + 1 */
    v.n = c->n_vocab;
    if (!v.n) {
        const cJSON *e;
        cJSON_ArrayForEach(e, vocab) if (cJSON_IsNumber(e) && e->valuedouble + 1 > (double)v.n && e->valuedouble < (double)(1 << 24))
            v.n = (int64_t)e->valuedouble + 1;
        cJSON_ArrayForEach(e, added) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
            if (cJSON_IsNumber(id) && id->valuedouble + 1 > (double)v.n && id->valuedouble < (double)(1 << 24))
                v.n = (int64_t)id->valuedouble + 1;
        }
        if (!v.n) {
            rc = err_set(KITE_E_FORMAT, "%s: empty vocabulary", path);
            goto done;
        }
    }
    v.text = calloc((size_t)v.n, sizeof *v.text);
    v.pads = calloc((size_t)v.n, sizeof *v.pads);
    v.type = calloc((size_t)v.n, sizeof *v.type);
    v.score = spm ? calloc((size_t)v.n, sizeof *v.score) : NULL;
    if (!v.text || !v.pads || !v.type || (spm && !v.score)) {
        rc = err_set(KITE_E_NOMEM, "out of memory for %lld tokens", (long long)v.n);
        goto done;
    }
    if ((rc = collect_tokens(&v, vocab, added, spm, hf_json_str(model, "unk_token")))) goto done;
    if ((rc = gguf_writer_set_str(w, "tokenizer.ggml.model", spm ? "llama" : "gpt2")) ||
        (pre && (rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", pre))) ||
        (spm && (rc = gguf_writer_set_str(w, "tokenizer.ggml.pre", "default"))) ||
        (rc = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v.text, NULL, (uint64_t)v.n))) {
        rc = err_set(rc, "out of memory writing the vocabulary");
        goto done;
    }
    if (spm) {
        if ((rc = spm_scores(&v, merges))) goto done;
        if ((rc = gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, v.score, (uint64_t)v.n))) {
            rc = err_set(rc, "out of memory writing scores");
            goto done;
        }
    }
    if ((rc = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, v.type, (uint64_t)v.n))) {
        rc = err_set(rc, "out of memory writing token types");
        goto done;
    }
    if (!spm && (rc = write_merges(&v, merges, w))) goto done;
    if ((rc = write_specials(&v, c, tok, tcfg, pre, w))) goto done;
    if (info) {
        snprintf(info->model, sizeof info->model, "%s", spm ? "llama" : "gpt2");
        snprintf(info->pre, sizeof info->pre, "%s", pre ? pre : "");
        info->n_tokens = v.n;
    }
done:
    build_free(&v);
    cJSON_Delete(tcfg);
    cJSON_Delete(tok);
    return rc;
}
