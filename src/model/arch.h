/*
 * arch.h - per-architecture tables: tensor names and fixed properties.
 *
 * Tensor names are data, not code: an architecture is a row of the table in
 * arch.c giving the GGUF name of every tensor role ("blk.%d." names take the
 * layer index).  The forward pass works on roles, so a new architecture that
 * shares llama's graph only needs a row here.
 */
#ifndef KITE_MODEL_ARCH_H
#define KITE_MODEL_ARCH_H

enum tensor_role {
    TR_TOKEN_EMBD,
    TR_OUTPUT_NORM,
    TR_OUTPUT,
    TR_ATTN_NORM,
    TR_ATTN_Q,
    TR_ATTN_K,
    TR_ATTN_V,
    TR_ATTN_OUT,
    TR_FFN_NORM,
    TR_FFN_GATE,
    TR_FFN_UP,
    TR_FFN_DOWN,
    TR_COUNT
};

typedef struct arch_info {
    const char *name;                   /* general.architecture */
    int rope_type;                      /* enum rope_type */
    /* GGUF tensor names; roles from TR_ATTN_NORM on are per layer and get the
     * prefix "blk.<layer>." (the same for every architecture llama.cpp knows) */
    const char *tensor_name[TR_COUNT];
} arch_info;

/* Table row of an architecture name, or NULL if kite does not support it. */
const arch_info *arch_find(const char *name);
/* "llama, ..." - the supported names, for error messages. */
const char *arch_supported_list(void);

#endif
