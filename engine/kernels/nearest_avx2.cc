// NearestEntry's AVX2 path (nearest.h): the AVX-512 path's method
// (nearest_avx512.cc) with 8 entries to a register. Compiled with the AVX2
// flags and -ffp-contract=off; see simd.h for what this file may use.
#include <immintrin.h>

#include <cstdint>

#include "engine/kernels/simd.h"

namespace waste::kernels::avx2 {

void NearestEntries(const float* lanes_books, const float* lanes_norms, int chunks, const float* x,
                    int64_t n, int32_t* out) {
  const __m256 inf = _mm256_set1_ps(__builtin_inff());
  const __m256 two = _mm256_set1_ps(2.f);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i eight = _mm256_set1_epi32(8);
  for (int64_t j = 0; j < n; ++j, x += 8) {
    const __m256 x0 = _mm256_set1_ps(x[0]), x1 = _mm256_set1_ps(x[1]), x2 = _mm256_set1_ps(x[2]),
                 x3 = _mm256_set1_ps(x[3]), x4 = _mm256_set1_ps(x[4]), x5 = _mm256_set1_ps(x[5]),
                 x6 = _mm256_set1_ps(x[6]), x7 = _mm256_set1_ps(x[7]);
    __m256 best = inf;
    __m256i best_at = _mm256_setzero_si256(), at = lane;
    const float* t = lanes_books;
    for (int c = 0; c < chunks; ++c, t += 64, at = _mm256_add_epi32(at, eight)) {
      __m256 dot = _mm256_add_ps(_mm256_setzero_ps(), _mm256_mul_ps(x0, _mm256_loadu_ps(t)));
      dot = _mm256_add_ps(dot, _mm256_mul_ps(x1, _mm256_loadu_ps(t + 8)));
      dot = _mm256_add_ps(dot, _mm256_mul_ps(x2, _mm256_loadu_ps(t + 16)));
      dot = _mm256_add_ps(dot, _mm256_mul_ps(x3, _mm256_loadu_ps(t + 24)));
      dot = _mm256_add_ps(dot, _mm256_mul_ps(x4, _mm256_loadu_ps(t + 32)));
      dot = _mm256_add_ps(dot, _mm256_mul_ps(x5, _mm256_loadu_ps(t + 40)));
      dot = _mm256_add_ps(dot, _mm256_mul_ps(x6, _mm256_loadu_ps(t + 48)));
      dot = _mm256_add_ps(dot, _mm256_mul_ps(x7, _mm256_loadu_ps(t + 56)));
      const __m256 dist =
          _mm256_sub_ps(_mm256_loadu_ps(lanes_norms + 8 * c), _mm256_mul_ps(two, dot));
      const __m256 less = _mm256_cmp_ps(dist, best, _CMP_LT_OQ);
      best = _mm256_blendv_ps(best, dist, less);
      best_at = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(best_at), _mm256_castsi256_ps(at), less));
    }
    float values[8];
    int32_t where[8];
    _mm256_storeu_ps(values, best);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(where), best_at);
    // The first minimum: the least value, then the lowest index holding it.
    float least = values[0];
    for (int l = 1; l < 8; ++l) least = values[l] < least ? values[l] : least;
    if (!(least < __builtin_inff())) {  // nothing below +inf: the scalar loop keeps entry 0
      out[j] = 0;
      continue;
    }
    int32_t first = 0x7fffffff;
    for (int l = 0; l < 8; ++l)
      if (values[l] == least && where[l] < first) first = where[l];
    out[j] = first;
  }
}

}  // namespace waste::kernels::avx2
