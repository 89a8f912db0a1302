#include "engine/convert/vq_fit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>

#include "engine/format/encoding.h"

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

// Index of the entry nearest to x: argmin ||c||^2 - 2 x.c (norms given).
int Nearest(const float* x, const float* books, const float* norms, int entries) {
  int best = 0;
  float best_d = std::numeric_limits<float>::infinity();
  for (int e = 0; e < entries; ++e) {
    const float* c = books + e * kDim;
    float dot = 0.f;
    for (int i = 0; i < kDim; ++i) dot += x[i] * c[i];
    const float d = norms[e] - 2.f * dot;
    if (d < best_d) best_d = d, best = e;
  }
  return best;
}

void Norms(const float* books, int entries, float* norms) {
  for (int e = 0; e < entries; ++e) {
    float s = 0.f;
    for (int i = 0; i < kDim; ++i) s += books[e * kDim + i] * books[e * kDim + i];
    norms[e] = s;
  }
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
            float* books) {
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
  std::vector<float> norms(entries);
  for (int it = 0; it < iterations; ++it) {
    Norms(books, entries, norms.data());
    ForBlocks(threads, [&](int b) {
      std::vector<double>& bs = block_sum[b];
      std::vector<int64_t>& bc = block_count[b];
      std::fill(bs.begin(), bs.end(), 0.0);
      std::fill(bc.begin(), bc.end(), 0);
      for (int64_t j = n * b / kBlocks; j < n * (b + 1) / kBlocks; ++j) {
        const int a = Nearest(x + j * kDim, books, norms.data(), entries);
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
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(row[c]) * row[c];
    const double rms = std::sqrt(ss / static_cast<double>(cols));
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
  std::vector<float> norms(entries);
  for (int s = 0; s < stages; ++s) {
    float* b = books.data() + static_cast<size_t>(s) * entries * kDim;
    KMeans(residual.data(), n, entries, o.iterations, o.seed * 1000003u + static_cast<uint64_t>(s),
           o.threads, b);
    for (int i = 0; i < entries * kDim; ++i) b[i] = RoundF16(b[i]);
    Norms(b, entries, norms.data());
    ForBlocks(o.threads, [&](int blk) {
      for (int64_t j = n * blk / kBlocks; j < n * (blk + 1) / kBlocks; ++j) {
        float* x = residual.data() + j * kDim;
        const int a = Nearest(x, b, norms.data(), entries);
        for (int i = 0; i < kDim; ++i) x[i] -= b[a * kDim + i];
      }
    });
  }
  return books;
}

QuantError QuantizeMatrix(const float* w, int64_t rows, int64_t cols, const float* books,
                          int stages, int entries, uint8_t* indices, uint16_t* scales) {
  const int64_t per_row = cols / kDim, per_stage = rows * per_row;
  std::vector<float> norms(static_cast<size_t>(stages) * entries);
  for (int s = 0; s < stages; ++s)
    Norms(books + static_cast<size_t>(s) * entries * kDim, entries, norms.data() + s * entries);
  std::vector<float> q(static_cast<size_t>(cols));  // the row's unscaled reconstruction
  QuantError err;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(row[c]) * row[c];
    const double rms = std::sqrt(ss / static_cast<double>(cols));
    const float inv = rms > 0 ? static_cast<float>(1.0 / rms) : 0.f;
    for (int64_t v = 0; v < per_row; ++v) {
      float x[kDim], acc[kDim] = {};
      for (int i = 0; i < kDim; ++i) x[i] = row[v * kDim + i] * inv;
      for (int s = 0; s < stages; ++s) {
        const float* b = books + static_cast<size_t>(s) * entries * kDim;
        const int a = Nearest(x, b, norms.data() + s * entries, entries);
        indices[s * per_stage + r * per_row + v] = static_cast<uint8_t>(a);
        for (int i = 0; i < kDim; ++i) x[i] -= b[a * kDim + i], acc[i] += b[a * kDim + i];
      }
      std::memcpy(q.data() + v * kDim, acc, sizeof acc);
    }
    // Least-squares scale for the chosen vectors, then stored as f16.
    double wq = 0, qq = 0;
    for (int64_t c = 0; c < cols; ++c) wq += static_cast<double>(row[c]) * q[c], qq += double(q[c]) * q[c];
    const float scale = qq > 0 ? static_cast<float>(wq / qq) : 0.f;
    scales[r] = format::F32ToF16(scale);
    const float stored = format::F16ToF32(scales[r]);
    for (int64_t c = 0; c < cols; ++c) {
      const double d = static_cast<double>(row[c]) - static_cast<double>(stored * q[c]);
      err.err2 += d * d;
    }
    err.norm2 += ss;
  }
  return err;
}

}  // namespace waste::convert
