/*
 * tool_calls.h - tool calls of `kite serve` (docs/http.md, "Tools"): the
 * grammar that forces calls (tool_choice "required" or a named function) and
 * the parser that finds calls in a model's output.
 *
 * DESIGN
 *   Both follow the family's call syntax (chat_tool_format, chat_tools.h).
 *   The grammar is GBNF: each tool's parameter schema is converted by
 *   grammar_json_schema_to_gbnf, its rule names prefixed "t<i>-" so that the
 *   tools' grammars live side by side, and wrapped in the family's markup with
 *   the name written literally: e.g. HERMES
 *     root ::= "<tool_call>\n" tc-call "\n</tool_call>"
 *     tc-call-0 ::= "{\"name\": \"f\", \"arguments\": " t0-root "}"
 *   With parallel calls, the wrapped call may repeat (HERMES and LLAMA3
 *   separated by "\n", MISTRAL and GENERIC by ", " inside their list).
 *   The parser takes the output text apart with cJSON; it never fails on
 *   garbage: what is not a well-formed call is content.  A call cut off at
 *   the end (max_tokens) is dropped, the calls before it are kept.
 *
 * THREAD SAFETY
 *   Pure functions; any thread.
 */
#ifndef KITE_TOOLS_TOOL_CALLS_H
#define KITE_TOOLS_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>

#include "chat/chat_tools.h"

/* GBNF forcing one call (or, if parallel, one or more) of tools[named], or
 * of any of tools[0..n) when named < 0, in family's syntax.  *out malloc'd.
 * Returns a kite_status with kite_last_error() set (a schema the converter
 * refuses: its status, the message naming the keyword); the message starts
 * with "tools[i].function.parameters: " for the failing tool. */
int tool_grammar_gbnf(int family, const chat_tool *tools, size_t n, int named, bool parallel, char **out /* OUT */);

typedef struct tool_parsed_call {
    char *name;      /* malloc'd */
    char *arguments; /* malloc'd compact JSON text of an object */
} tool_parsed_call;

typedef struct tool_parse {
    char *content;          /* text before the calls (trailing white space cut), malloc'd, or NULL (none) */
    tool_parsed_call *calls; /* [n_calls], malloc'd */
    size_t n_calls;
} tool_parse;

/* Finds the calls in text[0..len) (need not be NUL-terminated) written in
 * family's syntax.  Calls to a name not in tools[0..n_tools) are kept for
 * HERMES, MISTRAL and GENERIC (the markup says they are calls) but not for
 * LLAMA3, whose calls are bare JSON objects.  Returns true with *out filled
 * when at least one call is found, false (and *out zeroed) when none is or
 * out of memory.  Free with tool_parse_free.  Cost: linear in len. */
bool tool_calls_parse(int family, const char *text, size_t len, const chat_tool *tools, size_t n_tools,
                      tool_parse *out /* OUT */);
void tool_parse_free(tool_parse *p);

#endif
