#include "engine/kernels/recurrence.h"

#include <algorithm>

#include "engine/kernels/simd.h"

namespace waste::kernels {
namespace {

// The delta rule on a [dk][dv] state whose row i decays by
// decay[i * decay_step] (1: KDA's per-channel decay; 0: one for the head).
void DeltaStepScalar(float* S, int dk, int dv, const float* decay, int decay_step,
                     const float* k, const float* v, float b, const float* q, float* u, float* o) {
  std::fill(u, u + dv, 0.f);
  for (int i = 0; i < dk; ++i) {
    float* row = S + static_cast<int64_t>(i) * dv;
    const float di = decay[i * decay_step];
    for (int j = 0; j < dv; ++j) {
      row[j] *= di;
      u[j] += k[i] * row[j];
    }
  }
  for (int j = 0; j < dv; ++j) u[j] = b * (v[j] - u[j]);
  std::fill(o, o + dv, 0.f);
  for (int i = 0; i < dk; ++i) {
    float* row = S + static_cast<int64_t>(i) * dv;
    for (int j = 0; j < dv; ++j) {
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
  DeltaStepScalar(S, d, d, decay, 1, k, v, b, q, u, o);
}

void GatedDeltaStateStep(float* S, int dk, int dv, float decay, const float* k, const float* v,
                         float b, const float* q, float* u, float* o, Isa isa) {
  isa = UsableIsa(isa);
  if (isa >= Isa::kAvx512 && avx512::GatedDeltaStateStep(S, dk, dv, decay, k, v, b, q, u, o))
    return;
  if (isa >= Isa::kAvx2 && avx2::GatedDeltaStateStep(S, dk, dv, decay, k, v, b, q, u, o)) return;
  DeltaStepScalar(S, dk, dv, &decay, 0, k, v, b, q, u, o);
}

void WeightedRowSum(const float* a, const float* rows, int64_t n_rows, int64_t stride,
                    int64_t cols, float* y, Isa isa) {
  isa = UsableIsa(isa);
  if (isa >= Isa::kAvx512 && avx512::WeightedRowSum(a, rows, n_rows, stride, cols, y)) return;
  if (isa >= Isa::kAvx2 && avx2::WeightedRowSum(a, rows, n_rows, stride, cols, y)) return;
  WeightedRowSumScalar(a, rows, n_rows, stride, cols, y);
}

}  // namespace waste::kernels
