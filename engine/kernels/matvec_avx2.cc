// MatVec and WeightedRows with AVX2 + FMA + F16C: 8 columns per step, and
// Q4G in groups of 128 as integer products (vpmaddubsw).
// Compiled with -mavx2 -mfma -mf16c -ffp-contract=off (MatVec's fused
// multiply-adds are explicit; WeightedRows must not have any); see simd.h
// for what this file may use.
#include <immintrin.h>

#include <cstring>

#include "engine/kernels/q4_fixed.h"
#include "engine/kernels/simd.h"

namespace waste::kernels::avx2 {
namespace {

using format::Fmt;

// FirstLanes(n): a maskload/maskstore mask with lanes [0, n) set, n in [0, 8].
alignas(32) const int32_t kLaneMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
__m256i FirstLanes(int64_t n) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLaneMask + 8 - n));
}

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float Sum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

const float* AsFloats(const uint8_t* p) {
  return reinterpret_cast<const float*>(p);
}

float RowF32(const uint8_t* row, const float* x, int64_t cols) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(AsFloats(row + 4 * c)), _mm256_loadu_ps(x + c), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(AsFloats(row + 4 * c + 32)), _mm256_loadu_ps(x + c + 8),
                         a1);
  }
  for (; c < cols; c += 8) {
    const __m256i m = FirstLanes(cols - c < 8 ? cols - c : 8);
    a0 = _mm256_fmadd_ps(_mm256_maskload_ps(AsFloats(row + 4 * c), m), _mm256_maskload_ps(x + c, m),
                         a0);
  }
  return Sum(_mm256_add_ps(a0, a1));
}

__m256 Halves(__m128i h, bool bf16) {
  if (bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

float RowF16(const uint8_t* row, const float* x, int64_t cols, bool bf16) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m128i h0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c));
    const __m128i h1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c + 16));
    a0 = _mm256_fmadd_ps(Halves(h0, bf16), _mm256_loadu_ps(x + c), a0);
    a1 = _mm256_fmadd_ps(Halves(h1, bf16), _mm256_loadu_ps(x + c + 8), a1);
  }
  for (; c < cols; c += 8) {
    const int64_t n = cols - c < 8 ? cols - c : 8;
    alignas(16) uint16_t tail[8] = {};
    std::memcpy(tail, row + 2 * c, static_cast<size_t>(n) * 2);
    const __m128i h = _mm_load_si128(reinterpret_cast<const __m128i*>(tail));
    a0 = _mm256_fmadd_ps(Halves(h, bf16), _mm256_maskload_ps(x + c, FirstLanes(n)), a0);
  }
  return Sum(_mm256_add_ps(a0, a1));
}

// The 8 quantized values of a grouped row starting at column c (c % 8 == 0),
// as floats. Reads stay inside the row: rows are padded to whole groups (a
// multiple of 8 here) and Q3G rows end with a guard byte.
__m256 DecodeQ8(const uint8_t* row, int64_t c) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c))));
}

// Q4G: bytes hold two values, low nibble first. The signed values of
// columns c..c+15 (as bytes, bias removed, in order) from 8 bytes.
__m128i NibblesQ4(const uint8_t* row, int64_t c) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c / 2));
  const __m128i nib = _mm_set1_epi8(15), bias = _mm_set1_epi8(8);
  const __m128i lo = _mm_sub_epi8(_mm_and_si128(b, nib), bias);
  const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), nib), bias);
  return _mm_unpacklo_epi8(lo, hi);
}

__m256 DecodeQ4(const uint8_t* row, int64_t c) {  // columns c..c+7, reading 4 bytes
  const __m128i b = _mm_cvtsi32_si128(static_cast<int>(LoadU32(row + c / 2)));
  const __m128i nib = _mm_set1_epi8(15), bias = _mm_set1_epi8(8);
  const __m128i lo = _mm_sub_epi8(_mm_and_si128(b, nib), bias);
  const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), nib), bias);
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpacklo_epi8(lo, hi)));
}

__m256 DecodeQ3(const uint8_t* row, int64_t c) {
  // 8 values = 3 bytes; the 4-byte read ends at most at the guard byte.
  const __m256i word = _mm256_set1_epi32(static_cast<int>(LoadU32(row + c / 8 * 3)));
  const __m256i shifts = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
  const __m256i q =
      _mm256_sub_epi32(_mm256_and_si256(_mm256_srlv_epi32(word, shifts), _mm256_set1_epi32(7)),
                       _mm256_set1_epi32(4));
  return _mm256_cvtepi32_ps(q);
}

template <Fmt kFmt>
__m256 Decode(const uint8_t* row, int64_t c) {
  if constexpr (kFmt == Fmt::kQ8G) return DecodeQ8(row, c);
  if constexpr (kFmt == Fmt::kQ4G) return DecodeQ4(row, c);
  return DecodeQ3(row, c);
}

// Columns c..c+15 (c % 8 == 0), Q4G from one 8-byte load.
template <Fmt kFmt>
void Decode16(const uint8_t* row, int64_t c, __m256* first, __m256* second) {
  if constexpr (kFmt == Fmt::kQ4G) {
    const __m128i q = NibblesQ4(row, c);
    *first = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
    *second = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(q, q)));
  } else {
    *first = Decode<kFmt>(row, c);
    *second = Decode<kFmt>(row, c + 8);
  }
}

template <Fmt kFmt>
float RowGrouped(const uint8_t* row, const uint8_t* scales, const float* x, int64_t cols,
                 int64_t group) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t beg = 0, g = 0; beg < cols; beg += group, ++g) {
    const int64_t end = beg + group < cols ? beg + group : cols;
    __m256 g0 = _mm256_setzero_ps(), g1 = _mm256_setzero_ps();
    int64_t c = beg;
    for (; c + 16 <= end; c += 16) {
      __m256 w0, w1;
      Decode16<kFmt>(row, c, &w0, &w1);
      g0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + c), g0);
      g1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + c + 8), g1);
    }
    for (; c < end; c += 8) {  // padding columns meet x = 0
      const __m256i m = FirstLanes(end - c < 8 ? end - c : 8);
      g0 = _mm256_fmadd_ps(Decode<kFmt>(row, c), _mm256_maskload_ps(x + c, m), g0);
    }
    uint16_t h;
    std::memcpy(&h, scales + 2 * g, sizeof h);
    acc = _mm256_fmadd_ps(_mm256_add_ps(g0, g1), _mm256_set1_ps(_cvtsh_ss(h)), acc);
  }
  return Sum(acc);
}

template <Fmt kFmt>
void RowsGrouped(const MatrixView& w, const float* x, float* y, int64_t row_begin,
                 int64_t row_end) {
  const int64_t groups = (w.cols + w.group - 1) / w.group;
  const int64_t row_bytes = kFmt == Fmt::kQ8G   ? groups * w.group
                            : kFmt == Fmt::kQ4G ? groups * w.group / 2
                                                : groups * w.group * 3 / 8 + 1;
  const uint8_t* scales = reinterpret_cast<const uint8_t*>(w.scales);
  for (int64_t r = row_begin; r < row_end; ++r)
    y[r] = RowGrouped<kFmt>(w.payload + r * row_bytes, scales + 2 * r * groups, x, w.cols, w.group);
}

// Q4G in groups of 128 as integer dot products, the fixed point of
// matvec_avx512.cc (its comment has the rounding; q4_fixed.h the layout,
// the same here). AVX2 has no vpdpbusd: vpmaddubsw multiplies 32
// unsigned weight nibbles n by 32 signed digits and sums adjacent pairs into
// int16 (at most 2 * 15 * 128 = 3840, so four of them still fit), and
// vpmaddwd by ones sums adjacent int16 pairs into 8 int32 lanes. Lane l of
// a group's first 32 bytes covers columns 8l..8l+7, of its last 32 bytes
// 64+8l..64+8l+7: the AVX-512 lanes l and l + 8.
//
// kExact: per digit, the four products of a group (even and odd columns of
// both halves) summed, a2 << 16 + a1 << 8 + a0 plus both bias halves is sum
// (n - 8) m over the lane's 16 columns exactly in int32 (|lane| < 2^30),
// converted to float once and scaled by the f16 scale times 2^(e-21).
// kInt8: the halves stay apart, each with its 32-column steps.
using q4fixed::Digits;
using q4fixed::FixedInput;

__m256i Dot16(__m256i n, const int8_t* d) {  // 16 int16: n * d summed in pairs
  return _mm256_maddubs_epi16(n, _mm256_load_si256(reinterpret_cast<const __m256i*>(d)));
}

__m256i Widen(__m256i pairs) {  // 8 int32: adjacent int16 summed
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

__m256i Load8(const int32_t* p) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

// A group's 64 weight bytes as unsigned nibbles: [0] even and [1] odd
// columns of bytes 0..31, [2] and [3] of bytes 32..63.
struct Nibbles {
  __m256i lo0, hi0, lo1, hi1;
};
Nibbles SplitGroup(const uint8_t* p) {
  const __m256i nibble = _mm256_set1_epi8(15);
  const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i q1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
  return {_mm256_and_si256(q0, nibble), _mm256_and_si256(_mm256_srli_epi16(q0, 4), nibble),
          _mm256_and_si256(q1, nibble), _mm256_and_si256(_mm256_srli_epi16(q1, 4), nibble)};
}

// One digit's sums n * d over a group's two halves: *first lanes l (columns
// 8l..8l+7), *second lanes l + 8.
void DigitHalves(const Nibbles& n, const int8_t* d, __m256i* first, __m256i* second) {
  *first = Widen(_mm256_add_epi16(Dot16(n.lo0, d), Dot16(n.hi0, d + 64)));
  *second = Widen(_mm256_add_epi16(Dot16(n.lo1, d + 32), Dot16(n.hi1, d + 96)));
}

// One digit's sums over the whole group, lanes l and l + 8 together.
__m256i DigitWhole(const Nibbles& n, const int8_t* d) {
  return Widen(_mm256_add_epi16(_mm256_add_epi16(Dot16(n.lo0, d), Dot16(n.hi0, d + 64)),
                                _mm256_add_epi16(Dot16(n.lo1, d + 32), Dot16(n.hi1, d + 96))));
}

float MaxLane(__m256 v) {
  const __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
}

float BitsToFloat(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// The low byte of each int32 lane (all in [-128, 127]), stored as 8 bytes.
void StoreBytes(int8_t* at, __m256i m) {
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, -1);
  const __m256i b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(m, pick),
                                                _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(at), _mm256_castsi256_si128(b));
}

// matvec_avx512.cc's FixInput on AVX2: the layout of q4_fixed.h, the same
// rounding, false in the same cases.
template <int kDigits>
bool FixInput(const float* x, int64_t groups, const FixedInput* f) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 finite_max = _mm256_set1_ps(3.4028235e38f);
  for (int64_t g = 0; g < groups; ++g) {
    int8_t* digits = f->digits + g * kDigits * 128;
    __m256 v[16], mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int t = 0; t < 16; ++t) {
      v[t] = _mm256_loadu_ps(x + 128 * g + 8 * t);
      const __m256 a = _mm256_and_ps(v[t], magnitude);
      mx = _mm256_max_ps(mx, a);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, finite_max, _CMP_NLE_UQ));  // NaN or infinite
    }
    if (_mm256_movemask_ps(bad) != 0) return false;
    const float largest = MaxLane(mx);
    if (largest == 0.f) {
      std::memset(digits, 0, kDigits * 128);
      std::memset(f->bias[g], 0, sizeof f->bias[g]);
      std::memset(f->unit + (kDigits == 1 ? 16 * g : g), 0, (kDigits == 1 ? 16 : 1) * 4);
      continue;
    }
    uint32_t bits;
    std::memcpy(&bits, &largest, sizeof bits);
    const int e = static_cast<int>(bits >> 23) - 127;
    if (e < -100) return false;
    __m256 scale[4];  // x to m, per 32 columns
    if constexpr (kDigits == 1) {
      for (int t = 0; t < 4; ++t) {
        __m256 top = _mm256_setzero_ps();
        for (int i = 0; i < 4; ++i) top = _mm256_max_ps(top, _mm256_and_ps(v[4 * t + i], magnitude));
        const float largest32 = MaxLane(top);
        if (largest32 != 0.f && largest32 < 0x1p-100f) return false;
        scale[t] = _mm256_set1_ps(largest32 == 0.f ? 0.f : 127.f / largest32);
        for (int lane = 0; lane < 4; ++lane) f->unit[16 * g + 4 * t + lane] = largest32 / 127.f;
      }
    } else {
      f->unit[g] = BitsToFloat(static_cast<uint32_t>(e - 21 + 127) << 23);
      for (int t = 0; t < 4; ++t)
        scale[t] = _mm256_set1_ps(BitsToFloat(static_cast<uint32_t>(21 - e + 127) << 23));
    }
    for (int s = 0; s < 8; ++s) {  // columns 16 s .. 16 s + 15
      const __m256 a = v[2 * s], b = v[2 * s + 1];
      for (int half = 0; half < 2; ++half) {
        const __m256 mixed = half ? _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))
                                  : _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
        const __m256 xs = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(mixed), 0xD8));
        const __m256i m = _mm256_cvtps_epi32(_mm256_mul_ps(xs, scale[s / 2]));  // nearest, ties even
        const int at = 64 * half + 8 * s;
        if constexpr (kDigits == 1) {
          StoreBytes(digits + at, m);
        } else {
          const __m256i d0 = _mm256_srai_epi32(_mm256_slli_epi32(m, 24), 24);
          const __m256i m1 = _mm256_srai_epi32(_mm256_sub_epi32(m, d0), 8);
          const __m256i d1 = _mm256_srai_epi32(_mm256_slli_epi32(m1, 24), 24);
          const __m256i d2 = _mm256_srai_epi32(_mm256_sub_epi32(m1, d1), 8);
          StoreBytes(digits + at, d0);
          StoreBytes(digits + 128 + at, d1);
          StoreBytes(digits + 256 + at, d2);
        }
      }
    }
    // -8 * sum m per lane: the product with every weight nibble 8.
    const __m256i eight = _mm256_set1_epi8(8);
    const Nibbles eights{eight, eight, eight, eight};
    __m256i first = _mm256_setzero_si256(), second = _mm256_setzero_si256();
    for (int k = kDigits - 1; k >= 0; --k) {
      __m256i a, b;
      DigitHalves(eights, digits + 128 * k, &a, &b);
      first = _mm256_add_epi32(_mm256_slli_epi32(first, 8), a);
      second = _mm256_add_epi32(_mm256_slli_epi32(second, 8), b);
    }
    const __m256i zero = _mm256_setzero_si256();
    _mm256_store_si256(reinterpret_cast<__m256i*>(f->bias[g]), _mm256_sub_epi32(zero, first));
    _mm256_store_si256(reinterpret_cast<__m256i*>(f->bias[g] + 8), _mm256_sub_epi32(zero, second));
  }
  return true;
}

// Rows of a Q4G matrix in groups of 128 against kT inputs at once, each
// group's bytes loaded and split once for all of them; per input the
// operations and their order are those of one input alone.
template <int kT, int kDigits>
void RowsQ4G128(const MatrixView& w, const FixedInput* f, float* const* y, int64_t row_begin,
                int64_t row_end) {
  const int64_t groups = w.cols / 128;
  const uint8_t* scales = reinterpret_cast<const uint8_t*>(w.scales);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.payload + r * groups * 64;
    const uint8_t* row_scales = scales + 2 * r * groups;
    __m256 acc[kT], acc_second[kDigits == 1 ? kT : 1];
    for (int t = 0; t < kT; ++t) acc[t] = _mm256_setzero_ps();
    for (__m256& a : acc_second) a = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const Nibbles n = SplitGroup(row + g * 64);
      uint16_t h;
      std::memcpy(&h, row_scales + 2 * g, sizeof h);
      const float scale = _cvtsh_ss(h);
      for (int t = 0; t < kT; ++t) {
        const int8_t* d = f[t].digits + g * kDigits * 128;
        const int32_t* bias = f[t].bias[g];
        if constexpr (kDigits == 1) {
          __m256i first, second;
          DigitHalves(n, d, &first, &second);
          const __m256 s = _mm256_set1_ps(scale);
          const float* unit = f[t].unit + 16 * g;
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(first, Load8(bias))),
                                   _mm256_mul_ps(s, _mm256_loadu_ps(unit)), acc[t]);
          acc_second[t] =
              _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(second, Load8(bias + 8))),
                              _mm256_mul_ps(s, _mm256_loadu_ps(unit + 8)), acc_second[t]);
        } else {
          const __m256i a2 = DigitWhole(n, d + 256), a1 = DigitWhole(n, d + 128);
          const __m256i a0 = DigitWhole(n, d);
          const __m256i sum = _mm256_add_epi32(
              _mm256_add_epi32(_mm256_slli_epi32(a2, 16), _mm256_slli_epi32(a1, 8)),
              _mm256_add_epi32(a0, _mm256_add_epi32(Load8(bias), Load8(bias + 8))));
          acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(scale * f[t].unit[g]),
                                   acc[t]);
        }
      }
    }
    for (int t = 0; t < kT; ++t)
      y[t][r] = Sum(kDigits == 1 ? _mm256_add_ps(acc[t], acc_second[t]) : acc[t]);
  }
}

// Up to 4 inputs a pass: AVX2's 16 registers hold 4 inputs' accumulators
// beside a group's nibbles.
template <int kDigits>
void RowsQ4G128Many(const MatrixView& w, const FixedInput* f, float* const* y, size_t n,
                    int64_t row_begin, int64_t row_end) {
  for (size_t i = 0; i < n;) {
    const size_t left = n - i;
    if (left >= 4) {
      RowsQ4G128<4, kDigits>(w, f + i, y + i, row_begin, row_end);
      i += 4;
    } else if (left >= 2) {
      RowsQ4G128<2, kDigits>(w, f + i, y + i, row_begin, row_end);
      i += 2;
    } else {
      RowsQ4G128<1, kDigits>(w, f + i, y + i, row_begin, row_end);
      i += 1;
    }
  }
}

// WeightedRows: y[c] = sum over r of a[r] * W[first + r][c], each weight
// decoded as DequantRow decodes it (scale * q for grouped formats, an exact
// product), then multiplied and added in the scalar reference's order.
// 8 columns per step inside one group (group % 8 == 0), 64 per sweep (8
// accumulators of AVX2's 16 registers).
constexpr int64_t kWeightedBlock = 64;

// The 8 weights of columns c..c+7 of a row, of which the first `lanes` (m =
// FirstLanes(lanes)) are inside the row; lanes outside it are zero or, for
// grouped formats, the padding of the last group (read, never stored).
template <Fmt kFmt>
__m256 DecodeScaled(const MatrixView& w, const uint8_t* row, const uint8_t* row_scales, int64_t c,
                    int64_t lanes, __m256i m) {
  if constexpr (kFmt == Fmt::kF32) {
    if (lanes == 8) return _mm256_loadu_ps(AsFloats(row + 4 * c));
    return _mm256_maskload_ps(AsFloats(row + 4 * c), m);
  } else if constexpr (kFmt == Fmt::kF16) {
    if (lanes == 8)
      return Halves(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * c)), w.bf16);
    alignas(16) uint16_t tail[8] = {};  // F16 rows are not padded
    std::memcpy(tail, row + 2 * c, static_cast<size_t>(lanes) * 2);
    return Halves(_mm_load_si128(reinterpret_cast<const __m128i*>(tail)), w.bf16);
  } else {
    uint16_t h;
    std::memcpy(&h, row_scales + 2 * (c / w.group), sizeof h);
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h)), Decode<kFmt>(row, c));
  }
}

template <Fmt kFmt>
void WeightedRowsT(const MatrixView& w, int64_t first, const float* a, int64_t n_rows, float* y) {
  const int64_t row_bytes = MatrixRowBytes(w);
  const int64_t groups = w.group > 0 ? (w.cols + w.group - 1) / w.group : 0;
  const uint8_t* scales = reinterpret_cast<const uint8_t*>(w.scales);
  for (int64_t c0 = 0; c0 < w.cols; c0 += kWeightedBlock) {
    const int64_t width = w.cols - c0 < kWeightedBlock ? w.cols - c0 : kWeightedBlock;
    const int n = static_cast<int>((width + 7) / 8);
    const int64_t last_lanes = width - 8 * (n - 1);
    const __m256i all = FirstLanes(8), last = FirstLanes(last_lanes);
    __m256 acc[kWeightedBlock / 8];
    for (int t = 0; t < n; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = w.payload + (first + r) * row_bytes;
      const uint8_t* row_scales = scales ? scales + 2 * (first + r) * groups : nullptr;
      const __m256 ar = _mm256_set1_ps(a[r]);
      for (int t = 0; t < n; ++t) {
        const bool full = t + 1 < n;
        const __m256 v = DecodeScaled<kFmt>(w, row, row_scales, c0 + 8 * t, full ? 8 : last_lanes,
                                            full ? all : last);
        acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(ar, v));
      }
    }
    for (int t = 0; t + 1 < n; ++t) _mm256_storeu_ps(y + c0 + 8 * t, acc[t]);
    _mm256_maskstore_ps(y + c0 + 8 * (n - 1), last, acc[n - 1]);
  }
}

}  // namespace

bool Q4FixInput(const float* x, int64_t cols, Q4Input in, uint8_t* fixed) {
  if (cols % 128 != 0) return false;
  const FixedInput f = q4fixed::At(fixed, cols / 128, Digits(in));
  return in == Q4Input::kInt8 ? FixInput<1>(x, cols / 128, &f) : FixInput<3>(x, cols / 128, &f);
}

void Q4FixedRows(const MatrixView& w, Q4Input in, const q4fixed::FixedInput* fixed, float* const* ys,
                 size_t n, int64_t row_begin, int64_t row_end) {
  if (in == Q4Input::kInt8)
    RowsQ4G128Many<1>(w, fixed, ys, n, row_begin, row_end);
  else
    RowsQ4G128Many<3>(w, fixed, ys, n, row_begin, row_end);
}

bool MatVec(const MatrixView& w, const float* x, float* y, int64_t row_begin, int64_t row_end) {
  switch (w.fmt) {
    case Fmt::kF32:
      for (int64_t r = row_begin; r < row_end; ++r)
        y[r] = RowF32(w.payload + r * w.cols * 4, x, w.cols);
      return true;
    case Fmt::kF16:
      for (int64_t r = row_begin; r < row_end; ++r)
        y[r] = RowF16(w.payload + r * w.cols * 2, x, w.cols, w.bf16);
      return true;
    case Fmt::kQ8G:
    case Fmt::kQ4G:
    case Fmt::kQ3G:
      if (w.group <= 0 || w.group % 8 != 0) return false;
      if (w.fmt == Fmt::kQ8G) RowsGrouped<Fmt::kQ8G>(w, x, y, row_begin, row_end);
      if (w.fmt == Fmt::kQ4G) RowsGrouped<Fmt::kQ4G>(w, x, y, row_begin, row_end);
      if (w.fmt == Fmt::kQ3G) RowsGrouped<Fmt::kQ3G>(w, x, y, row_begin, row_end);
      return true;
    default:
      return false;
  }
}

bool WeightedRows(const MatrixView& w, int64_t first_row, const float* a, int64_t n_rows,
                  float* y) {
  switch (w.fmt) {
    case Fmt::kF32:
      WeightedRowsT<Fmt::kF32>(w, first_row, a, n_rows, y);
      return true;
    case Fmt::kF16:
      WeightedRowsT<Fmt::kF16>(w, first_row, a, n_rows, y);
      return true;
    case Fmt::kQ8G:
    case Fmt::kQ4G:
    case Fmt::kQ3G:
      if (w.group <= 0 || w.group % 8 != 0) return false;
      if (w.fmt == Fmt::kQ8G) WeightedRowsT<Fmt::kQ8G>(w, first_row, a, n_rows, y);
      if (w.fmt == Fmt::kQ4G) WeightedRowsT<Fmt::kQ4G>(w, first_row, a, n_rows, y);
      if (w.fmt == Fmt::kQ3G) WeightedRowsT<Fmt::kQ3G>(w, first_row, a, n_rows, y);
      return true;
    default:
      return false;
  }
}

}  // namespace waste::kernels::avx2
