// <immintrin.h> for the CPU kernels that carry their own target attributes (AVX2, AVX-512), on
// x86-64 GCC and Clang builds only; include it inside an
// `#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))` block.
//
// GCC 12's AVX-512 intrinsics start many results from _mm512_undefined_*(), a self-initialised
// variable that -W(maybe-)uninitialized reports wherever they are inlined (GCC bug 105593, fixed
// in 13); the warnings are silenced for the header's lines alone.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
