// The activation functions of the forward pass, shared by its layer files.
#pragma once

#include <cmath>

namespace waste {

inline float Silu(float x) {
  return x / (1.f + std::exp(-x));
}
inline float Sigmoid(float x) {
  return 1.f / (1.f + std::exp(-x));
}
inline float Softplus(float x) {
  return x > 20.f ? x : std::log1p(std::exp(x));
}  // torch's threshold

}  // namespace waste
