/*
 * embed_parse.c - parsing of embeddings requests (embed.h) and the base64
 * encoding of their answers.
 *
 * DESIGN
 *   A pure function of the body: the cJSON tree is freed before returning
 *   and the request owns copies of every text and id list.  The input forms
 *   are OpenAI's (a string, an array of strings, an array of token ids, an
 *   array of arrays of token ids); an empty string or array, a mixed array
 *   or an id outside the vocabulary is a 400 naming "input".  Fields are
 *   those of OpenAI's embeddings API plus llama-server's "content"; any
 *   other non-null field is a 400 naming it (never silently ignored).
 *
 * THREADS
 *   Any thread; no state.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "http/http_check.h"

#define INVALID "invalid_request_error"

static const char *const EMBED_FIELDS[] = {"input", "content", "model", "encoding_format", "dimensions", "user", NULL};

void embed_request_free(embed_request *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->n_input; i++) {
        if (r->text) free(r->text[i]);
        if (r->ids) free(r->ids[i]);
    }
    free(r->text);
    free(r->ids);
    free(r->n_ids);
    free(r->model);
    memset(r, 0, sizeof *r);
}

static bool fail_oom(oai_error *err) {
    oai_error_set(err, 500, "server_error", NULL, NULL, "Out of memory.");
    return false;
}

static bool bad_input(oai_error *err, const char *key, const char *fmt_what, int32_t i) {
    if (i >= 0)
        oai_error_set(err, 400, INVALID, "invalid_value", key, "Invalid value for '%s': item %d %s.", key, (int)i,
                      fmt_what);
    else
        oai_error_set(err, 400, INVALID, "invalid_value", key, "Invalid value for '%s': %s.", key, fmt_what);
    return false;
}

static bool is_id(const cJSON *v) { return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble); }

/* ids from an array of integers in [0, n_vocab); item is the input's index for messages (-1: the only one). */
static bool take_ids(const cJSON *arr, const char *key, int32_t n_vocab, int32_t item, embed_request *r, int32_t slot,
                     oai_error *err) {
    const int n = cJSON_GetArraySize(arr);
    if (n == 0) return bad_input(err, key, item >= 0 ? "is an empty list of tokens" : "the list of tokens is empty", item);
    kite_token *ids = malloc(sizeof *ids * (size_t)n);
    if (!ids) return fail_oom(err);
    int32_t k = 0;
    for (const cJSON *t = arr->child; t; t = t->next, k++) {
        if (!is_id(t)) {
            free(ids);
            oai_error_set(err, 400, INVALID, "invalid_type", key,
                          "Invalid type for '%s': expected a string, an array of strings, an array of integers "
                          "(token ids) or an array of arrays of integers.", key);
            return false;
        }
        if (t->valuedouble < 0 || t->valuedouble >= n_vocab) {
            free(ids);
            oai_error_set(err, 400, INVALID, "invalid_value", key,
                          "Invalid value for '%s': token %g is outside the vocabulary (%d tokens).", key,
                          t->valuedouble, (int)n_vocab);
            return false;
        }
        ids[k] = (kite_token)t->valuedouble;
    }
    r->ids[slot] = ids;
    r->n_ids[slot] = k;
    return true;
}

static bool take_text(const cJSON *s, const char *key, int32_t item, embed_request *r, int32_t slot, oai_error *err) {
    if (!s->valuestring[0]) return bad_input(err, key, item >= 0 ? "is an empty string" : "the text is empty", item);
    if (!(r->text[slot] = strdup(s->valuestring))) return fail_oom(err);
    return true;
}

static bool alloc_inputs(embed_request *r, int32_t n, oai_error *err) {
    r->text = calloc((size_t)n, sizeof *r->text);
    r->ids = calloc((size_t)n, sizeof *r->ids);
    r->n_ids = calloc((size_t)n, sizeof *r->n_ids);
    if (!r->text || !r->ids || !r->n_ids) return fail_oom(err);
    r->n_input = n;
    return true;
}

static bool parse_input(const cJSON *in, const char *key, int32_t n_vocab, embed_request *r, oai_error *err) {
    if (cJSON_IsString(in)) return alloc_inputs(r, 1, err) && take_text(in, key, -1, r, 0, err);
    if (!cJSON_IsArray(in)) {
        oai_error_set(err, 400, INVALID, "invalid_type", key,
                      "Invalid type for '%s': expected a string, an array of strings, an array of integers "
                      "(token ids) or an array of arrays of integers.", key);
        return false;
    }
    const int n = cJSON_GetArraySize(in);
    if (n == 0) return bad_input(err, key, "the list of inputs is empty", -1);
    if (is_id(in->child)) return alloc_inputs(r, 1, err) && take_ids(in, key, n_vocab, -1, r, 0, err);
    if (n > EMBED_MAX_INPUTS) {
        oai_error_set(err, 400, INVALID, "invalid_value", key,
                      "Invalid value for '%s': %d inputs, at most %d per request.", key, n, EMBED_MAX_INPUTS);
        return false;
    }
    if (!alloc_inputs(r, n, err)) return false;
    int32_t i = 0;
    for (const cJSON *it = in->child; it; it = it->next, i++) {
        if (cJSON_IsString(it)) {
            if (!take_text(it, key, i, r, i, err)) return false;
        } else if (cJSON_IsArray(it)) {
            if (!take_ids(it, key, n_vocab, i, r, i, err)) return false;
        } else {
            oai_error_set(err, 400, INVALID, "invalid_type", key,
                          "Invalid type for '%s': item %d must be a string or an array of integers (token ids).", key,
                          (int)i);
            return false;
        }
    }
    return true;
}

bool embed_parse(const char *body, size_t len, bool oai, int32_t n_vocab, int32_t n_embd, embed_request *r,
                 oai_error *err) {
    memset(r, 0, sizeof *r);
    r->oai = oai;
    if (http_json_has_nul(body, len)) {
        oai_error_set(err, 400, INVALID, "invalid_value", NULL, "Strings in the request may not contain U+0000 (\\u0000).");
        return false;
    }
    cJSON *root = len ? cJSON_ParseWithLength(body, len) : NULL;
    bool ok = false;
    if (!root) {
        oai_error_set(err, 400, INVALID, "invalid_json", NULL, "We could not parse the JSON body of your request.");
        return false;
    }
    if (!cJSON_IsObject(root)) {
        oai_error_set(err, 400, INVALID, "invalid_type", NULL, "The request body must be a JSON object.");
        goto done;
    }
    for (const cJSON *it = root->child; it; it = it->next) {
        const char *k = it->string ? it->string : "";
        bool known = false;
        for (const char *const *f = EMBED_FIELDS; *f; f++) known |= !strcmp(*f, k);
        if (known || cJSON_IsNull(it)) continue;
        char shown[48];
        http_utf8_copy(shown, sizeof shown, k);
        oai_error_set(err, 400, INVALID, "unknown_parameter", shown,
                      "Unrecognized request argument supplied: '%s' (%s).", shown, oai ? "/v1/embeddings" : "/embedding");
        goto done;
    }
    const cJSON *model = oai_member(root, "model");
    if (model && !cJSON_IsString(model)) {
        oai_error_set(err, 400, INVALID, "invalid_type", "model", "Invalid type for 'model': expected a string.");
        goto done;
    }
    if (model && !(r->model = strdup(model->valuestring))) {
        fail_oom(err);
        goto done;
    }
    const cJSON *user = oai_member(root, "user");
    if (user && !cJSON_IsString(user)) {
        oai_error_set(err, 400, INVALID, "invalid_type", "user", "Invalid type for 'user': expected a string.");
        goto done;
    }
    const cJSON *ef = oai_member(root, "encoding_format");
    if (ef) {
        if (!cJSON_IsString(ef)) {
            oai_error_set(err, 400, INVALID, "invalid_type", "encoding_format",
                          "Invalid type for 'encoding_format': expected a string.");
            goto done;
        }
        if (!strcmp(ef->valuestring, "base64")) {
            r->base64 = true;
        } else if (strcmp(ef->valuestring, "float")) {
            char shown[48];
            http_utf8_copy(shown, sizeof shown, ef->valuestring);
            oai_error_set(err, 400, INVALID, "invalid_value", "encoding_format",
                          "Invalid value for 'encoding_format': '%s' (expected 'float' or 'base64').", shown);
            goto done;
        }
    }
    const cJSON *dim = oai_member(root, "dimensions");
    if (dim) {
        if (!is_id(dim)) {
            oai_error_set(err, 400, INVALID, "invalid_type", "dimensions", "Invalid type for 'dimensions': expected an integer.");
            goto done;
        }
        if (dim->valuedouble != (double)n_embd) {
            oai_error_set(err, 400, INVALID, "unsupported_value", "dimensions",
                          "'dimensions' %g is not supported: this model's embeddings have %d dimensions (kite does not "
                          "shorten them).", dim->valuedouble, (int)n_embd);
            goto done;
        }
    }
    const char *key = "input";
    const cJSON *in = oai_member(root, "input");
    if (!in && (in = oai_member(root, "content"))) key = "content";
    if (!in) {
        oai_error_set(err, 400, INVALID, "missing_required_parameter", "input", "Missing required parameter: 'input'.");
        goto done;
    }
    if (oai_member(root, "input") && oai_member(root, "content")) {
        oai_error_set(err, 400, INVALID, "invalid_value", "content", "Give 'input' or 'content', not both.");
        goto done;
    }
    ok = parse_input(in, key, n_vocab, r, err);
done:
    cJSON_Delete(root);
    return ok;
}

char *embed_base64_f32(const float *v, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t nb = n * 4;
    char *out = malloc((nb + 2) / 3 * 4 + 1);
    if (!out) return NULL;
    size_t o = 0;
    uint32_t acc = 0;
    int held = 0;
    for (size_t i = 0; i < nb; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i / 4], 4);
        const uint32_t byte = (bits >> (8 * (i % 4))) & 0xff; /* little-endian whatever the host */
        acc = acc << 8 | byte;
        if (++held == 3) {
            out[o++] = tab[acc >> 18 & 63];
            out[o++] = tab[acc >> 12 & 63];
            out[o++] = tab[acc >> 6 & 63];
            out[o++] = tab[acc & 63];
            acc = 0;
            held = 0;
        }
    }
    if (held == 1) {
        out[o++] = tab[acc >> 2 & 63];
        out[o++] = tab[(acc & 3) << 4];
        out[o++] = '=';
        out[o++] = '=';
    } else if (held == 2) {
        out[o++] = tab[acc >> 10 & 63];
        out[o++] = tab[acc >> 4 & 63];
        out[o++] = tab[(acc & 15) << 2];
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}
