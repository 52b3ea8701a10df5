/* tmpfile.c - temporary files removed on SIGINT/SIGTERM/SIGHUP (tmpfile.h). */
#include "core/tmpfile.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char slot_path[TMPF_SLOTS][TMPF_PATH_MAX];
static atomic_int slot_used[TMPF_SLOTS]; /* 1 once slot_path is complete */
static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint name_counter;

int tmpf_name(char *buf, size_t cap, const char *base, const char *tag) {
    const unsigned k = atomic_fetch_add(&name_counter, 1u);
    const int n = snprintf(buf, cap, "%s.%s.%ld.%u", base, tag, (long)getpid(), k);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int tmpf_register(const char *path) {
    const size_t len = strlen(path);
    if (len >= TMPF_PATH_MAX) return -1;
    int got = -1;
    pthread_mutex_lock(&slot_mu);
    for (int i = 0; i < TMPF_SLOTS && got < 0; i++)
        if (!atomic_load(&slot_used[i])) {
            memcpy(slot_path[i], path, len + 1);
            atomic_store(&slot_used[i], 1); /* published after the path is complete */
            got = i;
        }
    pthread_mutex_unlock(&slot_mu);
    return got;
}

void tmpf_unregister(int slot) {
    if (slot < 0 || slot >= TMPF_SLOTS) return;
    pthread_mutex_lock(&slot_mu);
    atomic_store(&slot_used[slot], 0);
    pthread_mutex_unlock(&slot_mu);
}

static void on_signal(int sig) {
    for (int i = 0; i < TMPF_SLOTS; i++)
        if (atomic_load(&slot_used[i])) unlink(slot_path[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

void tmpf_install_signal_handlers(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}
