// recurrence.h's loops with AVX2: 8 value columns per register, each lane
// doing exactly the scalar reference's multiply, then add (this file is
// compiled with -ffp-contract=off so the compiler cannot fuse them either).

#include <immintrin.h>

#include "engine/kernels/simd.h"

namespace waste::kernels::avx2 {
namespace {

// Columns handled per sweep over the rows. AVX2 has 16 registers:
// WeightedRowSum keeps 8 accumulators, KdaStateStep's second pass 4 of u
// and 4 of o.
constexpr int kSumBlock = 64;
constexpr int kKdaBlock = 32;

// A maskload/maskstore mask with lanes [0, n) set, n in [1, 8].
alignas(32) const int32_t kLaneMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
__m256i FirstLanes(int64_t n) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLaneMask + 8 - n));
}

// The delta rule on a [dk][dv] state whose row i decays by
// decay[i * decay_step] (1: KDA's per-channel decay; 0: one for the head).
void DeltaStep(float* S, int dk, int dv, const float* decay, int decay_step, const float* k,
               const float* v, float b, const float* q, float* u, float* o) {
  // Column blocks of up to 32: each sweeps every row i in ascending order,
  // so every u[j] and o[j] sums in the scalar order.
  for (int j0 = 0; j0 < dv; j0 += kKdaBlock) {
    const int n = dv - j0 < kKdaBlock ? (dv - j0) / 8 : kKdaBlock / 8;
    __m256 acc[kKdaBlock / 8];
    for (int t = 0; t < n; ++t) acc[t] = _mm256_setzero_ps();
    for (int i = 0; i < dk; ++i) {
      float* row = S + static_cast<int64_t>(i) * dv + j0;
      const __m256 di = _mm256_set1_ps(decay[i * decay_step]), ki = _mm256_set1_ps(k[i]);
      for (int t = 0; t < n; ++t) {
        const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * t), di);
        _mm256_storeu_ps(row + 8 * t, s);
        acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(ki, s));
      }
    }
    const __m256 bb = _mm256_set1_ps(b);
    for (int t = 0; t < n; ++t) {
      acc[t] = _mm256_mul_ps(bb, _mm256_sub_ps(_mm256_loadu_ps(v + j0 + 8 * t), acc[t]));
      _mm256_storeu_ps(u + j0 + 8 * t, acc[t]);
    }
    __m256 out[kKdaBlock / 8];
    for (int t = 0; t < n; ++t) out[t] = _mm256_setzero_ps();
    for (int i = 0; i < dk; ++i) {
      float* row = S + static_cast<int64_t>(i) * dv + j0;
      const __m256 ki = _mm256_set1_ps(k[i]), qi = _mm256_set1_ps(q[i]);
      for (int t = 0; t < n; ++t) {
        const __m256 s = _mm256_add_ps(_mm256_loadu_ps(row + 8 * t), _mm256_mul_ps(ki, acc[t]));
        _mm256_storeu_ps(row + 8 * t, s);
        out[t] = _mm256_add_ps(out[t], _mm256_mul_ps(qi, s));
      }
    }
    for (int t = 0; t < n; ++t) _mm256_storeu_ps(o + j0 + 8 * t, out[t]);
  }
}

}  // namespace

bool KdaStateStep(float* S, int d, const float* decay, const float* k, const float* v, float b,
                  const float* q, float* u, float* o) {
  if (d % 8 != 0) return false;
  DeltaStep(S, d, d, decay, 1, k, v, b, q, u, o);
  return true;
}

bool GatedDeltaStateStep(float* S, int dk, int dv, float decay, const float* k, const float* v,
                         float b, const float* q, float* u, float* o) {
  if (dv % 8 != 0) return false;
  DeltaStep(S, dk, dv, &decay, 0, k, v, b, q, u, o);
  return true;
}

bool WeightedRowSum(const float* a, const float* rows, int64_t n_rows, int64_t stride, int64_t cols,
                    float* y) {
  for (int64_t c0 = 0; c0 < cols; c0 += kSumBlock) {
    const int64_t width = cols - c0 < kSumBlock ? cols - c0 : kSumBlock;
    const int n = static_cast<int>((width + 7) / 8);
    const __m256i last = FirstLanes(width - 8 * (n - 1));
    __m256 acc[kSumBlock / 8];
    for (int t = 0; t < n; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* row = rows + r * stride + c0;
      const __m256 ar = _mm256_set1_ps(a[r]);
      for (int t = 0; t + 1 < n; ++t)
        acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(ar, _mm256_loadu_ps(row + 8 * t)));
      acc[n - 1] =
          _mm256_add_ps(acc[n - 1], _mm256_mul_ps(ar, _mm256_maskload_ps(row + 8 * (n - 1), last)));
    }
    for (int t = 0; t + 1 < n; ++t) _mm256_storeu_ps(y + c0 + 8 * t, acc[t]);
    _mm256_maskstore_ps(y + c0 + 8 * (n - 1), last, acc[n - 1]);
  }
  return true;
}

}  // namespace waste::kernels::avx2
