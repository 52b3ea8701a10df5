/* arch.c - architecture table (see arch.h). */
#include "model/arch.h"

#include <string.h>

#include "model/model.h"

static const arch_info archs[] = {
    {
        .name = "llama",
        .rope_type = ROPE_NORM,
        .tensor_name =
            {
                [TR_TOKEN_EMBD] = "token_embd.weight",
                [TR_OUTPUT_NORM] = "output_norm.weight",
                [TR_OUTPUT] = "output.weight",
                [TR_ATTN_NORM] = "attn_norm.weight",
                [TR_ATTN_Q] = "attn_q.weight",
                [TR_ATTN_K] = "attn_k.weight",
                [TR_ATTN_V] = "attn_v.weight",
                [TR_ATTN_OUT] = "attn_output.weight",
                [TR_FFN_NORM] = "ffn_norm.weight",
                [TR_FFN_GATE] = "ffn_gate.weight",
                [TR_FFN_UP] = "ffn_up.weight",
                [TR_FFN_DOWN] = "ffn_down.weight",
            },
    },
};

const arch_info *arch_find(const char *name) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(archs[i].name, name) == 0) return &archs[i];
    return NULL;
}

const char *arch_supported_list(void) { return "llama"; }
