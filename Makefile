# kite - build, run and test.
#
#   make            library build/libkite.a and CLI build/kite
#   make run        generate a story with the bundled model (greedy, golden prompt)
#   make test       unit + golden + e2e tests (closing line "N passed, N failed")
#   make test SAN=1 the same under AddressSanitizer + UndefinedBehaviorSanitizer (build-san/)
#   make fuzz       libFuzzer targets (clang), each run for FUZZ_SECONDS
#   make bench      benchmark the standard set, rewrite BENCHMARKS.md (docs/bench.md)
#   make roofline-report  predicted vs measured roofline, rewrite docs/reports/ROOFLINE.md
#   make quant-report     every quantization method on the bundled model, rewrite
#                   docs/reports/QUANTIZATION.md
#   make acceptance the slow acceptance checks (tests/acceptance/)
#   make test-arm   AArch64 cross build of the kernels and their tests, run under qemu
#                   (build/arm/; docs/kernels.md, "AArch64")
#   make WERROR=1   treat warnings as errors (CI)
#   make MPI=0|1    without / with Open MPI (default: with it when mpicc is found;
#                   docs/distributed.md)
#
# Only files under an ISA folder (src/kernels/x86_*, src/kernels/arm_neon/*_dotprod.c)
# may get ISA flags, so the binary runs on any x86-64 (or AArch64) and picks
# kernels at run time.

CC ?= cc

# Every core by default (a first build takes about a minute on 2 cores, most of
# it the AVX-512 kernel files); an explicit -jN on the command line wins.
ifeq ($(filter -j%,$(MAKEFLAGS)),)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif
# One short line per step ("CC src/x.c"); V=1 prints the full commands.
ifeq ($(V),1)
  Q :=
  say := @true
else
  Q := @
  say := @printf '  %-5s %s\n'
endif

SAN ?=
ifeq ($(SAN),1)
  BUILD ?= build-san
  SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  OPT := -O1
  DBG ?= -g
else
  BUILD ?= build
  SANFLAGS :=
  OPT := -O2
endif

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla -Wformat=2
ifeq ($(WERROR),1)
  WARN += -Werror
endif

CPPFLAGS += -Iinclude -Isrc -Itools -D_DEFAULT_SOURCE -D_FILE_OFFSET_BITS=64
# -ffp-contract=off: gcc's -std=c11 default, made explicit so clang does not
# fuse a*b+c into FMAs differently in ISA files and reference kernels (tests
# compare some kernels bit for bit).
# Debug info: line tables (-g1: file:line in backtraces and gdb) by default, which compiles
# in about half the CPU time of -g (8 of the heaviest files: 22.7 s -> 12.8 s user, gcc 12);
# DBG=-g for full debug info (sanitizer builds have it).
DBG ?= -g1
CFLAGS += -std=c11 $(OPT) $(DBG) $(WARN) $(SANFLAGS) -pthread -ffp-contract=off
LDFLAGS += $(SANFLAGS) -pthread
LDLIBS += -lm
# byte-level BPE tokenizer: regex (PCRE2, Unicode properties) and NFC (utf8proc)
LDLIBS += -lpcre2-8 -lutf8proc

# src/: the engine library (libc, libm, pthreads, plus PCRE2/utf8proc for the
# tokenizer).  tools/: code with heavier dependencies (HTTP server: libmicrohttpd,
# JSON: cJSON), linked into the CLI and the tests only, never into libkite.
LIB_SRC := $(shell find src -name '*.c' | sort)
TOOLS_SRC := $(shell find tools -name '*.c' 2>/dev/null | sort)
TOOLS_LDLIBS := -lmicrohttpd -lcjson
CLI_SRC := $(sort $(wildcard cli/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))

# Distributed inference (src/dist, docs/distributed.md): on Open MPI when mpicc is
# found, or MPI=1; MPI=0 builds the one-rank src/dist/dist_none.c instead.  Only
# dist_mpi.c sees the MPI headers (as system headers: -Werror is ours, not theirs).
MPI ?= $(if $(shell command -v mpicc 2>/dev/null),1,0)
ifeq ($(MPI),1)
  LIB_SRC := $(filter-out src/dist/dist_none.c,$(LIB_SRC))
  MPI_CPPFLAGS := $(patsubst -I%,-isystem %,$(shell mpicc --showme:compile 2>/dev/null))
  LDLIBS += $(shell mpicc --showme:link 2>/dev/null)
else
  LIB_SRC := $(filter-out src/dist/dist_mpi.c,$(LIB_SRC))
endif

LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOLS_OBJ := $(TOOLS_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all run test fuzz clean deps bench
# keep the fuzz build's objects (they are intermediate files of pattern rules)
.SECONDARY:
all: $(BUILD)/kite $(BUILD)/libkite.a

deps:
	@sh scripts/install-deps.sh

# Every compile waits for the package check, so `make -jN run` is safe on a
# fresh machine too (order-only: it never forces a rebuild).
$(LIB_OBJ) $(TOOLS_OBJ) $(CLI_OBJ) $(TEST_BIN): | deps

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

# The CLI finds the bundled model next to the binary (build/../models) or,
# for builds elsewhere (BUILD=/tmp/x), in this source tree.
$(BUILD)/obj/cli/args.o: CPPFLAGS += -DKITE_SOURCE_MODEL='"$(CURDIR)/models/stories260K.gguf"'

# ISA flags: only the kernel folders get them, and only when the compiler
# targets x86 (elsewhere those files compile to nothing and the scalar
# kernels run).  Target-specific variables, so every other object stays
# baseline x86-64.
KITE_TARGET := $(shell $(CC) -dumpmachine 2>/dev/null)
ifneq ($(filter x86_64% i386% i486% i586% i686% amd64%,$(KITE_TARGET)),)
  KITE_X86 := 1
  AVX2_FLAGS := -mavx2 -mfma -mf16c
  AVX512_FLAGS := -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512vnni -mavx512bf16 -mfma -mf16c
# (each folder's register.c only stores kernel addresses and runs on any
# CPU: it gets no ISA flags)
ISA_OBJ = $(filter-out %/register.o,$(filter $(1)/src/kernels/$(2)/%,$(3)))
$(call ISA_OBJ,$(BUILD)/obj,x86_avx2,$(LIB_OBJ)): CFLAGS += $(AVX2_FLAGS)
$(call ISA_OBJ,$(BUILD)/obj,x86_avx512,$(LIB_OBJ)): CFLAGS += $(AVX512_FLAGS)
# AVX-VNNI (VEX vpdpbusd) q4_0/q8_0 kernels: a run-time variant of the avx2 level
$(BUILD)/obj/src/kernels/x86_avx2/vec_dot_quant_avxvnni.o: CFLAGS += -mavxvnni
endif
# A native AArch64 build: the dot-product kernels alone get +dotprod (as in make test-arm)
ifneq ($(filter aarch64% arm64%,$(KITE_TARGET)),)
$(filter $(BUILD)/obj/src/kernels/arm_neon/%_dotprod.o,$(LIB_OBJ)): CFLAGS += -march=armv8.2-a+dotprod
endif

$(BUILD)/obj/src/dist/dist_mpi.o: CPPFLAGS += $(MPI_CPPFLAGS)

# The archive is rebuilt when MPI changes (its objects differ: dist_mpi.o or dist_none.o).
MPI_STAMP := $(BUILD)/mpi-$(MPI).stamp
$(MPI_STAMP):
	@mkdir -p $(dir $@)
	$(Q)rm -f $(BUILD)/mpi-*.stamp
	$(Q)touch $@

$(BUILD)/libkite.a: $(LIB_OBJ) $(MPI_STAMP)
	@mkdir -p $(dir $@)
	$(say) AR $@
	$(Q)rm -f $@
	$(Q)ar rcs $@ $(LIB_OBJ)

$(BUILD)/libkite-tools.a: $(TOOLS_OBJ)
	@mkdir -p $(dir $@)
	$(say) AR $@
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^

$(BUILD)/kite: $(CLI_OBJ) $(BUILD)/libkite-tools.a $(BUILD)/libkite.a
	$(say) LD $@
	$(Q)$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libkite-tools.a $(BUILD)/libkite.a $(TOOLS_LDLIBS) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libkite-tools.a $(BUILD)/libkite.a tests/harness.h
	@mkdir -p $(dir $@)
	$(say) CCLD $@
	$(Q)$(CC) $(CPPFLAGS) -Itests $(CFLAGS) -MMD -MP $< -o $@ $(BUILD)/libkite-tools.a $(BUILD)/libkite.a $(LDFLAGS) $(TOOLS_LDLIBS) $(LDLIBS)

# The option-table test walks the CLI's tables: it links the CLI without main.o.
CLI_LIB_OBJ := $(filter-out $(BUILD)/obj/cli/main.o,$(CLI_OBJ))
$(BUILD)/libkite-cli.a: $(CLI_LIB_OBJ)
	@mkdir -p $(dir $@)
	$(say) AR $@
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^
$(BUILD)/tests/test_cli_opts: tests/unit/test_cli_opts.c $(BUILD)/libkite-cli.a $(BUILD)/libkite-tools.a $(BUILD)/libkite.a tests/harness.h
	@mkdir -p $(dir $@)
	$(say) CCLD $@
	$(Q)$(CC) $(CPPFLAGS) -Itests $(CFLAGS) -MMD -MP $< -o $@ $(BUILD)/libkite-cli.a $(BUILD)/libkite-tools.a $(BUILD)/libkite.a $(LDFLAGS) $(TOOLS_LDLIBS) $(LDLIBS)

# The bundled model, greedy, with the prompt of the first golden case:
# 196 new tokens = run.c's 200 positions minus BOS and the 4 prompt tokens.
run: deps $(BUILD)/kite
	$(BUILD)/kite run -p "Once upon a time" -n 196 --temp 0

SCALE_DIR := build/scale
SCALE_MODELS := $(foreach t,q4_0 q8_0 q4_k_m f16,$(SCALE_DIR)/tl4-$(t).gguf)
test: deps $(BUILD)/kite $(TEST_BIN) $(SCALE_MODELS)
	@sh tests/run.sh $(BUILD)

# The scale tier's models (tests/unit/test_scale.c, issue 22): 4-layer
# TinyLlama-shape synthetic files, made once (about 90 s, mostly q4_k_m) and
# kept in build/scale for every BUILD (order-only on kite: a rebuilt kite makes
# the same bytes, so they are never remade).
$(SCALE_DIR)/tl4-%.gguf: | $(BUILD)/kite
	@mkdir -p $(dir $@)
	$(say) SYNTH $@
	$(Q)$(BUILD)/kite synth --shape tinyllama-1.1b --type $* --layers 4 -o $@ >/dev/null

# ---- server web assets: the chat page (tools/http/web/*) embedded in the tools
# library as $(BUILD)/gen/web_assets.c, generated by a POSIX sh + od + awk script
# (no xxd); the table's contract is tools/http/web_assets.h.
WEB_FILES := $(sort $(wildcard tools/http/web/*))
WEB_OBJ := $(BUILD)/obj/gen/web_assets.o
$(BUILD)/gen/web_assets.c: $(WEB_FILES) tools/http/gen_web_assets.sh
	@mkdir -p $(dir $@)
	$(say) GEN $@
	$(Q)sh tools/http/gen_web_assets.sh $@ $(WEB_FILES)
$(WEB_OBJ): $(BUILD)/gen/web_assets.c tools/http/web_assets.h | deps
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@
$(BUILD)/libkite-tools.a: $(WEB_OBJ)

# ---- loadtest: a bounded load on a `kite serve` started on 127.0.0.1 (loopback
# only) with the bundled model; prints throughput and latency percentiles
# (docs/http.md; LOADTEST_CLIENTS, LOADTEST_REQUESTS, LOADTEST_TOKENS, LOADTEST_MODEL).
# LOADTEST_HOSTILE=1: honest p50/p99 alone and beside 1000 slowloris sockets and a 10x flood.
.PHONY: loadtest
loadtest: $(BUILD)/kite
	sh tools/http/loadtest.sh $(BUILD)

# ---- benchmarks: synthesize the models (cached in $(BUILD)/bench-models, outside
# git), run kite bench on each and rewrite BENCHMARKS.md (see docs/bench.md;
# BENCH_LAYERS, BENCH_REPS, BENCH_TYPES, LLAMA_BENCH=..., LLAMA2C=... are passed through).
bench: $(BUILD)/kite
	sh bench/run.sh $(BUILD)

# ---- roofline report: docs/reports/ROOFLINE.md and roofline-tinyllama.svg, predicted vs
# measured on this machine (docs/roofline.md; ROOFLINE_LAYERS, ROOFLINE_THREADS, ROOFLINE_REPS, ROOFLINE_ROUNDS)
.PHONY: roofline-report
roofline-report: $(BUILD)/kite
	sh scripts/roofline-report.sh $(BUILD)

# ---- grammar mask benchmark: one JSON line per (vocabulary, grammar), the
# per-step cost of the token mask (bench/grammar_bench.c, docs/grammar.md).
GRAMMAR_BENCH_VOCABS ?= ../shared/models/vocab-llama2-spm.gguf ../shared/models/vocab-llama3.gguf ../shared/models/vocab-qwen3.gguf
.PHONY: grammar-bench
$(BUILD)/grammar_bench: bench/grammar_bench.c $(BUILD)/libkite.a
	$(CC) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(BUILD)/libkite.a $(LDFLAGS) $(LDLIBS)
grammar-bench: $(BUILD)/grammar_bench
	$(BUILD)/grammar_bench $(GRAMMAR_BENCH_VOCABS)

# ---- acceptance: the slow checks of resolved issues (tests/acceptance/*.sh;
# the fast ones are part of make test).  Each prints "N passed, N failed".
.PHONY: acceptance
acceptance: $(BUILD)/kite
	@st=0; for t in tests/acceptance/*.sh; do sh $$t $(BUILD) || st=1; done; exit $$st

# ---- quantization report: docs/reports/QUANTIZATION.md, every method on the bundled model
# (scripts/quant-report.sh; QREP_REPS repetitions of each decode measurement)
.PHONY: quant-report
quant-report: $(BUILD)/kite
	sh scripts/quant-report.sh $(BUILD)

# ---- fuzzing (clang + libFuzzer) ------------------------------------------
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
FUZZ_SECONDS ?= 30
# 0: a random seed per run (exploration); CI passes a fixed seed so that its
# short run replays the same mutation sequence as a local check.
FUZZ_SEED ?= 0
# a fuzz target is one process: the one-rank src/dist whatever MPI says
FUZZ_LIB_SRC := $(sort $(filter-out src/dist/dist_mpi.c,$(LIB_SRC)) src/dist/dist_none.c)
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=build-fuzz/obj/%.o)
FUZZ_CFLAGS := -std=c11 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -pthread -ffp-contract=off

# The SIMD kernel folders are built without sanitizers or coverage: no parser
# lives there, coverage of intrinsics guides no mutation, and clang 14 took
# over 12 CPU-minutes on vec_dot_float_avx512.c with these flags (ASan alone
# 4 min, none 6 s); the kernels run under ASan+UBSan in `make test SAN=1`.
FUZZ_ISA_CFLAGS := -std=c11 -O1 -g -fno-omit-frame-pointer -pthread -ffp-contract=off

ifeq ($(KITE_X86),1)
$(call ISA_OBJ,build-fuzz/obj,x86_avx2,$(FUZZ_LIB_OBJ)): FUZZ_CFLAGS = $(FUZZ_ISA_CFLAGS) $(AVX2_FLAGS)
$(call ISA_OBJ,build-fuzz/obj,x86_avx512,$(FUZZ_LIB_OBJ)): FUZZ_CFLAGS = $(FUZZ_ISA_CFLAGS) $(AVX512_FLAGS)
build-fuzz/obj/src/kernels/x86_avx2/vec_dot_quant_avxvnni.o: FUZZ_CFLAGS += -mavxvnni
endif
ifneq ($(filter aarch64% arm64%,$(KITE_TARGET)),)
$(filter build-fuzz/obj/src/kernels/arm_neon/%_dotprod.o,$(FUZZ_LIB_OBJ)): FUZZ_CFLAGS = $(FUZZ_ISA_CFLAGS) -march=armv8.2-a+dotprod
endif

build-fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(CPPFLAGS) $(FUZZ_CFLAGS) -c $< -o $@

# tools/ objects a fuzz target needs (the safetensors parser uses cJSON;
# fuzz_oai the server's request parsing, head checks and tool-call parser; fuzz_embed embed_parse.c)
FUZZ_TOOLS_OBJ := build-fuzz/obj/tools/convert/safetensors.o build-fuzz/obj/tools/http/oai.o \
                  build-fuzz/obj/tools/http/http_check.o build-fuzz/obj/tools/http/oai_tools.o \
                  build-fuzz/obj/tools/http/tool_calls.o build-fuzz/obj/tools/http/embed_parse.o
build-fuzz/%: tests/fuzz/%.c $(FUZZ_LIB_OBJ) $(FUZZ_TOOLS_OBJ)
	clang $(CPPFLAGS) -std=c11 -O1 -g -fsanitize=fuzzer,address,undefined -pthread $< $(FUZZ_LIB_OBJ) $(FUZZ_TOOLS_OBJ) -o $@ -lm -lpcre2-8 -lutf8proc -lcjson

# One run target per fuzzer, so that `make -j2 fuzz` runs two at a time.
FUZZ_RUN := $(FUZZ_BIN:build-fuzz/%=fuzz-run-%)
.PHONY: fuzz $(FUZZ_RUN)
fuzz: $(FUZZ_RUN)
$(FUZZ_RUN): fuzz-run-%: build-fuzz/%
	@mkdir -p build-fuzz/corpus-$*
	@echo "fuzzing $* for $(FUZZ_SECONDS)s"
	@$< -seed=$(FUZZ_SEED) -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 build-fuzz/corpus-$* tests/fuzz/corpus/$* \
	  >build-fuzz/$*.log 2>&1 || { tail -n 60 build-fuzz/$*.log; echo "fuzz: $* failed (log: build-fuzz/$*.log)"; exit 1; }
	@grep -E "^Done" build-fuzz/$*.log | sed "s/^/$*: /"

# ---- AArch64: cross build and kernel tests under qemu (docs/kernels.md, "AArch64") ----
#   make test-arm   cross-compiles the library (all of src/ that needs no third-party
#                   library: not the PCRE2/utf8proc tokenizer files, the one-rank
#                   src/dist) and the kernel unit tests with aarch64-linux-gnu-gcc
#                   -march=armv8-a into build/arm/, the dotprod files with
#                   -march=armv8.2-a+dotprod, and runs each test under qemu-aarch64 on
#                   a CPU without the dot product (level neon) and one with it
#                   (level dotprod).  Needs Debian's gcc-aarch64-linux-gnu,
#                   libc6-dev-arm64-cross and qemu-user (KITE_WITH_ARM=1 sh
#                   scripts/install-deps.sh).  Correctness only: speed under qemu means nothing.
ARM_CC ?= aarch64-linux-gnu-gcc
ARM_BUILD ?= build/arm
ARM_QEMU ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
# qemu CPU models: cortex-a53 (Armv8.0, no dot product) and max (everything qemu has)
ARM_CPUS ?= cortex-a53 max
ARM_LIB_SRC := $(sort $(filter-out src/kernels/x86_% src/tokenizer/pretok.c src/tokenizer/unicode.c src/dist/dist_mpi.c,\
                 $(shell find src -name '*.c')) src/dist/dist_none.c)
ARM_LIB_OBJ := $(ARM_LIB_SRC:%.c=$(ARM_BUILD)/obj/%.o)
# tools/ objects the kernel tests use (KITE_CPU_LEVEL through tools/config)
ARM_TOOLS_OBJ := $(ARM_BUILD)/obj/tools/config/config.o
ARM_TESTS := test_kernels test_registry test_ops test_flat_gemm test_gemm test_fused test_attention
ARM_TEST_BIN := $(ARM_TESTS:%=$(ARM_BUILD)/tests/%)
ARM_CFLAGS := -std=c11 -O2 -g1 $(WARN) -pthread -ffp-contract=off -march=armv8-a -ffunction-sections -fdata-sections

# a missing tool is named once, before any compile (order-only)
.PHONY: arm-deps
arm-deps:
	@command -v $(firstword $(ARM_CC)) >/dev/null 2>&1 && command -v $(firstword $(ARM_QEMU)) >/dev/null 2>&1 || \
	  { echo "make test-arm needs $(firstword $(ARM_CC)) and $(firstword $(ARM_QEMU)): KITE_WITH_ARM=1 sh scripts/install-deps.sh (as root), or apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user" >&2; exit 1; }
$(ARM_LIB_OBJ) $(ARM_TOOLS_OBJ) $(ARM_TEST_BIN): | arm-deps

$(ARM_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(say) ARMCC $<
	$(Q)$(ARM_CC) $(CPPFLAGS) $(ARM_CFLAGS) -MMD -MP -c $< -o $@
# the dot-product kernels: the only files with more than the Armv8-A baseline
$(ARM_BUILD)/obj/src/kernels/arm_neon/%_dotprod.o: ARM_CFLAGS += -march=armv8.2-a+dotprod

$(ARM_BUILD)/libkite.a: $(ARM_LIB_OBJ)
	$(say) AR $@
	$(Q)rm -f $@
	$(Q)aarch64-linux-gnu-ar rcs $@ $^

$(ARM_BUILD)/tests/%: tests/unit/%.c $(ARM_BUILD)/libkite.a $(ARM_TOOLS_OBJ) tests/harness.h
	@mkdir -p $(dir $@)
	$(say) ARMLD $@
	$(Q)$(ARM_CC) $(CPPFLAGS) -Itests $(ARM_CFLAGS) -MMD -MP $< -o $@ $(ARM_TOOLS_OBJ) $(ARM_BUILD)/libkite.a -pthread -lm -Wl,--gc-sections

.PHONY: test-arm arm
arm: $(ARM_TEST_BIN)
test-arm: $(ARM_TEST_BIN)
	@ARM_QEMU="$(ARM_QEMU)" ARM_CPUS="$(ARM_CPUS)" sh tests/run-arm.sh $(ARM_BUILD) $(ARM_TESTS)

clean:
	rm -rf build build-san build-fuzz

-include $(LIB_OBJ:.o=.d) $(TOOLS_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_BIN:=.d)
-include $(ARM_LIB_OBJ:.o=.d) $(ARM_TOOLS_OBJ:.o=.d) $(ARM_TEST_BIN:=.d)
