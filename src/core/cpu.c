/*
 * cpu.c - cpuid/xgetbv feature detection (see cpu.h).
 *
 * cpuid leaf 1 gives FMA (ecx 12), OSXSAVE (ecx 27), AVX (ecx 28) and F16C
 * (ecx 29); leaf 7.0 gives AVX2 (ebx 5), AVX512F (ebx 16), AVX512DQ (ebx 17),
 * AVX512BW (ebx 30), AVX512VL (ebx 31) and AVX512_VNNI (ecx 11); leaf 7.1
 * gives AVX-VNNI (eax 4) and AVX512_BF16 (eax 5).  XCR0 bits 1-2 (SSE, YMM)
 * and 5-7 (opmask, ZMM_Hi256, Hi16_ZMM) say which states the OS saves.
 * On AArch64 Linux, getauxval(AT_HWCAP) gives ASIMD (bit 1) and ASIMDDP
 * (bit 20, sdot/udot).
 */
#include "core/cpu.h"

#include <pthread.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KITE_X86 1
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#endif

static cpu_info g_info;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#ifdef KITE_X86
static uint64_t read_xcr0(void) {
    /* xgetbv by opcode-level asm, so this file needs no -mxsave */
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}
#endif

static void detect(void) {
#ifdef KITE_X86
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d)) /* vendor string: ebx, edx, ecx */
        g_info.intel = b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu; /* "Genu" "ineI" "ntel" */
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const bool osxsave = (c >> 27) & 1;
    const bool has_avx = (c >> 28) & 1, has_fma = (c >> 12) & 1, has_f16c = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    const bool ymm_os = (xcr0 & 0x6) == 0x6;
    const bool zmm_os = (xcr0 & 0xe6) == 0xe6;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    unsigned b7 = 0, c7 = 0, a71 = 0;
    if (max_leaf >= 7) {
        unsigned a7, d7;
        __cpuid_count(7, 0, a7, b7, c7, d7);
        if (a7 >= 1) {
            unsigned b71, c71, d71;
            __cpuid_count(7, 1, a71, b71, c71, d71);
            (void)b71, (void)c71, (void)d71;
        }
        (void)d7;
    }
    g_info.avx = has_avx && ymm_os;
    g_info.fma = has_fma && g_info.avx;
    g_info.f16c = has_f16c && g_info.avx;
    g_info.avx2 = ((b7 >> 5) & 1) && g_info.avx;
    g_info.avxvnni = ((a71 >> 4) & 1) && g_info.avx;
    const bool z = g_info.avx && zmm_os;
    g_info.avx512f = ((b7 >> 16) & 1) && z;
    g_info.avx512dq = ((b7 >> 17) & 1) && g_info.avx512f;
    g_info.avx512bw = ((b7 >> 30) & 1) && g_info.avx512f;
    g_info.avx512vl = ((b7 >> 31) & 1) && g_info.avx512f;
    g_info.avx512vnni = ((c7 >> 11) & 1) && g_info.avx512f;
    g_info.avx512bf16 = ((a71 >> 5) & 1) && g_info.avx512f;
#endif
#if defined(__aarch64__) && defined(__linux__)
    const unsigned long hw = getauxval(AT_HWCAP);
    g_info.neon = (hw & HWCAP_ASIMD) != 0;
    g_info.dotprod = g_info.neon && (hw & HWCAP_ASIMDDP) != 0;
#elif defined(__aarch64__)
    g_info.neon = true; /* AArch64 elsewhere (no auxv): NEON is the baseline; the dot product unknown, so off */
#endif
}

const cpu_info *cpu_features(void) {
    pthread_once(&g_once, detect);
    return &g_info;
}
