// gguf_matvec.h's lanes with AVX-512: a piece's codes unpacked by
// gguf_codes.h, turned into the weights 16 at a time (a * float(q), less b),
// or a float type's values converted, then applied to each input with the
// 64 lanes in four registers, each lane doing exactly the reference's
// multiply and add (compiled with -ffp-contract=off, so nothing is fused).

#include "engine/kernels/avx512_intrin.h"
#include "engine/kernels/gguf_codes.h"
#include "engine/kernels/simd.h"

namespace waste::kernels::avx512 {
namespace {

// The weights wv[0 : values] (64-byte aligned) of the piece at column c0 (a
// multiple of 64) into each input's lanes.
void Apply(const float* wv, int values, int64_t c0, const float* const* xs, int n, float* acc) {
  const int regs = values / 16;
  for (int t = 0; t < n; ++t) {
    const float* x = xs[t] + c0;
    float* lanes = acc + 64 * t;
    __m512 s0 = _mm512_loadu_ps(lanes), s1 = _mm512_loadu_ps(lanes + 16);
    __m512 s2 = _mm512_loadu_ps(lanes + 32), s3 = _mm512_loadu_ps(lanes + 48);
    int g = 0;
    for (; g + 4 <= regs; g += 4) {
      s0 = _mm512_add_ps(s0,
                         _mm512_mul_ps(_mm512_load_ps(wv + 16 * g), _mm512_loadu_ps(x + 16 * g)));
      s1 = _mm512_add_ps(
          s1, _mm512_mul_ps(_mm512_load_ps(wv + 16 * g + 16), _mm512_loadu_ps(x + 16 * g + 16)));
      s2 = _mm512_add_ps(
          s2, _mm512_mul_ps(_mm512_load_ps(wv + 16 * g + 32), _mm512_loadu_ps(x + 16 * g + 32)));
      s3 = _mm512_add_ps(
          s3, _mm512_mul_ps(_mm512_load_ps(wv + 16 * g + 48), _mm512_loadu_ps(x + 16 * g + 48)));
    }
    // The row's last 32 values (of a float type, up to 63).
    if (g < regs)
      s0 = _mm512_add_ps(s0,
                         _mm512_mul_ps(_mm512_load_ps(wv + 16 * g), _mm512_loadu_ps(x + 16 * g)));
    if (g + 1 < regs)
      s1 = _mm512_add_ps(
          s1, _mm512_mul_ps(_mm512_load_ps(wv + 16 * g + 16), _mm512_loadu_ps(x + 16 * g + 16)));
    if (g + 2 < regs)
      s2 = _mm512_add_ps(
          s2, _mm512_mul_ps(_mm512_load_ps(wv + 16 * g + 32), _mm512_loadu_ps(x + 16 * g + 32)));
    _mm512_storeu_ps(lanes, s0);
    _mm512_storeu_ps(lanes + 16, s1);
    _mm512_storeu_ps(lanes + 32, s2);
    _mm512_storeu_ps(lanes + 48, s3);
    for (int j = 16 * regs; j < values; ++j)  // a float row's last values past a register
      lanes[j % 64] = lanes[j % 64] + wv[j] * x[j];
  }
}

}  // namespace

bool GgufRowLanes(const GgufMatrixView& w, int64_t r, const float* const* xs, int n, float* acc) {
  for (int t = 0; t < 4 * n; ++t) _mm512_storeu_ps(acc + 16 * t, _mm512_setzero_ps());
  if (gguf_codes::ForEachFloatPiece(w, r, [&](const float* wv, int values, int64_t c0) {
        Apply(wv, values, c0, xs, n, acc);
      }))
    return true;
  const bool offset = GgufFactorsHaveOffset(w.type);
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
        Apply(wv, values, c0, xs, n, acc);
      });
}

}  // namespace waste::kernels::avx512
