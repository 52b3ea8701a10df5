/*
 * chat_template.h - turning a conversation into the prompt text a chat
 * model was trained on (issue 8 item 3; used by `kite chat` and `kite serve`).
 *
 * DESIGN
 *   Real GGUF files carry a Jinja template in tokenizer.chat_template.  kite
 *   does not run Jinja: it recognises the common families from marker strings
 *   in the template text and formats them with C code.  A documented default
 *   (chatml) is used when nothing is recognised.  The exact output of each
 *   family, and the reference template it follows, is in docs/chat.md and
 *   pinned by tests/unit/test_chat_template.c.
 *   Special tokens in the produced text (e.g. "<|im_start|>") are written as
 *   text.  kite_tokenize does NOT parse them (it cuts out user-defined tokens
 *   only): tokenize chat prompts with chat_tokenize() (chat_tokenize.h), which
 *   matches control/user-defined/unknown token texts first.
 *
 * THREAD SAFETY
 *   Every function is reentrant (no global state).
 */
#ifndef KITE_CHAT_TEMPLATE_H
#define KITE_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "kite.h"

enum chat_family {
    CHAT_UNKNOWN = -1,
    CHAT_LLAMA2 = 0,  /* [INST] <<SYS>> ... (Meta Llama-2-chat template) */
    CHAT_LLAMA3,      /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_CHATML,      /* <|im_start|>role\n...<|im_end|>\n (Qwen, many fine-tunes) */
    CHAT_MISTRAL,     /* [INST] ... [/INST] (v0.1/v0.2 style, no system role: prepended to the first user turn) */
    CHAT_ZEPHYR,      /* <|user|>\n...</s>\n */
    CHAT_GEMMA,       /* <start_of_turn>user\n...<end_of_turn>\n */
    CHAT_PHI3,        /* <|user|>\n...<|end|>\n */
    CHAT_FAMILY_COUNT
};

typedef struct chat_msg {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* UTF-8 */
} chat_msg;

/* Family recognised from a Jinja template's text, or CHAT_UNKNOWN (NULL too).
 * A text that is exactly a family name ("llama3") gives that family.  Markers,
 * in this order: "<|im_start|>" chatml (unless "<|im_sep|>": phi-4, unknown);
 * "[INST]" llama2 with "<<SYS>>", else mistral; "<|start_header_id|>" and
 * "<|end_header_id|>" llama3; "<start_of_turn>" gemma; "<|user|>" and
 * "<|assistant|>" zephyr (unless "<|end|>": phi-3, or "[gMASK]": GLM).
 * Cost: a few substring searches over the text. */
int chat_template_detect(const char *jinja);
/* "llama2", "llama3", "chatml", "mistral", "zephyr", "gemma"; NULL if out of range. */
const char *chat_family_name(int family);
/* Inverse of chat_family_name, or CHAT_UNKNOWN (NULL too). */
int chat_family_from_name(const char *name);
/* "llama2, llama3, chatml, mistral, zephyr, gemma" (static), for messages. */
const char *chat_family_names(void);

/* The family to use for a model: `override` (a family name) if given, else
 * detected from the model's tokenizer.chat_template, else CHAT_CHATML (the
 * documented default).  Returns a kite_status (KITE_E_ARG for an unknown
 * override name or a NULL model/family, with kite_last_error() set; *family
 * unchanged on error). */
int chat_family_for_model(const kite_model *model, const char *override, int *family /* OUT */);

/* How chat_family_for_model_src chose the family (for messages). */
enum chat_family_source {
    CHAT_SRC_OVERRIDE = 0,     /* the override name */
    CHAT_SRC_DETECTED,         /* recognised in tokenizer.chat_template */
    CHAT_SRC_NO_TEMPLATE,      /* the model has no tokenizer.chat_template: default */
    CHAT_SRC_UNRECOGNISED      /* the template matched no family: default */
};
/* chat_family_for_model, also telling how the family was chosen (*source may
 * be NULL). */
int chat_family_for_model_src(const kite_model *model, const char *override, int *family /* OUT */,
                              int *source /* OUT: enum chat_family_source */);
/* "override", "detected from the model's template", ... (static). */
const char *chat_family_source_str(int source);

/* Formats msgs[0..n) in `family` and, if add_generation_prompt, the opening
 * of the assistant's turn (families whose user turn already ends with the
 * prompt, llama2 and mistral, add nothing).  *out is a malloc'd
 * NUL-terminated string the caller frees.  The leading BOS is not written:
 * tokenize the result with add_bos as the model asks.  BOS/EOS markers inside
 * the history ("</s><s>[INST]" in llama2, "</s>" after a mistral or zephyr
 * turn) are written as text.  Roles may come in any order; system messages
 * are merged into the next user turn where the family has no system role
 * (mistral, gemma; llama2 puts them in a <<SYS>> block there).
 * Returns a kite_status (KITE_E_ARG: unknown role, NULL content or role,
 * family out of range, msgs NULL with n > 0; KITE_E_NOMEM); *out unchanged
 * on error.  Cost: linear in the total content length. */
int chat_apply(int family, const chat_msg *msgs, size_t n, bool add_generation_prompt, char **out /* OUT */);

/* Stop strings of a family (end-of-turn markers that a model may print as
 * text), NULL-terminated static array (a one-entry {NULL} array if the
 * family is out of range). */
const char *const *chat_stop_strings(int family);

/* Streaming stop-string check: of text[0..len) (everything generated and not
 * yet shown), how many leading bytes may be shown now.  If a stop string
 * occurs, *hit is set and the offset of its earliest occurrence is returned
 * (the text before it is the reply).  Otherwise *hit is false and the result
 * is len minus the longest tail that is a proper prefix of a stop string (it
 * might become one with more text): hold that tail back.  stops is
 * NULL-terminated (NULL: none).  Cost: O(len * total stop length). */
size_t chat_stop_scan(const char *text, size_t len, const char *const *stops, bool *hit /* OUT */);

#endif
