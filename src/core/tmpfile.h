/*
 * tmpfile.h - temporary files that an interrupt must not leave behind.
 *
 * DESIGN
 *   Writers that go through a temporary file (the GGUF writer's
 *   "<out>.tmp.<pid>.<n>", SmoothQuant's intermediate model) register its
 *   path while it exists.  tmpf_install_signal_handlers() (called by the
 *   CLI commands that write models) makes SIGINT, SIGTERM and SIGHUP unlink
 *   every registered path, then die of the signal as before (default action
 *   re-raised).  The table is a fixed array of TMPF_SLOTS paths, so the
 *   handler only reads memory and calls unlink(2), both async-signal-safe.
 *
 *   tmpf_name() makes names unique within and across processes: path, a tag,
 *   the pid and a per-process counter.
 *
 * THREAD SAFETY
 *   Register / unregister from any thread (a mutex guards slot choice); the
 *   handler may run on any thread at any time.
 */
#ifndef KITE_CORE_TMPFILE_H
#define KITE_CORE_TMPFILE_H

#include <stddef.h>

#define TMPF_SLOTS 16
#define TMPF_PATH_MAX 4096

/* Writes "<base>.<tag>.<pid>.<n>" to buf (n: a per-process counter).
 * Returns 0, or -1 when it does not fit in cap bytes. */
int tmpf_name(char *buf, size_t cap, const char *base, const char *tag);

/* Registers path for removal on a fatal signal.  Returns a slot >= 0, or -1
 * (table full or path too long: the file is then not protected). */
int tmpf_register(const char *path);
/* Forgets slot (-1 is a no-op); call before renaming or removing the file. */
void tmpf_unregister(int slot);

/* Installs the SIGINT / SIGTERM / SIGHUP handlers (idempotent). */
void tmpf_install_signal_handlers(void);

#endif
