/*
 * chat_template.h - turning a conversation into the prompt text a chat
 * model was trained on (issue 8 item 3; used by `kite chat` and `kite serve`).
 *
 * DESIGN
 *   Real GGUF files carry a Jinja template in tokenizer.chat_template.  kite
 *   does not run Jinja: it recognises the common families from marker strings
 *   in the template text and formats them with C code.  A documented default
 *   (chatml-like plain markers) is used when nothing is recognised.
 *   Special tokens in the produced text (e.g. "<|im_start|>") are written as
 *   text; kite_tokenize matches them as special tokens.
 */
#ifndef KITE_CHAT_TEMPLATE_H
#define KITE_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "kite.h"

enum chat_family {
    CHAT_UNKNOWN = -1,
    CHAT_LLAMA2 = 0,  /* [INST] <<SYS>> ... */
    CHAT_LLAMA3,      /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_CHATML,      /* <|im_start|>role\n...<|im_end|>\n (Qwen, many fine-tunes) */
    CHAT_MISTRAL,     /* [INST] ... [/INST] (v1-v3 style, no system role: prepended to the first user turn) */
    CHAT_ZEPHYR,      /* <|user|>\n...</s>\n */
    CHAT_GEMMA,       /* <start_of_turn>user\n...<end_of_turn>\n */
    CHAT_FAMILY_COUNT
};

typedef struct chat_msg {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* UTF-8 */
} chat_msg;

/* Family recognised from a Jinja template's text, or CHAT_UNKNOWN (NULL too). */
int chat_template_detect(const char *jinja);
/* "llama2", "llama3", "chatml", "mistral", "zephyr", "gemma"; NULL if out of range. */
const char *chat_family_name(int family);
/* Inverse of chat_family_name, or CHAT_UNKNOWN. */
int chat_family_from_name(const char *name);

/* The family to use for a model: `override` (a family name) if given, else
 * detected from the model's tokenizer.chat_template, else CHAT_CHATML (the
 * documented default).  Returns a kite_status (KITE_E_ARG for an unknown
 * override name, with kite_last_error() set). */
int chat_family_for_model(const kite_model *model, const char *override, int *family /* OUT */);

/* Formats msgs[0..n) in `family` and, if add_generation_prompt, the opening
 * of the assistant's turn.  *out is a malloc'd NUL-terminated string the
 * caller frees.  BOS is not written: tokenize the result with add_bos as the
 * model asks (kite_tokenize matches the special tokens).  Returns a kite_status
 * (KITE_E_ARG: unknown role, NULL content). */
int chat_apply(int family, const chat_msg *msgs, size_t n, bool add_generation_prompt, char **out /* OUT */);

/* Stop strings of a family (end-of-turn markers that a model may print as
 * text), NULL-terminated static array. */
const char *const *chat_stop_strings(int family);

#endif
