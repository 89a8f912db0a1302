#include "engine/kernels/matvec.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/format/encoding.h"
#include "engine/kernels/q4_fixed.h"
#include "engine/kernels/simd.h"
#include "engine/kernels/thread_pool.h"

namespace waste::kernels {
namespace {

using format::Fmt;

int GroupedBits(Fmt f) {
  return f == Fmt::kQ8G ? 8 : f == Fmt::kQ4G ? 4 : 3;
}

format::GroupedShape Grouped(const MatrixView& w) {
  return {GroupedBits(w.fmt), w.group, w.rows, w.cols};
}

uint16_t LoadU16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Calls f(c, weight) for every column of row r, weight decoded exactly as
// encoding.h defines it. The scalar reference of both MatVec and DequantRow.
template <class F>
void ForEachWeight(const MatrixView& w, int64_t r, F&& f) {
  const uint8_t* row = w.payload + r * MatrixRowBytes(w);
  switch (w.fmt) {
    case Fmt::kF32:
      for (int64_t c = 0; c < w.cols; ++c) {
        float v;
        std::memcpy(&v, row + 4 * c, sizeof v);
        f(c, v);
      }
      return;
    case Fmt::kF16:
      for (int64_t c = 0; c < w.cols; ++c) {
        const uint16_t h = LoadU16(row + 2 * c);
        f(c, w.bf16 ? format::Bf16ToF32(h) : format::F16ToF32(h));
      }
      return;
    default:
      break;
  }
  const int64_t groups = Grouped(w).groups_per_row();
  const uint8_t* scales = reinterpret_cast<const uint8_t*>(w.scales) + 2 * r * groups;
  for (int64_t g = 0; g < groups; ++g) {
    const float scale = format::F16ToF32(LoadU16(scales + 2 * g));
    const int64_t end = std::min<int64_t>((g + 1) * w.group, w.cols);
    for (int64_t c = g * w.group; c < end; ++c) {
      int q;
      if (w.fmt == Fmt::kQ8G) {
        q = static_cast<int8_t>(row[c]);
      } else if (w.fmt == Fmt::kQ4G) {
        q = ((c & 1) ? row[c / 2] >> 4 : row[c / 2] & 15) - 8;
      } else {
        q = format::Q3At(row, c);
      }
      f(c, scale * static_cast<float>(q));
    }
  }
}

void MatVecScalar(const MatrixView& w, const float* x, float* y, int64_t row_begin,
                  int64_t row_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    float sum = 0.f;
    ForEachWeight(w, r, [&](int64_t c, float v) { sum += v * x[c]; });
    y[r] = sum;
  }
}

// The SIMD Q4G products in groups of 128 (q4_fixed.h, README.md): the input
// in fixed point first, then integer products.
bool FixedPointQ4(const MatrixView& w, Isa isa) {
  return isa >= Isa::kAvx2 && w.fmt == Fmt::kQ4G && w.group == 128 && w.cols % 128 == 0;
}

bool FixInput(Isa isa, const float* x, int64_t cols, Q4Input in, uint8_t* fixed) {
  return isa >= Isa::kAvx512 ? avx512::Q4FixInput(x, cols, in, fixed)
                             : avx2::Q4FixInput(x, cols, in, fixed);
}

// The AMX product takes the exact fixed point; int8 inputs stay on
// AVX-512's (for every chunk size alike, so the bits do not depend on it).
bool Amx(Isa isa, Q4Input in) {
  return isa >= Isa::kAmx && in == Q4Input::kExact;
}

// Rows [row_begin, row_end) of w against every input in fixed[]; ys[i] is
// fixed[i]'s output. amx_scratch: q4fixed::AmxScratchBytes(w.cols,
// fixed.size()) bytes, 64-aligned, where Amx(isa, in).
void FixedRows(Isa isa, const MatrixView& w, Q4Input in, std::span<const uint8_t* const> fixed,
               std::span<float* const> ys, int64_t row_begin, int64_t row_end,
               uint8_t* amx_scratch) {
  constexpr size_t kBatch = q4fixed::kAmxTokensAPass;  // inputs described on the stack at a time
  q4fixed::FixedInput f[kBatch];
  for (size_t i = 0; i < fixed.size(); i += kBatch) {
    const size_t n = std::min(kBatch, fixed.size() - i);
    for (size_t j = 0; j < n; ++j)
      f[j] = q4fixed::At(const_cast<uint8_t*>(fixed[i + j]), w.cols / 128, q4fixed::Digits(in));
    if (Amx(isa, in))
      amx::Q4FixedRows(w, f, ys.data() + i, n, row_begin, row_end, amx_scratch);
    else if (isa >= Isa::kAvx512)
      avx512::Q4FixedRows(w, in, f, ys.data() + i, n, row_begin, row_end);
    else
      avx2::Q4FixedRows(w, in, f, ys.data() + i, n, row_begin, row_end);
  }
}

}  // namespace

int64_t MatrixRowBytes(const MatrixView& w) {
  switch (w.fmt) {
    case Fmt::kF32:
      return w.cols * 4;
    case Fmt::kF16:
      return w.cols * 2;
    default:
      return Grouped(w).row_bytes();
  }
}

int64_t MatrixBytes(const MatrixView& w) {
  if (w.fmt == Fmt::kF32 || w.fmt == Fmt::kF16) return w.rows * MatrixRowBytes(w);
  const format::GroupedShape g = Grouped(w);
  return g.payload_bytes() + g.scale_bytes();
}

void MatVec(const MatrixView& w, const float* x, float* y, int64_t row_begin, int64_t row_end,
            Isa isa, Q4Input in) {
  if (row_begin >= row_end) return;
  isa = UsableIsa(isa);
  if (FixedPointQ4(w, isa) && w.cols / 128 <= q4fixed::kMaxGroups) {
    alignas(64) uint8_t buffer[q4fixed::kMaxGroups * q4fixed::GroupBytes(3)];
    alignas(64) uint8_t amx_scratch[q4fixed::AmxScratchBytes(q4fixed::kMaxGroups * 128, 1)];
    if (FixInput(isa, x, w.cols, in, buffer)) {
      const uint8_t* fixed = buffer;
      FixedRows(isa, w, in, {&fixed, 1}, {&y, 1}, row_begin, row_end, amx_scratch);
      return;
    }
  }
  if (isa >= Isa::kAvx512 && avx512::MatVec(w, x, y, row_begin, row_end)) return;
  if (isa >= Isa::kAvx2 && avx2::MatVec(w, x, y, row_begin, row_end)) return;
  MatVecScalar(w, x, y, row_begin, row_end);
}

void MatVecs(ThreadPool& pool, std::span<const MatVecJob> jobs, int64_t grain, Isa isa,
             Q4Input in) {
  int64_t total = 0;
  for (const MatVecJob& j : jobs) total += j.w->rows;
  pool.ParallelFor(total, grain, [&](int64_t a, int64_t b) {
    // [a, b) in the concatenation; `first` is the current job's first row there.
    int64_t first = 0;
    for (const MatVecJob& j : jobs) {
      if (first >= b) break;
      const int64_t lo = std::max(a, first), hi = std::min(b, first + j.w->rows);
      if (lo < hi) MatVec(*j.w, j.x, j.y, lo - first, hi - first, isa, in);
      first += j.w->rows;
    }
  });
}

void MatVecBlocks(const MatrixView& w, std::span<const float* const> xs,
                  std::span<float* const> ys, int64_t row_begin, int64_t row_end, int64_t block,
                  Isa isa, Q4Input in) {
  if (row_begin >= row_end) return;
  isa = UsableIsa(isa);
  block = std::max<int64_t>(block, 1);
  // The SIMD Q4G products in groups of 128 put each input in fixed point
  // first; done once here instead of once a block (it cost about 40% of a
  // product cut into 32-row calls).
  const size_t n = xs.size();
  const bool fixed = FixedPointQ4(w, isa);
  const int64_t bytes = fixed ? q4fixed::Bytes(w.cols, in) : 0;
  const int64_t amx_bytes =
      fixed && Amx(isa, in) ? q4fixed::AmxScratchBytes(w.cols, static_cast<int64_t>(n)) : 0;
  std::unique_ptr<uint8_t[]> buffer;
  // The inputs in fixed point and their outputs; the rest (an input that
  // cannot be, or every input off this path) take MatVec.
  std::vector<const uint8_t*> fixed_in;
  std::vector<float*> fixed_out;
  std::vector<size_t> other;
  uint8_t* amx_scratch = nullptr;
  if (fixed) {
    buffer = std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(bytes) * n +
                                                       static_cast<size_t>(amx_bytes) + 64);
    uint8_t* at = buffer.get() + (64 - reinterpret_cast<uintptr_t>(buffer.get()) % 64) % 64;
    amx_scratch = at + bytes * static_cast<int64_t>(n);
    for (size_t i = 0; i < n; ++i, at += bytes) {
      if (FixInput(isa, xs[i], w.cols, in, at)) {
        fixed_in.push_back(at);
        fixed_out.push_back(ys[i]);
      } else {
        other.push_back(i);
      }
    }
  } else {
    for (size_t i = 0; i < n; ++i) other.push_back(i);
  }
  // One input alone has no block to share: its rows in one call (a call a
  // block cost a decode token about 3% in its routed experts).
  // AMX takes every input for each 16 rows itself, and lays the inputs out
  // for its tiles once a call: no blocks.
  if (n == 1 || (fixed && Amx(isa, in))) block = row_end - row_begin;
  for (int64_t lo = row_begin; lo < row_end; lo += block) {
    const int64_t hi = std::min(row_end, lo + block);
    if (!fixed_in.empty()) FixedRows(isa, w, in, fixed_in, fixed_out, lo, hi, amx_scratch);
    for (size_t i : other) MatVec(w, xs[i], ys[i], lo, hi, isa, in);
  }
}

void MatVecsMany(ThreadPool& pool, std::span<const MatVecManyJob> jobs, int64_t grain, Isa isa,
                 Q4Input in) {
  grain = std::max<int64_t>(grain, 1);
  int64_t total = 0;
  for (const MatVecManyJob& j : jobs) total += j.w->rows;
  pool.ParallelFor(total, grain, [&](int64_t a, int64_t b) {
    int64_t first = 0;  // the current job's first row in the concatenation
    for (const MatVecManyJob& j : jobs) {
      if (first >= b) break;
      const int64_t lo = std::max(a, first), hi = std::min(b, first + j.w->rows);
      if (lo < hi) MatVecBlocks(*j.w, j.xs, j.ys, lo - first, hi - first, grain, isa, in);
      first += j.w->rows;
    }
  });
}

void MatVecMany(ThreadPool& pool, const MatrixView& w, std::span<const float* const> xs,
                std::span<float* const> ys, int64_t grain, Isa isa, Q4Input in) {
  grain = std::max<int64_t>(grain, 1);
  pool.ParallelFor(w.rows, grain, [&](int64_t a, int64_t b) {
    MatVecBlocks(w, xs, ys, a, b, grain, isa, in);
  });
}

void DequantRow(const MatrixView& w, int64_t row, float* out) {
  ForEachWeight(w, row, [&](int64_t c, float v) { out[c] = v; });
}

void WeightedRows(const MatrixView& w, int64_t first_row, const float* a, int64_t n_rows, float* y,
                  Isa isa) {
  isa = UsableIsa(isa);
  if (isa >= Isa::kAvx512 && avx512::WeightedRows(w, first_row, a, n_rows, y)) return;
  if (isa >= Isa::kAvx2 && avx2::WeightedRows(w, first_row, a, n_rows, y)) return;
  std::fill(y, y + w.cols, 0.f);
  for (int64_t r = 0; r < n_rows; ++r)
    ForEachWeight(w, first_row + r, [&](int64_t c, float v) { y[c] += a[r] * v; });
}

}  // namespace waste::kernels
