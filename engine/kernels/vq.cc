#include "engine/kernels/vq.h"

#include <algorithm>
#include <cstring>

#include "engine/format/encoding.h"
#include "engine/kernels/simd.h"

namespace waste::kernels {
namespace {

void BuildLutScalar(const float* const* codebooks, int stages, int entries, const float* x,
                    int64_t cols, float* lut) {
  for (int64_t v = 0; v < cols / 8; ++v) {
    const float* xv = x + 8 * v;
    for (int s = 0; s < stages; ++s) {
      for (int e = 0; e < entries; ++e) {
        const float* c = codebooks[s] + 8 * e;
        float dot = 0.f;
        for (int d = 0; d < 8; ++d) dot += c[d] * xv[d];
        *lut++ = dot;
      }
    }
  }
}

void ApplyScalar(const VqMatrixView& m, const float* lut, float* y, int64_t row_begin,
                 int64_t row_end) {
  const int64_t nv = m.cols / 8;
  const int64_t block = m.index_block;
  const int bytes_per_vector = m.index_bits == 6 ? 3 : m.stages;
  const int64_t table = static_cast<int64_t>(m.stages) * m.entries;  // floats per v
  for (int64_t r = row_begin; r < row_end; ++r) {
    float sum = 0.f;
    for (int64_t v = 0; v < nv; ++v) {
      const int64_t pos = block ? ((r / block) * nv + v) * block + r % block : r * nv + v;
      const uint8_t* p = m.indices + pos * bytes_per_vector;
      uint8_t unpacked[4];
      if (m.index_bits == 6) {
        format::UnpackVq4(p, unpacked);
        p = unpacked;
      }
      const float* t = lut + v * table;
      for (int s = 0; s < m.stages; ++s) sum += t[s * m.entries + p[s]];
    }
    uint16_t h;
    std::memcpy(&h, m.scales + 2 * r, sizeof h);
    y[r] = format::F16ToF32(h) * sum;
  }
}

}  // namespace

size_t VqLutFloats(int64_t cols, int stages, int entries) {
  return static_cast<size_t>(cols / 8) * static_cast<size_t>(stages) *
             static_cast<size_t>(entries) +
         static_cast<size_t>(entries < 256 ? 256 - entries : 0);
}

void VqBuildLut(const float* const* codebooks, int stages, int entries, const float* x,
                int64_t cols, float* lut, Isa isa) {
  isa = UsableIsa(isa);
  if (isa >= Isa::kAvx512) {
    avx512::VqBuildLut(codebooks, stages, entries, x, cols, lut);
  } else if (isa >= Isa::kAvx2) {
    avx2::VqBuildLut(codebooks, stages, entries, x, cols, lut);
  } else {
    BuildLutScalar(codebooks, stages, entries, x, cols, lut);
  }
  const size_t body = VqLutFloats(cols, stages, entries) - VqLutFloats(0, stages, entries);
  std::fill_n(lut + body, VqLutFloats(0, stages, entries), 0.f);
}

void VqApply(const VqMatrixView& m, const float* lut, float* y, int64_t row_begin, int64_t row_end,
             Isa isa) {
  if (row_begin >= row_end) return;
  isa = UsableIsa(isa);
  if (isa >= Isa::kAvx512 && avx512::VqApply(m, lut, y, row_begin, row_end)) return;
  if (isa >= Isa::kAvx2 && avx2::VqApply(m, lut, y, row_begin, row_end)) return;
  ApplyScalar(m, lut, y, row_begin, row_end);
}

}  // namespace waste::kernels
