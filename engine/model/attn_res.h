// Kimi K3's Attention Residuals: a sublayer's input is a softmax mix of the
// block representations so far and the current block's running sum, scored
// by one learned query per sublayer (modeling_kimi_linear.py's
// _apply_attn_res). Per token: nothing of it crosses from token to token.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace waste {

// out = sum_i p_i v_i over v = [blocks[0..nb), partial], where
// p = softmax_i(sum_j v_ij / rms(v_i) * norm_w[j] * proj_w[j]) and
// rms(v) = sqrt(mean(v^2) + eps). blocks is [nb][n]. `out` may be `partial`
// itself (the output aggregation mixes in place): partial's term is written
// first, element by element, before any block is added.
inline void AttnRes(const float* blocks, int nb, const float* partial, const float* norm_w,
                    const float* proj_w, int n, float eps, float* out) {
  std::vector<float> p(static_cast<size_t>(nb) + 1);
  for (int i = 0; i <= nb; ++i) {
    const float* v = i < nb ? blocks + static_cast<size_t>(i) * n : partial;
    double ss = 0;
    for (int j = 0; j < n; ++j) ss += static_cast<double>(v[j]) * v[j];
    const float inv = 1.f / std::sqrt(static_cast<float>(ss / n) + eps);
    double score = 0;
    for (int j = 0; j < n; ++j) score += static_cast<double>(v[j] * inv) * (norm_w[j] * proj_w[j]);
    p[i] = static_cast<float>(score);
  }
  const float mx = *std::max_element(p.begin(), p.end());
  float sum = 0.f;
  for (float& x : p) sum += x = std::exp(x - mx);
  for (float& x : p) x /= sum;
  for (int j = 0; j < n; ++j) out[j] = p[nb] * partial[j];
  for (int i = 0; i < nb; ++i) {
    const float* v = blocks + static_cast<size_t>(i) * n;
    for (int j = 0; j < n; ++j) out[j] += p[i] * v[j];
  }
}

}  // namespace waste
