// MatVec with AVX-512 (F, BW, VL, VBMI): 16 columns per step. Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512vbmi -mavx2 -mfma -mf16c; see simd.h
// for what this file may use.

#include "engine/kernels/avx512_intrin.h"

#include <cstring>

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

// Q4G in groups of 128 (the trunk's usual shape), a different way round: a
// group is one 64-byte load, and dword lane i holds weights 8i..8i+7, one
// per nibble. vpermps reads only an index's low 4 bits, so shifting the
// group right by 4s and looking it up in a register of the 16 values
// (n - 8) gives weights 8i + s of every lane as floats: a shift, a permute
// and an FMA per 16 weights, with no widening. The input is visited in the
// same order, transposed once per call into xt.
constexpr int64_t kMaxTransposed = 16384;  // columns; wider rows take RowsGrouped

void RowsQ4G128(const MatrixView& w, const float* x, float* y, int64_t row_begin,
                int64_t row_end) {
  const int64_t groups = w.cols / 128;
  alignas(64) float xt[kMaxTransposed];  // [groups][8 (s)][16 (i)] = x[128g + 8i + s]
  for (int64_t g = 0; g < groups; ++g)
    for (int s = 0; s < 8; ++s)
      for (int i = 0; i < 16; ++i) xt[g * 128 + s * 16 + i] = x[g * 128 + 8 * i + s];
  const __m512 values =
      _mm512_setr_ps(-8.f, -7.f, -6.f, -5.f, -4.f, -3.f, -2.f, -1.f, 0.f, 1.f, 2.f, 3.f, 4.f, 5.f,
                     6.f, 7.f);
  const uint8_t* scales = reinterpret_cast<const uint8_t*>(w.scales);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.payload + r * groups * 64;
    const uint8_t* row_scales = scales + 2 * r * groups;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
      const __m512i q = _mm512_loadu_si512(row + g * 64);
      const float* xg = xt + g * 128;
      // Four sums of two nibble positions each: short dependency chains.
      __m512 s0 = _mm512_mul_ps(_mm512_permutexvar_ps(q, values), _mm512_load_ps(xg));
      __m512 s1 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), values),
                                _mm512_load_ps(xg + 16));
      __m512 s2 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 8), values),
                                _mm512_load_ps(xg + 32));
      __m512 s3 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 12), values),
                                _mm512_load_ps(xg + 48));
      s0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 16), values),
                           _mm512_load_ps(xg + 64), s0);
      s1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 20), values),
                           _mm512_load_ps(xg + 80), s1);
      s2 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 24), values),
                           _mm512_load_ps(xg + 96), s2);
      s3 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 28), values),
                           _mm512_load_ps(xg + 112), s3);
      uint16_t h;
      std::memcpy(&h, row_scales + 2 * g, sizeof h);
      acc = _mm512_fmadd_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)),
                            _mm512_set1_ps(_cvtsh_ss(h)), acc);
    }
    y[r] = _mm512_reduce_add_ps(acc);
  }
}

}  // namespace

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
      if (w.fmt == Fmt::kQ4G && w.group == 128 && w.cols % 128 == 0 && w.cols <= kMaxTransposed)
        RowsQ4G128(w, x, y, row_begin, row_end);
      else if (w.fmt == Fmt::kQ4G)
        RowsGrouped<Fmt::kQ4G>(w, x, y, row_begin, row_end);
      if (w.fmt == Fmt::kQ3G) RowsGrouped<Fmt::kQ3G>(w, x, y, row_begin, row_end);
      return true;
    default:
      return false;
  }
}

}  // namespace waste::kernels::avx512
