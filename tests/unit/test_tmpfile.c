/*
 * test_tmpfile.c - interrupted writes leave no temporary file, and NaN/Inf
 * weights are refused (issue 25, robustness).
 *
 *   - tmpf_name gives distinct names within a process;
 *   - SIGINT and SIGTERM arriving while the GGUF writer streams a tensor (a
 *     child process with kite quantize's handlers, signalled from its fill
 *     callback) kill the child by that signal and leave the directory empty;
 *   - quant_model on a model with a NaN (f32) or an Inf (f16) weight fails
 *     with KITE_E_FORMAT naming the tensor, row and column, and writes
 *     nothing.
 */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/tmpfile.h"
#include "gguf/gguf.h"
#include "harness.h"
#include "kite.h"
#include "quant/quantize.h"
#include "tensor/dtype.h"

static char dir[] = "/tmp/kite-test-tmpfile-XXXXXX";

static int n_entries(const char *path) {
    DIR *d = opendir(path);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void clear_dir(void) {
    DIR *d = opendir(dir);
    if (!d) return;
    char p[512];
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

TEST(test_names_unique) {
    char a[128], b[128];
    CHECK(tmpf_name(a, sizeof a, "/x/out.gguf", "tmp") == 0);
    CHECK(tmpf_name(b, sizeof b, "/x/out.gguf", "tmp") == 0);
    CHECK(strcmp(a, b) != 0);
    CHECK(strncmp(a, "/x/out.gguf.tmp.", 16) == 0);
    CHECK(tmpf_name(a, 8, "/x/out.gguf", "tmp") == -1);
}

typedef struct sig_fill {
    int sig, calls;
} sig_fill;

/* Streams zeros; on the third chunk the process signals itself (the file
 * then holds the header and two chunks). */
static int fill_then_signal(void *user, int64_t row0, int64_t n_rows, void *dst) {
    sig_fill *f = user;
    (void)row0;
    memset(dst, 0, (size_t)n_rows * 4096 * sizeof(float));
    if (++f->calls == 3) {
        kill(getpid(), f->sig);
        pause(); /* the handler re-raises the default action: never returns */
    }
    return KITE_OK;
}

static void signal_during_write(int sig) {
    clear_dir();
    char out[256];
    snprintf(out, sizeof out, "%s/model.gguf", dir);
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        tmpf_install_signal_handlers();
        gguf_writer *w = gguf_writer_new();
        sig_fill f = {.sig = sig};
        const int64_t ne[2] = {4096, 4096}; /* 64 MiB: many chunks */
        gguf_writer_set_str(w, "general.architecture", "llama");
        gguf_writer_add_tensor_cb(w, "big.weight", KITE_DTYPE_F32, 2, ne, fill_then_signal, &f);
        gguf_writer_write(w, out);
        _exit(3); /* not reached */
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == sig, "child status %#x, expected death by signal %d", st, sig);
    CHECK_MSG(n_entries(dir) == 0, "signal %d: %d file(s) left in %s", sig, n_entries(dir), dir);
    clear_dir();
}

TEST(test_sigint_removes_temp) { signal_during_write(SIGINT); }
TEST(test_sigterm_removes_temp) { signal_during_write(SIGTERM); }

/* A two-matrix llama-named model with one bad value at (row, col) of the second. */
static void write_bad_model(const char *path, uint32_t type, int row, int col, float bad) {
    enum { NE0 = 64, ROWS = 8 };
    float a[ROWS * NE0], b[ROWS * NE0];
    uint16_t bh[ROWS * NE0];
    for (int i = 0; i < ROWS * NE0; i++) a[i] = b[i] = 0.01f * (float)(i % 17) - 0.05f;
    b[row * NE0 + col] = bad;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    const int64_t ne[2] = {NE0, ROWS};
    gguf_writer_add_tensor(w, "blk.0.attn_q.weight", KITE_DTYPE_F32, 2, ne, a);
    const void *bd = b;
    if (type == KITE_DTYPE_F16) {
        dtype_get(KITE_DTYPE_F16)->from_float(b, bh, ROWS * NE0);
        bd = bh;
    }
    gguf_writer_add_tensor(w, "blk.0.attn_k.weight", type, 2, ne, bd);
    CHECK_EQ_INT(gguf_writer_write(w, path), KITE_OK);
    gguf_writer_free(w);
}

TEST(test_nonfinite_weight_named) {
    char in[256], out[256];
    snprintf(in, sizeof in, "%s/in.gguf", dir);
    snprintf(out, sizeof out, "%s/out.gguf", dir);
    const struct { uint32_t type; float bad; int row, col; } cases[] = {
        {KITE_DTYPE_F32, NAN, 5, 7}, {KITE_DTYPE_F16, INFINITY, 2, 63}, {KITE_DTYPE_F32, -INFINITY, 0, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        clear_dir();
        write_bad_model(in, cases[k].type, cases[k].row, cases[k].col, cases[k].bad);
        quant_params p = {.type = KITE_DTYPE_Q8_0, .n_threads = 2};
        CHECK_EQ_INT(quant_model(in, out, &p, NULL), KITE_E_FORMAT);
        char want[128];
        snprintf(want, sizeof want, "blk.0.attn_k.weight: row %d has a NaN or Inf weight (column %d)", cases[k].row,
                 cases[k].col);
        CHECK_MSG(strstr(kite_last_error(), want) != NULL, "message '%s' lacks '%s'", kite_last_error(), want);
        CHECK_EQ_INT(n_entries(dir), 1); /* only the input */
    }
    clear_dir();
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    RUN(test_names_unique);
    RUN(test_sigint_removes_temp);
    RUN(test_sigterm_removes_temp);
    RUN(test_nonfinite_weight_named);
    rmdir(dir);
    return harness_summary("test_tmpfile");
}
