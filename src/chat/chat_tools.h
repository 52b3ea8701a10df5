/*
 * chat_tools.h - tool (function) calling in chat prompts: the tool list, the
 * assistant's calls and the tools' results rendered the way each model family
 * was trained on them (issue 24 item 4; used by `kite serve`).
 *
 * DESIGN
 *   Each chat family maps to one tool-call syntax (chat_tool_format), which
 *   is both how calls in the history are written and what the model is asked
 *   (and, for forced calls, constrained) to print:
 *     HERMES   chatml, Qwen2.5/Qwen3: the tools as JSON lines inside
 *              <tools></tools> in the system message; a call is
 *              "<tool_call>\n{\"name\": N, \"arguments\": A}\n</tool_call>",
 *              several joined with "\n"; results are one user turn of
 *              "<tool_response>\nR\n</tool_response>" blocks joined with "\n"
 *              (Qwen3's template);
 *     LLAMA3   Llama 3.1: "Environment: ipython" in the system turn, the tools
 *              (JSON, indent 4) in the first user turn; a call is
 *              {"name": N, "parameters": A}, several joined with "\n"; results
 *              are "ipython" turns (Meta's Llama 3.1 template, tools in the
 *              user message, its default);
 *     MISTRAL  Mistral v0.3: "[AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS]"
 *              before the last user turn; calls
 *              "[TOOL_CALLS] [{\"name\": N, \"arguments\": A}, ...]" (the
 *              history adds "\"id\""); results "[TOOL_RESULTS] {\"content\":
 *              R, \"call_id\": \"ID\"}[/TOOL_RESULTS]"; turns "[INST] ...[/INST]"
 *              as in v0.3 (no space before [/INST], unlike chat_apply's v0.1);
 *     GENERIC  every other family: the tools described in the system message,
 *              calls as one JSON object {"tool_calls": [{"name": N,
 *              "arguments": A}, ...]}, results as user turns
 *              "Tool result (ID):\nR".
 *   JSON of tools is written as Python's json.dumps writes it (", " and ": "
 *   separators, or an indent), as the models' Jinja templates do; arguments
 *   (JSON text) are written as given.
 *
 * THREAD SAFETY
 *   Reentrant: no global mutable state.
 */
#ifndef KITE_CHAT_TOOLS_H
#define KITE_CHAT_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "chat/chat_template.h"

/* A function the model may call (OpenAI's tools[i].function). */
typedef struct chat_tool {
    const char *name;        /* [A-Za-z0-9_-]{1,64} (the caller checks) */
    const char *description; /* or NULL */
    const char *parameters;  /* JSON text of the parameters' JSON Schema, or NULL (none) */
} chat_tool;

/* One call of an assistant message (OpenAI's tool_calls[i]). */
typedef struct chat_tool_call {
    const char *id;        /* or NULL */
    const char *name;
    const char *arguments; /* JSON text of the arguments object */
} chat_tool_call;

/* The tool parts of one message, parallel to a chat_msg array. */
typedef struct chat_msg_tools {
    const chat_tool_call *calls; /* assistant: [n_calls], or NULL */
    size_t n_calls;
    const char *tool_call_id;    /* role "tool": the call answered, or NULL */
} chat_msg_tools;

enum chat_tool_format { CHAT_TOOLS_HERMES = 0, CHAT_TOOLS_LLAMA3, CHAT_TOOLS_MISTRAL, CHAT_TOOLS_GENERIC };

/* The tool-call syntax of a family (GENERIC for a family without its own). */
int chat_tool_format(int family);
/* "hermes", "llama3", "mistral", "generic" (static; "?" out of range). */
const char *chat_tool_format_name(int format);

/* chat_apply with tools: msgs[0..n) may also have role "tool" (a result) and
 * assistant calls in ext[i] (ext NULL: none); tools[0..n_tools) are offered
 * to the model in the family's format (n_tools 0: none offered, calls and
 * results in the history are still rendered).  *out is malloc'd.  Returns a
 * kite_status (KITE_E_ARG: as chat_apply, a NULL tool name, a call without
 * name or arguments; KITE_E_NOMEM); *out unchanged on error.  Cost: linear
 * in the total text. */
int chat_apply_tools(int family, const chat_msg *msgs, const chat_msg_tools *ext, size_t n, const chat_tool *tools,
                     size_t n_tools, bool add_generation_prompt, char **out /* OUT */);

/* Re-spaces a JSON text as Python's json.dumps: indent < 0 gives ", " and
 * ": " separators on one line, indent >= 0 one member per line indented by
 * `indent` spaces per level (empty {} and [] stay so).  The input must be
 * JSON (white space outside strings is dropped; nothing is validated).
 * Returns a malloc'd string or NULL (out of memory). */
char *chat_json_respace(const char *json, int indent);

#endif
