// BG_CPU_RELAX(): the pause a spin-wait loop takes between two looks at its word (the x86 PAUSE
// hint, which frees the core's resources for its sibling; elsewhere a yield).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BG_CPU_RELAX() _mm_pause()
#else
#include <thread>
#define BG_CPU_RELAX() std::this_thread::yield()
#endif
