// recurrence.h's loops with AVX-512 F: 16 value columns per register, each
// lane doing exactly the scalar reference's multiply, then add (this file is
// compiled with -ffp-contract=off so the compiler cannot fuse them either).

#include "engine/kernels/avx512_intrin.h"

#include "engine/kernels/simd.h"

namespace waste::kernels::avx512 {
namespace {

// Columns handled per sweep over the rows: 8 registers of accumulators.
constexpr int kBlock = 128;

__mmask16 Lanes(int64_t n) {  // n in [1, 16]
  return static_cast<__mmask16>((1u << n) - 1u);
}

// The delta rule on a [dk][dv] state whose row i decays by
// decay[i * decay_step] (1: KDA's per-channel decay; 0: one for the head).
void DeltaStep(float* S, int dk, int dv, const float* decay, int decay_step, const float* k,
               const float* v, float b, const float* q, float* u, float* o) {
  // Column blocks of up to 128: each sweeps every row i in ascending order,
  // so every u[j] and o[j] sums in the scalar order.
  for (int j0 = 0; j0 < dv; j0 += kBlock) {
    const int n = dv - j0 < kBlock ? (dv - j0) / 16 : kBlock / 16;
    __m512 acc[kBlock / 16];
    for (int t = 0; t < n; ++t) acc[t] = _mm512_setzero_ps();
    for (int i = 0; i < dk; ++i) {
      float* row = S + static_cast<int64_t>(i) * dv + j0;
      const __m512 di = _mm512_set1_ps(decay[i * decay_step]), ki = _mm512_set1_ps(k[i]);
      for (int t = 0; t < n; ++t) {
        const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(row + 16 * t), di);
        _mm512_storeu_ps(row + 16 * t, s);
        acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(ki, s));
      }
    }
    const __m512 bb = _mm512_set1_ps(b);
    for (int t = 0; t < n; ++t) {
      acc[t] = _mm512_mul_ps(bb, _mm512_sub_ps(_mm512_loadu_ps(v + j0 + 16 * t), acc[t]));
      _mm512_storeu_ps(u + j0 + 16 * t, acc[t]);
    }
    __m512 out[kBlock / 16];
    for (int t = 0; t < n; ++t) out[t] = _mm512_setzero_ps();
    for (int i = 0; i < dk; ++i) {
      float* row = S + static_cast<int64_t>(i) * dv + j0;
      const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
      for (int t = 0; t < n; ++t) {
        const __m512 s = _mm512_add_ps(_mm512_loadu_ps(row + 16 * t), _mm512_mul_ps(ki, acc[t]));
        _mm512_storeu_ps(row + 16 * t, s);
        out[t] = _mm512_add_ps(out[t], _mm512_mul_ps(qi, s));
      }
    }
    for (int t = 0; t < n; ++t) _mm512_storeu_ps(o + j0 + 16 * t, out[t]);
  }
}

}  // namespace

bool KdaStateStep(float* S, int d, const float* decay, const float* k, const float* v, float b,
                  const float* q, float* u, float* o) {
  if (d % 16 != 0) return false;
  DeltaStep(S, d, d, decay, 1, k, v, b, q, u, o);
  return true;
}

bool GatedDeltaStateStep(float* S, int dk, int dv, float decay, const float* k, const float* v,
                         float b, const float* q, float* u, float* o) {
  if (dv % 16 != 0) return false;
  DeltaStep(S, dk, dv, &decay, 0, k, v, b, q, u, o);
  return true;
}

bool WeightedRowSum(const float* a, const float* rows, int64_t n_rows, int64_t stride,
                    int64_t cols, float* y) {
  for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
    const int64_t width = cols - c0 < kBlock ? cols - c0 : kBlock;
    const int n = static_cast<int>((width + 15) / 16);
    const __mmask16 last = Lanes(width - 16 * (n - 1));
    __m512 acc[kBlock / 16];
    for (int t = 0; t < n; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* row = rows + r * stride + c0;
      const __m512 ar = _mm512_set1_ps(a[r]);
      for (int t = 0; t + 1 < n; ++t)
        acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(ar, _mm512_loadu_ps(row + 16 * t)));
      acc[n - 1] = _mm512_add_ps(
          acc[n - 1], _mm512_mul_ps(ar, _mm512_maskz_loadu_ps(last, row + 16 * (n - 1))));
    }
    for (int t = 0; t + 1 < n; ++t) _mm512_storeu_ps(y + c0 + 16 * t, acc[t]);
    _mm512_mask_storeu_ps(y + c0 + 16 * (n - 1), last, acc[n - 1]);
  }
  return true;
}

}  // namespace waste::kernels::avx512
