/*
 * cpu.h - CPU feature detection (cpuid + xgetbv on x86, getauxval on AArch64).
 *
 * DESIGN
 *   cpu_features() runs cpuid once (pthread_once) and reports the ISA
 *   extensions the kernels use.  An extension counts only when the OS also
 *   saves its register state: XCR0 must enable the YMM state for AVX/AVX2/FMA/
 *   F16C and the opmask + ZMM states for AVX-512.  On AArch64 the kernel's
 *   HWCAP bits say the same (getauxval(AT_HWCAP): the kernel only sets a bit
 *   it saves the state of).  Flags of the other architecture are false.  This file is compiled without ISA flags: it only asks.
 *
 * THREAD SAFETY
 *   cpu_features() may be called from any thread; the result is immutable.
 */
#ifndef KITE_CORE_CPU_H
#define KITE_CORE_CPU_H

#include <stdbool.h>

typedef struct cpu_info {
    bool avx;          /* AVX with OS YMM support */
    bool avx2;
    bool fma;
    bool f16c;
    bool avx512f;      /* AVX-512 foundation with OS opmask/ZMM support */
    bool avx512bw;
    bool avx512dq;
    bool avx512vl;
    bool avx512vnni;   /* vpdpbusd on zmm/ymm (with VL) */
    bool avx512bf16;   /* vdpbf16ps */
    bool avxvnni;      /* VEX-encoded vpdpbusd (AVX-VNNI): avx2-level q4_0/q8_0 variant */
    bool neon;         /* AArch64 Advanced SIMD (HWCAP_ASIMD; every AArch64 Linux CPU has it) */
    bool dotprod;      /* AArch64 sdot/udot (HWCAP_ASIMDDP, Armv8.2 dot product) */
    bool intel;        /* vendor "GenuineIntel": a tuning default (kernels/dispatch.h), not a feature */
} cpu_info;

/* Features of the CPU this process runs on (detected once). */
const cpu_info *cpu_features(void);

#endif
