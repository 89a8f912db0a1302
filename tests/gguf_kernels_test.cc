// engine/kernels/gguf_matvec.h: the products straight from GGUF blocks.
// The scalar reference against the `gguf` package's dequantized values
// (tests/fixtures/gguf/quants, tools/gguf/make_fixtures.py): bit for bit
// against the header's order applied to them, and within that order's
// rounding of their exact (double) dot. Every SIMD path, row range and
// chunk against the scalar reference bit for bit, on matrices tiled from
// the fixture blocks with odd row counts and widths that end in a partial
// piece.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/gguf_matvec.h"
#include "tests/test_util.h"

namespace waste::kernels {
namespace {

// One fixture file: the package's blocks and its dequantization of them.
struct Quants {
  uint32_t type = 0, block = 0, size = 0, n = 0;
  std::vector<uint8_t> blocks;
  std::vector<float> values;
};

Quants Load(const char* name) {
  const std::vector<uint8_t> b =
      testing::FileBytes(std::string(WASTE_FIXTURES) + "/gguf/quants/" + name + ".bin");
  Quants q;
  EXPECT_GE(b.size(), 16u);
  if (b.size() < 16) return q;
  std::memcpy(&q.type, b.data(), 4);
  std::memcpy(&q.block, b.data() + 4, 4);
  std::memcpy(&q.size, b.data() + 8, 4);
  std::memcpy(&q.n, b.data() + 12, 4);
  const size_t bytes = size_t{q.n} * q.size, values = size_t{q.n} * q.block;
  EXPECT_EQ(b.size(), 16 + bytes + values * 4);
  if (b.size() != 16 + bytes + values * 4) return q;
  q.blocks.assign(b.begin() + 16, b.begin() + 16 + static_cast<ptrdiff_t>(bytes));
  q.values.resize(values);
  std::memcpy(q.values.data(), b.data() + 16 + bytes, values * 4);
  return q;
}

// The types the products read, in the order the issue asks for them, then
// the others gguf_dequant.h reads.
const char* const kTypes[] = {"q4_k",   "q5_k",   "q6_k",  "q8_0",  "q2_k",    "q3_k",
                              "iq4_xs", "mxfp4",  "q4_0",  "q4_1",  "q5_0",    "q5_1",
                              "iq4_nl", "bf16",   "f16",   "f32",   "iq3_xxs", "iq2_xxs",
                              "iq3_s",  "iq2_xs", "iq2_s", "iq1_s", "iq1_m"};

std::vector<float> RandomX(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// gguf_matvec.h's order, written from its statement, on given weights.
float HeaderOrder(const float* w, const float* x, int64_t cols) {
  float acc[64] = {};
  for (int64_t c = 0; c < cols; ++c) acc[c % 64] = acc[c % 64] + w[c] * x[c];
  for (int s = 32; s >= 1; s /= 2)
    for (int i = 0; i < s; ++i) acc[i] = acc[i] + acc[i + s];
  return acc[0];
}

// The fixture's blocks as rows x cols (every shape its blocks fill): y is
// the header's order on the package's values, bit for bit, and within that
// order's rounding of the exact dot: a product and cols/64 + 6 adds on the
// longest path, so |y - dot| <= gamma(cols/64 + 8) * sum |w x|.
TEST(GgufKernels, ScalarIsThePackagesValuesInTheHeadersOrder) {
  std::mt19937 rng(1);
  for (const char* name : kTypes) {
    SCOPED_TRACE(name);
    const Quants q = Load(name);
    ASSERT_TRUE(GgufMatVecSupports(q.type));
    const int64_t total = int64_t{q.n} * q.block;
    const std::vector<float> x = RandomX(static_cast<size_t>(total), rng);
    int shapes = 0;
    for (int64_t rows = 1; rows <= q.n; rows *= 2) {
      const int64_t cols = total / rows;
      const GgufMatrixView w{q.type, q.blocks.data(), static_cast<int64_t>(q.blocks.size()), rows,
                             cols};
      ASSERT_TRUE(CheckGgufMatrix(w).ok());
      std::vector<float> y(static_cast<size_t>(rows));
      GgufMatVec(w, x.data(), y.data(), 0, rows, Isa::kScalar);
      const double u = std::ldexp(1.0, -24), k = static_cast<double>(cols / 64 + 8);
      for (int64_t r = 0; r < rows; ++r) {
        const float* wr = q.values.data() + r * cols;
        const float want = HeaderOrder(wr, x.data(), cols);
        EXPECT_EQ(std::memcmp(&y[static_cast<size_t>(r)], &want, 4), 0)
            << rows << " x " << cols << " row " << r << ": " << y[static_cast<size_t>(r)]
            << " != " << want;
        double dot = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          dot += static_cast<double>(wr[c]) * x[static_cast<size_t>(c)];
          mag += std::fabs(static_cast<double>(wr[c]) * x[static_cast<size_t>(c)]);
        }
        EXPECT_LE(std::fabs(y[static_cast<size_t>(r)] - dot), k * u / (1 - k * u) * mag)
            << rows << " x " << cols << " row " << r;
      }
      ++shapes;
    }
    EXPECT_GE(shapes, 4);
  }
}

// A rows x cols matrix of the fixture's blocks, tiled in a scrambled order.
std::vector<uint8_t> Tile(const Quants& q, int64_t rows, int64_t cols) {
  const int64_t per_row = cols / q.block;
  std::vector<uint8_t> m(static_cast<size_t>(rows * per_row * q.size));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < per_row; ++k)
      std::memcpy(m.data() + (r * per_row + k) * q.size,
                  q.blocks.data() + (r * 7 + k * 3) % q.n * q.size, q.size);
  return m;
}

// Widths of one block, of a piece and a part, and of many pieces and a part
// (for the float types, parts that end inside a register and a lane row).
std::vector<int64_t> Widths(const Quants& q) {
  if (q.block == 256) return {256, 768, 2816};
  if (q.block == 1) return {1, 13, 77, 333, 2885};
  return {32, 96, 352, 2880};
}

TEST(GgufKernels, EveryIsaAndRowRangeGivesTheScalarBits) {
  std::mt19937 rng(2);
  for (const char* name : kTypes) {
    const Quants q = Load(name);
    for (const int64_t cols : Widths(q)) {
      SCOPED_TRACE(std::string(name) + " cols " + std::to_string(cols));
      const int64_t rows = 37;
      const std::vector<uint8_t> m = Tile(q, rows, cols);
      const GgufMatrixView w{q.type, m.data(), static_cast<int64_t>(m.size()), rows, cols};
      const std::vector<float> x = RandomX(static_cast<size_t>(cols), rng);
      std::vector<float> want(rows);
      GgufMatVec(w, x.data(), want.data(), 0, rows, Isa::kScalar);
      for (const Isa isa : AvailableIsas()) {
        std::vector<float> got(rows, -1.f);
        GgufMatVec(w, x.data(), got.data(), 0, rows, isa);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << IsaName(isa);
        std::vector<float> part(rows, -1.f);
        GgufMatVec(w, x.data(), part.data(), 5, 22, isa);
        for (int64_t r = 0; r < rows; ++r) {
          const float expect = r >= 5 && r < 22 ? want[static_cast<size_t>(r)] : -1.f;
          EXPECT_EQ(std::memcmp(&part[static_cast<size_t>(r)], &expect, 4), 0)
              << IsaName(isa) << " rows [5, 22), row " << r;
        }
      }
    }
  }
}

// The chunk product on 1, 3 and 70 inputs (past the 64 a row's blocks are
// decoded once for) is each input's GgufMatVec, bit for bit, on every Isa.
TEST(GgufKernels, ChunkIsEachInputsMatVec) {
  std::mt19937 rng(3);
  for (const char* name : kTypes) {
    const Quants q = Load(name);
    const int64_t rows = 9, cols = Widths(q)[1];
    const std::vector<uint8_t> m = Tile(q, rows, cols);
    const GgufMatrixView w{q.type, m.data(), static_cast<int64_t>(m.size()), rows, cols};
    for (const size_t n : {size_t{1}, size_t{3}, size_t{70}}) {
      SCOPED_TRACE(std::string(name) + " inputs " + std::to_string(n));
      std::vector<std::vector<float>> x(n), want(n), got(n);
      std::vector<const float*> xs(n);
      std::vector<float*> ys(n);
      for (size_t t = 0; t < n; ++t) {
        x[t] = RandomX(static_cast<size_t>(cols), rng);
        want[t].resize(rows);
        got[t].assign(rows, -1.f);
        xs[t] = x[t].data();
        ys[t] = got[t].data();
        GgufMatVec(w, xs[t], want[t].data(), 0, rows, Isa::kScalar);
      }
      for (const Isa isa : AvailableIsas()) {
        GgufMatMul(w, xs, ys, 1, rows, isa);
        for (size_t t = 0; t < n; ++t) {
          EXPECT_EQ(got[t][0], -1.f) << IsaName(isa) << " wrote a row outside its range";
          EXPECT_EQ(std::memcmp(got[t].data() + 1, want[t].data() + 1, (rows - 1) * 4), 0)
              << IsaName(isa) << " input " << t;
        }
      }
    }
  }
}

// F16 and BF16 rows of every kind of value (subnormals, signed zeros,
// infinities, the largest finite): every Isa's conversion gives the
// scalar's bits. One row per special value, the rest of it random halves.
TEST(GgufKernels, FloatTypesSpecialValuesOnEveryIsa) {
  std::mt19937 rng(4);
  const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x0200, 0x7bff,
                               0xfbff, 0x7c00, 0xfc00, 0x0400, 0x3c00, 0x8001};
  for (const uint32_t type : {uint32_t{gguf::kF16}, uint32_t{gguf::kBF16}}) {
    const int64_t rows = std::size(specials), cols = 300;
    std::vector<uint16_t> m(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)  // finite small values of either type, then the special
        m[static_cast<size_t>(r * cols + c)] =
            c % 37 == r
                ? specials[r]
                : static_cast<uint16_t>((type == gguf::kF16 ? 0x3000 : 0x3e00) | (rng() & 0x80ff));
    const GgufMatrixView w{type, reinterpret_cast<const uint8_t*>(m.data()),
                           static_cast<int64_t>(m.size() * 2), rows, cols};
    ASSERT_TRUE(CheckGgufMatrix(w).ok());
    const std::vector<float> x = RandomX(static_cast<size_t>(cols), rng);
    std::vector<float> want(static_cast<size_t>(rows));
    GgufMatVec(w, x.data(), want.data(), 0, rows, Isa::kScalar);
    int finite = 0;
    for (const float v : want) finite += std::isfinite(v);
    EXPECT_GE(finite, 8);  // most rows are numbers, not all inf or NaN
    for (const Isa isa : AvailableIsas()) {
      std::vector<float> got(static_cast<size_t>(rows));
      GgufMatVec(w, x.data(), got.data(), 0, rows, isa);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
          << gguf::TypeName(type) << " " << IsaName(isa);
    }
  }
}

TEST(GgufKernels, RefusesOtherTypesAndShapesByName) {
  const uint8_t block[34] = {};  // one Q8_0 block
  auto message = [&](uint32_t type, int64_t bytes, int64_t rows, int64_t cols) {
    return CheckGgufMatrix({type, block, bytes, rows, cols}).message();
  };
  EXPECT_EQ(message(gguf::kQ8_0, 34, 1, 32), "");
  EXPECT_EQ(message(gguf::kQ8_0, 34, 0, 32), "");
  // ggml's codes 34 and 15: TQ1_0 and Q8_K (llama.cpp's input type only).
  EXPECT_NE(message(34, 54, 1, 256).find("TQ1_0 has no matrix product"), std::string::npos);
  EXPECT_NE(message(15, 292, 1, 256).find("Q8_K has no matrix product"), std::string::npos);
  EXPECT_NE(message(99, 34, 1, 32).find("type 99"), std::string::npos);
  EXPECT_NE(message(gguf::kQ4_K, 1 << 20, 2, 384)
                .find("Q4_K matrix of 2 x 384: cols must be whole blocks of 256"),
            std::string::npos);
  EXPECT_NE(message(gguf::kQ8_0, 34, -1, 32).find("Q8_0 matrix of -1 x 32"), std::string::npos);
  EXPECT_NE(message(gguf::kQ8_0, 34, 2, 32).find("needs 34 bytes a row, has 34 bytes"),
            std::string::npos);
  EXPECT_NE(message(gguf::kQ8_0, 34, int64_t{1} << 62, 32 << 20).find("bytes a row"),
            std::string::npos);  // rows * row bytes past int64: still refused
  EXPECT_FALSE(CheckGgufMatrix({gguf::kQ8_0, nullptr, 34, 1, 32}).ok());
}

}  // namespace
}  // namespace waste::kernels
