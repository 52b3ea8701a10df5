#!/bin/sh
# scripts/install-deps.sh - installs the Debian packages kite needs when they
# are missing and we are root; otherwise says what to install.  Called by
# `make run` / `make test` (target deps) and by .ci/run.
set -u
need=""
command -v cc >/dev/null 2>&1 || need="$need gcc libc6-dev"
command -v ar >/dev/null 2>&1 || need="$need binutils"
# byte-level BPE tokenizer: PCRE2 (split regexes) and utf8proc (NFC)
[ -f /usr/include/pcre2.h ] || need="$need libpcre2-dev"
[ -f /usr/include/utf8proc.h ] || need="$need libutf8proc-dev"
# tools/: HTTP server (libmicrohttpd) and JSON (cJSON)
[ -f /usr/include/microhttpd.h ] || need="$need libmicrohttpd-dev"
[ -f /usr/include/cjson/cJSON.h ] || need="$need libcjson-dev"
[ "${KITE_WITH_FUZZ:-0}" = 1 ] && {
    command -v clang >/dev/null 2>&1 || need="$need clang"
    ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need="$need libclang-rt-dev"
}
# kite serve's client-library and browser tests (tests/e2e/test_serve.sh skip
# them without these): opt-in, Chromium alone is about 300 MB installed
[ "${KITE_WITH_BROWSER:-0}" = 1 ] && {
    command -v node >/dev/null 2>&1 || need="$need nodejs"
    command -v npm >/dev/null 2>&1 || need="$need npm"
    [ -x /usr/bin/chromium ] || need="$need chromium"
}
# AArch64 cross build and its kernel tests under qemu (make test-arm,
# docs/kernels.md "AArch64"): opt-in (.ci/run sets it)
[ "${KITE_WITH_ARM:-0}" = 1 ] && {
    command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need="$need gcc-aarch64-linux-gnu"
    [ -f /usr/aarch64-linux-gnu/include/stdio.h ] || need="$need libc6-dev-arm64-cross"
    command -v qemu-aarch64 >/dev/null 2>&1 || need="$need qemu-user"
}
# distributed inference (src/dist, docs/distributed.md; tests/e2e/test_mpi.sh
# skips without it): Open MPI, installed when we can; not required (make MPI=0
# builds the one-rank version).  The Makefile looks for mpicc when it starts:
# a build that installed it here takes MPI from the next make on.
if ! command -v mpicc >/dev/null 2>&1 && [ "${KITE_WITH_MPI:-1}" = 1 ]; then
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && need="$need openmpi-bin libopenmpi-dev"
fi
[ -z "$need" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing:$need"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq $need >/dev/null || exit 1
else
    echo "kite needs these Debian packages:$need (run as root, or: sudo apt-get install$need)" >&2
    exit 1
fi
