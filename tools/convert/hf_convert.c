/*
 * hf_convert.c - the `kite convert --hf` driver (see hf_convert.h):
 * config.json -> hyperparameters, tokenizer.json -> vocabulary, safetensors
 * -> streamed tensors, then one gguf_writer_write.
 */
#include "convert/hf_convert.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "convert/hf_internal.h"
#include "tensor/dtype.h"

/* general.file_type as llama.cpp numbers it (enum llama_ftype). */
static uint32_t file_type_of(uint32_t t) {
    switch (t) {
    case KITE_DTYPE_F16: return 1;
    case KITE_DTYPE_Q8_0: return 7;
    case KITE_DTYPE_BF16: return 32;
    default: return 0;
    }
}

/* AUTO: BF16 when the checkpoint's token embedding is BF16, else F16 (like
 * llama.cpp's "auto", the 16-bit type that keeps a 16-bit source exact). */
static uint32_t auto_type(const st_model *st) {
    static const char *const emb[] = {"model.embed_tokens.weight", "transformer.wte.weight", "wte.weight"};
    for (size_t i = 0; i < sizeof emb / sizeof emb[0]; i++) {
        const st_tensor *t = st_model_find(st, emb[i]);
        if (t) return t->dtype == KITE_DTYPE_BF16 ? KITE_DTYPE_BF16 : KITE_DTYPE_F16;
    }
    return KITE_DTYPE_F16;
}

static void dir_base(const char *dir, char *out, size_t cap) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    snprintf(out, cap, "%.*s", (int)(n - b), dir + b);
}

int hf_convert(const hf_convert_params *p, hf_convert_info *info) {
    hf_config c;
    st_model *st = NULL;
    gguf_writer *w = NULL;
    hf_plan *plan = NULL;
    hf_vocab_info vi;
    memset(&vi, 0, sizeof vi);
    if (!p || !p->dir || !p->out_path) return err_set(KITE_E_ARG, "hf_convert: dir and out_path are required");
    if (p->out_type != HF_TYPE_AUTO && p->out_type != KITE_DTYPE_F32 && p->out_type != KITE_DTYPE_F16 &&
        p->out_type != KITE_DTYPE_BF16 && p->out_type != KITE_DTYPE_Q8_0)
        return err_set(KITE_E_ARG, "hf_convert: output type %d is not f32, f16, bf16 or q8_0", p->out_type);
    int rc = hf_config_load(p->dir, &c);
    if (rc) return rc;
    if ((rc = st_model_open(p->dir, &st))) goto done;
    if (!c.n_vocab) {
        /* no vocab_size in config.json: the embedding's rows decide */
        const st_tensor *e = st_model_find(st, c.family == HF_GPT2 ? "wte.weight" : "model.embed_tokens.weight");
        if (!e && c.family == HF_GPT2) e = st_model_find(st, "transformer.wte.weight");
        if (e && e->n_dims == 2 && e->shape[0] <= (1 << 24)) c.n_vocab = e->shape[0];
    }
    uint32_t out_type = p->out_type == HF_TYPE_AUTO ? auto_type(st) : (uint32_t)p->out_type;
    char name[256];
    if (p->name) snprintf(name, sizeof name, "%s", p->name);
    else dir_base(p->dir, name, sizeof name);
    if (!(w = gguf_writer_new())) {
        rc = err_set(KITE_E_NOMEM, "out of memory");
        goto done;
    }
    if ((rc = gguf_writer_set_str(w, "general.architecture", c.arch)) || (rc = gguf_writer_set_str(w, "general.name", name))) {
        rc = err_set(rc, "out of memory");
        goto done;
    }
    if ((rc = hf_config_write(&c, w))) goto done;
    if ((rc = gguf_writer_set_u32(w, "general.file_type", file_type_of(out_type)))) {
        rc = err_set(rc, "out of memory");
        goto done;
    }
    if ((rc = hf_vocab_write(p->dir, &c, w, &vi))) goto done;
    if ((rc = hf_plan_build(&c, st, out_type, w, &plan))) goto done;
    gguf_writer_set_progress(w, p->progress);
    if ((rc = gguf_writer_write(w, p->out_path))) goto done;
    if (info) {
        memset(info, 0, sizeof *info);
        snprintf(info->arch, sizeof info->arch, "%s", c.arch);
        snprintf(info->model_type, sizeof info->model_type, "%s", c.model_type);
        snprintf(info->tokenizer, sizeof info->tokenizer, "%s", vi.model);
        snprintf(info->pre, sizeof info->pre, "%s", vi.pre);
        info->out_type = out_type;
        info->n_layer = c.n_layer;
        info->n_vocab = vi.n_tokens;
        info->n_tensors = hf_plan_n_tensors(plan);
    }
done:
    hf_plan_free(plan);
    gguf_writer_free(w);
    st_model_free(st);
    hf_config_free(&c);
    return rc;
}
