/*
 * hf_json.c - JSON files of a Hugging Face directory: loading and typed
 * field getters that report the file and key on error (see hf_internal.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "convert/hf_internal.h"

/* JSON files bigger than this are refused (tokenizer.json of large
 * vocabularies is ~10-20 MB). */
#define HF_JSON_MAX (512u << 20)

int hf_json_load(const char *dir, const char *name, bool optional, cJSON **out) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return err_set(KITE_E_ARG, "%s: path too long", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) {
            if (optional) return KITE_E_NOT_FOUND;
            return err_set(KITE_E_NOT_FOUND, "%s: not found", path);
        }
        return err_set(KITE_E_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    int rc = KITE_OK;
    char *buf = NULL;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = err_set(KITE_E_IO, "%s: not a regular file", path);
        goto done;
    }
    if ((uint64_t)st.st_size > HF_JSON_MAX) {
        rc = err_set(KITE_E_FORMAT, "%s: %lld bytes is too large for a JSON file (max %u)", path,
                     (long long)st.st_size, HF_JSON_MAX);
        goto done;
    }
    size_t n = (size_t)st.st_size;
    if (!(buf = malloc(n + 1))) {
        rc = err_set(KITE_E_NOMEM, "%s: out of memory", path);
        goto done;
    }
    if (fread(buf, 1, n, f) != n) {
        rc = err_set(KITE_E_IO, "%s: read failed", path);
        goto done;
    }
    buf[n] = '\0';
    cJSON *j = cJSON_ParseWithLength(buf, n);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        rc = err_set(KITE_E_FORMAT, "%s: not a JSON object", path);
        goto done;
    }
    *out = j;
done:
    free(buf);
    fclose(f);
    return rc;
}

int hf_json_int(const cJSON *obj, const char *file, const char *key, bool required, int64_t lo, int64_t hi,
                int64_t *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j || cJSON_IsNull(j)) {
        if (!required) return KITE_E_NOT_FOUND;
        return err_set(KITE_E_NOT_FOUND, "%s: '%s' missing", file, key);
    }
    double d = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d))
        return err_set(KITE_E_FORMAT, "%s: '%s' must be an integer in [%lld, %lld]", file, key, (long long)lo,
                       (long long)hi);
    *out = (int64_t)d;
    return KITE_OK;
}

int hf_json_num(const cJSON *obj, const char *file, const char *key, bool required, double *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!j || cJSON_IsNull(j)) {
        if (!required) return KITE_E_NOT_FOUND;
        return err_set(KITE_E_NOT_FOUND, "%s: '%s' missing", file, key);
    }
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble))
        return err_set(KITE_E_FORMAT, "%s: '%s' must be a finite number", file, key);
    *out = j->valuedouble;
    return KITE_OK;
}

const char *hf_json_str(const cJSON *obj, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(j) ? j->valuestring : NULL;
}
