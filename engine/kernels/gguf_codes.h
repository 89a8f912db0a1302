// Internal to gguf_matvec_avx2.cc and gguf_matvec_avx512.cc (include it
// only there, after <immintrin.h>): the codes of gguf_dequant.h's factored
// types unpacked to int8 with AVX2's integer instructions, and the walk over
// a row's blocks a piece (kGgufPiece values) at a time; the float types'
// rows (F32, F16, BF16) converted a piece at a time with AVX2 and F16C. Everything here has
// internal linkage, so each file gets its own copy built with its own flags
// (simd.h says why nothing inline may be shared with baseline code).
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/gguf/gguf.h"
#include "engine/kernels/gguf_dequant.h"
#include "engine/kernels/simd.h"

namespace waste::kernels::gguf_codes {
namespace {

__m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
void Store32(int8_t* q, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), v);
}
// (byte >> s) & mask, of each byte.
__m256i Bits(__m256i v, int s, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(s)),
                          _mm256_set1_epi8(static_cast<char>(mask)));
}
__m256i Shl4(__m256i v) {  // bytes below 16 only
  return _mm256_slli_epi16(v, 4);
}

// Each function writes one block's codes, as gguf_dequant.cc's *Codes do.
void Q8_0(const uint8_t* b, int8_t* q) {
  Store32(q, Load32(b + 2));
}
// The 32-value blocks' 16 bytes of nibbles at p: low nibbles values 0..15,
// high ones 16..31.
__m256i Nibbles32(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i low4 = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), low4), _mm_and_si128(v, low4));
}
// Q5_0's and Q5_1's fifth bits: bit j of the u32 at p as 16 in byte j.
__m256i Fifths(const uint8_t* p) {
  int32_t h;
  std::memcpy(&h, p, 4);
  // Byte j takes the u32's byte j / 8, then tests its bit j % 8.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(h),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                          _mm256_set1_epi8(16));
}
void Q4_0(const uint8_t* b, int8_t* q) {
  Store32(q, _mm256_sub_epi8(Nibbles32(b + 2), _mm256_set1_epi8(8)));
}
void Q4_1(const uint8_t* b, int8_t* q) {
  Store32(q, Nibbles32(b + 4));
}
void Q5_0(const uint8_t* b, int8_t* q) {
  Store32(q,
          _mm256_sub_epi8(_mm256_or_si256(Nibbles32(b + 6), Fifths(b + 2)), _mm256_set1_epi8(16)));
}
void Q5_1(const uint8_t* b, int8_t* q) {
  Store32(q, _mm256_or_si256(Nibbles32(b + 8), Fifths(b + 4)));
}
void Iq4Nl(const uint8_t* b, int8_t* q) {
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kGgufIq4Levels)));
  Store32(q, _mm256_shuffle_epi8(table, Nibbles32(b + 2)));
}
void Mxfp4(const uint8_t* b, int8_t* q) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kGgufE2m1Doubled));
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 1));
  const __m128i low4 = _mm_set1_epi8(15);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm_shuffle_epi8(table, _mm_and_si128(v, low4)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16),
                   _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(v, 4), low4)));
}
void Q2_K(const uint8_t* b, int8_t* q) {
  for (int h = 0; h < 2; ++h) {
    const __m256i v = Load32(b + 16 + 32 * h);
    for (int s = 0; s < 4; ++s) Store32(q + 128 * h + 32 * s, Bits(v, 2 * s, 3));
  }
}
void Q3_K(const uint8_t* b, int8_t* q) {
  const __m256i hmask = Load32(b), four = _mm256_set1_epi8(4);
  for (int h = 0; h < 2; ++h) {
    const __m256i v = Load32(b + 32 + 32 * h);
    for (int s = 0; s < 4; ++s) {
      const __m256i high = _mm256_slli_epi16(Bits(hmask, 4 * h + s, 1), 2);
      Store32(q + 128 * h + 32 * s,
              _mm256_sub_epi8(_mm256_or_si256(Bits(v, 2 * s, 3), high), four));
    }
  }
}
void Q4_K(const uint8_t* b, int8_t* q) {
  for (int c = 0; c < 4; ++c) {
    const __m256i v = Load32(b + 16 + 32 * c);
    Store32(q + 64 * c, Bits(v, 0, 15));
    Store32(q + 64 * c + 32, Bits(v, 4, 15));
  }
}
void Q5_K(const uint8_t* b, int8_t* q) {
  const __m256i qh = Load32(b + 16);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = Load32(b + 48 + 32 * c);
    Store32(q + 64 * c, _mm256_or_si256(Bits(v, 0, 15), Shl4(Bits(qh, 2 * c, 1))));
    Store32(q + 64 * c + 32, _mm256_or_si256(Bits(v, 4, 15), Shl4(Bits(qh, 2 * c + 1, 1))));
  }
}
void Q6_K(const uint8_t* b, int8_t* q) {
  const __m256i bias = _mm256_set1_epi8(32);
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = Load32(b + 64 * h), l1 = Load32(b + 64 * h + 32);
    const __m256i qh = Load32(b + 128 + 32 * h);
    const __m256i low[4] = {Bits(l0, 0, 15), Bits(l1, 0, 15), Bits(l0, 4, 15), Bits(l1, 4, 15)};
    for (int s = 0; s < 4; ++s)
      Store32(q + 128 * h + 32 * s,
              _mm256_sub_epi8(_mm256_or_si256(low[s], Shl4(Bits(qh, 2 * s, 3))), bias));
  }
}
void Iq4Xs(const uint8_t* b, int8_t* q) {
  const __m256i table = _mm256_broadcastsi128_si256(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kGgufIq4Levels)));
  for (int p = 0; p < 4; ++p) {  // 32 bytes: two sub-blocks, low nibbles first in each
    const __m256i v = Load32(b + 8 + 32 * p);
    const __m256i lo = _mm256_shuffle_epi8(table, Bits(v, 0, 15));
    const __m256i hi = _mm256_shuffle_epi8(table, Bits(v, 4, 15));
    Store32(q + 64 * p, _mm256_permute2x128_si256(lo, hi, 0x20));
    Store32(q + 64 * p + 32, _mm256_permute2x128_si256(lo, hi, 0x31));
  }
}

// The grid types' codes are table lookups by index and sign: gguf_dequant.cc's.
template <uint32_t kType>
void Grid(const uint8_t* b, int8_t* q) {
  GgufBlockCodes(kType, b, q);
}

using CodesFn = void (*)(const uint8_t*, int8_t*);
CodesFn Codes(uint32_t type) {
  switch (type) {
    case gguf::kQ8_0:
      return Q8_0;
    case gguf::kQ4_0:
      return Q4_0;
    case gguf::kQ4_1:
      return Q4_1;
    case gguf::kQ5_0:
      return Q5_0;
    case gguf::kQ5_1:
      return Q5_1;
    case gguf::kIQ4_NL:
      return Iq4Nl;
    case gguf::kMXFP4:
      return Mxfp4;
    case gguf::kQ2_K:
      return Q2_K;
    case gguf::kQ3_K:
      return Q3_K;
    case gguf::kQ4_K:
      return Q4_K;
    case gguf::kQ5_K:
      return Q5_K;
    case gguf::kQ6_K:
      return Q6_K;
    case gguf::kIQ4_XS:
      return Iq4Xs;
    case gguf::kIQ3_XXS:
      return Grid<gguf::kIQ3_XXS>;
    case gguf::kIQ3_S:
      return Grid<gguf::kIQ3_S>;
    case gguf::kIQ2_XXS:
      return Grid<gguf::kIQ2_XXS>;
    case gguf::kIQ2_XS:
      return Grid<gguf::kIQ2_XS>;
    case gguf::kIQ2_S:
      return Grid<gguf::kIQ2_S>;
    case gguf::kIQ1_S:
      return Grid<gguf::kIQ1_S>;
    case gguf::kIQ1_M:
      return Grid<gguf::kIQ1_M>;
    default:
      return nullptr;
  }
}

// Calls piece(q, a, b, values, c0) for each piece of row r in ascending
// columns: q[0 : values] its codes, a and b its factors per 16 values
// (b as gguf_dequant.h's), starting at column c0 (a multiple of kGgufPiece).
// False, having called nothing, for a type without codes here.
template <class Piece>
bool ForEachPiece(const GgufMatrixView& w, int64_t r, Piece piece) {
  const CodesFn codes = Codes(w.type);
  if (!codes) return false;
  const gguf::TypeInfo& info = *gguf::FindType(w.type);
  const int64_t bs = info.block_size, size = info.type_size;
  const uint8_t* row = w.data + r * GgufRowBytes(w);
  alignas(32) int8_t q[kGgufPiece];
  float a[kGgufPiece / 16], m[kGgufPiece / 16];
  for (int64_t c0 = 0; c0 < w.cols; c0 += kGgufPiece) {
    const int64_t blocks = (w.cols - c0 < kGgufPiece ? w.cols - c0 : kGgufPiece) / bs;
    const uint8_t* p = row + c0 / bs * size;
    for (int64_t k = 0; k < blocks; ++k) {
      codes(p + k * size, q + k * bs);
      GgufBlockFactors(w.type, p + k * size, a + k * bs / 16, m + k * bs / 16);
    }
    piece(q, a, m, static_cast<int>(blocks * bs), c0);
  }
  return true;
}

// Eight values of a float type at p, as gguf_dequant.cc converts them.
__m256 Floats8(uint32_t type, const uint8_t* p) {
  if (type == gguf::kF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (type == gguf::kBF16)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  // Exact, subnormals included; a signalling NaN comes out quiet, as the
  // product's multiply would make it.
  return _mm256_cvtph_ps(h);
}

// Calls piece(wv, values, c0) for each piece of row r of a float type in
// ascending columns: wv[0 : values] its weights (64-byte aligned), starting
// at column c0. False, having called nothing, for another type.
template <class Piece>
bool ForEachFloatPiece(const GgufMatrixView& w, int64_t r, Piece piece) {
  if (w.type != gguf::kF32 && w.type != gguf::kF16 && w.type != gguf::kBF16) return false;
  const int64_t size = gguf::FindType(w.type)->type_size;
  const uint8_t* row = w.data + r * GgufRowBytes(w);
  alignas(64) float wv[kGgufPiece];
  for (int64_t c0 = 0; c0 < w.cols; c0 += kGgufPiece) {
    const int values = static_cast<int>(w.cols - c0 < kGgufPiece ? w.cols - c0 : kGgufPiece);
    const uint8_t* p = row + c0 * size;
    int j = 0;
    for (; j + 8 <= values; j += 8) _mm256_store_ps(wv + j, Floats8(w.type, p + j * size));
    if (j < values) {  // the row's last values: through a buffer, not past the row
      alignas(32) uint8_t tail[32] = {};
      std::memcpy(tail, p + j * size, static_cast<size_t>((values - j) * size));
      alignas(32) float last[8];
      _mm256_store_ps(last, Floats8(w.type, tail));
      std::memcpy(wv + j, last, static_cast<size_t>(values - j) * 4);
    }
    piece(static_cast<const float*>(wv), values, c0);
  }
  return true;
}

}  // namespace
}  // namespace waste::kernels::gguf_codes
