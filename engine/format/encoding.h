// Scalar encode and decode of the trunk formats (F16, BF16, Q8G, Q4G, Q3G),
// of VQ4P's packed indices and of MXFP4's codes and scales. These are the reference definitions: the
// writer encodes with them, tests decode with them, and every SIMD kernel
// is checked against them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace waste::format {

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);  // round to nearest even; overflow to inf
float Bf16ToF32(uint16_t h);
uint16_t F32ToBf16(float f);  // round to nearest even

// Group-quantized rows: each row of `cols` values is cut into groups of
// `group`, the last one zero-padded, each with one f16 scale.
struct GroupedShape {
  int bits;   // 8, 4 or 3
  int group;  // values per scale
  int64_t rows;
  int64_t cols;

  int64_t groups_per_row() const { return (cols + group - 1) / group; }
  // Bytes of one row's payload: 3-bit rows carry one guard byte so the
  // decoder's two-byte read stays inside the row.
  int64_t row_bytes() const {
    const int64_t padded = groups_per_row() * group;
    return bits == 3 ? (padded * 3 + 7) / 8 + 1 : padded * bits / 8;
  }
  int64_t payload_bytes() const { return rows * row_bytes(); }
  int64_t scale_bytes() const { return rows * groups_per_row() * 2; }
};

// Quantizes row-major `x` (rows * cols) into `payload` (payload_bytes()) and
// `scales` (rows * groups_per_row() f16), symmetric, scale = max|x| / qmax.
void QuantizeGrouped(const GroupedShape& s, const float* x, uint8_t* payload, uint16_t* scales);

// Decodes row `r` into `out[cols]`.
void DequantizeGroupedRow(const GroupedShape& s, const uint8_t* payload, const uint16_t* scales,
                          int64_t r, float* out);

// The signed 3-bit value at position i of a Q3G row (range -4..3).
inline int Q3At(const uint8_t* row, int64_t i) {
  const int64_t bit = i * 3;
  const int v = (row[bit >> 3] >> (bit & 7)) | (row[(bit >> 3) + 1] << (8 - (bit & 7)));
  return (v & 7) - 4;
}

// VQ4P: four 6-bit stage indices packed into three bytes, stage 0 in the low bits.
inline void PackVq4(const uint8_t s[4], uint8_t out[3]) {
  out[0] = static_cast<uint8_t>((s[0] & 63) | (s[1] << 6));
  out[1] = static_cast<uint8_t>(((s[1] & 63) >> 2) | (s[2] << 4));
  out[2] = static_cast<uint8_t>(((s[2] & 63) >> 4) | (s[3] << 2));
}
inline void UnpackVq4(const uint8_t b[3], uint8_t s[4]) {
  s[0] = b[0] & 63;
  s[1] = static_cast<uint8_t>((b[0] >> 6) | ((b[1] & 15) << 2));
  s[2] = static_cast<uint8_t>((b[1] >> 4) | ((b[2] & 3) << 4));
  s[3] = b[2] >> 2;
}

// MXFP4 (OCP microscaling): E2M1 values, two per byte, low nibble first
// (column 2i in the low nibble of byte i), one E8M0 scale per 32 values of a
// row: 2^(e - 127), 255 is NaN.
float E2m1ToF32(uint8_t nibble);  // the low 4 bits
float E8m0ToF32(uint8_t code);
inline constexpr int kMxfp4Block = 32;  // values per E8M0 scale

// INT4 experts, compressed-tensors' pack-quantized layout: eight 4-bit codes
// an int32 word, value i of a word in bits 4i..4i+3, so on this
// little-endian format two a byte, low nibble first; a code is the signed
// value plus 8 (symmetric: no zero point). Value = (code - 8) * the bf16
// scale of its group of 32 in the row, exact in float32.
inline float Int4ToF32(uint8_t nibble) { return static_cast<float>((nibble & 15) - 8); }
inline constexpr int kInt4Group = 32;  // values per bf16 scale

// Q4GR experts: the trunk's Q4G (GroupedShape bits 4) in groups of 128
// values, the width the AVX-512 integer product takes, or of 64 or 32 when
// the experts' input and intermediate widths are not multiples of 128.
// The group for those widths; 0 when not even 32 divides both.
inline constexpr int kQ4grGroup = 128;
inline int Q4grGroup(int64_t width, int64_t inter) {
  for (int g = kQ4grGroup; g >= 32; g /= 2)
    if (width % g == 0 && inter % g == 0) return g;
  return 0;
}

// zlib's crc32, as the format defines it; `prior`, the crc of the bytes
// before these, continues it over a file read in pieces.
uint32_t Crc32(std::span<const uint8_t> bytes, uint32_t prior = 0);

}  // namespace waste::format
