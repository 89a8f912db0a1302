#include "engine/model/rotary.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace waste {

Rotary MakeRotary(int dims, double theta, const YarnConfig& y) {
  // As HF computes it, in float32: pos_freqs = theta^(2i/d); YaRN blends
  // 1/pos_freqs (extrapolation) and 1/(factor * pos_freqs) by a ramp.
  Rotary r;
  const double pi = std::numbers::pi;
  const float base = static_cast<float>(theta);
  r.inv_freq.resize(dims / 2);
  std::vector<float> pos_freqs(dims / 2);
  for (int j = 0; j < dims / 2; ++j) {
    pos_freqs[j] = std::pow(base, static_cast<float>(2 * j) / static_cast<float>(dims));
    r.inv_freq[j] = 1.f / pos_freqs[j];
  }
  if (y.factor > 1.0) {
    auto corr = [&](double rot) {
      return dims * std::log(y.original_max_position / (rot * 2 * pi)) / (2 * std::log(theta));
    };
    double low = std::max(std::floor(corr(y.beta_fast)), 0.0);
    double high = std::min(std::ceil(corr(y.beta_slow)), static_cast<double>(dims - 1));
    if (low == high) high += 0.001;
    const float factor = static_cast<float>(y.factor);
    for (int j = 0; j < dims / 2; ++j) {
      const float ramp = std::clamp(static_cast<float>((j - low) / (high - low)), 0.f, 1.f);
      const float extrapolation = 1.f - ramp;
      r.inv_freq[j] = 1.f / (factor * pos_freqs[j]) * (1.f - extrapolation) +
                      1.f / pos_freqs[j] * extrapolation;
    }
    if (y.mscale_all_dim > 0) {
      const double ms = 0.1 * y.mscale_all_dim * std::log(y.factor) + 1.0;
      r.softmax_factor = static_cast<float>(ms * ms);
    }
  }
  return r;
}

void Rotary::Apply(float* v, int pos) const {
  if (rotate_half) {
    // HF: v * cos + rotate_half(v) * sin, with cos and sin times attention_factor.
    const size_t half = inv_freq.size();
    for (size_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos) * inv_freq[i];
      const float c = std::cos(angle) * cos_sin_factor, s = std::sin(angle) * cos_sin_factor;
      const float x0 = v[i], x1 = v[i + half];
      v[i] = x0 * c - x1 * s;
      v[i + half] = x1 * c + x0 * s;
    }
    return;
  }
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    const float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c - x1 * s;
    v[2 * i + 1] = x1 * c + x0 * s;
  }
}

}  // namespace waste
