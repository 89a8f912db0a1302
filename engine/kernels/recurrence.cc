#include "engine/kernels/recurrence.h"

#include <algorithm>

#include "engine/kernels/simd.h"

namespace waste::kernels {
namespace {

void KdaStateStepScalar(float* S, int d, const float* decay, const float* k, const float* v,
                        float b, const float* q, float* u, float* o) {
  std::fill(u, u + d, 0.f);
  for (int i = 0; i < d; ++i) {
    float* row = S + static_cast<int64_t>(i) * d;
    for (int j = 0; j < d; ++j) {
      row[j] *= decay[i];
      u[j] += k[i] * row[j];
    }
  }
  for (int j = 0; j < d; ++j) u[j] = b * (v[j] - u[j]);
  std::fill(o, o + d, 0.f);
  for (int i = 0; i < d; ++i) {
    float* row = S + static_cast<int64_t>(i) * d;
    for (int j = 0; j < d; ++j) {
      row[j] += k[i] * u[j];
      o[j] += q[i] * row[j];
    }
  }
}

void WeightedRowSumScalar(const float* a, const float* rows, int64_t n_rows, int64_t stride,
                          int64_t cols, float* y) {
  std::fill(y, y + cols, 0.f);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = rows + r * stride;
    for (int64_t c = 0; c < cols; ++c) y[c] += a[r] * row[c];
  }
}

}  // namespace

void KdaStateStep(float* S, int d, const float* decay, const float* k, const float* v, float b,
                  const float* q, float* u, float* o, Isa isa) {
  isa = UsableIsa(isa);
  if (isa >= Isa::kAvx512 && avx512::KdaStateStep(S, d, decay, k, v, b, q, u, o)) return;
  if (isa >= Isa::kAvx2 && avx2::KdaStateStep(S, d, decay, k, v, b, q, u, o)) return;
  KdaStateStepScalar(S, d, decay, k, v, b, q, u, o);
}

void WeightedRowSum(const float* a, const float* rows, int64_t n_rows, int64_t stride,
                    int64_t cols, float* y, Isa isa) {
  isa = UsableIsa(isa);
  if (isa >= Isa::kAvx512 && avx512::WeightedRowSum(a, rows, n_rows, stride, cols, y)) return;
  if (isa >= Isa::kAvx2 && avx2::WeightedRowSum(a, rows, n_rows, stride, cols, y)) return;
  WeightedRowSumScalar(a, rows, n_rows, stride, cols, y);
}

}  // namespace waste::kernels
