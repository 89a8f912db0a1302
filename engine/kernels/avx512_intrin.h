// <immintrin.h> for the AVX-512 files. GCC 12's AVX-512 headers trip
// -W(maybe-)uninitialized on their own _mm512_undefined_* placeholders (GCC
// bug 105593, fixed in 13), so those two warnings are off in the files that
// include this; include it first.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
