// engine/kernels/int4.h: the INT4 product. The decoding (encoding.h) against
// compressed-tensors' own decompress on committed bytes
// (tests/fixtures/int4/), the scalar reference against a double-precision
// sum of those weights, and every SIMD path, every row range and every
// thread count against the scalar reference bit for bit (the header promises
// the same bits), on every code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/format/encoding.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/int4.h"
#include "engine/kernels/thread_pool.h"
#include "tests/test_util.h"

namespace waste::kernels {
namespace {

const std::string kFixtures = std::string(WASTE_FIXTURES) + "/int4/";

struct Matrix {
  std::vector<uint8_t> codes, scales;
  Int4MatrixView view;
};

// Random codes (every one of the 16 appears) and random finite bf16 scales
// of both signs between about 2^-8 and 2^8.
Matrix Make(int64_t rows, int64_t cols, std::mt19937& rng) {
  Matrix m;
  m.codes.resize(static_cast<size_t>(rows * cols / 2));
  m.scales.resize(static_cast<size_t>(rows * cols / 32 * 2));
  for (uint8_t& c : m.codes) c = static_cast<uint8_t>(rng());
  std::uniform_int_distribution<int> exponent(119, 135);
  for (size_t i = 0; i < m.scales.size(); i += 2) {
    const uint16_t h = static_cast<uint16_t>((rng() & 0x807f) | (exponent(rng) << 7));
    std::memcpy(&m.scales[i], &h, 2);
  }
  m.view = {m.codes.data(), m.scales.data(), rows, cols};
  return m;
}

float Weight(const Int4MatrixView& w, int64_t r, int64_t c) {
  const uint8_t b = w.codes[r * (w.cols / 2) + c / 2];
  uint16_t s;
  std::memcpy(&s, w.scales + 2 * (r * (w.cols / 32) + c / 32), 2);
  return format::Int4ToF32(static_cast<uint8_t>((c & 1) ? b >> 4 : b)) * format::Bf16ToF32(s);
}

std::vector<float> RandomX(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-2.f, 2.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = d(rng);
  return x;
}

// compressed-tensors packed a [16][128] matrix (weight_packed's int32 bytes,
// weight_scale's bf16 bytes) and decompressed it with its scale in float32:
// every weight decodes to its value exactly, and the product is its sum.
TEST(Int4, DecodesAsCompressedTensorsDoes) {
  const std::vector<uint8_t> codes = waste::testing::FileBytes(kFixtures + "packed.bin");
  const std::vector<uint8_t> scales = waste::testing::FileBytes(kFixtures + "scales.bin");
  const std::vector<float> want = waste::testing::FileFloats(kFixtures + "dequant.bin");
  const int64_t rows = 16, cols = 128;
  ASSERT_EQ(codes.size(), static_cast<size_t>(rows * cols / 2));
  ASSERT_EQ(scales.size(), static_cast<size_t>(rows * cols / 32 * 2));
  ASSERT_EQ(want.size(), static_cast<size_t>(rows * cols));
  const Int4MatrixView w{codes.data(), scales.data(), rows, cols};
  int extremes = 0;  // codes 0 and 15 (values -8 and 7) are both present
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = Weight(w, r, c);
      ASSERT_EQ(v, want[static_cast<size_t>(r * cols + c)]) << "row " << r << " col " << c;
      const uint8_t b = codes[static_cast<size_t>(r * cols / 2 + c / 2)];
      const int code = (c & 1) ? b >> 4 : b & 15;
      extremes |= code == 0 ? 1 : code == 15 ? 2 : 0;
    }
  EXPECT_EQ(extremes, 3);
  std::mt19937 rng(5);
  const std::vector<float> x = RandomX(cols, rng);
  std::vector<float> y(rows);
  Int4MatVec(w, x.data(), y.data(), 0, rows, Isa::kScalar);
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0, mag = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double p = static_cast<double>(want[static_cast<size_t>(r * cols + c)]) *
                       x[static_cast<size_t>(c)];
      sum += p, mag += std::fabs(p);
    }
    EXPECT_NEAR(y[static_cast<size_t>(r)], sum, 1e-6 * mag) << "row " << r;
  }
}

TEST(Int4, ScalarIsTheDecodedSum) {
  std::mt19937 rng(1);
  const Matrix m = Make(37, 96, rng);
  const std::vector<float> x = RandomX(96, rng);
  std::vector<float> y(37);
  Int4MatVec(m.view, x.data(), y.data(), 0, 37, Isa::kScalar);
  for (int64_t r = 0; r < 37; ++r) {
    double want = 0, mag = 0;
    for (int64_t c = 0; c < 96; ++c) {
      const double p = static_cast<double>(Weight(m.view, r, c)) * x[static_cast<size_t>(c)];
      want += p, mag += std::fabs(p);
    }
    EXPECT_NEAR(y[static_cast<size_t>(r)], want, 1e-6 * mag + 1e-30) << "row " << r;
  }
}

TEST(Int4, EveryIsaGivesTheScalarBits) {
  std::mt19937 rng(2);
  for (const int64_t cols : {32, 64, 96, 7168}) {
    const int64_t rows = 45;
    const Matrix m = Make(rows, cols, rng);
    const std::vector<float> x = RandomX(cols, rng);
    std::vector<float> want(rows);
    Int4MatVec(m.view, x.data(), want.data(), 0, rows, Isa::kScalar);
    for (const Isa isa : AvailableIsas()) {
      std::vector<float> got(rows, -1.f);
      Int4MatVec(m.view, x.data(), got.data(), 0, rows, isa);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
          << IsaName(isa) << " cols " << cols;
    }
  }
}

TEST(Int4, RowRangesAndThreadsChangeNothing) {
  std::mt19937 rng(3);
  const int64_t rows = 100, cols = 160;
  const Matrix m = Make(rows, cols, rng);
  const std::vector<float> x = RandomX(cols, rng);
  for (const Isa isa : AvailableIsas()) {
    std::vector<float> whole(rows);
    Int4MatVec(m.view, x.data(), whole.data(), 0, rows, isa);
    for (const int64_t step : {1, 7, 32}) {
      std::vector<float> parts(rows, -1.f);
      for (int64_t a = 0; a < rows; a += step)
        Int4MatVec(m.view, x.data(), parts.data(), a, std::min(rows, a + step), isa);
      EXPECT_EQ(std::memcmp(parts.data(), whole.data(), whole.size() * 4), 0)
          << IsaName(isa) << " step " << step;
    }
    for (const int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> got(rows, -1.f);
      pool.ParallelFor(rows, 8, [&](int64_t a, int64_t b) {
        Int4MatVec(m.view, x.data(), got.data(), a, b, isa);
      });
      EXPECT_EQ(std::memcmp(got.data(), whole.data(), whole.size() * 4), 0)
          << IsaName(isa) << " threads " << threads;
    }
  }
}

TEST(Int4, WritesOnlyItsRows) {
  std::mt19937 rng(4);
  const Matrix m = Make(10, 64, rng);
  const std::vector<float> x = RandomX(64, rng);
  for (const Isa isa : AvailableIsas()) {
    std::vector<float> y(10, 42.f);
    Int4MatVec(m.view, x.data(), y.data(), 3, 6, isa);
    for (int r : {0, 1, 2, 6, 7, 8, 9}) EXPECT_EQ(y[static_cast<size_t>(r)], 42.f) << r;
    for (int r : {3, 4, 5}) EXPECT_NE(y[static_cast<size_t>(r)], 42.f) << r;
  }
}

}  // namespace
}  // namespace waste::kernels
