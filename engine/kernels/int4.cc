#include "engine/kernels/int4.h"

#include <cstring>

#include "engine/format/encoding.h"
#include "engine/kernels/simd.h"

namespace waste::kernels {
namespace {

void Int4MatVecScalar(const Int4MatrixView& w, const float* x, float* y, int64_t a, int64_t b) {
  const int64_t groups = w.cols / format::kInt4Group;
  for (int64_t r = a; r < b; ++r) {
    const uint8_t* codes = w.codes + r * (w.cols / 2);
    const uint8_t* scales = w.scales + 2 * r * groups;
    float acc[16] = {};
    for (int64_t k = 0; k < groups; ++k) {
      uint16_t h;
      std::memcpy(&h, scales + 2 * k, 2);
      const float s = format::Bf16ToF32(h);
      const uint8_t* bc = codes + 16 * k;
      const float* bx = x + 32 * k;
      for (int l = 0; l < 16; ++l) {
        const int hi = l + 16;
        const float w0 = format::Int4ToF32(static_cast<uint8_t>(bc[l / 2] >> (4 * (l & 1))));
        const float w1 = format::Int4ToF32(static_cast<uint8_t>(bc[hi / 2] >> (4 * (hi & 1))));
        const float p = w0 * bx[l] + w1 * bx[hi];
        acc[l] = acc[l] + p * s;
      }
    }
    for (int n = 8; n >= 1; n /= 2)
      for (int i = 0; i < n; ++i) acc[i] = acc[i] + acc[i + n];
    y[r] = acc[0];
  }
}

}  // namespace

void Int4MatVec(const Int4MatrixView& w, const float* x, float* y, int64_t row_begin,
                int64_t row_end, Isa isa) {
  isa = UsableIsa(isa);
  if (isa >= Isa::kAvx512 && avx512::Int4MatVec(w, x, y, row_begin, row_end)) return;
  if (isa >= Isa::kAvx2 && avx2::Int4MatVec(w, x, y, row_begin, row_end)) return;
  Int4MatVecScalar(w, x, y, row_begin, row_end);
}

}  // namespace waste::kernels
