#include "engine/convert/dequant.h"

#include <cmath>
#include <limits>

namespace waste::convert {

float Fp8E4m3ToF32(uint8_t code) {
  const float sign = (code & 0x80) ? -1.f : 1.f;
  const int exp = (code >> 3) & 15, mant = code & 7;
  if (exp == 15 && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);  // mant/8 * 2^-6
  return sign * std::ldexp(static_cast<float>(8 + mant), exp - 10);      // (1 + mant/8) * 2^(exp-7)
}

float E2m1ToF32(uint8_t nibble) {
  static constexpr float kMagnitude[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float m = kMagnitude[nibble & 7];
  return (nibble & 8) ? -m : m;
}

float E8m0ToF32(uint8_t code) {
  if (code == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.f, static_cast<int>(code) - 127);
}

}  // namespace waste::convert
