// gguf_matvec.h's lanes with AVX-512: a piece's codes unpacked by
// gguf_codes.h, turned into the weights 16 at a time (a * float(q), less b),
// then applied to each input with the 64 lanes in four registers, each lane
// doing exactly the reference's multiply and add (compiled with
// -ffp-contract=off, so nothing is fused).

#include "engine/kernels/avx512_intrin.h"
#include "engine/kernels/gguf_codes.h"
#include "engine/kernels/simd.h"

namespace waste::kernels::avx512 {

bool GgufRowLanes(const GgufMatrixView& w, int64_t r, const float* const* xs, int n, float* acc) {
  const bool offset = GgufFactorsHaveOffset(w.type);
  for (int t = 0; t < 4 * n; ++t) _mm512_storeu_ps(acc + 16 * t, _mm512_setzero_ps());
  return gguf_codes::ForEachPiece(
      w, r, [&](const int8_t* q, const float* a, const float* b, int values, int64_t c0) {
        alignas(64) float wv[kGgufPiece];
        const int regs = values / 16;  // even: a piece is whole blocks of 32 or 256
        for (int g = 0; g < regs; ++g) {
          const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * g));
          __m512 v =
              _mm512_mul_ps(_mm512_set1_ps(a[g]), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes)));
          if (offset) v = _mm512_sub_ps(v, _mm512_set1_ps(b[g]));
          _mm512_store_ps(wv + 16 * g, v);
        }
        for (int t = 0; t < n; ++t) {
          const float* x = xs[t] + c0;
          float* lanes = acc + 64 * t;
          __m512 s0 = _mm512_loadu_ps(lanes), s1 = _mm512_loadu_ps(lanes + 16);
          __m512 s2 = _mm512_loadu_ps(lanes + 32), s3 = _mm512_loadu_ps(lanes + 48);
          int g = 0;
          for (; g + 4 <= regs; g += 4) {
            s0 = _mm512_add_ps(
                s0, _mm512_mul_ps(_mm512_load_ps(wv + 16 * g), _mm512_loadu_ps(x + 16 * g)));
            s1 = _mm512_add_ps(s1, _mm512_mul_ps(_mm512_load_ps(wv + 16 * g + 16),
                                                 _mm512_loadu_ps(x + 16 * g + 16)));
            s2 = _mm512_add_ps(s2, _mm512_mul_ps(_mm512_load_ps(wv + 16 * g + 32),
                                                 _mm512_loadu_ps(x + 16 * g + 32)));
            s3 = _mm512_add_ps(s3, _mm512_mul_ps(_mm512_load_ps(wv + 16 * g + 48),
                                                 _mm512_loadu_ps(x + 16 * g + 48)));
          }
          if (g < regs) {  // the row's last 32 values
            s0 = _mm512_add_ps(
                s0, _mm512_mul_ps(_mm512_load_ps(wv + 16 * g), _mm512_loadu_ps(x + 16 * g)));
            s1 = _mm512_add_ps(s1, _mm512_mul_ps(_mm512_load_ps(wv + 16 * g + 16),
                                                 _mm512_loadu_ps(x + 16 * g + 16)));
          }
          _mm512_storeu_ps(lanes, s0);
          _mm512_storeu_ps(lanes + 16, s1);
          _mm512_storeu_ps(lanes + 32, s2);
          _mm512_storeu_ps(lanes + 48, s3);
        }
      });
}

}  // namespace waste::kernels::avx512
