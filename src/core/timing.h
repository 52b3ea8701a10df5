/* timing.h - monotonic wall-clock time for measurements. */
#ifndef KITE_CORE_TIMING_H
#define KITE_CORE_TIMING_H

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
double time_now_s(void);

#endif
