#include "engine/kernels/vq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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

// ---- the quantized table: the reference every SIMD path matches bit for bit ----

int64_t Groups(int64_t nv) {
  return (nv + kVqGroup - 1) / kVqGroup;
}
int TableEntries(int index_bits) {
  return index_bits == 6 ? 64 : 256;
}

void QuantizeScalar(const float* lut, int64_t cols, int stages, int entries, int index_bits,
                    uint8_t* qlut) {
  const int64_t nv = cols / 8, groups = Groups(nv);
  const int width = TableEntries(index_bits);
  uint8_t* bytes = qlut + 4 * groups;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t v0 = g * kVqGroup, v1 = std::min(nv, v0 + kVqGroup);
    const float* src = lut + v0 * stages * entries;
    const int64_t n = (v1 - v0) * stages * entries;
    float amax = 0.f;
    for (int64_t i = 0; i < n; ++i) {
      const float a = std::fabs(src[i]);
      amax = a > amax ? a : amax;  // skips NaN, as vmaxps(a, amax) does
    }
    const float scale = amax / 127.f, inv = amax > 0.f ? 127.f / amax : 0.f;
    std::memcpy(qlut + 4 * g, &scale, 4);
    for (int64_t vs = 0; vs < (v1 - v0) * stages; ++vs) {
      uint8_t* out = bytes + (v0 * stages + vs) * width;
      for (int e = 0; e < width; ++e) {
        if (e >= entries) {
          out[e] = 128;
          continue;
        }
        float t = src[vs * entries + e] * inv;
        t = t > -127.f ? t : -127.f;  // NaN becomes -127, as vmaxps(t, -127) makes it
        t = t < 127.f ? t : 127.f;
        out[e] = static_cast<uint8_t>(static_cast<int>(std::nearbyint(t)) + 128);
      }
    }
  }
}

void ApplyQScalar(const VqMatrixView& m, const uint8_t* qlut, float* y, int64_t row_begin,
                  int64_t row_end) {
  const int64_t nv = m.cols / 8, groups = Groups(nv);
  const int64_t block = m.index_block;
  const int bytes_per_vector = m.index_bits == 6 ? 3 : m.stages;
  const int width = TableEntries(m.index_bits);
  const uint8_t* table = qlut + 4 * groups;
  for (int64_t r = row_begin; r < row_end; ++r) {
    float sum = 0.f;
    for (int64_t g = 0; g < groups; ++g) {
      int32_t q = 0;  // exact: at most 127 * kVqGroup * 8 in magnitude
      for (int64_t v = g * kVqGroup; v < std::min(nv, (g + 1) * kVqGroup); ++v) {
        const int64_t pos = block ? ((r / block) * nv + v) * block + r % block : r * nv + v;
        const uint8_t* p = m.indices + pos * bytes_per_vector;
        uint8_t unpacked[4];
        if (m.index_bits == 6) {
          format::UnpackVq4(p, unpacked);
          p = unpacked;
        }
        const uint8_t* t = table + v * m.stages * width;
        for (int s = 0; s < m.stages; ++s) q += t[s * width + p[s]] - 128;
      }
      float scale;
      std::memcpy(&scale, qlut + 4 * g, 4);
      sum = std::fma(scale, static_cast<float>(q), sum);  // the SIMD paths' vfmadd
    }
    uint16_t h;
    std::memcpy(&h, m.scales + 2 * r, sizeof h);
    y[r] = format::F16ToF32(h) * sum;
  }
}

void SplitScalar(const float* lut, int64_t cols, int stages, int entries, uint8_t* planes) {
  const int64_t tables = cols / 8 * stages;
  for (int64_t i = 0; i < tables; ++i)
    for (int e = 0; e < 256; ++e) {
      uint32_t bits;
      std::memcpy(&bits, lut + i * entries + e, 4);
      for (int p = 0; p < 4; ++p)
        planes[(i * 4 + p) * 256 + e] = static_cast<uint8_t>(bits >> (8 * p));
    }
}

}  // namespace

size_t VqSplitLutBytes(int64_t cols, int stages) {
  return static_cast<size_t>(cols / 8) * static_cast<size_t>(stages) * 1024;
}

void VqSplitLut(const float* lut, int64_t cols, int stages, int entries, uint8_t* planes, Isa isa) {
  if (UsableIsa(isa) >= Isa::kAvx512) {
    avx512::VqSplitLut(lut, cols, stages, entries, planes);
  } else {
    SplitScalar(lut, cols, stages, entries, planes);
  }
}

void VqBuildSplitLut(const float* const* codebooks, int stages, int entries, const float* x,
                     int64_t cols, uint8_t* planes, Isa isa) {
  if (entries == 256 && UsableIsa(isa) >= Isa::kAvx512) {
    avx512::VqBuildSplitLut(codebooks, stages, x, cols, planes);
    return;
  }
  // Fewer entries: a plane reads past its table into the next (VqSplitLut),
  // so the whole float table is built first. No model path takes this on
  // the formats written today (VqSplitCovers needs AVX-512).
  std::vector<float> lut(VqLutFloats(cols, stages, entries));
  VqBuildLut(codebooks, stages, entries, x, cols, lut.data(), isa);
  VqSplitLut(lut.data(), cols, stages, entries, planes, isa);
}

bool VqSplitCovers(int index_bits, int index_block, Isa isa) {
  return UsableIsa(isa) >= Isa::kAvx512 && index_bits == 8 && index_block == 64;
}

void VqApplySplit(const VqMatrixView& m, const float* lut, const uint8_t* planes, float* y,
                  int64_t row_begin, int64_t row_end, Isa isa) {
  if (row_begin >= row_end) return;
  if (planes && UsableIsa(isa) >= Isa::kAvx512 &&
      avx512::VqApplySplit(m, planes, y, row_begin, row_end))
    return;
  VqApply(m, lut, y, row_begin, row_end, isa);
}

size_t VqQLutBytes(int64_t cols, int stages, int index_bits) {
  const int64_t nv = cols / 8;
  return static_cast<size_t>(4 * Groups(nv) + nv * stages * TableEntries(index_bits));
}

void VqQuantizeLut(const float* lut, int64_t cols, int stages, int entries, int index_bits,
                   uint8_t* qlut, Isa isa) {
  if (UsableIsa(isa) >= Isa::kAvx512) {
    avx512::VqQuantizeLut(lut, cols, stages, entries, index_bits, qlut);
  } else {
    QuantizeScalar(lut, cols, stages, entries, index_bits, qlut);
  }
}

void VqBuildQLut(const float* const* codebooks, int stages, int entries, int index_bits,
                 const float* x, int64_t cols, uint8_t* qlut, Isa isa) {
  if (UsableIsa(isa) >= Isa::kAvx512) {
    avx512::VqBuildQLut(codebooks, stages, entries, index_bits, x, cols, qlut);
    return;
  }
  // A table entry depends only on its own 8 inputs and a group's bytes only
  // on its own entries, so a group built and quantized alone is the same
  // bytes as the whole table's.
  constexpr int64_t kGroupCols = 8 * kVqGroup;
  const int64_t nv = cols / 8, groups = Groups(nv);
  const int width = TableEntries(index_bits);
  std::vector<float> lut(VqLutFloats(kGroupCols, stages, entries));
  std::vector<uint8_t> one(VqQLutBytes(kGroupCols, stages, index_bits));  // one scale, the bytes
  uint8_t* bytes = qlut + 4 * groups;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t v0 = g * kVqGroup, v1 = std::min(nv, v0 + kVqGroup);
    VqBuildLut(codebooks, stages, entries, x + 8 * v0, 8 * (v1 - v0), lut.data(), isa);
    VqQuantizeLut(lut.data(), 8 * (v1 - v0), stages, entries, index_bits, one.data(), isa);
    std::memcpy(qlut + 4 * g, one.data(), 4);
    std::memcpy(bytes + v0 * stages * width, one.data() + 4,
                static_cast<size_t>((v1 - v0) * stages * width));
  }
}

void VqApplyQ(const VqMatrixView& m, const uint8_t* qlut, float* y, int64_t row_begin,
              int64_t row_end, Isa isa) {
  if (row_begin >= row_end) return;
  if (UsableIsa(isa) >= Isa::kAvx512 && avx512::VqApplyQ(m, qlut, y, row_begin, row_end)) return;
  ApplyQScalar(m, qlut, y, row_begin, row_end);
}

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
