#include "engine/format/encoding.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace waste::format {

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      uint32_t m = man;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400) == 0);
      bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t F32ToF16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);  // inf / nan
  if (ax >= 0x477ff000u) return sign | 0x7c00;  // rounds past 65504: inf
  if (ax < 0x38800000u) {                       // below the smallest normal half
    if (ax < 0x33000000u) return sign;          // rounds to zero
    const int e = static_cast<int>(ax >> 23);
    const uint32_t m = (ax & 0x7fffff) | 0x800000;
    const int shift = 126 - e;  // 14..24
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return sign | static_cast<uint16_t>(h);
  }
  uint32_t h = ((ax >> 13) - (112u << 10));
  const uint32_t rem = ax & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return sign | static_cast<uint16_t>(h);
}

float Bf16ToF32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

uint16_t F32ToBf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet nan
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

void QuantizeGrouped(const GroupedShape& s, const float* x, uint8_t* payload, uint16_t* scales) {
  const int qmax = s.bits == 8 ? 127 : s.bits == 4 ? 7 : 3;
  const int qmin = s.bits == 8 ? -127 : s.bits == 4 ? -8 : -4;
  const int64_t ng = s.groups_per_row();
  const int64_t rb = s.row_bytes();
  if (s.payload_bytes() == 0) return;  // no rows: payload may be null, which memset must not see
  std::memset(payload, 0, static_cast<size_t>(s.payload_bytes()));
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* xr = x + r * s.cols;
    uint8_t* pr = payload + r * rb;
    for (int64_t g = 0; g < ng; ++g) {
      const int64_t beg = g * s.group;
      const int64_t end = std::min<int64_t>(beg + s.group, s.cols);
      float amax = 0.f;
      for (int64_t i = beg; i < end; ++i) amax = std::max(amax, std::fabs(xr[i]));
      const uint16_t sh = F32ToF16(amax > 0.f ? amax / static_cast<float>(qmax) : 0.f);
      scales[r * ng + g] = sh;
      const float scale = F16ToF32(sh);
      const float inv = scale > 0.f ? 1.f / scale : 0.f;
      for (int64_t i = beg; i < end; ++i) {
        const int q = std::clamp(static_cast<int>(std::lround(xr[i] * inv)), qmin, qmax);
        if (s.bits == 8) {
          pr[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
        } else if (s.bits == 4) {
          const uint8_t nib = static_cast<uint8_t>(q + 8);
          pr[i / 2] |= (i & 1) ? static_cast<uint8_t>(nib << 4) : nib;
        } else {
          const uint32_t u = static_cast<uint32_t>(q + 4);
          const int64_t bit = i * 3;
          pr[bit >> 3] |= static_cast<uint8_t>(u << (bit & 7));
          pr[(bit >> 3) + 1] |= static_cast<uint8_t>(u >> (8 - (bit & 7)));
        }
      }
      // Padding past `cols` encodes zero: 0 for Q8G, the +8 / +4 bias otherwise.
      for (int64_t i = end; i < beg + s.group && s.bits != 8; ++i) {
        if (s.bits == 4) {
          pr[i / 2] |= (i & 1) ? static_cast<uint8_t>(8 << 4) : 8;
        } else {
          const int64_t bit = i * 3;
          pr[bit >> 3] |= static_cast<uint8_t>(4u << (bit & 7));
          pr[(bit >> 3) + 1] |= static_cast<uint8_t>(4u >> (8 - (bit & 7)));
        }
      }
    }
  }
}

void DequantizeGroupedRow(const GroupedShape& s, const uint8_t* payload, const uint16_t* scales,
                          int64_t r, float* out) {
  const int64_t ng = s.groups_per_row();
  const uint8_t* pr = payload + r * s.row_bytes();
  for (int64_t i = 0; i < s.cols; ++i) {
    const float scale = F16ToF32(scales[r * ng + i / s.group]);
    int q;
    if (s.bits == 8) {
      q = static_cast<int8_t>(pr[i]);
    } else if (s.bits == 4) {
      q = ((i & 1) ? (pr[i / 2] >> 4) : (pr[i / 2] & 15)) - 8;
    } else {
      q = Q3At(pr, i);
    }
    out[i] = scale * static_cast<float>(q);
  }
}

uint32_t Crc32(std::span<const uint8_t> bytes, uint32_t prior) {
  uLong crc = prior;
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {  // zlib takes a uInt length
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
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

}  // namespace waste::format
