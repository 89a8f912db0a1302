// gguf_matvec.h's lanes with AVX2: a piece's codes unpacked by
// gguf_codes.h, turned into the weights 8 at a time (a * float(q), less b),
// or a float type's values converted, then applied to each input with the
// 64 lanes in eight registers, each lane doing exactly the reference's
// multiply and add (compiled with -ffp-contract=off, so nothing is fused).

#include <immintrin.h>

#include "engine/kernels/gguf_codes.h"
#include "engine/kernels/simd.h"

namespace waste::kernels::avx2 {
namespace {

// The weights wv[0 : values] of the piece at column c0 (a multiple of 64)
// into each input's lanes.
void Apply(const float* wv, int values, int64_t c0, const float* const* xs, int n, float* acc) {
  const int regs = values / 8;
  for (int t = 0; t < n; ++t) {
    const float* x = xs[t] + c0;
    float* lanes = acc + 64 * t;
    __m256 s[8];
    for (int i = 0; i < 8; ++i) s[i] = _mm256_loadu_ps(lanes + 8 * i);
    int g = 0;
    for (; g + 8 <= regs; g += 8)
      for (int i = 0; i < 8; ++i)
        s[i] = _mm256_add_ps(s[i], _mm256_mul_ps(_mm256_load_ps(wv + 8 * (g + i)),
                                                 _mm256_loadu_ps(x + 8 * (g + i))));
    for (int i = 0; g + i < regs; ++i)  // the row's last 32 values (of a float type, fewer)
      s[i] = _mm256_add_ps(
          s[i], _mm256_mul_ps(_mm256_load_ps(wv + 8 * (g + i)), _mm256_loadu_ps(x + 8 * (g + i))));
    for (int i = 0; i < 8; ++i) _mm256_storeu_ps(lanes + 8 * i, s[i]);
    for (int j = 8 * regs; j < values; ++j)  // a float row's last values past a register
      lanes[j % 64] = lanes[j % 64] + wv[j] * x[j];
  }
}

}  // namespace

bool GgufRowLanes(const GgufMatrixView& w, int64_t r, const float* const* xs, int n, float* acc) {
  for (int t = 0; t < 8 * n; ++t) _mm256_storeu_ps(acc + 8 * t, _mm256_setzero_ps());
  if (gguf_codes::ForEachFloatPiece(w, r, [&](const float* wv, int values, int64_t c0) {
        Apply(wv, values, c0, xs, n, acc);
      }))
    return true;
  const bool offset = GgufFactorsHaveOffset(w.type);
  return gguf_codes::ForEachPiece(
      w, r, [&](const int8_t* q, const float* a, const float* b, int values, int64_t c0) {
        alignas(32) float wv[kGgufPiece];
        const int regs = values / 8;  // a multiple of 4: a piece is whole blocks of 32 or 256
        for (int g = 0; g < regs; ++g) {
          const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * g));
          __m256 v = _mm256_mul_ps(_mm256_set1_ps(a[g / 2]),
                                   _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes)));
          if (offset) v = _mm256_sub_ps(v, _mm256_set1_ps(b[g / 2]));
          _mm256_store_ps(wv + 8 * g, v);
        }
        Apply(wv, values, c0, xs, n, acc);
      });
}

}  // namespace waste::kernels::avx2
