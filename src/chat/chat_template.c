/*
 * chat_template.c - chat template families: detection from the Jinja text,
 * names, formatting of a conversation, stop strings.
 *
 * DESIGN
 *   Detection looks for marker substrings (see chat_template_detect in the
 *   header); formatting is one small function per family writing into a
 *   growable buffer.  Each family follows one reference template, rendered
 *   with llama.cpp's Jinja engine to obtain the expected strings of
 *   tests/unit/test_chat_template.c (docs/chat.md lists them):
 *     llama2   Meta Llama-2-chat: bos + "[INST] " + strip(<<SYS>> block +
 *              user) + " [/INST]", assistant " " + strip(content) + " </s>";
 *     llama3   Meta Llama-3-Instruct (tests/data/chat/llama3-instruct.jinja):
 *              header + trim(content) + "<|eot_id|>";
 *     chatml   Qwen3 (tests/data/chat/qwen3.jinja) without tools/thinking;
 *     mistral  Mistral-7B-Instruct v0.1/v0.2: "[INST] " + user + " [/INST]",
 *              assistant content + "</s>"; a system message is put before the
 *              next user message with "\n", as llama.cpp does;
 *     zephyr   HuggingFaceH4/zephyr-7b-beta: "<|role|>\n" + content + "</s>\n";
 *     phi3     microsoft/Phi-3-mini-4k-instruct: "<|role|>\n" + content +
 *              "<|end|>\n";
 *     gemma    google/gemma-7b-it: "<start_of_turn>user|model\n" +
 *              trim(content) + "<end_of_turn>\n"; system (no such role) is
 *              trim(system) + "\n\n" before the next user turn, as in
 *              Gemma 3's own template and llama.cpp.
 *   "trim"/"strip" remove ASCII whitespace (Jinja's also removes other
 *   Unicode spaces).  The leading BOS is never written.
 *
 * INVARIANTS
 *   A buffer is always NUL-terminated once it holds anything; on any error
 *   the partial buffer is freed and *out is untouched.
 *
 * THREAD SAFETY
 *   Reentrant: no global mutable state.
 */
#include "chat/chat_template.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/textbuf.h"
#include "model/model.h"
#include "generate/stop.h"

static const char *const family_names[CHAT_FAMILY_COUNT] = {
    [CHAT_LLAMA2] = "llama2", [CHAT_LLAMA3] = "llama3", [CHAT_CHATML] = "chatml",
    [CHAT_MISTRAL] = "mistral", [CHAT_ZEPHYR] = "zephyr", [CHAT_GEMMA] = "gemma", [CHAT_PHI3] = "phi3",
};

const char *chat_family_name(int family) {
    return family >= 0 && family < CHAT_FAMILY_COUNT ? family_names[family] : NULL;
}

int chat_family_from_name(const char *name) {
    if (!name) return CHAT_UNKNOWN;
    for (int f = 0; f < CHAT_FAMILY_COUNT; f++)
        if (!strcmp(name, family_names[f])) return f;
    return CHAT_UNKNOWN;
}

const char *chat_family_names(void) { return "llama2, llama3, chatml, mistral, zephyr, gemma, phi3"; }

int chat_template_detect(const char *t) {
    if (!t) return CHAT_UNKNOWN;
    int by_name = chat_family_from_name(t);
    if (by_name != CHAT_UNKNOWN) return by_name;
#define HAS(s) (strstr(t, s) != NULL)
    if (HAS("<|im_start|>")) return HAS("<|im_sep|>") ? CHAT_UNKNOWN : CHAT_CHATML;
    if (HAS("[INST]")) return HAS("<<SYS>>") ? CHAT_LLAMA2 : CHAT_MISTRAL;
    if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>")) return CHAT_LLAMA3;
    if (HAS("<start_of_turn>")) return CHAT_GEMMA;
    if (HAS("<|assistant|>") && HAS("<|end|>")) return CHAT_PHI3;
    if (HAS("<|user|>") && HAS("<|assistant|>") && !HAS("[gMASK]")) return CHAT_ZEPHYR;
#undef HAS
    return CHAT_UNKNOWN;
}

const char *chat_family_source_str(int source) {
    switch (source) {
    case CHAT_SRC_OVERRIDE: return "chosen with --chat-template";
    case CHAT_SRC_DETECTED: return "detected from the model's chat template";
    case CHAT_SRC_NO_TEMPLATE: return "default: the model has no chat template";
    case CHAT_SRC_UNRECOGNISED: return "default: the model's chat template is not recognised";
    default: return "?";
    }
}

int chat_family_for_model_src(const kite_model *model, const char *override, int *family, int *source) {
    if (!family) return err_set(KITE_E_ARG, "chat_family_for_model: NULL family");
    if (override) {
        int f = chat_family_from_name(override);
        if (f == CHAT_UNKNOWN)
            return err_set(KITE_E_ARG, "unknown chat template '%s' (expected one of %s)", override,
                           chat_family_names());
        *family = f;
        if (source) *source = CHAT_SRC_OVERRIDE;
        return KITE_OK;
    }
    if (!model) return err_set(KITE_E_ARG, "chat_family_for_model: NULL model");
    gguf_str s;
    int src = CHAT_SRC_NO_TEMPLATE, f = CHAT_CHATML;
    if (model->gguf && gguf_get_str(model->gguf, "tokenizer.chat_template", &s) == KITE_OK) {
        char *t = gguf_str_dup(s);
        if (!t) return err_set(KITE_E_NOMEM, "chat_family_for_model: out of memory");
        int d = chat_template_detect(t);
        free(t);
        src = d == CHAT_UNKNOWN ? CHAT_SRC_UNRECOGNISED : CHAT_SRC_DETECTED;
        if (d != CHAT_UNKNOWN) f = d;
    }
    err_clear(); /* an absent key is not an error here */
    *family = f;
    if (source) *source = src;
    return KITE_OK;
}

int chat_family_for_model(const kite_model *model, const char *override, int *family) {
    return chat_family_for_model_src(model, override, family, NULL);
}

/* ---- formatting -------------------------------------------------------------- */

enum role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT };

static int role_of(const char *r) {
    if (!strcmp(r, "system")) return ROLE_SYSTEM;
    if (!strcmp(r, "user")) return ROLE_USER;
    if (!strcmp(r, "assistant")) return ROLE_ASSISTANT;
    return -1;
}

/* chatml: <|im_start|>role\ncontent<|im_end|>\n */
static void fmt_chatml(textbuf *b, const chat_msg *m, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        textbuf_put(b, "<|im_start|>");
        textbuf_put(b, m[i].role);
        textbuf_put(b, "\n");
        textbuf_put(b, m[i].content);
        textbuf_put(b, "<|im_end|>\n");
    }
    if (gen) textbuf_put(b, "<|im_start|>assistant\n");
}

/* llama3: <|start_header_id|>role<|end_header_id|>\n\ntrim(content)<|eot_id|> */
static void fmt_llama3(textbuf *b, const chat_msg *m, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        textbuf_put(b, "<|start_header_id|>");
        textbuf_put(b, m[i].role);
        textbuf_put(b, "<|end_header_id|>\n\n");
        textbuf_put_trim(b, m[i].content);
        textbuf_put(b, "<|eot_id|>");
    }
    if (gen) textbuf_put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* zephyr: <|role|>\ncontent</s>\n */
static void fmt_zephyr(textbuf *b, const chat_msg *m, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        textbuf_put(b, "<|");
        textbuf_put(b, m[i].role);
        textbuf_put(b, "|>\n");
        textbuf_put(b, m[i].content);
        textbuf_put(b, "</s>\n");
    }
    if (gen) textbuf_put(b, "<|assistant|>\n");
}

/* phi3: <|role|>\ncontent<|end|>\n (Phi-3-mini-instruct's template; no
 * eos_token after the last turn without a generation prompt, as llama.cpp's
 * built-in phi3) */
static void fmt_phi3(textbuf *b, const chat_msg *m, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        textbuf_put(b, "<|");
        textbuf_put(b, m[i].role);
        textbuf_put(b, "|>\n");
        textbuf_put(b, m[i].content);
        textbuf_put(b, "<|end|>\n");
    }
    if (gen) textbuf_put(b, "<|assistant|>\n");
}

/* llama2 (Meta): a user turn is "[INST] " + strip(sys + user) + " [/INST]"
 * where sys is "<<SYS>>\n" + system + "\n<</SYS>>\n\n" (system messages
 * since the last user turn, joined with "\n"; empty if none); every user
 * turn but a leading one starts with "<s>"; assistant turns are
 * " " + strip(content) + " </s>".  System text with no user turn after it
 * opens a turn: "[INST] " + sys. */
static void fmt_llama2(textbuf *b, const chat_msg *m, size_t n) {
    textbuf sys = {0}, turn = {0};
    for (size_t i = 0; i < n && !sys.oom && !turn.oom; i++) {
        int r = role_of(m[i].role);
        if (r == ROLE_SYSTEM) {
            textbuf_put(&sys, sys.len ? "\n" : "<<SYS>>\n");
            textbuf_put(&sys, m[i].content);
        } else if (r == ROLE_ASSISTANT) {
            textbuf_put(b, " ");
            textbuf_put_trim(b, m[i].content);
            textbuf_put(b, " </s>");
        } else {
            turn.len = 0;
            if (sys.len) {
                textbuf_putn(&turn, sys.p, sys.len);
                textbuf_put(&turn, "\n<</SYS>>\n\n");
                sys.len = 0;
            }
            textbuf_put(&turn, m[i].content);
            if (b->len) textbuf_put(b, "<s>");
            textbuf_put(b, "[INST] ");
            if (turn.len) textbuf_put_trim(b, turn.p);
            textbuf_put(b, " [/INST]");
        }
    }
    if (sys.len && !sys.oom) {
        if (b->len) textbuf_put(b, "<s>");
        textbuf_put(b, "[INST] ");
        textbuf_putn(b, sys.p, sys.len);
        textbuf_put(b, "\n<</SYS>>\n\n");
    }
    if (sys.oom || turn.oom) b->oom = true;
    free(sys.p);
    free(turn.p);
}

/* mistral (v0.1/v0.2): "[INST] " + [system + "\n"] + user + " [/INST]",
 * assistant content + "</s>"; no stripping. */
static void fmt_mistral(textbuf *b, const chat_msg *m, size_t n) {
    bool open = false; /* "[INST] " written, user text not yet */
    for (size_t i = 0; i < n; i++) {
        int r = role_of(m[i].role);
        if (r == ROLE_ASSISTANT) {
            if (open) { /* system text with no user message: close the turn */
                textbuf_put(b, " [/INST]");
                open = false;
            }
            textbuf_put(b, m[i].content);
            textbuf_put(b, "</s>");
            continue;
        }
        if (!open) textbuf_put(b, "[INST] ");
        open = true;
        textbuf_put(b, m[i].content);
        if (r == ROLE_SYSTEM) {
            textbuf_put(b, "\n");
        } else {
            textbuf_put(b, " [/INST]");
            open = false;
        }
    }
}

/* gemma: <start_of_turn>user|model\ntrim(content)<end_of_turn>\n; pending
 * system text (trimmed, joined with "\n\n") + "\n\n" opens the next user turn. */
static void fmt_gemma(textbuf *b, const chat_msg *m, size_t n, bool gen) {
    size_t sys_from = 0;
    bool have_sys = false;
    for (size_t i = 0; i < n; i++) {
        int r = role_of(m[i].role);
        if (r == ROLE_SYSTEM) {
            if (!have_sys) sys_from = i;
            have_sys = true;
            continue;
        }
        textbuf_put(b, r == ROLE_ASSISTANT ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
        if (r == ROLE_USER && have_sys) {
            for (size_t k = sys_from; k < i; k++) {
                if (role_of(m[k].role) != ROLE_SYSTEM) continue;
                const char *c = m[k].content;
                size_t before = b->len;
                textbuf_put_trim(b, c);
                if (b->len > before) textbuf_put(b, "\n\n"); /* an empty system text adds nothing */
            }
            have_sys = false;
        }
        textbuf_put_trim(b, m[i].content);
        textbuf_put(b, "<end_of_turn>\n");
    }
    if (gen) textbuf_put(b, "<start_of_turn>model\n");
}

int chat_apply(int family, const chat_msg *msgs, size_t n, bool gen, char **out) {
    if (!out) return err_set(KITE_E_ARG, "chat_apply: NULL out");
    if (family < 0 || family >= CHAT_FAMILY_COUNT)
        return err_set(KITE_E_ARG, "chat_apply: chat family %d out of range", family);
    if (!msgs && n) return err_set(KITE_E_ARG, "chat_apply: NULL messages");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return err_set(KITE_E_ARG, "chat_apply: message %zu: NULL %s", i, msgs[i].role ? "content" : "role");
        if (role_of(msgs[i].role) < 0)
            return err_set(KITE_E_ARG, "chat_apply: message %zu: unknown role '%s' (expected system, user or assistant)",
                           i, msgs[i].role);
    }
    textbuf b = {0};
    textbuf_put(&b, ""); /* an empty conversation still gives "" */
    switch (family) {
    case CHAT_LLAMA2: fmt_llama2(&b, msgs, n); break;
    case CHAT_LLAMA3: fmt_llama3(&b, msgs, n, gen); break;
    case CHAT_CHATML: fmt_chatml(&b, msgs, n, gen); break;
    case CHAT_MISTRAL: fmt_mistral(&b, msgs, n); break;
    case CHAT_ZEPHYR: fmt_zephyr(&b, msgs, n, gen); break;
    case CHAT_GEMMA: fmt_gemma(&b, msgs, n, gen); break;
    case CHAT_PHI3: fmt_phi3(&b, msgs, n, gen); break;
    default: KITE_ASSERT(0);
    }
    if (b.oom) {
        free(b.p);
        return err_set(KITE_E_NOMEM, "chat_apply: out of memory");
    }
    *out = b.p;
    return KITE_OK;
}

/* ---- stop strings ------------------------------------------------------------ */

static const char *const stops_llama2[] = {"</s>", "[INST]", NULL};
static const char *const stops_llama3[] = {"<|eot_id|>", "<|start_header_id|>", "<|end_of_text|>", NULL};
static const char *const stops_chatml[] = {"<|im_end|>", "<|im_start|>", NULL};
static const char *const stops_mistral[] = {"</s>", "[INST]", NULL};
static const char *const stops_zephyr[] = {"</s>", "<|endoftext|>", "<|user|>", NULL};
static const char *const stops_gemma[] = {"<end_of_turn>", "<start_of_turn>", NULL};
static const char *const stops_phi3[] = {"<|end|>", "<|endoftext|>", "<|user|>", NULL};
static const char *const stops_none[] = {NULL};

const char *const *chat_stop_strings(int family) {
    switch (family) {
    case CHAT_LLAMA2: return stops_llama2;
    case CHAT_LLAMA3: return stops_llama3;
    case CHAT_CHATML: return stops_chatml;
    case CHAT_MISTRAL: return stops_mistral;
    case CHAT_ZEPHYR: return stops_zephyr;
    case CHAT_GEMMA: return stops_gemma;
    case CHAT_PHI3: return stops_phi3;
    default: return stops_none;
    }
}

size_t chat_stop_scan(const char *text, size_t len, const char *const *stops, bool *hit) {
    int32_t n = 0;
    while (stops && stops[n]) n++;
    bool h;
    const size_t at = stop_scan(text, len, stops, NULL, n, &h);
    if (hit) *hit = h;
    return at;
}
