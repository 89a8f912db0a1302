// engine/kernels/mxfp4.h: the MXFP4 product. The scalar reference against a
// double-precision sum of the decoded weights, and every SIMD path, every
// row range and every thread count against the scalar reference bit for
// bit (the header promises the same bits), on every code and on scales
// from subnormal to large.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/format/encoding.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/mxfp4.h"
#include "engine/kernels/thread_pool.h"

namespace waste::kernels {
namespace {

struct Matrix {
  std::vector<uint8_t> codes, scales;
  Mxfp4MatrixView view;
};

// Random codes (every one of the 16 appears), scales around 2^0 with a few
// at the subnormal end (codes 0 and 1).
Matrix Make(int64_t rows, int64_t cols, std::mt19937& rng) {
  Matrix m;
  m.codes.resize(static_cast<size_t>(rows * cols / 2));
  m.scales.resize(static_cast<size_t>(rows * cols / 32));
  for (uint8_t& c : m.codes) c = static_cast<uint8_t>(rng());
  std::uniform_int_distribution<int> sc(112, 136);
  for (size_t i = 0; i < m.scales.size(); ++i)
    m.scales[i] = static_cast<uint8_t>(i % 13 == 5 ? i % 2 : sc(rng));
  m.view = {m.codes.data(), m.scales.data(), rows, cols};
  return m;
}

std::vector<float> RandomX(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(rng);
  return x;
}

TEST(Mxfp4, ScalarIsTheDecodedSum) {
  std::mt19937 rng(1);
  const Matrix m = Make(37, 96, rng);
  const std::vector<float> x = RandomX(96, rng);
  std::vector<float> y(37);
  Mxfp4MatVec(m.view, x.data(), y.data(), 0, 37, Isa::kScalar);
  for (int64_t r = 0; r < 37; ++r) {
    double want = 0, mag = 0;
    for (int64_t c = 0; c < 96; ++c) {
      const uint8_t b = m.codes[static_cast<size_t>(r * 48 + c / 2)];
      const float w = format::E2m1ToF32(static_cast<uint8_t>((c & 1) ? b >> 4 : b)) *
                      format::E8m0ToF32(m.scales[static_cast<size_t>(r * 3 + c / 32)]);
      want += static_cast<double>(w) * x[static_cast<size_t>(c)];
      mag += std::fabs(static_cast<double>(w) * x[static_cast<size_t>(c)]);
    }
    EXPECT_NEAR(y[static_cast<size_t>(r)], want, 1e-6 * mag + 1e-30) << "row " << r;
  }
}

TEST(Mxfp4, EveryIsaGivesTheScalarBits) {
  std::mt19937 rng(2);
  for (const int64_t cols : {32, 64, 96, 2880}) {
    const int64_t rows = 45;
    const Matrix m = Make(rows, cols, rng);
    const std::vector<float> x = RandomX(cols, rng);
    std::vector<float> want(rows);
    Mxfp4MatVec(m.view, x.data(), want.data(), 0, rows, Isa::kScalar);
    for (const Isa isa : AvailableIsas()) {
      std::vector<float> got(rows, -1.f);
      Mxfp4MatVec(m.view, x.data(), got.data(), 0, rows, isa);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
          << IsaName(isa) << " cols " << cols;
    }
  }
}

TEST(Mxfp4, RowRangesAndThreadsChangeNothing) {
  std::mt19937 rng(3);
  const int64_t rows = 100, cols = 160;
  const Matrix m = Make(rows, cols, rng);
  const std::vector<float> x = RandomX(cols, rng);
  for (const Isa isa : AvailableIsas()) {
    std::vector<float> whole(rows);
    Mxfp4MatVec(m.view, x.data(), whole.data(), 0, rows, isa);
    for (const int64_t step : {1, 7, 32}) {
      std::vector<float> parts(rows, -1.f);
      for (int64_t a = 0; a < rows; a += step)
        Mxfp4MatVec(m.view, x.data(), parts.data(), a, std::min(rows, a + step), isa);
      EXPECT_EQ(std::memcmp(parts.data(), whole.data(), whole.size() * 4), 0)
          << IsaName(isa) << " step " << step;
    }
    for (const int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> got(rows, -1.f);
      pool.ParallelFor(rows, 8, [&](int64_t a, int64_t b) {
        Mxfp4MatVec(m.view, x.data(), got.data(), a, b, isa);
      });
      EXPECT_EQ(std::memcmp(got.data(), whole.data(), whole.size() * 4), 0)
          << IsaName(isa) << " threads " << threads;
    }
  }
}

TEST(Mxfp4, WritesOnlyItsRows) {
  std::mt19937 rng(4);
  const Matrix m = Make(10, 64, rng);
  const std::vector<float> x = RandomX(64, rng);
  for (const Isa isa : AvailableIsas()) {
    std::vector<float> y(10, 42.f);
    Mxfp4MatVec(m.view, x.data(), y.data(), 3, 6, isa);
    for (int r : {0, 1, 2, 6, 7, 8, 9}) EXPECT_EQ(y[static_cast<size_t>(r)], 42.f) << r;
    for (int r : {3, 4, 5}) EXPECT_NE(y[static_cast<size_t>(r)], 42.f) << r;
  }
}

}  // namespace
}  // namespace waste::kernels
