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

}  // namespace waste::convert
