// MatVec with AVX-512 (F, BW, VL, VBMI): 16 columns per step. Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512vbmi -mavx512vnni -mavx2 -mfma -mf16c; see simd.h
// for what this file may use.

#include "engine/kernels/avx512_intrin.h"

#include <algorithm>
#include <cstring>

#include "engine/kernels/q4_fixed.h"
#include "engine/kernels/simd.h"

namespace waste::kernels::avx512 {
namespace {

using format::Fmt;

__mmask16 FirstLanes(int64_t n) {  // n in [0, 16]
  return static_cast<__mmask16>((1u << n) - 1u);
}

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

float RowF32(const uint8_t* row, const float* x, int64_t cols) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 32 <= cols; c += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(row + 4 * c), _mm512_loadu_ps(x + c), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(row + 4 * c + 64), _mm512_loadu_ps(x + c + 16), a1);
  }
  for (; c < cols; c += 16) {
    const __mmask16 m = FirstLanes(cols - c < 16 ? cols - c : 16);
    a0 =
        _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, row + 4 * c), _mm512_maskz_loadu_ps(m, x + c), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

// 16 halves (or bfloat16s) from p, the lanes outside m zero.
__m512 LoadHalves(const uint8_t* p, __mmask16 m, bool bf16) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

float RowF16(const uint8_t* row, const float* x, int64_t cols, bool bf16) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 32 <= cols; c += 32) {
    a0 = _mm512_fmadd_ps(LoadHalves(row + 2 * c, 0xffff, bf16), _mm512_loadu_ps(x + c), a0);
    a1 = _mm512_fmadd_ps(LoadHalves(row + 2 * c + 32, 0xffff, bf16), _mm512_loadu_ps(x + c + 16),
                         a1);
  }
  for (; c < cols; c += 16) {
    const __mmask16 m = FirstLanes(cols - c < 16 ? cols - c : 16);
    a0 = _mm512_fmadd_ps(LoadHalves(row + 2 * c, m, bf16), _mm512_maskz_loadu_ps(m, x + c), a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

// The 16 quantized values of a grouped row starting at column c (c % 16 ==
// 0), as floats. Reads stay inside the row: rows are padded to whole groups
// (a multiple of 16 here) and Q3G rows end with a guard byte.
__m512 DecodeQ8(const uint8_t* row, int64_t c) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c))));
}

// Q4G: bytes hold two values, low nibble first. Splits 16 bytes into the
// signed values of columns c..c+31 (as bytes, bias removed), in order.
void NibblesQ4(const uint8_t* row, int64_t c, int bytes, __m128i* first, __m128i* second) {
  const __m128i b = bytes == 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c / 2))
                                : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c / 2));
  const __m128i nib = _mm_set1_epi8(15), bias = _mm_set1_epi8(8);
  const __m128i lo = _mm_sub_epi8(_mm_and_si128(b, nib), bias);
  const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), nib), bias);
  *first = _mm_unpacklo_epi8(lo, hi);
  *second = _mm_unpackhi_epi8(lo, hi);
}

__m512 DecodeQ4(const uint8_t* row, int64_t c) {
  __m128i first, second;
  NibblesQ4(row, c, 8, &first, &second);
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(first));
}

__m512 DecodeQ3(const uint8_t* row, int64_t c) {
  // 16 values = 48 bits = 6 bytes: values 0..7 in the first three bytes,
  // 8..15 in the next three. Two 4-byte reads; the last one ends at most at
  // the guard byte.
  const uint8_t* p = row + c / 8 * 3;
  const __m512i words =
      _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(static_cast<int>(LoadU32(p)))),
                         _mm256_set1_epi32(static_cast<int>(LoadU32(p + 3))), 1);
  const __m512i shifts = _mm512_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21, 0, 3, 6, 9, 12, 15, 18, 21);
  const __m512i q =
      _mm512_sub_epi32(_mm512_and_si512(_mm512_srlv_epi32(words, shifts), _mm512_set1_epi32(7)),
                       _mm512_set1_epi32(4));
  return _mm512_cvtepi32_ps(q);
}

template <Fmt kFmt>
__m512 Decode(const uint8_t* row, int64_t c) {
  if constexpr (kFmt == Fmt::kQ8G) return DecodeQ8(row, c);
  if constexpr (kFmt == Fmt::kQ4G) return DecodeQ4(row, c);
  return DecodeQ3(row, c);
}

// Columns c..c+31 (c % 16 == 0, all inside one group): Q4G from one
// 16-byte load, Q3G from 12 bytes.
template <Fmt kFmt>
void Decode32(const uint8_t* row, int64_t c, __m512* first, __m512* second) {
  if constexpr (kFmt == Fmt::kQ4G) {
    __m128i a, b;
    NibblesQ4(row, c, 16, &a, &b);
    *first = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(a));
    *second = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  } else if constexpr (kFmt == Fmt::kQ3G) {
    // 32 values = the 12 bytes at p; both 8-byte reads end inside them.
    // vpmultishiftqb picks any 8 bits of a qword: values 0-15 are at bits
    // 3j of the qword at p, values 16-31 at bits 16 + 3j of the one at p + 4.
    const uint8_t* p = row + c / 8 * 3;
    uint64_t a, b;
    std::memcpy(&a, p, sizeof a);
    std::memcpy(&b, p + 4, sizeof b);
    const __m256i src = _mm256_setr_epi64x(static_cast<long long>(a), static_cast<long long>(a),
                                           static_cast<long long>(b), static_cast<long long>(b));
    const __m256i shifts =
        _mm256_setr_epi8(0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39, 42, 45, 16, 19, 22, 25,
                         28, 31, 34, 37, 40, 43, 46, 49, 52, 55, 58, 61);
    const __m256i q = _mm256_sub_epi8(
        _mm256_and_si256(_mm256_multishift_epi64_epi8(shifts, src), _mm256_set1_epi8(7)),
        _mm256_set1_epi8(4));
    *first = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
    *second = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
  } else {
    *first = Decode<kFmt>(row, c);
    *second = Decode<kFmt>(row, c + 16);
  }
}

// One grouped row: per group, sum q * x, then scale it in.
template <Fmt kFmt>
float RowGrouped(const uint8_t* row, const uint8_t* scales, const float* x, int64_t cols,
                 int64_t group) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t beg = 0, g = 0; beg < cols; beg += group, ++g) {
    const int64_t end = beg + group < cols ? beg + group : cols;
    __m512 g0 = _mm512_setzero_ps(), g1 = _mm512_setzero_ps();
    int64_t c = beg;
    for (; c + 32 <= end; c += 32) {
      __m512 w0, w1;
      Decode32<kFmt>(row, c, &w0, &w1);
      g0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + c), g0);
      g1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + c + 16), g1);
    }
    for (; c < end; c += 16) {  // padding columns meet x = 0
      const __mmask16 m = FirstLanes(end - c < 16 ? end - c : 16);
      g0 = _mm512_fmadd_ps(Decode<kFmt>(row, c), _mm512_maskz_loadu_ps(m, x + c), g0);
    }
    uint16_t h;
    std::memcpy(&h, scales + 2 * g, sizeof h);
    acc = _mm512_fmadd_ps(_mm512_add_ps(g0, g1), _mm512_set1_ps(_cvtsh_ss(h)), acc);
  }
  return _mm512_reduce_add_ps(acc);
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

// Q4G in groups of 128 (the trunk's usual shape) as integer dot products
// (AVX-512 VNNI's vpdpbusd: 64 unsigned bytes times 64 signed bytes, summed
// four at a time into 16 int32 lanes).
//
// The input, Q4Input::kExact: each 128-column group of x becomes integers
// m = x * 2^(21-e), rounded to nearest, where 2^e <= the group's largest |x|
// < 2^(e+1); so |m| <= 2^22 and x = m * 2^(e-21) to within half a step,
// 2^-23 of the group's largest value (float itself keeps 2^-24 of each
// value). m is split into three signed bytes (balanced base 256: m = d0 +
// 256 d1 + 65536 d2). Q4Input::kInt8: per 32 columns, m = x * 127 /
// largest rounded, one signed byte, a step of the 32 columns' largest |x| /
// 127 (llama.cpp's Q8_0 activations).
// The weights: a group is one 64-byte load; its low nibbles are the even
// columns and its high nibbles the odd ones, taken as unsigned bytes n in
// [0, 15] (the weight is n - 8). Per group, one accumulator a digit collects
// sum n * d_k over even and odd columns; a2 << 16 + a1 << 8 + a0 is then
// sum n * m exactly in int32 (|lane| < 2^29), and the bias lanes subtract
// 8 * sum m. The group's sum, converted to float once, is scaled by the
// f16 scale times the input's step (kInt8: per lane, 4 lanes a step).
//
// Compared with the float product (which rounds every product and partial
// sum), kExact rounds each input once and each group's sum once: the kernel
// tests hold it to the same tolerance, and commit b4055d0's message has the
// logit differences. An input that is not finite or whose group is below
// 2^-100 cannot be put in fixed point; that call takes the float path.
using q4fixed::Digits;
using q4fixed::FixedInput;

// Sum n * m of one group, per lane: the digits d at [k][0..127] against the
// unsigned bytes lo (even columns) and hi (odd), plus `start`.
template <int kDigits>
__m512i GroupDot(__m512i start, __m512i lo, __m512i hi, const int8_t* d) {
  if constexpr (kDigits == 1) {
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, lo, _mm512_load_si512(d)), hi,
                               _mm512_load_si512(d + 64));
  } else {
    const __m512i zero = _mm512_setzero_si512();
    __m512i a2 = _mm512_dpbusd_epi32(zero, lo, _mm512_load_si512(d + 256));
    __m512i a1 = _mm512_dpbusd_epi32(zero, lo, _mm512_load_si512(d + 128));
    __m512i a0 = _mm512_dpbusd_epi32(start, lo, _mm512_load_si512(d));
    a2 = _mm512_dpbusd_epi32(a2, hi, _mm512_load_si512(d + 256 + 64));
    a1 = _mm512_dpbusd_epi32(a1, hi, _mm512_load_si512(d + 128 + 64));
    a0 = _mm512_dpbusd_epi32(a0, hi, _mm512_load_si512(d + 64));
    return _mm512_add_epi32(
        _mm512_add_epi32(_mm512_slli_epi32(a2, 16), _mm512_slli_epi32(a1, 8)), a0);
  }
}

// False if x cannot be put in fixed point (see above).
template <int kDigits>
bool FixInput(const float* x, int64_t groups, const FixedInput* f) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512i eights = _mm512_set1_epi8(8);
  for (int64_t g = 0; g < groups; ++g) {
    int8_t* digits = f->digits + g * kDigits * 128;
    __m512 v[8];
    __m512 mx = _mm512_setzero_ps();
    for (int t = 0; t < 8; ++t) {
      v[t] = _mm512_loadu_ps(x + 128 * g + 16 * t);
      mx = _mm512_max_ps(mx, _mm512_abs_ps(v[t]));
    }
    // max_ps returns its second operand when either is NaN: check every
    // lane for finiteness instead of trusting the maximum.
    __mmask16 bad = 0;
    for (int t = 0; t < 8; ++t)
      bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(v[t]), _mm512_set1_ps(3.4028235e38f), _CMP_NLE_UQ);
    if (bad) return false;
    const float largest = _mm512_reduce_max_ps(mx);
    if (largest == 0.f) {
      for (int b = 0; b < kDigits * 128; b += 64)
        _mm512_store_si512(digits + b, _mm512_setzero_si512());
      _mm512_store_si512(f->bias[g], _mm512_setzero_si512());
      if constexpr (kDigits == 1)
        _mm512_storeu_ps(f->unit + 16 * g, _mm512_setzero_ps());
      else
        f->unit[g] = 0.f;
      continue;
    }
    // The exponent e from the float's bits: largest in [2^e, 2^(e+1)).
    uint32_t bits;
    std::memcpy(&bits, &largest, sizeof bits);
    const int e = static_cast<int>(bits >> 23) - 127;
    if (e < -100) return false;  // 2^(21-e) would overflow, 2^(e-21) underflow
    // The factor that makes x into m, per 32 columns t (kInt8) or the group.
    __m512 scale[4];
    if constexpr (kDigits == 1) {
      alignas(64) float units[16];
      for (int t = 0; t < 4; ++t) {
        const float top = _mm512_reduce_max_ps(
            _mm512_max_ps(_mm512_abs_ps(v[2 * t]), _mm512_abs_ps(v[2 * t + 1])));
        if (top != 0.f && top < 0x1p-100f) return false;  // 127 / top would overflow
        scale[t] = _mm512_set1_ps(top == 0.f ? 0.f : 127.f / top);
        for (int lane = 0; lane < 4; ++lane) units[4 * t + lane] = top / 127.f;
      }
      _mm512_storeu_ps(f->unit + 16 * g, _mm512_load_ps(units));
    } else {
      const uint32_t scale_bits = static_cast<uint32_t>(21 - e + 127) << 23;
      const uint32_t unit_bits = static_cast<uint32_t>(e - 21 + 127) << 23;
      float scale_value;
      std::memcpy(&scale_value, &scale_bits, sizeof scale_value);
      std::memcpy(&f->unit[g], &unit_bits, sizeof f->unit[g]);
      for (int t = 0; t < 4; ++t) scale[t] = _mm512_set1_ps(scale_value);
    }
    for (int half = 0; half < 2; ++half) {
      for (int t = 0; t < 4; ++t) {
        // Columns 32 t + 2 j + half, j = 0..15.
        const __m512 xs = _mm512_permutex2var_ps(v[2 * t], half ? odd : even, v[2 * t + 1]);
        const __m512i m = _mm512_cvtps_epi32(_mm512_mul_ps(xs, scale[t]));  // nearest, ties even
        const int at = 64 * half + 16 * t;
        if constexpr (kDigits == 1) {  // |m| <= 127: saturation changes nothing
          _mm_store_si128(reinterpret_cast<__m128i*>(digits + at), _mm512_cvtsepi32_epi8(m));
        } else {
          const __m512i d0 = _mm512_srai_epi32(_mm512_slli_epi32(m, 24), 24);
          const __m512i m1 = _mm512_srai_epi32(_mm512_sub_epi32(m, d0), 8);
          const __m512i d1 = _mm512_srai_epi32(_mm512_slli_epi32(m1, 24), 24);
          const __m512i d2 = _mm512_srai_epi32(_mm512_sub_epi32(m1, d1), 8);
          _mm_store_si128(reinterpret_cast<__m128i*>(digits + at), _mm512_cvtepi32_epi8(d0));
          _mm_store_si128(reinterpret_cast<__m128i*>(digits + 128 + at),
                          _mm512_cvtepi32_epi8(d1));
          _mm_store_si128(reinterpret_cast<__m128i*>(digits + 256 + at),
                          _mm512_cvtepi32_epi8(d2));
        }
      }
    }
    // 8 * sum m per lane: the same product with every weight byte 8.
    _mm512_store_si512(f->bias[g],
                       _mm512_sub_epi32(_mm512_setzero_si512(),
                                        GroupDot<kDigits>(_mm512_setzero_si512(), eights, eights,
                                                          digits)));
  }
  return true;
}

// Rows of a Q4G matrix in groups of 128 against kT inputs at once: each
// group's 64 bytes are loaded and split into nibbles once for all of them.
// Per input the operations and their order are those of one input alone
// (GroupDot, then the fused scale into its own accumulator), so an input's
// bits do not depend on the inputs beside it.
template <int kT, int kDigits>
void RowsQ4G128(const MatrixView& w, const FixedInput* f, float* const* y, int64_t row_begin,
                int64_t row_end) {
  const int64_t groups = w.cols / 128;
  const __m512i nibble = _mm512_set1_epi8(15);
  const uint8_t* scales = reinterpret_cast<const uint8_t*>(w.scales);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.payload + r * groups * 64;
    const uint8_t* row_scales = scales + 2 * r * groups;
    __m512 acc[kT];
    for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const __m512i q = _mm512_loadu_si512(row + g * 64);
      const __m512i lo = _mm512_and_si512(q, nibble);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), nibble);
      uint16_t h;
      std::memcpy(&h, row_scales + 2 * g, sizeof h);
      const float scale = _cvtsh_ss(h);
      for (int t = 0; t < kT; ++t) {
        const __m512i sum = GroupDot<kDigits>(_mm512_load_si512(f[t].bias[g]), lo, hi,
                                              f[t].digits + g * kDigits * 128);
        const __m512 step = kDigits == 1
                                ? _mm512_mul_ps(_mm512_set1_ps(scale), _mm512_loadu_ps(f[t].unit + 16 * g))
                                : _mm512_set1_ps(scale * f[t].unit[g]);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), step, acc[t]);
      }
    }
    for (int t = 0; t < kT; ++t) y[t][r] = _mm512_reduce_add_ps(acc[t]);
  }
}

// Up to 4 inputs a pass over the rows: a row's pass reads each input's
// digits (3 x 128 bytes a group), and at 2304 columns 4 inputs' 28 KiB
// still sit in L1 with the row; 8 spill to L2 and run slower than 4
// (bench/matvec_bench.cc "blocks", docs/log/2026-12-02.md, "several inputs a pass"). With
// one digit, 8 inputs take the room of 4 with three.
template <int kDigits>
void RowsQ4G128Many(const MatrixView& w, const FixedInput* f, float* const* y, size_t n,
                    int64_t row_begin, int64_t row_end) {
  for (size_t i = 0; i < n;) {
    const size_t left = n - i;
    if (kDigits == 1 && left >= 8) {
      RowsQ4G128<8, kDigits>(w, f + i, y + i, row_begin, row_end);
      i += 8;
    } else if (left >= 4) {
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
// 16 columns per step inside one group (group % 16 == 0), 128 per sweep.
template <Fmt kFmt>
__m512 DecodeScaled(const MatrixView& w, const uint8_t* row, const uint8_t* row_scales, int64_t c,
                    __mmask16 m) {
  if constexpr (kFmt == Fmt::kF32) {
    return _mm512_maskz_loadu_ps(m, row + 4 * c);
  } else if constexpr (kFmt == Fmt::kF16) {
    return LoadHalves(row + 2 * c, m, w.bf16);
  } else {
    uint16_t h;
    std::memcpy(&h, row_scales + 2 * (c / w.group), sizeof h);
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(h)), Decode<kFmt>(row, c));
  }
}

template <Fmt kFmt>
void WeightedRowsT(const MatrixView& w, int64_t first, const float* a, int64_t n_rows, float* y) {
  const int64_t row_bytes = MatrixRowBytes(w);
  const int64_t groups = w.group > 0 ? (w.cols + w.group - 1) / w.group : 0;
  const uint8_t* scales = reinterpret_cast<const uint8_t*>(w.scales);
  for (int64_t c0 = 0; c0 < w.cols; c0 += 128) {
    const int64_t width = w.cols - c0 < 128 ? w.cols - c0 : 128;
    const int n = static_cast<int>((width + 15) / 16);
    const __mmask16 last = FirstLanes(width - 16 * (n - 1));
    __m512 acc[8];
    for (int t = 0; t < n; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint8_t* row = w.payload + (first + r) * row_bytes;
      const uint8_t* row_scales = scales ? scales + 2 * (first + r) * groups : nullptr;
      const __m512 ar = _mm512_set1_ps(a[r]);
      for (int t = 0; t < n; ++t) {
        const __mmask16 m = t + 1 < n ? static_cast<__mmask16>(0xffff) : last;
        const __m512 v = DecodeScaled<kFmt>(w, row, row_scales, c0 + 16 * t, m);
        acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(ar, v));
      }
    }
    for (int t = 0; t + 1 < n; ++t) _mm512_storeu_ps(y + c0 + 16 * t, acc[t]);
    _mm512_mask_storeu_ps(y + c0 + 16 * (n - 1), last, acc[n - 1]);
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
      if (w.group <= 0 || w.group % 16 != 0) return false;
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
      if (w.group <= 0 || w.group % 16 != 0) return false;
      if (w.fmt == Fmt::kQ8G) WeightedRowsT<Fmt::kQ8G>(w, first_row, a, n_rows, y);
      if (w.fmt == Fmt::kQ4G) WeightedRowsT<Fmt::kQ4G>(w, first_row, a, n_rows, y);
      if (w.fmt == Fmt::kQ3G) WeightedRowsT<Fmt::kQ3G>(w, first_row, a, n_rows, y);
      return true;
    default:
      return false;
  }
}

}  // namespace waste::kernels::avx512
