/*
 * web_assets.h - the chat page's files (tools/http/web/), embedded in the
 * binary.  The definitions are generated at build time into
 * $(BUILD)/gen/web_assets.c by tools/http/gen_web_assets.sh (Makefile
 * section "server web assets"); edit the files under web/, not the table.
 */
#ifndef KITE_TOOLS_WEB_ASSETS_H
#define KITE_TOOLS_WEB_ASSETS_H

#include <stddef.h>

typedef struct web_asset {
    const char *path;          /* URL path, e.g. "/index.html" */
    const char *content_type;  /* e.g. "text/html; charset=utf-8" */
    const unsigned char *data; /* file bytes (static) */
    size_t len;                /* bytes */
} web_asset;

extern const web_asset web_assets[];
extern const size_t web_assets_count;

#endif
