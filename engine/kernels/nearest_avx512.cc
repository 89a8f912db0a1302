// NearestEntry's AVX-512 path (nearest.h). Compiled with the AVX-512 flags
// and -ffp-contract=off; see simd.h for what this file may use.
//
// 16 entries are the 16 lanes of a register. Per vector: its 8 coordinates
// are broadcast once, then per chunk of 16 entries dot = 0, dot += x[d] *
// c[d] for d = 0..7 (a multiply and an add, never fused), dist = norm - 2 *
// dot: the scalar loop's operations in its order, so each lane's dist is
// the scalar dist of its entry. Each lane keeps its first minimum (strict
// <, chunks in ascending order, NaN never less); the first minimum overall
// is the lowest index among the lanes holding the least of those values.
#include "engine/kernels/avx512_intrin.h"

#include <cstdint>

#include "engine/kernels/simd.h"

namespace waste::kernels::avx512 {

void NearestEntries(const float* lanes_books, const float* lanes_norms, int chunks, const float* x,
                    int64_t n, int32_t* out) {
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  const __m512 two = _mm512_set1_ps(2.f);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i sixteen = _mm512_set1_epi32(16);
  for (int64_t j = 0; j < n; ++j, x += 8) {
    const __m512 x0 = _mm512_set1_ps(x[0]), x1 = _mm512_set1_ps(x[1]), x2 = _mm512_set1_ps(x[2]),
                 x3 = _mm512_set1_ps(x[3]), x4 = _mm512_set1_ps(x[4]), x5 = _mm512_set1_ps(x[5]),
                 x6 = _mm512_set1_ps(x[6]), x7 = _mm512_set1_ps(x[7]);
    __m512 best = inf;
    __m512i best_at = _mm512_setzero_si512(), at = lane;
    const float* t = lanes_books;
    for (int c = 0; c < chunks; ++c, t += 128, at = _mm512_add_epi32(at, sixteen)) {
      __m512 dot = _mm512_add_ps(_mm512_setzero_ps(), _mm512_mul_ps(x0, _mm512_loadu_ps(t)));
      dot = _mm512_add_ps(dot, _mm512_mul_ps(x1, _mm512_loadu_ps(t + 16)));
      dot = _mm512_add_ps(dot, _mm512_mul_ps(x2, _mm512_loadu_ps(t + 32)));
      dot = _mm512_add_ps(dot, _mm512_mul_ps(x3, _mm512_loadu_ps(t + 48)));
      dot = _mm512_add_ps(dot, _mm512_mul_ps(x4, _mm512_loadu_ps(t + 64)));
      dot = _mm512_add_ps(dot, _mm512_mul_ps(x5, _mm512_loadu_ps(t + 80)));
      dot = _mm512_add_ps(dot, _mm512_mul_ps(x6, _mm512_loadu_ps(t + 96)));
      dot = _mm512_add_ps(dot, _mm512_mul_ps(x7, _mm512_loadu_ps(t + 112)));
      const __m512 dist =
          _mm512_sub_ps(_mm512_loadu_ps(lanes_norms + 16 * c), _mm512_mul_ps(two, dot));
      const __mmask16 less = _mm512_cmp_ps_mask(dist, best, _CMP_LT_OQ);
      best = _mm512_mask_mov_ps(best, less, dist);
      best_at = _mm512_mask_mov_epi32(best_at, less, at);
    }
    const float least = _mm512_reduce_min_ps(best);
    if (!(least < __builtin_inff())) {  // nothing below +inf: the scalar loop keeps entry 0
      out[j] = 0;
      continue;
    }
    const __mmask16 holders = _mm512_cmp_ps_mask(best, _mm512_set1_ps(least), _CMP_EQ_OQ);
    out[j] = _mm512_mask_reduce_min_epi32(holders, best_at);
  }
}

}  // namespace waste::kernels::avx512
