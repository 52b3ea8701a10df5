/* timing.h - monotonic wall-clock time for measurements. */
#ifndef KITE_CORE_TIMING_H
#define KITE_CORE_TIMING_H

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
double time_now_s(void);
/* CPU seconds used by the whole process, all threads (CLOCK_PROCESS_CPUTIME_ID):
 * on a shared machine, the cycles a measurement actually got. */
double time_cpu_s(void);

#endif
