#include "engine/convert/vq_fit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "engine/format/encoding.h"
#include "engine/kernels/nearest.h"

namespace waste::convert {
namespace {

constexpr int kDim = 8;

// splitmix64: a fixed, portable stream for picking initial centroids.
uint64_t Next(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// sum of v[i]^2 in double, in index order.
double SumOfSquares(const float* v, int64_t n) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(v[i]) * v[i];
  return ss;
}

// acc + sum of (w[i] - scale * q[i])^2 in double, in index order. Not
// inlined: inlined into QuantizeMatrix, GCC 12 keeps acc in a stack slot,
// stored and loaded again for every weight.
[[gnu::noinline]] double AddSquaredErrors(double acc, const float* w, const float* q, float scale,
                                          int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(w[i]) - static_cast<double>(scale * q[i]);
    acc += d * d;
  }
  return acc;
}

float RoundF16(float v) {
  return format::F16ToF32(format::F32ToF16(v));
}

// Runs body(block) for blocks [0, kBlocks) on `threads` threads. The work is
// cut into a fixed number of blocks whatever the thread count, and results
// are merged block by block in order, so they do not depend on the threads.
constexpr int kBlocks = 32;
void ForBlocks(int threads, const std::function<void(int)>& body) {
  threads = std::clamp(threads, 1, kBlocks);
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int b = t; b < kBlocks; b += threads) body(b);
    });
  for (int b = 0; b < kBlocks; b += threads) body(b);
  for (auto& th : pool) th.join();
}

// k-means on n vectors (n x 8) into `entries` centroids.
void KMeans(const float* x, int64_t n, int entries, int iterations, uint64_t seed, int threads,
            kernels::Isa isa, float* books) {
  uint64_t rng = seed;
  for (int e = 0; e < entries; ++e) {
    const int64_t pick = n > 0 ? static_cast<int64_t>(Next(rng) % static_cast<uint64_t>(n)) : 0;
    for (int i = 0; i < kDim; ++i) books[e * kDim + i] = n > 0 ? x[pick * kDim + i] : 0.f;
  }
  std::vector<double> sum(static_cast<size_t>(entries) * kDim);
  std::vector<int64_t> count(entries);
  // Per block: sums and counts of the vectors it assigned.
  std::vector<std::vector<double>> block_sum(kBlocks, std::vector<double>(sum.size()));
  std::vector<std::vector<int64_t>> block_count(kBlocks, std::vector<int64_t>(entries));
  std::vector<int32_t> nearest(static_cast<size_t>(n));
  for (int it = 0; it < iterations; ++it) {
    const kernels::NearestEntry search(books, entries, isa);
    ForBlocks(threads, [&](int b) {
      std::vector<double>& bs = block_sum[b];
      std::vector<int64_t>& bc = block_count[b];
      std::fill(bs.begin(), bs.end(), 0.0);
      std::fill(bc.begin(), bc.end(), 0);
      const int64_t first = n * b / kBlocks, end = n * (b + 1) / kBlocks;
      search.Find(x + first * kDim, end - first, nearest.data() + first);
      for (int64_t j = first; j < end; ++j) {
        const int a = nearest[j];
        ++bc[a];
        for (int i = 0; i < kDim; ++i) bs[a * kDim + i] += x[j * kDim + i];
      }
    });
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(count.begin(), count.end(), 0);
    for (int b = 0; b < kBlocks; ++b) {
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += block_sum[b][i];
      for (int e = 0; e < entries; ++e) count[e] += block_count[b][e];
    }
    for (int e = 0; e < entries; ++e) {
      if (count[e] > 0) {
        for (int i = 0; i < kDim; ++i)
          books[e * kDim + i] = static_cast<float>(sum[e * kDim + i] / count[e]);
      } else if (n > 0) {  // an empty cluster restarts on a random vector
        const int64_t pick = static_cast<int64_t>(Next(rng) % static_cast<uint64_t>(n));
        for (int i = 0; i < kDim; ++i) books[e * kDim + i] = x[pick * kDim + i];
      }
    }
  }
}

}  // namespace

void AppendNormalizedVectors(const float* w, int64_t rows, int64_t cols, int64_t step,
                             std::vector<float>* out) {
  const int64_t per_row = cols / kDim;
  step = std::max<int64_t>(1, step);
  int64_t k = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    const double rms = std::sqrt(SumOfSquares(row, cols) / static_cast<double>(cols));
    const float inv = rms > 0 ? static_cast<float>(1.0 / rms) : 0.f;
    for (int64_t v = 0; v < per_row; ++v, ++k) {
      if (k % step != 0) continue;
      for (int i = 0; i < kDim; ++i) out->push_back(row[v * kDim + i] * inv);
    }
  }
}

std::vector<float> FitResidualCodebooks(std::span<const float> vectors, int stages, int entries,
                                        const VqFitOptions& o) {
  const int64_t n = static_cast<int64_t>(vectors.size()) / kDim;
  std::vector<float> residual(vectors.begin(), vectors.end());
  std::vector<float> books(static_cast<size_t>(stages) * entries * kDim);
  std::vector<int32_t> nearest(static_cast<size_t>(n));
  for (int s = 0; s < stages; ++s) {
    float* b = books.data() + static_cast<size_t>(s) * entries * kDim;
    KMeans(residual.data(), n, entries, o.iterations, o.seed * 1000003u + static_cast<uint64_t>(s),
           o.threads, o.isa, b);
    for (int i = 0; i < entries * kDim; ++i) b[i] = RoundF16(b[i]);
    const kernels::NearestEntry search(b, entries, o.isa);
    ForBlocks(o.threads, [&](int blk) {
      const int64_t first = n * blk / kBlocks, end = n * (blk + 1) / kBlocks;
      search.Find(residual.data() + first * kDim, end - first, nearest.data() + first);
      for (int64_t j = first; j < end; ++j) {
        float* x = residual.data() + j * kDim;
        const int a = nearest[j];
        for (int i = 0; i < kDim; ++i) x[i] -= b[a * kDim + i];
      }
    });
  }
  return books;
}

QuantError QuantizeMatrix(const float* w, int64_t rows, int64_t cols, const float* books,
                          int stages, int entries, kernels::Isa isa, uint8_t* indices,
                          uint16_t* scales) {
  const int64_t per_row = cols / kDim, per_stage = rows * per_row;
  std::vector<kernels::NearestEntry> search;
  search.reserve(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s)
    search.emplace_back(books + static_cast<size_t>(s) * entries * kDim, entries, isa);
  // One row at a time: x its normalized vectors, then what the stages so
  // far leave of them; q the sum of the chosen entries (the row's unscaled
  // reconstruction). Each vector sees the same float operations, in the
  // same order, as when it was searched on its own.
  std::vector<float> x(static_cast<size_t>(cols)), q(static_cast<size_t>(cols));
  std::vector<int32_t> nearest(static_cast<size_t>(per_row));
  // The error sums add row after row, weight after weight, as always; the
  // row's norm is added at once and the errors go through AddSquaredErrors
  // so that no sum lives across the searches' calls (GCC then keeps it in
  // a stack slot, stored and loaded on every weight).
  double err2 = 0, norm2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    const double ss = SumOfSquares(row, cols);
    norm2 += ss;
    const double rms = std::sqrt(ss / static_cast<double>(cols));
    const float inv = rms > 0 ? static_cast<float>(1.0 / rms) : 0.f;
    for (int64_t c = 0; c < cols; ++c) x[c] = row[c] * inv;
    std::fill(q.begin(), q.end(), 0.f);
    for (int s = 0; s < stages; ++s) {
      const float* b = books + static_cast<size_t>(s) * entries * kDim;
      search[s].Find(x.data(), per_row, nearest.data());
      uint8_t* idx = indices + s * per_stage + r * per_row;
      for (int64_t v = 0; v < per_row; ++v) {
        const int a = nearest[v];
        idx[v] = static_cast<uint8_t>(a);
        for (int i = 0; i < kDim; ++i)
          x[v * kDim + i] -= b[a * kDim + i], q[v * kDim + i] += b[a * kDim + i];
      }
    }
    // Least-squares scale for the chosen vectors, then stored as f16.
    double wq = 0, qq = 0;
    for (int64_t c = 0; c < cols; ++c)
      wq += static_cast<double>(row[c]) * q[c], qq += double(q[c]) * q[c];
    const float scale = qq > 0 ? static_cast<float>(wq / qq) : 0.f;
    scales[r] = format::F32ToF16(scale);
    const float stored = format::F16ToF32(scales[r]);
    err2 = AddSquaredErrors(err2, row, q.data(), stored, cols);
  }
  QuantError err;
  err.err2 = err2;
  err.norm2 = norm2;
  return err;
}

}  // namespace waste::convert
