/*
 * shape.c - the model shape of the roofline analysis: from synth's table of
 * well-known shapes (`--shape NAME`) or from a GGUF file (`-m FILE`).
 *
 * A file's hyperparameters come from the public API (kite_model_get_info,
 * loaded with mmap so nothing is copied); the weight types from the GGUF
 * tensor table: blk.0.attn_q.weight for the layer matrices and
 * output.weight (else the tied token_embd.weight) for the head.
 *
 * Thread safety: reentrant.
 */
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "kite.h"
#include "model/arch.h"
#include "roofline/synth.h"
#include "roofline/roofline.h"

int rl_shape_from_name(const char *name, uint32_t wtype, rl_shape *sh) {
    const synth_shape *s = synth_shape_find(name);
    if (!s) return err_set(KITE_E_NOT_FOUND, "unknown shape '%s' (%s)", name, synth_shape_list());
    memset(sh, 0, sizeof *sh);
    snprintf(sh->name, sizeof sh->name, "%s", s->name);
    sh->n_embd = s->n_embd;
    sh->n_ff = s->n_ff;
    sh->n_layer = s->n_layer;
    sh->n_head = s->n_head;
    sh->n_head_kv = s->n_head_kv;
    sh->head_dim = s->head_dim > 0 ? s->head_dim : s->n_embd / s->n_head;
    sh->n_vocab = s->n_vocab;
    sh->wtype = wtype;
    sh->out_type = wtype;
    sh->n_expert = s->n_expert;
    sh->n_expert_used = s->n_expert_used;
    sh->n_ff_exp = s->n_ff_exp;
    sh->router_type = wtype; /* synth writes the router as a matrix of the weight type */
    sh->gpt2 = s->arch && !strcmp(s->arch, "gpt2");
    sh->gemma2 = s->arch && !strcmp(s->arch, "gemma2");
    /* the loader's rule (loader.c, read_swa_pattern): a pattern period, gemma2's even layers, else all */
    sh->sliding_window = s->sliding_window;
    const int64_t period = s->swa_period > 0 ? s->swa_period : sh->gemma2 ? 2 : 0;
    for (int64_t l = 0; l < s->n_layer && s->sliding_window > 0; l++)
        sh->n_swa_layers += period == 0 || l % period < period - 1;
    return KITE_OK;
}

int rl_shape_from_file(const char *path, rl_shape *sh) {
    kite_model *m = NULL;
    gguf_ctx *g = NULL;
    kite_model_params mp = kite_model_default_params();
    mp.use_mmap = true;
    int rc = kite_model_load(path, &mp, &m);
    if (rc != KITE_OK) goto done;
    kite_model_info mi; /* a vocab-only file fails in the loader (model_err_vocab_only) */
    kite_model_get_info(m, &mi);
    gguf_open_params gp = {.use_mmap = true};
    rc = gguf_open(path, &gp, &g);
    if (rc != KITE_OK) goto done;
    /* gpt2 keeps q, k and v in one fused matrix */
    const bool gpt2 = mi.arch && !strcmp(mi.arch, "gpt2");
    char q_name[ARCH_NAME_MAX] = "";
    const gguf_tensor *tq = arch_tensor_name(NULL, gpt2 ? TR_ATTN_QKV : TR_ATTN_Q, 0, q_name, sizeof q_name)
                                ? gguf_find_tensor(g, q_name)
                                : NULL;
    const gguf_tensor *to = gguf_find_tensor(g, arch_role_base(TR_OUTPUT));
    if (!to) to = gguf_find_tensor(g, arch_role_base(TR_TOKEN_EMBD));
    if (!tq || !to) {
        rc = err_set(KITE_E_NOT_FOUND, "%s: tensor %s or %s/%s missing", path, q_name, arch_role_stem(TR_OUTPUT),
                     arch_role_base(TR_TOKEN_EMBD));
        goto done;
    }
    memset(sh, 0, sizeof *sh);
    const char *base = strrchr(path, '/');
    snprintf(sh->name, sizeof sh->name, "%s", mi.name && mi.name[0] ? mi.name : base ? base + 1 : path);
    sh->n_embd = mi.n_embd;
    sh->n_ff = mi.n_ff;
    sh->n_layer = mi.n_layer;
    sh->n_head = mi.n_head;
    sh->n_head_kv = mi.n_head_kv;
    sh->head_dim = gpt2 ? mi.n_embd / mi.n_head : tq->ne[1] / mi.n_head;
    sh->n_vocab = mi.n_vocab;
    sh->wtype = tq->type;
    sh->out_type = to->type;
    sh->gpt2 = gpt2;
    sh->gemma2 = mi.arch && !strcmp(mi.arch, "gemma2");
    sh->sliding_window = mi.sliding_window;
    sh->n_swa_layers = mi.n_swa_layers;
    /* MoE: experts stacked as (n_embd, n_ff_exp, n_expert); the router (n_embd, n_expert) */
    char e_name[ARCH_NAME_MAX] = "", r_name[ARCH_NAME_MAX] = "";
    const gguf_tensor *te =
        arch_tensor_name(NULL, TR_FFN_GATE_EXPS, 0, e_name, sizeof e_name) ? gguf_find_tensor(g, e_name) : NULL;
    const gguf_tensor *tr =
        arch_tensor_name(NULL, TR_FFN_GATE_INP, 0, r_name, sizeof r_name) ? gguf_find_tensor(g, r_name) : NULL;
    if (te && tr && te->n_dims == 3) {
        char key[96];
        uint32_t used = 0;
        snprintf(key, sizeof key, "%s.expert_used_count", mi.arch ? mi.arch : "llama");
        sh->n_expert = te->ne[2];
        sh->n_ff_exp = te->ne[1];
        sh->router_type = tr->type;
        sh->n_expert_used = gguf_get_u32(g, key, &used) == KITE_OK ? used : 0;
    }
done:
    gguf_close(g);
    kite_model_free(m);
    return rc;
}
