// MatVec and WeightedRows with AVX2 + FMA + F16C: 8 columns per step.
// Compiled with -mavx2 -mfma -mf16c -ffp-contract=off (MatVec's fused
// multiply-adds are explicit; WeightedRows must not have any); see simd.h
// for what this file may use.
#include <immintrin.h>

#include <cstring>

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
