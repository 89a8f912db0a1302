#include "engine/kernels/gguf_matvec.h"

#include <algorithm>
#include <string>

#include "engine/gguf/gguf.h"
#include "engine/kernels/gguf_dequant.h"
#include "engine/kernels/simd.h"

namespace waste::kernels {
namespace {

constexpr int kMaxTokens = 64;  // inputs a row's blocks are decoded once for

// The scalar reference of simd.h's GgufRowLanes: the row decoded 256 values
// at a time by GgufDequantize, each piece applied to every input's lanes.
void RowLanesScalar(const GgufMatrixView& w, int64_t r, const float* const* xs, int n, float* acc) {
  const gguf::TypeInfo& info = *gguf::FindType(w.type);
  const int64_t per_piece = kGgufPiece / info.block_size;  // blocks
  std::fill(acc, acc + int64_t{n} * 64, 0.f);
  float wv[kGgufPiece];
  for (int64_t c0 = 0; c0 < w.cols; c0 += kGgufPiece) {
    const int64_t blocks = std::min<int64_t>(per_piece, (w.cols - c0) / info.block_size);
    const int64_t values = blocks * info.block_size;
    const uint8_t* p = w.data + r * GgufRowBytes(w) + c0 / info.block_size * info.type_size;
    // Whole blocks of a type GgufDequantize reads: cannot fail.
    (void)GgufDequantize(w.type, {p, static_cast<size_t>(blocks * info.type_size)},
                         {wv, static_cast<size_t>(values)});
    for (int t = 0; t < n; ++t) {
      const float* x = xs[t] + c0;
      float* a = acc + int64_t{t} * 64;
      for (int64_t j = 0; j < values; ++j) a[j % 64] = a[j % 64] + wv[j] * x[j];
    }
  }
}

}  // namespace

bool GgufMatVecSupports(uint32_t type) {
  return GgufFactored(type) || type == gguf::kF32 || type == gguf::kF16 || type == gguf::kBF16;
}

int64_t GgufRowBytes(const GgufMatrixView& w) {
  const gguf::TypeInfo& info = *gguf::FindType(w.type);
  return w.cols / info.block_size * info.type_size;
}

Status CheckGgufMatrix(const GgufMatrixView& w) {
  if (!GgufMatVecSupports(w.type))
    return Status::Error(gguf::TypeName(w.type) + " has no matrix product yet");
  const gguf::TypeInfo& info = *gguf::FindType(w.type);
  const std::string shape = std::string(info.name) + " matrix of " + std::to_string(w.rows) +
                            " x " + std::to_string(w.cols);
  if (w.rows < 0 || w.cols <= 0 || w.cols % info.block_size != 0)
    return Status::Error(shape + ": cols must be whole blocks of " +
                         std::to_string(info.block_size));
  const int64_t row_bytes = GgufRowBytes(w);
  if (w.rows > 0 && (!w.data || w.bytes < 0 || row_bytes > w.bytes / w.rows))
    return Status::Error(shape + ": needs " + std::to_string(row_bytes) + " bytes a row, has " +
                         std::to_string(w.bytes) + " bytes");
  return Status::Ok();
}

void GgufMatMul(const GgufMatrixView& w, std::span<const float* const> xs,
                std::span<float* const> ys, int64_t row_begin, int64_t row_end, Isa isa) {
  isa = UsableIsa(isa);
  alignas(64) float acc[kMaxTokens * 64];
  for (size_t t0 = 0; t0 < xs.size(); t0 += kMaxTokens) {
    const int n = static_cast<int>(std::min<size_t>(kMaxTokens, xs.size() - t0));
    for (int64_t r = row_begin; r < row_end; ++r) {
      const float* const* x = xs.data() + t0;
      if (!(isa >= Isa::kAvx512 && avx512::GgufRowLanes(w, r, x, n, acc)) &&
          !(isa >= Isa::kAvx2 && avx2::GgufRowLanes(w, r, x, n, acc)))
        RowLanesScalar(w, r, x, n, acc);
      for (int t = 0; t < n; ++t) {
        float* a = acc + t * 64;
        for (int s = 32; s >= 1; s /= 2)
          for (int i = 0; i < s; ++i) a[i] = a[i] + a[i + s];
        ys[t0 + static_cast<size_t>(t)][r] = a[0];
      }
    }
  }
}

void GgufMatVec(const GgufMatrixView& w, const float* x, float* y, int64_t row_begin,
                int64_t row_end, Isa isa) {
  GgufMatMul(w, {&x, 1}, {&y, 1}, row_begin, row_end, isa);
}

}  // namespace waste::kernels
