// Norms and activations, as the references compute them (float32 values,
// RMSNorm's and the L2 norm's sums of squares in double). Shared by every
// layer file, so that each formula is written once.
#pragma once

#include <cmath>

namespace waste {

inline float Silu(float x) {
  return x / (1.f + std::exp(-x));
}

inline float Sigmoid(float x) {
  return 1.f / (1.f + std::exp(-x));
}

// torch's softplus, with its threshold of 20.
inline float Softplus(float x) {
  return x > 20.f ? x : std::log1p(std::exp(x));
}

// Kimi K3's SiTU gated unit (SituAndMul): beta * tanh(g / beta) * sigmoid(g)
// times linear_beta * tanh(u / linear_beta), or times u when linear_beta is 0.
inline float Situ(float g, float u, float beta, float linear_beta) {
  const float a = beta * std::tanh(g / beta) * Sigmoid(g);
  return a * (linear_beta > 0.f ? linear_beta * std::tanh(u / linear_beta) : u);
}

// KDA's log-decay of one channel, z = the gate's projection plus dt_bias and
// a = exp(A_log[head]): Kimi-Linear's -a * softplus(z) (fla's naive_kda_gate),
// or with lower_bound < 0 K3's lower_bound * sigmoid(a * z)
// (naive_kda_lowerbound_gate), which keeps it in (lower_bound, 0).
inline float KdaLogDecay(float a, float z, float lower_bound) {
  return lower_bound < 0.f ? lower_bound * Sigmoid(a * z) : -a * Softplus(z);
}

// y = x / rms(x) * w, over n values.
inline void RmsNorm(const float* x, const float* w, int n, float eps, float* y) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = 1.f / std::sqrt(static_cast<float>(ss / n) + eps);
  for (int i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

// x / sqrt(sum x^2 + 1e-6), as fla's l2norm (not F.normalize's max(|x|, eps)).
inline void L2Normalize(float* x, int n) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = 1.f / std::sqrt(static_cast<float>(ss) + 1e-6f);
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace waste
