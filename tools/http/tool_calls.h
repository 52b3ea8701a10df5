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
 *   The parser is incremental (tool_stream): fed the output text as it
 *   grows, it reports content, the start of each call (its name) and the
 *   call's arguments in fragments as they are decoded, so that a stream
 *   sends them token by token; tool_calls_parse is the same parser fed the
 *   whole text once, so streamed and whole answers agree byte for byte.  It
 *   never fails on garbage: what is not a well-formed call is content.
 *   Content is held while it may still be the start of a call's markup
 *   ("<tool_call>", "[TOOL_CALLS]", '{' ws '"tool_calls"' ws ':', and for
 *   LLAMA3 the whole output when it begins with '{' or <|python_tag|>);
 *   white space just before a call is not content.  A call is announced
 *   (header sent) once its name is complete and its arguments object has
 *   begun (LLAMA3: and the name is one of the tools); until then it is only
 *   checked when complete (cJSON), and a call that fails the check is
 *   content if no call came before it, the end of the calls otherwise.
 *   The arguments are the model's own text of the object (not re-printed),
 *   or the text of a JSON string holding an object.  A call cut off at the
 *   end (max_tokens) is dropped, the calls before it are kept; in a stream
 *   whose call was announced already, its fragments are out (tool_stream.cut
 *   says so), and an announced call whose object turns out malformed is not
 *   taken back - the latter only for a call no grammar constrained
 *   (tool_choice "auto" written in a spelling that missed the trigger).
 *
 * THREAD SAFETY
 *   Pure functions; any thread.
 */
#ifndef KITE_TOOLS_TOOL_CALLS_H
#define KITE_TOOLS_TOOL_CALLS_H

#include <stdbool.h>
#include <stddef.h>

#include "chat/chat_tools.h"
#include "kite.h"

/* GBNF forcing one call (or, if parallel, one or more) of tools[named], or
 * of any of tools[0..n) when named < 0, in family's syntax.  *out malloc'd.
 * Returns a kite_status with kite_last_error() set (a schema the converter
 * refuses: its status, the message naming the keyword); the message starts
 * with "tools[i].function.parameters: " for the failing tool. */
int tool_grammar_gbnf(int family, const chat_tool *tools, size_t n, int named, bool parallel, char **out /* OUT */);

/* The triggers of the lazy grammar (kite_grammar_new_lazy) that constrains the
 * calls a model chooses to make (tool_choice "auto"): the text each root of
 * tool_grammar_gbnf begins with - "<tool_call>", "[TOOL_CALLS]",
 * "{\"tool_calls\":", and for LLAMA3 "{\"name\":" at the output's start.
 * Fills out[0..1) (static texts); returns the count. */
size_t tool_grammar_triggers(int family, kite_grammar_trigger *out /* OUT [1] */);

typedef struct tool_parsed_call {
    char *name;      /* malloc'd */
    char *arguments; /* malloc'd JSON text of an object, as the model wrote it */
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

/* What the incremental parser reports, in text order; a false return stops
 * the feed (tool_stream_feed returns false). */
typedef struct tool_stream_sink {
    void *user;
    bool (*content)(void *user, const char *s, size_t n);     /* content text */
    bool (*call)(void *user, size_t k, const char *name);     /* call k begins (k = 0, 1, ...) */
    bool (*args)(void *user, size_t k, const char *s, size_t n); /* a fragment of call k's arguments */
} tool_stream_sink;

/* Parser state (plain data: no allocation, nothing to free). */
typedef struct tool_stream {
    int fmt;                   /* CHAT_TOOLS_* */
    const chat_tool *tools;    /* not owned */
    size_t n_tools;
    int mode;                  /* private */
    size_t pos;                /* next byte of the text to read */
    size_t content_end;        /* content reported up to here */
    size_t call_start;         /* the current call's '{' */
    size_t args_sent;          /* announced call: arguments reported up to here */
    bool committed;            /* the current call is announced */
    size_t n_calls;            /* calls announced */
    bool cut;                  /* the final text ended inside an announced call */
} tool_stream;

void tool_stream_init(tool_stream *s, int family, const chat_tool *tools, size_t n_tools);

/* Reads text[0..len), the whole output so far (the same bytes as at the
 * previous feed, and more; it may have moved), and reports what became
 * certain.  final: the output is complete.  Cost: linear in the new text,
 * plus a re-scan of the current call from its start (a call's length). */
bool tool_stream_feed(tool_stream *s, const char *text, size_t len, bool final, const tool_stream_sink *sink);

#endif
