// int4.h's product with AVX2: the reference's 16 lanes in two registers,
// each lane doing exactly its multiplies and adds (compiled with
// -ffp-contract=off, so nothing is fused).

#include <immintrin.h>

#include "engine/kernels/simd.h"

namespace waste::kernels::avx2 {
namespace {

// A bf16 at `p` (unaligned) to float: its bits in the float's high half.
float Bf16(const uint8_t* p) {
  const uint32_t bits = (static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8) << 16;
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(bits))));
}

// Eight codes (bytes of `c`'s low 8) to the floats code - 8, exactly.
__m256 Decode8(__m128i c) {
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(c), _mm256_set1_epi32(8)));
}

}  // namespace

bool Int4MatVec(const Int4MatrixView& w, const float* x, float* y, int64_t row_begin,
                int64_t row_end) {
  if (w.cols % 32 != 0) return false;
  const int64_t groups = w.cols / 32;
  const __m128i low4 = _mm_set1_epi8(0x0f);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* codes = w.codes + r * (w.cols / 2);
    const uint8_t* scales = w.scales + 2 * r * groups;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();  // lanes 0-7, 8-15
    for (int64_t k = 0; k < groups; ++k) {
      const __m256 s = _mm256_set1_ps(Bf16(scales + 2 * k));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16 * k));
      const __m128i lo = _mm_and_si128(b, low4);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), low4);
      const __m128i c0 = _mm_unpacklo_epi8(lo, hi);  // columns 0..15
      const __m128i c1 = _mm_unpackhi_epi8(lo, hi);  // columns 16..31
      const float* bx = x + 32 * k;
      const __m256 w00 = Decode8(c0), w01 = Decode8(_mm_srli_si128(c0, 8));
      const __m256 w10 = Decode8(c1), w11 = Decode8(_mm_srli_si128(c1, 8));
      const __m256 p0 = _mm256_add_ps(_mm256_mul_ps(w00, _mm256_loadu_ps(bx)),
                                      _mm256_mul_ps(w10, _mm256_loadu_ps(bx + 16)));
      const __m256 p1 = _mm256_add_ps(_mm256_mul_ps(w01, _mm256_loadu_ps(bx + 8)),
                                      _mm256_mul_ps(w11, _mm256_loadu_ps(bx + 24)));
      acc0 = _mm256_add_ps(acc0, _mm256_mul_ps(p0, s));
      acc1 = _mm256_add_ps(acc1, _mm256_mul_ps(p1, s));
    }
    const __m256 t = _mm256_add_ps(acc0, acc1);  // i + (i + 8)
    const __m128 u = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    const __m128 v = _mm_add_ps(u, _mm_movehl_ps(u, u));  // i + (i + 2)
    y[r] = _mm_cvtss_f32(_mm_add_ss(v, _mm_shuffle_ps(v, v, 1)));
  }
  return true;
}

}  // namespace waste::kernels::avx2
