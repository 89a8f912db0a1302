// The compute kernels: every SIMD path against the scalar reference, the
// scalar references against independent decodings (encoding.h for the
// trunk formats, a fully dequantized matrix for VQ), row ranges that write
// only their rows, reads that stay inside their buffers (every buffer ends
// at an unmapped page), and the thread pool's coverage of a range.
// Every suite is instantiated as "kernels/...", so `ctest -R kernels` runs
// exactly this file.
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/format/encoding.h"
#include "engine/format/writer.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/matvec.h"
#include "engine/kernels/nearest.h"
#include "engine/kernels/recurrence.h"
#include "engine/kernels/thread_pool.h"
#include "engine/kernels/vq.h"

namespace waste::kernels {
namespace {

using format::Fmt;

// ---- helpers ----

// `bytes` of zeroed memory that end `slack` bytes before an unmapped page, so
// a read or write past the end faults. slack > 0 also misaligns the start.
class Guarded {
 public:
  explicit Guarded(size_t bytes, size_t slack = 0) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    map_bytes_ = (bytes + slack + page - 1) / page * page + page;
    void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<uint8_t*>(p);
    if (mprotect(base_ + map_bytes_ - page, page, PROT_NONE) != 0)
      throw std::runtime_error("mprotect failed");
    data_ = base_ + map_bytes_ - page - slack - bytes;
  }
  ~Guarded() { munmap(base_, map_bytes_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;

  uint8_t* bytes() { return data_; }
  float* floats() { return reinterpret_cast<float*>(data_); }

 private:
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t map_bytes_ = 0;
};

std::string Name(Isa isa) {
  return IsaName(isa);
}

// Skips (loudly) when the CPU lacks `isa`.
#define WASTE_REQUIRE_ISA(isa)                                                            \
  do {                                                                                    \
    if (UsableIsa(isa) != (isa))                                                          \
      GTEST_SKIP() << "SKIP: this CPU has no " << IsaName(isa) << "; the best it has is " \
                   << IsaName(BestIsa()) << ", so the " << IsaName(isa)                   \
                   << " path is NOT tested here";                                         \
  } while (0)

// ---- cpu ----

class Isas : public ::testing::TestWithParam<Isa> {};

TEST_P(Isas, AreListedInOrderWhenTheCpuHasThem) {
  const Isa isa = GetParam();
  const std::vector<Isa> isas = AvailableIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::kScalar);
  EXPECT_EQ(isas.back(), BestIsa());
  EXPECT_TRUE(std::is_sorted(isas.begin(), isas.end()));
  const bool listed = std::find(isas.begin(), isas.end(), isa) != isas.end();
  EXPECT_EQ(listed, isa <= BestIsa());
  EXPECT_EQ(UsableIsa(isa), listed ? isa : BestIsa());
  const char* want = isa == Isa::kScalar   ? "scalar"
                     : isa == Isa::kAvx2   ? "avx2"
                     : isa == Isa::kAvx512 ? "avx512"
                                           : "amx";
  EXPECT_STREQ(IsaName(isa), want);
  std::printf("%s: %s (best on this CPU: %s)\n", IsaName(isa),
              listed ? "available" : "NOT available", IsaName(BestIsa()));
}

INSTANTIATE_TEST_SUITE_P(kernels, Isas,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx),
                         [](const auto& test) { return std::string(IsaName(test.param)); });

// ---- trunk matrices ----

struct TrunkFormat {
  const char* name;
  Fmt fmt;
  bool bf16;
  int group;  // grouped formats
};

int Bits(Fmt f) {
  return f == Fmt::kQ8G ? 8 : f == Fmt::kQ4G ? 4 : 3;
}

// A random matrix stored in `f`, in guarded buffers, with its values decoded
// independently of the kernels (encoding.h on aligned copies).
struct TrunkMatrix {
  std::unique_ptr<Guarded> payload, scales;
  MatrixView view;
  std::vector<float> dense;  // [rows][cols], as encoding.h decodes the stored bytes

  TrunkMatrix(const TrunkFormat& f, int64_t rows, int64_t cols, size_t slack, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> values(static_cast<size_t>(rows * cols));
    for (float& v : values) v = normal(rng);
    view.fmt = f.fmt;
    view.bf16 = f.bf16;
    view.rows = rows;
    view.cols = cols;
    view.group = f.group;
    dense.resize(values.size());
    std::vector<uint8_t> bytes;
    std::vector<uint16_t> sc;
    if (f.fmt == Fmt::kF32) {
      bytes.resize(values.size() * 4);
      if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
      dense = values;
    } else if (f.fmt == Fmt::kF16) {
      std::vector<uint16_t> h(values.size());
      for (size_t i = 0; i < h.size(); ++i) {
        h[i] = f.bf16 ? format::F32ToBf16(values[i]) : format::F32ToF16(values[i]);
        dense[i] = f.bf16 ? format::Bf16ToF32(h[i]) : format::F16ToF32(h[i]);
      }
      bytes.resize(h.size() * 2);
      if (!bytes.empty()) std::memcpy(bytes.data(), h.data(), bytes.size());
    } else {
      const format::GroupedShape s{Bits(f.fmt), f.group, rows, cols};
      bytes.resize(static_cast<size_t>(s.payload_bytes()));
      sc.resize(static_cast<size_t>(s.rows * s.groups_per_row()));
      format::QuantizeGrouped(s, values.data(), bytes.data(), sc.data());
      for (int64_t r = 0; r < rows; ++r)
        format::DequantizeGroupedRow(s, bytes.data(), sc.data(), r, dense.data() + r * cols);
    }
    payload = std::make_unique<Guarded>(bytes.size(), slack);
    // A matrix of no rows has no bytes (and memcpy must not see null).
    if (!bytes.empty()) std::memcpy(payload->bytes(), bytes.data(), bytes.size());
    view.payload = payload->bytes();
    if (!sc.empty()) {
      scales = std::make_unique<Guarded>(sc.size() * 2, slack);
      std::memcpy(scales->bytes(), sc.data(), sc.size() * 2);
      view.scales = reinterpret_cast<const uint16_t*>(scales->bytes());
    }
  }

  // sum_c |W[r][c] x[c]|: the scale of the rounding error a row may carry.
  double AbsDot(int64_t r, const float* x) const {
    double s = 0;
    for (int64_t c = 0; c < view.cols; ++c) s += std::fabs(double{dense[r * view.cols + c]} * x[c]);
    return s;
  }
  double Dot(int64_t r, const float* x) const {
    double s = 0;
    for (int64_t c = 0; c < view.cols; ++c) s += double{dense[r * view.cols + c]} * x[c];
    return s;
  }
};

// An input vector of `n` floats ending at an unmapped page.
struct Input {
  Guarded mem;
  explicit Input(int64_t n, uint32_t seed) : mem(static_cast<size_t>(n) * 4) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (int64_t i = 0; i < n; ++i) mem.floats()[i] = normal(rng);
  }
  const float* data() { return mem.floats(); }
};

constexpr double kRel = 1e-5;  // of the row's absolute sum
const int64_t kRows[] = {1, 7, 65, 130};
const int64_t kTrunkCols[] = {1, 8, 13, 24, 136, 300, 2304};

const TrunkFormat kTrunkFormats[] = {
    {"F32", Fmt::kF32, false, 0},
    {"F16", Fmt::kF16, false, 0},
    {"BF16", Fmt::kF16, true, 0},
    {"Q8G_g128", Fmt::kQ8G, false, 128},
    {"Q4G_g128", Fmt::kQ4G, false, 128},
    {"Q3G_g128", Fmt::kQ3G, false, 128},
    {"Q8G_g32", Fmt::kQ8G, false, 32},
    {"Q4G_g64", Fmt::kQ4G, false, 64},
    {"Q3G_g16", Fmt::kQ3G, false, 16},
    // Groups AVX-512 cannot take (not a multiple of 16): AVX2 runs them.
    {"Q8G_g24", Fmt::kQ8G, false, 24},
    {"Q4G_g40", Fmt::kQ4G, false, 40},
    {"Q3G_g8", Fmt::kQ3G, false, 8},
    // Groups neither SIMD path takes: scalar runs them.
    {"Q8G_g20", Fmt::kQ8G, false, 20},
    {"Q4G_g6", Fmt::kQ4G, false, 6},
    {"Q3G_g5", Fmt::kQ3G, false, 5},
};

class TrunkFormats : public ::testing::TestWithParam<TrunkFormat> {};

TEST_P(TrunkFormats, DequantRowDecodesAsEncodingDoes) {
  uint32_t seed = 1;
  for (int64_t rows : {1, 7}) {
    for (int64_t cols : kTrunkCols) {
      TrunkMatrix m(GetParam(), rows, cols, 1, seed++);
      std::vector<float> out(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        DequantRow(m.view, r, out.data());
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(out[c], m.dense[r * cols + c])
              << "row " << r << " col " << c << " cols " << cols;
      }
    }
  }
}

TEST_P(TrunkFormats, ScalarMatVecMatchesAPlainDotProduct) {
  uint32_t seed = 100;
  for (int64_t rows : kRows) {
    for (int64_t cols : kTrunkCols) {
      TrunkMatrix m(GetParam(), rows, cols, 0, seed++);
      Input x(cols, seed++);
      Guarded y(static_cast<size_t>(rows) * 4);
      MatVec(m.view, x.data(), y.floats(), 0, rows, Isa::kScalar);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_NEAR(y.floats()[r], m.Dot(r, x.data()), kRel * m.AbsDot(r, x.data()) + 1e-30)
            << rows << "x" << cols << " row " << r;
    }
  }
}

// Every SIMD path against scalar, on all rows and on sub-ranges; rows
// outside the range keep their sentinel.
void CheckTrunkIsa(const TrunkFormat& f, Isa isa) {
  uint32_t seed = 200;
  for (size_t slack : {0, 1}) {
    for (int64_t rows : kRows) {
      for (int64_t cols : kTrunkCols) {
        SCOPED_TRACE(::testing::Message()
                     << f.name << " " << rows << "x" << cols << " slack " << slack);
        TrunkMatrix m(f, rows, cols, slack, seed++);
        Input x(cols, seed++);
        std::vector<float> want(static_cast<size_t>(rows));
        MatVec(m.view, x.data(), want.data(), 0, rows, Isa::kScalar);
        Guarded y(static_cast<size_t>(rows) * 4);
        MatVec(m.view, x.data(), y.floats(), 0, rows, isa);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_NEAR(y.floats()[r], want[r], kRel * m.AbsDot(r, x.data()) + 1e-30) << "row " << r;

        const int64_t ranges[][2] = {
            {0, 0}, {0, 1}, {rows / 2, rows}, {rows / 3, rows / 3 + 1}, {1, rows - 1}};
        for (const auto& range : ranges) {
          const int64_t a = range[0], b = std::max(range[0], range[1]);
          std::fill_n(y.floats(), rows, -12345.f);
          MatVec(m.view, x.data(), y.floats(), a, b, isa);
          for (int64_t r = 0; r < rows; ++r) {
            if (r >= a && r < b)
              ASSERT_NEAR(y.floats()[r], want[r], kRel * m.AbsDot(r, x.data()) + 1e-30)
                  << "range [" << a << ", " << b << ") row " << r;
            else
              ASSERT_EQ(y.floats()[r], -12345.f)
                  << "range [" << a << ", " << b << ") wrote row " << r;
          }
        }
      }
    }
  }
}

TEST_P(TrunkFormats, Avx2MatchesScalar) {
  WASTE_REQUIRE_ISA(Isa::kAvx2);
  CheckTrunkIsa(GetParam(), Isa::kAvx2);
}

TEST_P(TrunkFormats, Avx512MatchesScalar) {
  WASTE_REQUIRE_ISA(Isa::kAvx512);
  CheckTrunkIsa(GetParam(), Isa::kAvx512);
}

TEST_P(TrunkFormats, AmxMatchesScalar) {
  WASTE_REQUIRE_ISA(Isa::kAmx);
  CheckTrunkIsa(GetParam(), Isa::kAmx);
}

TEST_P(TrunkFormats, RowBytes) {
  const TrunkFormat& f = GetParam();
  for (int64_t cols : kTrunkCols) {
    MatrixView w;
    w.fmt = f.fmt;
    w.bf16 = f.bf16;
    w.rows = 3;
    w.cols = cols;
    w.group = f.group;
    int64_t want;
    if (f.fmt == Fmt::kF32) {
      want = 4 * cols;
    } else if (f.fmt == Fmt::kF16) {
      want = 2 * cols;
    } else {
      const int64_t padded = (cols + f.group - 1) / f.group * f.group;
      want = f.fmt == Fmt::kQ8G   ? padded
             : f.fmt == Fmt::kQ4G ? padded / 2
                                  : (padded * 3 + 7) / 8 + 1;
    }
    EXPECT_EQ(MatrixRowBytes(w), want) << "cols " << cols;
  }
}

INSTANTIATE_TEST_SUITE_P(kernels, TrunkFormats, ::testing::ValuesIn(kTrunkFormats),
                         [](const auto& test) { return std::string(test.param.name); });

// WeightedRows reads a block of rows in place and must give, on every Isa,
// the bits of decoding them (DequantRow) and summing with WeightedRowSum:
// MLA's logits depend on it being the same whichever path runs.
TEST_P(TrunkFormats, WeightedRowsAreDequantRowThenWeightedRowSum) {
  const TrunkFormat& f = GetParam();
  uint32_t seed = 300;
  // Partial registers (AVX2: 8 lanes, AVX-512: 16) and column blocks
  // (AVX2: 64, AVX-512: 128).
  for (int64_t cols :
       {int64_t{1}, int64_t{13}, int64_t{72}, int64_t{136}, int64_t{300}, int64_t{512}}) {
    const int64_t rows = 40;
    TrunkMatrix m(f, rows, cols, 1, seed++);
    std::mt19937 rng(seed++);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> a(rows);
    for (float& v : a) v = normal(rng);
    for (const auto& [first, n] : {std::pair<int64_t, int64_t>{0, 40}, {5, 17}, {39, 1}, {3, 0}}) {
      std::vector<float> dense(static_cast<size_t>(n * cols)), want(cols);
      for (int64_t r = 0; r < n; ++r) DequantRow(m.view, first + r, dense.data() + r * cols);
      WeightedRowSum(a.data(), dense.data(), n, cols, cols, want.data(), Isa::kScalar);
      for (Isa isa : AvailableIsas()) {
        std::vector<float> y(static_cast<size_t>(cols) + 16, -3.f);
        WeightedRows(m.view, first, a.data(), n, y.data(), isa);
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), static_cast<size_t>(cols) * 4))
            << f.name << " " << IsaName(isa) << " cols " << cols << " rows [" << first << ", "
            << first + n << ")";
        EXPECT_EQ(y[cols], -3.f) << "wrote past cols, " << IsaName(isa);
      }
    }
  }
}

// MatVecMany (through MatVecBlocks) applies one matrix to several inputs, a
// block of rows to each in turn, each input put in fixed point once (Q4G in
// groups of 128 on AVX2 and AVX-512): each output must be the bits of its
// own MatVec, also for an input that cannot be put in fixed point (an
// infinity: the float path) beside ones that can. Fifteen inputs in fixed
// point take the kernels' passes of 4, 2 and 1 inputs at once, and AVX-512's
// of 8 (int8 inputs).
TEST_P(TrunkFormats, MatVecManyGivesTheBitsOfOneMatVecPerInput) {
  const TrunkFormat& f = GetParam();
  const int64_t cols = 256;
  uint32_t seed = 500;
  for (int64_t rows : {int64_t{1}, int64_t{67}, int64_t{130}}) {
    TrunkMatrix m(f, rows, cols, 1, seed++);
    std::vector<std::unique_ptr<Input>> inputs;
    for (int i = 0; i < 16; ++i) inputs.push_back(std::make_unique<Input>(cols, seed++));
    inputs[2]->mem.floats()[7] = INFINITY;
    for (Isa isa : AvailableIsas()) {
      for (Q4Input in : {Q4Input::kExact, Q4Input::kInt8}) {
        std::vector<std::vector<float>> want(inputs.size(), std::vector<float>(rows));
        for (size_t i = 0; i < inputs.size(); ++i)
          MatVec(m.view, inputs[i]->data(), want[i].data(), 0, rows, isa, in);
        for (int threads : {1, 3}) {
          ThreadPool pool(threads);
          for (int64_t grain : {1, 32}) {
            std::vector<std::vector<float>> out(inputs.size(), std::vector<float>(rows + 1, -7.f));
            std::vector<const float*> xs;
            std::vector<float*> ys;
            for (size_t i = 0; i < inputs.size(); ++i)
              xs.push_back(inputs[i]->data()), ys.push_back(out[i].data());
            MatVecMany(pool, m.view, xs, ys, grain, isa, in);
            for (size_t i = 0; i < inputs.size(); ++i) {
              EXPECT_EQ(0,
                        std::memcmp(out[i].data(), want[i].data(), static_cast<size_t>(rows) * 4))
                  << f.name << " " << IsaName(isa) << " rows " << rows << " input " << i
                  << (in == Q4Input::kInt8 ? " int8 inputs" : "");
              EXPECT_EQ(out[i][rows], -7.f) << "wrote past the output";
            }
          }
        }
      }
    }
  }
}

// MatVecs runs several matrices in one ParallelFor with chunks that cut
// across them: each output must be the bits of one MatVec over its whole
// matrix, and nothing outside the outputs may be written. Awkward row counts
// (zero rows, one, fewer than the threads, not a multiple of the grain) put
// chunk edges at and next to every matrix boundary.
TEST_P(TrunkFormats, MatVecsGivesTheBitsOfOneMatVecPerMatrix) {
  const TrunkFormat& f = GetParam();
  const int64_t cols = 256;  // whole groups of 128: AVX-512's fixed-point Q4G path runs too
  const int64_t rows[] = {37, 0, 1, 130, 2, 65, 3};
  std::vector<std::unique_ptr<TrunkMatrix>> mats;
  uint32_t seed = 400;
  for (int64_t r : rows) mats.push_back(std::make_unique<TrunkMatrix>(f, r, cols, 1, seed++));
  Input x0(cols, seed++), x1(cols, seed++);
  auto input = [&](size_t i) { return i % 2 ? x1.data() : x0.data(); };  // jobs share inputs
  constexpr float kSentinel = -7.f;
  for (Isa isa : AvailableIsas()) {
    std::vector<std::vector<float>> want;
    for (size_t i = 0; i < mats.size(); ++i) {
      want.emplace_back(static_cast<size_t>(mats[i]->view.rows));
      MatVec(mats[i]->view, input(i), want.back().data(), 0, mats[i]->view.rows, isa);
    }
    for (int threads : {1, 2, 3, 8}) {
      ThreadPool pool(threads);
      for (int64_t grain : {1, 3, 32, 1000}) {
        // Each output has a sentinel on either side.
        std::vector<std::vector<float>> out;
        std::vector<MatVecJob> jobs;
        for (size_t i = 0; i < mats.size(); ++i)
          out.emplace_back(static_cast<size_t>(mats[i]->view.rows) + 2, kSentinel);
        for (size_t i = 0; i < mats.size(); ++i)
          jobs.push_back({&mats[i]->view, input(i), out[i].data() + 1});
        const uint64_t jobs_before = pool.jobs();
        MatVecs(pool, jobs, grain, isa);
        // One barrier for all of them, when the pool is used at all.
        const int64_t total = 37 + 0 + 1 + 130 + 2 + 65 + 3;
        EXPECT_EQ(pool.jobs() - jobs_before, pool.size() > 1 && total > grain ? 1u : 0u);
        for (size_t i = 0; i < mats.size(); ++i) {
          const int64_t n = mats[i]->view.rows;
          SCOPED_TRACE(::testing::Message()
                       << f.name << " " << IsaName(isa) << " " << threads << " threads, grain "
                       << grain << ", matrix " << i << " (" << n << " rows)");
          EXPECT_EQ(out[i][0], kSentinel) << "wrote before the output";
          EXPECT_EQ(out[i][static_cast<size_t>(n) + 1], kSentinel) << "wrote past the output";
          if (n > 0) {  // memcmp must not see the null data() of an empty vector
            EXPECT_EQ(0,
                      std::memcmp(out[i].data() + 1, want[i].data(), static_cast<size_t>(n) * 4));
          }
        }
      }
    }
  }
}

// The Isas whose Q4G product in groups of 128 puts the input in fixed point
// (AVX2 and AVX-512; q4_fixed.h), of those this CPU has.
std::vector<Isa> FixedPointIsas() {
  std::vector<Isa> out;
  for (Isa isa : AvailableIsas())
    if (isa >= Isa::kAvx2) out.push_back(isa);
  return out;
}

// The SIMD Q4G products in groups of 128 put each group of the input in
// fixed point (matvec_avx2.cc, matvec_avx512.cc). Inputs that stress that:
// a group spanning 40 orders of magnitude, a zero group, huge values, a
// group too small for fixed point (which must take the float path), and
// non-finite values (which must come out as the scalar path's do).
TEST(Q4G128FixedInput, AgreesWithScalarOnHostileInputs) {
  WASTE_REQUIRE_ISA(Isa::kAvx2);
  const TrunkFormat f{"Q4G_g128", Fmt::kQ4G, false, 128};
  const int64_t rows = 9, cols = 512;  // four groups
  TrunkMatrix m(f, rows, cols, 0, 77);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 1.f);
  struct Case {
    const char* name;
    float (*value)(int64_t c, float r);
  };
  const Case cases[] = {
      {"wide range in a group",
       [](int64_t c, float r) { return c % 128 == 3 ? 1e20f : r * 1e-20f; }},
      {"a zero group", [](int64_t c, float r) { return c < 128 ? 0.f : r; }},
      {"huge", [](int64_t, float r) { return r * 1e30f; }},
      {"tiny group", [](int64_t c, float r) { return c >= 256 && c < 384 ? r * 1e-35f : r; }},
      {"denormal group", [](int64_t c, float r) { return c < 128 ? r * 1e-40f : r; }},
      {"one group of outliers", [](int64_t c, float r) { return c >= 384 ? r * 1e4f : r; }},
      {"infinity", [](int64_t c, float r) { return c == 200 ? INFINITY : r; }},
      {"nan", [](int64_t c, float r) { return c == 17 ? NAN : r; }},
  };
  for (const Case& k : cases) {
    Guarded x(static_cast<size_t>(cols) * 4);
    for (int64_t c = 0; c < cols; ++c) x.floats()[c] = k.value(c, normal(rng));
    std::vector<float> want(rows), got(rows);
    MatVec(m.view, x.floats(), want.data(), 0, rows, Isa::kScalar);
    for (Isa isa : FixedPointIsas()) {
      SCOPED_TRACE(IsaName(isa));
      MatVec(m.view, x.floats(), got.data(), 0, rows, isa);
      for (int64_t r = 0; r < rows; ++r) {
        if (!std::isfinite(want[r])) {
          EXPECT_EQ(std::isnan(got[r]), std::isnan(want[r])) << k.name << " row " << r;
          if (std::isinf(want[r])) {
            EXPECT_EQ(got[r], want[r]) << k.name << " row " << r;
          }
          continue;
        }
        EXPECT_NEAR(got[r], want[r], kRel * m.AbsDot(r, x.floats()) + 1e-38)
            << k.name << " row " << r;
      }
    }
  }
}

// The AMX product's arithmetic (matvec_amx.cc's header), written again
// from its definition: the input in exact fixed point (m = x * 2^(21-e)
// rounded to nearest even per group, three balanced base-256 digits), each
// digit's whole-group integer sum, and the float steps in their order.
float AmxTwin(const MatrixView& w, int64_t r, const float* x) {
  const int64_t groups = w.cols / 128;
  const uint8_t* row = w.payload + r * groups * 64;
  float acc = 0.f;
  for (int64_t g = 0; g < groups; ++g) {
    float largest = 0.f;
    for (int64_t c = 128 * g; c < 128 * (g + 1); ++c) largest = std::max(largest, std::fabs(x[c]));
    // A zero group: zero digits and a zero step, as the kernel has them.
    const int e = largest == 0.f ? 0 : std::ilogb(largest);
    const float to_m = std::ldexp(1.f, 21 - e);
    const float unit = largest == 0.f ? 0.f : std::ldexp(1.f, e - 21);
    int64_t sums[3] = {0, 0, 0};  // sum over the group of (n - 8) * d_k
    for (int64_t j = 0; j < 128; ++j) {
      const int64_t c = 128 * g + j;
      const uint8_t byte = row[g * 64 + j / 2];
      const int weight = ((j & 1) ? byte >> 4 : byte & 15) - 8;
      const int32_t m = static_cast<int32_t>(std::nearbyint(x[c] * to_m));
      const int32_t d0 = static_cast<int8_t>(m & 255);
      const int32_t m1 = (m - d0) / 256;
      const int32_t d1 = static_cast<int8_t>(m1 & 255);
      const int32_t d2 = (m1 - d1) / 256;
      EXPECT_EQ(d0 + 256 * d1 + 65536 * d2, m);
      EXPECT_LE(std::abs(d2), 127);
      sums[0] += weight * d0;
      sums[1] += weight * d1;
      sums[2] += weight * d2;
    }
    uint16_t h;
    std::memcpy(&h, reinterpret_cast<const uint8_t*>(w.scales) + 2 * (r * groups + g), 2);
    const int32_t u = static_cast<int32_t>(sums[2] * 256 + sums[1]);
    const float s = std::fma(static_cast<float>(u), 256.f, static_cast<float>(sums[0]));
    acc = std::fma(s, format::F16ToF32(h) * unit, acc);
  }
  return acc;
}

// Isa::kAmx against its twin bit for bit, through MatVec (one input, the
// one-token tile) and MatVecMany with every kind of pass: one tile narrower
// than 16 tokens, whole tiles, a padded last tile, more than a pass of 64.
// Row counts cut the 16-row tiles anywhere; 3200 columns (25 groups) give
// the one-input pass spans of unequal size. Under a sanitizer the twin (the
// test's own arithmetic, at -O0 there) checks each call's first and last
// input only: it made this case 16 s of the ASan+UBSan stage (1.9 s plain),
// and the kernel runs every shape under the sanitizer's checks all the same.
#ifdef WASTE_SANITIZE
constexpr bool kTwinOfEveryInput = false;
#else
constexpr bool kTwinOfEveryInput = true;
#endif
TEST(Q4G128Amx, IsItsArithmeticBitForBit) {
  WASTE_REQUIRE_ISA(Isa::kAmx);
  const TrunkFormat f{"Q4G_g128", Fmt::kQ4G, false, 128};
  uint32_t seed = 1200;
  ThreadPool pool(2);
  for (int64_t cols : {128, 2304, 3200}) {
    for (int64_t rows : {1, 15, 16, 17, 130}) {
      TrunkMatrix m(f, rows, cols, 1, seed++);
      for (size_t n : {1, 2, 7, 16, 17, 40, 64, 70}) {
        SCOPED_TRACE(::testing::Message() << rows << "x" << cols << ", " << n << " inputs");
        std::vector<std::unique_ptr<Input>> inputs;
        for (size_t i = 0; i < n; ++i) inputs.push_back(std::make_unique<Input>(cols, seed++));
        if (n > 2) {  // a zero group and one of outliers
          std::fill_n(inputs[1]->mem.floats(), 128, 0.f);
          for (int64_t c = 0; c < cols; c += 7) inputs[2]->mem.floats()[c] *= 1e3f;
        }
        std::vector<std::vector<float>> out(n, std::vector<float>(rows + 1, -7.f));
        std::vector<const float*> xs;
        std::vector<float*> ys;
        for (size_t i = 0; i < n; ++i) xs.push_back(inputs[i]->data()), ys.push_back(out[i].data());
        if (n == 1)
          MatVec(m.view, xs[0], ys[0], 0, rows, Isa::kAmx);
        else
          MatVecMany(pool, m.view, xs, ys, 32, Isa::kAmx);
        for (size_t i = 0; i < n; ++i) {
          for (int64_t r = 0; r < rows && (kTwinOfEveryInput || i == 0 || i + 1 == n); ++r) {
            const float want = AmxTwin(m.view, r, xs[i]);
            ASSERT_EQ(0, std::memcmp(&out[i][r], &want, 4))
                << "input " << i << " row " << r << ": " << out[i][r] << " against " << want;
          }
          EXPECT_EQ(out[i][rows], -7.f) << "wrote past the output";
        }
      }
    }
  }
}

// Q4Input::kInt8 (matvec.h): each 32 columns of the input rounded to the
// nearest multiple of their largest / 127. The reference rounds it the same
// way here and sums its products with the decoded weights in double; it also
// returns the rounding's bound, sum over the row of |w| * step / 2, which
// the kernel's distance from the exact product must stay within.
struct Int8Reference {
  double value = 0, bound = 0;
};
Int8Reference Int8Product(const TrunkMatrix& m, int64_t r, const float* x) {
  Int8Reference out;
  const int64_t cols = m.view.cols;
  for (int64_t b = 0; b < cols / 32; ++b) {
    float largest = 0.f;
    for (int64_t c = 32 * b; c < 32 * (b + 1); ++c) largest = std::max(largest, std::fabs(x[c]));
    if (largest == 0.f) continue;
    const float inv = 127.f / largest, unit = largest / 127.f;
    for (int64_t c = 32 * b; c < 32 * (b + 1); ++c) {
      const double w = m.dense[r * cols + c];
      out.value += w * std::nearbyint(x[c] * inv) * unit;
      out.bound += std::fabs(w) * unit * 0.501;  // half a step, and unit's own rounding
    }
  }
  return out;
}

TEST(Q4G128Int8Input, IsTheProductOfTheRoundedInput) {
  WASTE_REQUIRE_ISA(Isa::kAvx2);
  const TrunkFormat f{"Q4G_g128", Fmt::kQ4G, false, 128};
  uint32_t seed = 900;
  for (Isa isa : FixedPointIsas()) {
    for (int64_t cols : {128, 256, 2304}) {
      const int64_t rows = 37;
      TrunkMatrix m(f, rows, cols, 1, seed++);
      Input x(cols, seed++);
      for (int64_t c = 0; c < 128; c += 9) x.mem.floats()[c] *= 50.f;  // outliers in group 0
      for (int64_t c = 64; c < 96; ++c) x.mem.floats()[c] = 0.f;       // 32 zero columns
      std::vector<float> exact(rows), got(rows);
      MatVec(m.view, x.data(), exact.data(), 0, rows, isa);
      MatVec(m.view, x.data(), got.data(), 0, rows, isa, Q4Input::kInt8);
      double moved = 0;
      for (int64_t r = 0; r < rows; ++r) {
        SCOPED_TRACE(::testing::Message() << IsaName(isa) << " " << cols << " cols, row " << r);
        const Int8Reference want = Int8Product(m, r, x.data());
        EXPECT_NEAR(got[r], want.value, 1e-6 * m.AbsDot(r, x.data()));
        EXPECT_LE(std::fabs(got[r] - m.Dot(r, x.data())),
                  want.bound + 1e-6 * m.AbsDot(r, x.data()));
        moved += std::fabs(got[r] - exact[r]);
      }
      EXPECT_GT(moved, 0.) << "int8 inputs gave the exact path's results at " << cols << " cols";
    }
  }
}

// The scalar path ignores Q4Input; the fixed-point paths with int8 inputs
// take the float path, as the exact ones do, for an input they cannot put
// in fixed point (not finite, or a group below 2^-100).
TEST(Q4G128Int8Input, ScalarIgnoresItAndHostileInputsTakeTheFloatPath) {
  const TrunkFormat f{"Q4G_g128", Fmt::kQ4G, false, 128};
  const int64_t rows = 9, cols = 512;
  TrunkMatrix m(f, rows, cols, 0, 78);
  Input x(cols, 79);
  {
    std::vector<float> a(rows), b(rows);
    MatVec(m.view, x.data(), a.data(), 0, rows, Isa::kScalar);
    MatVec(m.view, x.data(), b.data(), 0, rows, Isa::kScalar, Q4Input::kInt8);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), rows * 4)) << "scalar";
  }
  for (Isa isa : FixedPointIsas())
    for (int64_t bad : {int64_t{17}, int64_t{300}}) {
      SCOPED_TRACE(IsaName(isa));
      Guarded y(static_cast<size_t>(cols) * 4);
      std::memcpy(y.floats(), x.data(), cols * 4);
      y.floats()[bad] = bad == 17 ? NAN : 1e-35f;  // 300: its group all tiny
      if (bad == 300)
        for (int64_t c = 256; c < 384; ++c) y.floats()[c] *= 1e-35f;
      std::vector<float> want(rows), got(rows);
      MatVec(m.view, y.floats(), want.data(), 0, rows, isa);
      MatVec(m.view, y.floats(), got.data(), 0, rows, isa, Q4Input::kInt8);
      for (int64_t r = 0; r < rows; ++r) {
        if (bad == 17) {
          EXPECT_TRUE(std::isnan(got[r])) << "row " << r;
        } else {
          EXPECT_EQ(got[r], want[r]) << "tiny group, row " << r;
        }
      }
    }
}

// ---- VQ experts ----

struct VqFormat {
  const char* name;
  int stages, entries, index_bits, index_block;
};

const VqFormat kVqFormats[] = {
    {"VQ3R", 3, 256, 8, 64},         {"VQ2R", 2, 256, 8, 64},
    {"VQ4P", 4, 64, 6, 64},          {"VQ3R_rowmajor", 3, 256, 8, 0},
    {"VQ2R_rowmajor", 2, 256, 8, 0}, {"VQ4P_rowmajor", 4, 64, 6, 0},
    {"S1_E16", 1, 16, 8, 64},        {"S4_E256", 4, 256, 8, 64},
    {"S5_E100", 5, 100, 8, 64},      {"S8_E256", 8, 256, 8, 64},
    {"VQ4P_E40", 4, 40, 6, 64},
};
const int64_t kVqCols[] = {8, 24, 136, 2304};

ExpertQuant Quant(const VqFormat& f) {
  ExpertQuant q;
  q.fmt = f.index_bits == 6 ? Fmt::kVQ4P : f.stages == 2 ? Fmt::kVQ2R : Fmt::kVQ3R;
  q.stages = f.stages;
  q.entries = f.entries;
  q.index_bits = f.index_bits;
  q.index_block = f.index_block;
  return q;
}

// An expert record with three matrices of the same shape, written by the
// project's writer (EncodeRecordPayload), then each matrix's index region
// and scales copied into buffers that end at an unmapped page.
struct VqRecord {
  ExpertQuant q;
  int64_t rows, cols;
  std::vector<float> books[format::kMatrices];  // [stage][entry][8]
  std::vector<uint8_t> idx[format::kMatrices];  // stage-major [stage][row * (cols/8) + v]
  std::vector<uint16_t> scale[format::kMatrices];
  std::unique_ptr<Guarded> index_mem[format::kMatrices], scale_mem[format::kMatrices];

  VqRecord(const VqFormat& f, int64_t r, int64_t c, uint32_t seed, bool wild_indices = false)
      : q(Quant(f)), rows(r), cols(c) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_real_distribution<float> uniform(0.25f, 2.f);
    RecordLayout lay;
    uint32_t off = sizeof(format::ExpertHeader);
    for (int m = 0; m < format::kMatrices; ++m) {
      lay.rows[m] = rows;
      lay.cols[m] = cols;
      lay.matrix_off[m] = off;
      off += static_cast<uint32_t>(lay.index_bytes(m, q));
    }
    lay.scales_off = off;
    lay.payload_end = off + static_cast<uint32_t>(6 * rows);
    lay.record_bytes = (lay.payload_end + 4095) / 4096 * 4096;
    const int max_index = wild_indices ? 255 : f.entries - 1;
    std::uniform_int_distribution<int> pick(0, std::min(max_index, f.index_bits == 6 ? 63 : 255));
    std::array<std::span<const uint8_t>, 3> idx_spans;
    std::array<std::span<const uint16_t>, 3> scale_spans;
    for (int m = 0; m < format::kMatrices; ++m) {
      books[m].resize(static_cast<size_t>(f.stages) * f.entries * 8);
      for (float& v : books[m]) v = normal(rng) * 0.1f;
      idx[m].resize(static_cast<size_t>(f.stages * rows * (cols / 8)));
      for (uint8_t& i : idx[m]) i = static_cast<uint8_t>(pick(rng));
      scale[m].resize(static_cast<size_t>(rows));
      for (uint16_t& s : scale[m]) s = format::F32ToF16(uniform(rng));
      idx_spans[m] = idx[m];
      scale_spans[m] = scale[m];
    }
    std::vector<uint8_t> rec(lay.record_bytes);
    EncodeRecordPayload(lay, q, idx_spans, scale_spans, rec);
    for (int m = 0; m < format::kMatrices; ++m) {
      const size_t n = static_cast<size_t>(lay.index_bytes(m, q));
      index_mem[m] = std::make_unique<Guarded>(n);
      std::memcpy(index_mem[m]->bytes(), rec.data() + lay.matrix_off[m], n);
      scale_mem[m] = std::make_unique<Guarded>(static_cast<size_t>(rows) * 2, 1);
      std::memcpy(scale_mem[m]->bytes(), rec.data() + lay.scales_off + 2 * rows * m,
                  static_cast<size_t>(rows) * 2);
    }
  }

  VqMatrixView View(int m) const {
    VqMatrixView v;
    v.indices = index_mem[m]->bytes();
    v.scales = scale_mem[m]->bytes();
    v.rows = rows;
    v.cols = cols;
    v.stages = q.stages;
    v.entries = q.entries;
    v.index_bits = q.index_bits;
    v.index_block = q.index_block;
    return v;
  }
  std::vector<const float*> Books(int m) const {
    std::vector<const float*> out;
    for (int s = 0; s < q.stages; ++s)
      out.push_back(books[m].data() + static_cast<size_t>(s) * q.entries * 8);
    return out;
  }
  // The dense weight, W[r][c] = scale[r] * sum_s books[s][index(r, c/8, s)][c % 8].
  double Weight(int m, int64_t r, int64_t c) const {
    const int64_t nv = cols / 8, per_stage = rows * nv;
    double w = 0;
    for (int s = 0; s < q.stages; ++s) {
      const int e = idx[m][s * per_stage + r * nv + c / 8];
      w += books[m][(static_cast<size_t>(s) * q.entries + e) * 8 + c % 8];
    }
    return w * format::F16ToF32(scale[m][r]);
  }
};

// A LUT in a guarded buffer.
struct Lut {
  size_t floats;
  Guarded mem;
  Lut(const VqRecord& rec, int m, const float* x, Isa isa)
      : floats(VqLutFloats(rec.cols, rec.q.stages, rec.q.entries)), mem(floats * 4) {
    const std::vector<const float*> books = rec.Books(m);
    VqBuildLut(books.data(), rec.q.stages, rec.q.entries, x, rec.cols, mem.floats(), isa);
  }
  const float* data() { return mem.floats(); }
};

class VqFormats : public ::testing::TestWithParam<VqFormat> {};

TEST_P(VqFormats, LutSize) {
  const VqFormat& f = GetParam();
  for (int64_t cols : kVqCols) {
    const size_t body = static_cast<size_t>(cols / 8 * f.stages * f.entries);
    EXPECT_EQ(VqLutFloats(cols, f.stages, f.entries), body + static_cast<size_t>(256 - f.entries));
  }
}

TEST_P(VqFormats, ScalarLutIsTheDotProductOfEachEntry) {
  const VqFormat& f = GetParam();
  VqRecord rec(f, 3, 24, 5);
  Input x(24, 6);
  Lut lut(rec, 1, x.data(), Isa::kScalar);
  for (int64_t v = 0; v < 3; ++v)
    for (int s = 0; s < f.stages; ++s)
      for (int e = 0; e < f.entries; ++e) {
        double want = 0;
        for (int d = 0; d < 8; ++d)
          want += double{rec.books[1][((static_cast<size_t>(s) * f.entries + e) * 8 + d)]} *
                  x.data()[8 * v + d];
        ASSERT_NEAR(lut.data()[(v * f.stages + s) * f.entries + e], want, 1e-5);
      }
  for (size_t i = static_cast<size_t>(3 * f.stages * f.entries); i < lut.floats; ++i)
    ASSERT_EQ(lut.data()[i], 0.f) << "padding " << i;
}

TEST_P(VqFormats, ScalarApplyMatchesTheDequantizedMatrix) {
  uint32_t seed = 300;
  for (int64_t rows : kRows) {
    for (int64_t cols : kVqCols) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
      VqRecord rec(GetParam(), rows, cols, seed++);
      Input x(cols, seed++);
      for (int m = 0; m < format::kMatrices; ++m) {
        Lut lut(rec, m, x.data(), Isa::kScalar);
        Guarded y(static_cast<size_t>(rows) * 4);
        VqApply(rec.View(m), lut.data(), y.floats(), 0, rows, Isa::kScalar);
        for (int64_t r = 0; r < rows; ++r) {
          double dot = 0, abs = 0;
          for (int64_t c = 0; c < cols; ++c) {
            const double t = rec.Weight(m, r, c) * x.data()[c];
            dot += t;
            abs += std::fabs(t);
          }
          ASSERT_NEAR(y.floats()[r], dot, kRel * abs + 1e-30) << "matrix " << m << " row " << r;
        }
      }
    }
  }
}

// 1100 rows take two of the AVX2 path's 1024-row segments; 136 columns
// are three of its 8-vector spans, enough to cross them (and cheaper than
// 2304).
const int64_t kVqIsaRows[] = {1, 7, 65, 130, 1100};

void CheckVqIsa(const VqFormat& f, Isa isa) {
  uint32_t seed = 400;
  for (int64_t rows : kVqIsaRows) {
    for (int64_t cols : kVqCols) {
      if (rows > 1024 && cols > 136) continue;
      SCOPED_TRACE(::testing::Message() << f.name << " " << rows << "x" << cols);
      VqRecord rec(f, rows, cols, seed++);
      Input x(cols, seed++);
      for (int m = 0; m < format::kMatrices; ++m) {
        const VqMatrixView view = rec.View(m);
        Lut want_lut(rec, m, x.data(), Isa::kScalar);
        Lut lut(rec, m, x.data(), isa);
        // The table: the same dot products up to summation order, then zeros.
        for (int64_t v = 0; v < cols / 8; ++v)
          for (int s = 0; s < f.stages; ++s)
            for (int e = 0; e < f.entries; ++e) {
              const size_t i = static_cast<size_t>((v * f.stages + s) * f.entries + e);
              double abs = 0;
              for (int d = 0; d < 8; ++d)
                abs += std::fabs(
                    double{rec.books[m][(static_cast<size_t>(s) * f.entries + e) * 8 + d]} *
                    x.data()[8 * v + d]);
              ASSERT_NEAR(lut.data()[i], want_lut.data()[i], kRel * abs + 1e-30) << "lut " << i;
            }
        for (size_t i = static_cast<size_t>(cols / 8 * f.stages * f.entries); i < lut.floats; ++i)
          ASSERT_EQ(lut.data()[i], 0.f);

        // The apply on the same table: every path adds in the same order.
        std::vector<float> want(static_cast<size_t>(rows));
        VqApply(view, want_lut.data(), want.data(), 0, rows, Isa::kScalar);
        Guarded y(static_cast<size_t>(rows) * 4);
        VqApply(view, want_lut.data(), y.floats(), 0, rows, isa);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(y.floats()[r], want[r]) << "matrix " << m << " row " << r;

        // The whole product with this path's own table.
        VqApply(view, lut.data(), y.floats(), 0, rows, isa);
        for (int64_t r = 0; r < rows; ++r) {
          double abs = 0;
          for (int64_t c = 0; c < cols; ++c) abs += std::fabs(rec.Weight(m, r, c) * x.data()[c]);
          ASSERT_NEAR(y.floats()[r], want[r], kRel * abs + 1e-30) << "matrix " << m << " row " << r;
        }

        // Row ranges, starting and ending inside index blocks and chunks.
        const int64_t ranges[][2] = {
            {0, 0},   {0, 1},    {rows - 1, rows}, {rows / 2, rows}, {3, rows - 2}, {17, 50},
            {63, 66}, {64, 128}, {5, 6},           {1020, 1030},     {1024, rows}};
        for (const auto& range : ranges) {
          const int64_t a = std::min(range[0], rows), b = std::max(a, std::min(range[1], rows));
          std::fill_n(y.floats(), rows, -12345.f);
          VqApply(view, want_lut.data(), y.floats(), a, b, isa);
          for (int64_t r = 0; r < rows; ++r) {
            if (r >= a && r < b)
              ASSERT_EQ(y.floats()[r], want[r]) << "range [" << a << ", " << b << ") row " << r;
            else
              ASSERT_EQ(y.floats()[r], -12345.f)
                  << "range [" << a << ", " << b << ") wrote row " << r;
          }
        }
      }
    }
  }
}

TEST_P(VqFormats, Avx2MatchesScalar) {
  WASTE_REQUIRE_ISA(Isa::kAvx2);
  CheckVqIsa(GetParam(), Isa::kAvx2);
}

TEST_P(VqFormats, Avx512MatchesScalar) {
  WASTE_REQUIRE_ISA(Isa::kAvx512);
  CheckVqIsa(GetParam(), Isa::kAvx512);
}

// A damaged record whose index bytes exceed `entries` reads inside the
// table (the buffer ends at an unmapped page) and every path agrees.
TEST_P(VqFormats, IndicesPastTheEntriesStayInsideTheTable) {
  const VqFormat& f = GetParam();
  VqRecord rec(f, 130, 136, 9, /*wild_indices=*/true);
  Input x(136, 10);
  Lut lut(rec, 2, x.data(), Isa::kScalar);
  std::vector<float> want(130);
  VqApply(rec.View(2), lut.data(), want.data(), 0, 130, Isa::kScalar);
  for (Isa isa : AvailableIsas()) {
    std::vector<float> y(130);
    VqApply(rec.View(2), lut.data(), y.data(), 0, 130, isa);
    for (int r = 0; r < 130; ++r) ASSERT_EQ(y[r], want[r]) << Name(isa) << " row " << r;
  }
}

// Splitting the rows across a pool changes nothing.
TEST_P(VqFormats, PoolSplitGivesTheSameRows) {
  VqRecord rec(GetParam(), 1024, 2304, 11);
  Input x(2304, 12);
  Lut lut(rec, 0, x.data(), BestIsa());
  std::vector<float> want(1024), got(1024);
  VqApply(rec.View(0), lut.data(), want.data(), 0, 1024, BestIsa());
  ThreadPool pool(3);
  for (int64_t grain : {1, 16, 32, 64, 100}) {
    std::fill(got.begin(), got.end(), 0.f);
    pool.ParallelFor(1024, grain, [&](int64_t a, int64_t b) {
      VqApply(rec.View(0), lut.data(), got.data(), a, b, BestIsa());
    });
    ASSERT_EQ(got, want) << "grain " << grain;
  }
}

// ---- the float table split into byte planes ----

// Only the formats with 8-bit indices have a split table (VQ4P's 6-bit ones
// keep their register-permute path), so only they are instantiated.
class VqSplitFormats : public ::testing::TestWithParam<VqFormat> {};

TEST_P(VqSplitFormats, SplitLutHoldsEachFloatsBytes) {
  const VqFormat& f = GetParam();
  for (int64_t cols : kVqCols) {
    VqRecord rec(f, 1, cols, 600);
    Input x(cols, 601);
    Lut lut(rec, 0, x.data(), Isa::kScalar);
    const size_t bytes = VqSplitLutBytes(cols, f.stages);
    ASSERT_EQ(bytes, static_cast<size_t>(cols / 8 * f.stages * 1024));
    Guarded want(bytes);
    VqSplitLut(lut.data(), cols, f.stages, f.entries, want.bytes(), Isa::kScalar);
    for (int64_t t = 0; t < cols / 8 * f.stages; ++t)
      for (int e = 0; e < 256; ++e) {
        uint8_t b[4];
        std::memcpy(b, lut.data() + t * f.entries + e, 4);
        for (int p = 0; p < 4; ++p)
          ASSERT_EQ(want.bytes()[(t * 4 + p) * 256 + e], b[p]) << "table " << t << " entry " << e;
      }
    for (Isa isa : AvailableIsas()) {
      Guarded got(bytes);
      VqSplitLut(lut.data(), cols, f.stages, f.entries, got.bytes(), isa);
      ASSERT_EQ(std::memcmp(got.bytes(), want.bytes(), bytes), 0) << Name(isa) << " cols " << cols;
    }
  }
}

// VqBuildSplitLut writes VqSplitLut's bytes of VqBuildLut's table on every
// path (AVX-512 builds the planes directly for 256 entries; fewer entries
// and the other paths go through the float table).
TEST_P(VqSplitFormats, BuildSplitLutIsTheSplitOfTheTable) {
  const VqFormat& f = GetParam();
  uint32_t seed = 605;
  for (int64_t cols : kVqCols) {
    VqRecord rec(f, 1, cols, seed++);
    Input x(cols, seed++);
    const size_t bytes = VqSplitLutBytes(cols, f.stages);
    for (int m = 0; m < format::kMatrices; ++m) {
      const std::vector<const float*> books = rec.Books(m);
      for (Isa isa : AvailableIsas()) {
        Lut lut(rec, m, x.data(), isa);
        Guarded want(bytes), got(bytes);
        VqSplitLut(lut.data(), cols, f.stages, f.entries, want.bytes(), isa);
        VqBuildSplitLut(books.data(), f.stages, f.entries, x.data(), cols, got.bytes(), isa);
        ASSERT_EQ(std::memcmp(got.bytes(), want.bytes(), bytes), 0)
            << Name(isa) << " cols " << cols << " matrix " << m;
      }
    }
  }
}

// VqApplySplit is VqApply, bit for bit, on every path: awkward shapes, row
// ranges inside index blocks, indices past the entries, non-finite tables.
TEST_P(VqSplitFormats, SplitApplyIsBitIdenticalToVqApply) {
  const VqFormat& f = GetParam();
  uint32_t seed = 610;
  for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{65}, int64_t{130}, int64_t{200}}) {
    for (int64_t cols : {int64_t{8}, int64_t{24}, int64_t{136}, int64_t{2304}}) {
      SCOPED_TRACE(::testing::Message() << f.name << " " << rows << "x" << cols);
      for (bool wild : {false, true}) {
        VqRecord rec(f, rows, cols, seed++, wild);
        Input x(cols, seed++);
        for (int m = 0; m < format::kMatrices; ++m) {
          Lut lut(rec, m, x.data(), Isa::kScalar);
          if (wild) {  // and non-finite entries
            lut.mem.floats()[1] = std::numeric_limits<float>::quiet_NaN();
            lut.mem.floats()[f.entries + 2] = -std::numeric_limits<float>::infinity();
          }
          Guarded planes(VqSplitLutBytes(cols, f.stages));
          VqSplitLut(lut.data(), cols, f.stages, f.entries, planes.bytes(), BestIsa());
          std::vector<float> want(static_cast<size_t>(rows));
          VqApply(rec.View(m), lut.data(), want.data(), 0, rows, Isa::kScalar);
          for (Isa isa : AvailableIsas()) {
            SCOPED_TRACE(Name(isa));
            Guarded y(static_cast<size_t>(rows) * 4);
            const int64_t ranges[][2] = {{0, rows},        {0, 0},        {0, 1},
                                         {rows - 1, rows}, {3, rows - 2}, {17, 50},
                                         {63, 66},         {64, 128},     {60, 199}};
            for (const auto& range : ranges) {
              const int64_t a = std::min(range[0], rows), b = std::max(a, std::min(range[1], rows));
              std::fill_n(y.floats(), rows, -12345.f);
              VqApplySplit(rec.View(m), lut.data(), planes.bytes(), y.floats(), a, b, isa);
              for (int64_t r = 0; r < rows; ++r) {
                const float w = r >= a && r < b ? want[r] : -12345.f;
                ASSERT_EQ(std::memcmp(&y.floats()[r], &w, 4), 0)
                    << "matrix " << m << " range [" << a << ", " << b << ") row " << r << ": "
                    << y.floats()[r] << " against " << w;
              }
            }
          }
        }
      }
    }
  }
}

// ---- the quantized (int8) table ----

// A quantized table in a guarded buffer, from a float table.
struct QLut {
  Guarded mem;
  QLut(const VqRecord& rec, const float* lut, Isa isa)
      : mem(VqQLutBytes(rec.cols, rec.q.stages, rec.q.index_bits)) {
    VqQuantizeLut(lut, rec.cols, rec.q.stages, rec.q.entries, rec.q.index_bits, mem.bytes(), isa);
  }
  const uint8_t* data() { return mem.bytes(); }
};

int64_t QGroups(int64_t cols) {
  return (cols / 8 + kVqGroup - 1) / kVqGroup;
}
float QScale(const uint8_t* qlut, int64_t g) {
  float f;
  std::memcpy(&f, qlut + 4 * g, 4);
  return f;
}

TEST_P(VqFormats, QuantizedTableRoundsEachGroupToItsScale) {
  const VqFormat& f = GetParam();
  const int width = f.index_bits == 6 ? 64 : 256;
  for (int64_t cols : kVqCols) {
    SCOPED_TRACE(::testing::Message() << "cols " << cols);
    VqRecord rec(f, 1, cols, 500);
    Input x(cols, 501);
    Lut lut(rec, 0, x.data(), Isa::kScalar);
    QLut q(rec, lut.data(), Isa::kScalar);
    const int64_t nv = cols / 8, groups = QGroups(cols);
    EXPECT_EQ(VqQLutBytes(cols, f.stages, f.index_bits),
              static_cast<size_t>(4 * groups + nv * f.stages * width));
    const uint8_t* bytes = q.data() + 4 * groups;
    for (int64_t g = 0; g < groups; ++g) {
      const float scale = QScale(q.data(), g);
      float amax = 0;
      bool hit_max = false;
      for (int64_t v = g * kVqGroup; v < std::min(nv, (g + 1) * kVqGroup); ++v)
        for (int s = 0; s < f.stages; ++s)
          for (int e = 0; e < f.entries; ++e)
            amax = std::max(amax, std::fabs(lut.data()[(v * f.stages + s) * f.entries + e]));
      ASSERT_EQ(scale, amax / 127.f) << "group " << g;
      for (int64_t v = g * kVqGroup; v < std::min(nv, (g + 1) * kVqGroup); ++v)
        for (int s = 0; s < f.stages; ++s)
          for (int e = 0; e < width; ++e) {
            const int b = bytes[(v * f.stages + s) * width + e];
            if (e >= f.entries) {
              ASSERT_EQ(b, 128) << "padding v " << v << " s " << s << " e " << e;
              continue;
            }
            ASSERT_GE(b, 1);
            const float want = lut.data()[(v * f.stages + s) * f.entries + e];
            ASSERT_LE(std::fabs((b - 128) * scale - want), 0.5001f * scale)
                << "v " << v << " s " << s << " e " << e;
            hit_max = hit_max || b == 1 || b == 255;
          }
      EXPECT_TRUE(hit_max) << "no entry of group " << g << " reached +-127";
    }
  }
}

// The scalar twin computes exactly f16(scale[r]) * sum_g scale_g * (integer sum).
TEST_P(VqFormats, QuantizedScalarApplyIsTheScaledIntegerSum) {
  const VqFormat& f = GetParam();
  const int width = f.index_bits == 6 ? 64 : 256;
  for (int64_t cols : kVqCols) {
    VqRecord rec(f, 65, cols, 510);
    Input x(cols, 511);
    for (int m = 0; m < format::kMatrices; ++m) {
      Lut lut(rec, m, x.data(), Isa::kScalar);
      QLut q(rec, lut.data(), Isa::kScalar);
      Guarded y(65 * 4);
      VqApplyQ(rec.View(m), q.data(), y.floats(), 0, 65, Isa::kScalar);
      const int64_t nv = cols / 8, groups = QGroups(cols);
      for (int64_t r = 0; r < 65; ++r) {
        double want = 0, abs = 0;
        for (int64_t g = 0; g < groups; ++g) {
          int64_t sum = 0;
          for (int64_t v = g * kVqGroup; v < std::min(nv, (g + 1) * kVqGroup); ++v)
            for (int s = 0; s < f.stages; ++s) {
              const int e = rec.idx[m][(s * rec.rows + r) * nv + v];
              sum += q.data()[4 * groups + (v * f.stages + s) * width + e] - 128;
            }
          want += double{QScale(q.data(), g)} * static_cast<double>(sum);
          abs += std::fabs(double{QScale(q.data(), g)} * static_cast<double>(sum));
        }
        want *= format::F16ToF32(rec.scale[m][r]);
        abs *= format::F16ToF32(rec.scale[m][r]);
        ASSERT_NEAR(y.floats()[r], want, kRel * abs + 1e-30)
            << "cols " << cols << " matrix " << m << " row " << r;
      }
    }
  }
}

// The int8 table against the exact float table: its rounding error only.
// Each of the nv * stages terms is off by at most scale_g / 2.
TEST_P(VqFormats, QuantizedApplyIsWithinTheTableRounding) {
  const VqFormat& f = GetParam();
  for (int64_t cols : kVqCols) {
    VqRecord rec(f, 130, cols, 520);
    Input x(cols, 521);
    Lut lut(rec, 1, x.data(), Isa::kScalar);
    QLut q(rec, lut.data(), Isa::kScalar);
    std::vector<float> exact(130), quant(130);
    VqApply(rec.View(1), lut.data(), exact.data(), 0, 130, Isa::kScalar);
    VqApplyQ(rec.View(1), q.data(), quant.data(), 0, 130, BestIsa());
    double bound = 0;
    for (int64_t g = 0; g < QGroups(cols); ++g)
      bound += 0.5 * QScale(q.data(), g) * std::min<int64_t>(kVqGroup, cols / 8 - g * kVqGroup) *
               f.stages;
    for (int64_t r = 0; r < 130; ++r)
      ASSERT_LE(std::fabs(quant[r] - exact[r]),
                format::F16ToF32(rec.scale[1][r]) * bound * 1.0001 + 1e-5 * std::fabs(exact[r]))
          << "cols " << cols << " row " << r;
  }
}

// Every path gives the same bytes and the same bits, on awkward shapes and
// row ranges that start and end inside index blocks.
TEST_P(VqFormats, QuantizedSimdIsBitIdenticalToTheScalarTwin) {
  const VqFormat& f = GetParam();
  uint32_t seed = 530;
  for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{65}, int64_t{130}, int64_t{200}}) {
    for (int64_t cols : {int64_t{8}, int64_t{24}, int64_t{72}, int64_t{136}, int64_t{2304}}) {
      SCOPED_TRACE(::testing::Message() << f.name << " " << rows << "x" << cols);
      VqRecord rec(f, rows, cols, seed++);
      Input x(cols, seed++);
      for (int m = 0; m < format::kMatrices; ++m) {
        Lut lut(rec, m, x.data(), Isa::kScalar);
        QLut want_q(rec, lut.data(), Isa::kScalar);
        const size_t bytes = VqQLutBytes(cols, f.stages, f.index_bits);
        std::vector<float> want(static_cast<size_t>(rows));
        VqApplyQ(rec.View(m), want_q.data(), want.data(), 0, rows, Isa::kScalar);
        for (Isa isa : AvailableIsas()) {
          SCOPED_TRACE(Name(isa));
          QLut q(rec, lut.data(), isa);
          ASSERT_EQ(std::memcmp(q.data(), want_q.data(), bytes), 0) << "matrix " << m;
          Guarded y(static_cast<size_t>(rows) * 4);
          VqApplyQ(rec.View(m), q.data(), y.floats(), 0, rows, isa);
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(y.floats()[r], want[r]) << "matrix " << m << " row " << r;
          const int64_t ranges[][2] = {{0, 0},        {0, 1},   {rows - 1, rows}, {rows / 2, rows},
                                       {3, rows - 2}, {17, 50}, {63, 66},         {64, 128},
                                       {5, 6},        {60, 199}};
          for (const auto& range : ranges) {
            const int64_t a = std::min(range[0], rows), b = std::max(a, std::min(range[1], rows));
            std::fill_n(y.floats(), rows, -12345.f);
            VqApplyQ(rec.View(m), q.data(), y.floats(), a, b, isa);
            for (int64_t r = 0; r < rows; ++r) {
              if (r >= a && r < b)
                ASSERT_EQ(y.floats()[r], want[r]) << "range [" << a << ", " << b << ") row " << r;
              else
                ASSERT_EQ(y.floats()[r], -12345.f)
                    << "range [" << a << ", " << b << ") wrote row " << r;
            }
          }
        }
      }
    }
  }
}

// Tables with infinities and NaNs (from a non-finite input) give the same
// bytes and bits on every path.
TEST_P(VqFormats, QuantizedNonFiniteTablesAgree) {
  const VqFormat& f = GetParam();
  VqRecord rec(f, 70, 136, 540);
  Input x(136, 541);
  Lut lut(rec, 0, x.data(), Isa::kScalar);
  float* t = lut.mem.floats();
  t[3] = std::numeric_limits<float>::quiet_NaN();                            // group 0
  t[f.stages * f.entries * 9 + 1] = std::numeric_limits<float>::infinity();  // group 1
  const size_t bytes = VqQLutBytes(136, f.stages, f.index_bits);
  QLut want_q(rec, lut.data(), Isa::kScalar);
  std::vector<float> want(70);
  VqApplyQ(rec.View(0), want_q.data(), want.data(), 0, 70, Isa::kScalar);
  for (Isa isa : AvailableIsas()) {
    QLut q(rec, lut.data(), isa);
    ASSERT_EQ(std::memcmp(q.data(), want_q.data(), bytes), 0) << Name(isa);
    std::vector<float> y(70);
    VqApplyQ(rec.View(0), q.data(), y.data(), 0, 70, isa);
    for (int r = 0; r < 70; ++r)
      ASSERT_EQ(std::memcmp(&y[r], &want[r], 4), 0) << Name(isa) << " row " << r;
  }
}

TEST_P(VqFormats, QuantizedIndicesPastTheEntriesStayInsideTheTable) {
  const VqFormat& f = GetParam();
  VqRecord rec(f, 130, 136, 9, /*wild_indices=*/true);
  Input x(136, 10);
  Lut lut(rec, 2, x.data(), Isa::kScalar);
  QLut q(rec, lut.data(), Isa::kScalar);
  std::vector<float> want(130);
  VqApplyQ(rec.View(2), q.data(), want.data(), 0, 130, Isa::kScalar);
  for (Isa isa : AvailableIsas()) {
    std::vector<float> y(130);
    VqApplyQ(rec.View(2), q.data(), y.data(), 0, 130, isa);
    for (int r = 0; r < 130; ++r) ASSERT_EQ(y[r], want[r]) << Name(isa) << " row " << r;
  }
}

TEST_P(VqFormats, QuantizedPoolSplitGivesTheSameRows) {
  VqRecord rec(GetParam(), 1024, 2304, 11);
  Input x(2304, 12);
  Lut lut(rec, 0, x.data(), BestIsa());
  QLut q(rec, lut.data(), BestIsa());
  std::vector<float> want(1024), got(1024);
  VqApplyQ(rec.View(0), q.data(), want.data(), 0, 1024, BestIsa());
  ThreadPool pool(3);
  for (int64_t grain : {1, 16, 32, 64, 100}) {
    std::fill(got.begin(), got.end(), 0.f);
    pool.ParallelFor(1024, grain, [&](int64_t a, int64_t b) {
      VqApplyQ(rec.View(0), q.data(), got.data(), a, b, BestIsa());
    });
    ASSERT_EQ(got, want) << "grain " << grain;
  }
}

// VqBuildQLut, a scale group at a time, writes VqQuantizeLut's bytes of
// VqBuildLut's whole table on every path (columns ending inside a group
// too: 136 is two groups and one position).
TEST_P(VqFormats, BuildQLutIsTheQuantizedTable) {
  const VqFormat& f = GetParam();
  uint32_t seed = 640;
  for (int64_t cols : kVqCols) {
    VqRecord rec(f, 1, cols, seed++);
    Input x(cols, seed++);
    const size_t bytes = VqQLutBytes(cols, rec.q.stages, rec.q.index_bits);
    for (int m = 0; m < format::kMatrices; ++m) {
      const std::vector<const float*> books = rec.Books(m);
      for (Isa isa : AvailableIsas()) {
        Lut lut(rec, m, x.data(), isa);
        QLut want(rec, lut.data(), isa);
        Guarded got(bytes);
        VqBuildQLut(books.data(), rec.q.stages, rec.q.entries, rec.q.index_bits, x.data(), cols,
                    got.bytes(), isa);
        ASSERT_EQ(std::memcmp(got.bytes(), want.data(), bytes), 0)
            << Name(isa) << " cols " << cols << " matrix " << m;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(kernels, VqFormats, ::testing::ValuesIn(kVqFormats),
                         [](const auto& test) { return std::string(test.param.name); });

std::vector<VqFormat> EightBitIndexFormats() {
  std::vector<VqFormat> v;
  for (const VqFormat& f : kVqFormats)
    if (f.index_bits == 8) v.push_back(f);
  return v;
}
INSTANTIATE_TEST_SUITE_P(kernels, VqSplitFormats, ::testing::ValuesIn(EightBitIndexFormats()),
                         [](const auto& test) { return std::string(test.param.name); });

// ---- nearest entry (waste convert's search) ----

// The codebook shapes: sizes of no chunk, part of one, one, one and a bit,
// the formats' 64 and 256, and awkward ones between.
constexpr int kNearestEntries[] = {1, 2, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 255, 256};

class Nearest : public ::testing::TestWithParam<Isa> {};

// Every path against the scalar rule, vector by vector, on random codebooks
// and inputs of awkward counts; then on codebooks built to tie: each entry
// repeated (so every distance has an equal twin, in another lane, another
// chunk or the same one), entries that are all the same, all zero, and
// inputs with NaN and infinities.
TEST_P(Nearest, SimdPicksTheScalarEntryEvenOnTies) {
  const Isa isa = GetParam();
  WASTE_REQUIRE_ISA(isa);
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.f, 1.f);
  int checked = 0, tied = 0;
  auto check = [&](const std::vector<float>& books, int entries, const std::vector<float>& x,
                   const std::string& what) {
    const NearestEntry search(books.data(), entries, isa);
    ASSERT_EQ(search.isa(), isa);
    const int64_t n = static_cast<int64_t>(x.size()) / 8;
    std::vector<int32_t> got(static_cast<size_t>(n) + 1, -7);
    search.Find(x.data(), n, got.data());
    EXPECT_EQ(got[n], -7) << what << ": wrote past n";
    std::vector<float> norms(entries);
    for (int e = 0; e < entries; ++e) {
      float s = 0.f;
      for (int i = 0; i < 8; ++i) s += books[e * 8 + i] * books[e * 8 + i];
      norms[e] = s;
    }
    for (int64_t j = 0; j < n; ++j) {
      const int32_t want =
          NearestEntryScalar(x.data() + j * 8, books.data(), norms.data(), entries);
      ASSERT_EQ(got[j], want) << what << ": entries " << entries << ", vector " << j;
      ++checked;
    }
  };
  for (int entries : kNearestEntries) {
    for (int64_t n : {0, 1, 3, 16, 17, 257}) {
      std::vector<float> books(static_cast<size_t>(entries) * 8), x(static_cast<size_t>(n) * 8);
      for (float& v : books) v = normal(rng);
      for (float& v : x) v = normal(rng);
      check(books, entries, x, "random");
      // Ties: the first half of the entries repeated in the second, in
      // reverse, so a minimum's twin sits at another lane and chunk.
      for (int e = entries / 2; e < entries; ++e)
        for (int i = 0; i < 8; ++i) books[e * 8 + i] = books[(entries - 1 - e) * 8 + i];
      // Inputs that are codebook entries (distance exactly -norm) and
      // quantized values, which tie more often.
      for (int64_t j = 0; j < n; j += 2)
        for (int i = 0; i < 8; ++i) x[j * 8 + i] = books[(j % entries) * 8 + i];
      for (int64_t j = 1; j < n; j += 2)
        for (int i = 0; i < 8; ++i) x[j * 8 + i] = std::round(x[j * 8 + i] * 2.f) / 2.f;
      check(books, entries, x, "repeated entries");
      if (entries > 1) ++tied;
      // Every entry the same: the answer is 0, whatever the lane count.
      for (int e = 1; e < entries; ++e) std::copy_n(books.begin(), 8, books.begin() + e * 8);
      check(books, entries, x, "identical entries");
      std::fill(books.begin(), books.end(), 0.f);
      check(books, entries, x, "zero entries");
    }
  }
  // Non-finite inputs and entries: NaN distances are never chosen; when no
  // distance is below +inf the answer is entry 0.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int entries : {1, 17, 256}) {
    std::vector<float> books(static_cast<size_t>(entries) * 8);
    for (float& v : books) v = normal(rng);
    books[(entries - 1) * 8 + 3] = inf;  // its norm is +inf
    if (entries > 2) books[(entries / 2) * 8] = nan;
    std::vector<float> x = {nan,  0, 0, 0, 0, 0, 0, 0, inf,   1,     1, 1, 1, 1, 1, 1,
                            -inf, 0, 0, 0, 0, 0, 0, 0, 1e30f, 1e30f, 0, 0, 0, 0, 0, 0,
                            0,    0, 0, 0, 0, 0, 0, 0, 1,     2,     3, 4, 5, 6, 7, 8};
    check(books, entries, x, "non-finite");
  }
  std::printf("%s: %d vectors checked, %d tie-rich codebooks\n", IsaName(isa), checked, tied);
}

// The scalar rule itself: the first of equal minima wins, and a NaN
// distance never does.
TEST(NearestScalar, TheFirstMinimumWins) {
  const float books[4 * 8] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0,
                              1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  const float norms[4] = {1, 1, 1, 1};
  const float on_first[8] = {1, 0, 0, 0, 0, 0, 0, 0}, on_second[8] = {0, 1, 0, 0, 0, 0, 0, 0};
  const float between[8] = {1, 1, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(NearestEntryScalar(on_first, books, norms, 4), 0);
  EXPECT_EQ(NearestEntryScalar(on_second, books, norms, 4), 1);
  EXPECT_EQ(NearestEntryScalar(between, books, norms, 4), 0);
  const float nan_norms[4] = {std::nanf(""), 1, 1, 1};
  EXPECT_EQ(NearestEntryScalar(on_first, books, nan_norms, 4), 2);
}

INSTANTIATE_TEST_SUITE_P(kernels, Nearest,
                         ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                         [](const auto& test) { return std::string(IsaName(test.param)); });

// ---- thread pool ----

class Pool : public ::testing::TestWithParam<int> {};  // the pool's thread count

TEST_P(Pool, SizeCountsTheCaller) {
  ThreadPool pool(GetParam());
  EXPECT_EQ(pool.size(), std::max(GetParam(), 1));
}

TEST_P(Pool, CoversEveryIndexExactlyOnceInWholeGrains) {
  const int threads = GetParam();
  ThreadPool pool(threads);
  for (int64_t n : {0, 1, 2, 7, 63, 64, 65, 1000, 4097}) {
    for (int64_t grain : {-1, 0, 1, 3, 16, 64, 1000, 5000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<bool> bad_chunk{false};
      const int64_t g = std::max<int64_t>(grain, 1);
      pool.ParallelFor(n, grain, [&](int64_t a, int64_t b) {
        if (a < 0 || b > n || a >= b || a % g != 0 || (b - a < g && b != n)) bad_chunk = true;
        for (int64_t i = a; i < b; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      ASSERT_FALSE(bad_chunk) << threads << " threads, n " << n << ", grain " << grain;
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
            << threads << " threads, n " << n << ", grain " << grain << ", index " << i;
    }
  }
}

// Back-to-back calls, some with work enough that workers join in the
// middle: a worker waking late for a finished job must take nothing from
// the next one, and every call must see only its own chunks.
TEST_P(Pool, ManyCallsInARow) {
  ThreadPool pool(GetParam());
  std::vector<int> owner(64);
  std::atomic<int64_t> worker_chunks{0};
  const std::thread::id caller = std::this_thread::get_id();
  for (int call = 0; call < 3000; ++call) {
    const int spins = call % 3 == 0 ? 2000 : 0;
    pool.ParallelFor(64, 1, [&](int64_t a, int64_t b) {
      if (std::this_thread::get_id() != caller) ++worker_chunks;
      std::atomic<int> busy{0};  // work for the chunk, on its own cache line
      for (int64_t i = a; i < b; ++i) {
        for (int k = 0; k < spins; ++k) busy.fetch_add(1, std::memory_order_relaxed);
        owner[static_cast<size_t>(i)] = call;
      }
    });
    for (int i = 0; i < 64; ++i) ASSERT_EQ(owner[static_cast<size_t>(i)], call) << "call " << call;
  }
  std::printf("%d threads: %lld of the chunks ran on workers\n", pool.size(),
              static_cast<long long>(worker_chunks.load()));
}

// jobs() counts the calls the workers took part in (each a barrier), not
// those that ran on the caller alone.
TEST_P(Pool, CountsTheJobsHandedToTheWorkers) {
  ThreadPool pool(GetParam());
  const uint64_t parallel = pool.size() > 1 ? 1 : 0;
  auto nothing = [](int64_t, int64_t) {};
  EXPECT_EQ(pool.jobs(), 0u);
  pool.ParallelFor(0, 1, nothing);
  pool.ParallelFor(16, 16, nothing);  // one grain: the caller alone
  EXPECT_EQ(pool.jobs(), 0u);
  pool.ParallelFor(17, 16, nothing);
  EXPECT_EQ(pool.jobs(), parallel);
  pool.ParallelFor(8, 1, [&](int64_t, int64_t) { pool.ParallelFor(100, 1, nothing); });  // nested
  EXPECT_EQ(pool.jobs(), 2 * parallel);
}

TEST_P(Pool, SleepingWorkersWakeUp) {
  ThreadPool pool(GetParam());
  for (int call = 0; call < 3; ++call) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // long past the spin
    std::atomic<int64_t> count{0};
    pool.ParallelFor(1000, 1, [&](int64_t a, int64_t b) { count += b - a; });
    ASSERT_EQ(count.load(), 1000);
  }
}

TEST_P(Pool, UsesEveryThread) {
  const int threads = std::max(GetParam(), 1);
  ThreadPool pool(threads);
  std::mutex mu;
  std::vector<std::thread::id> ids;
  std::atomic<int> arrived{0};
  // Each chunk waits until all have started, so every thread must be running one.
  pool.ParallelFor(threads, 1, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ids.push_back(std::this_thread::get_id());
    }
    ++arrived;
    while (arrived.load() < threads) std::this_thread::yield();
  });
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()) - ids.begin(), threads);
}

TEST_P(Pool, RethrowsTheFirstExceptionAfterEveryChunkRan) {
  ThreadPool pool(GetParam());
  std::atomic<int64_t> count{0};
  EXPECT_THROW(pool.ParallelFor(100, 1,
                                [&](int64_t a, int64_t b) {
                                  count += b - a;
                                  if (a == 0) throw std::runtime_error("chunk 0");
                                }),
               std::runtime_error);
  EXPECT_EQ(count.load(), 100);
  // The pool still works.
  count = 0;
  pool.ParallelFor(100, 1, [&](int64_t a, int64_t b) { count += b - a; });
  EXPECT_EQ(count.load(), 100);
}

TEST_P(Pool, NestedCallsRunSerially) {
  ThreadPool pool(GetParam());
  std::atomic<int64_t> count{0};
  pool.ParallelFor(8, 1, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i)
      pool.ParallelFor(10, 1, [&](int64_t c, int64_t d) { count += d - c; });
  });
  EXPECT_EQ(count.load(), 80);
}

TEST_P(Pool, CallsFromTwoThreadsAreSerialized) {
  ThreadPool pool(GetParam());
  std::atomic<int64_t> count{0};
  auto work = [&] {
    for (int i = 0; i < 500; ++i)
      pool.ParallelFor(100, 7, [&](int64_t a, int64_t b) { count += b - a; });
  };
  std::thread other(work);
  work();
  other.join();
  EXPECT_EQ(count.load(), 2 * 500 * 100);
}

TEST_P(Pool, DefaultThreadsIsTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(DefaultThreads(), CPU_COUNT(&set));
  EXPECT_GE(DefaultThreads(), 1);
}

INSTANTIATE_TEST_SUITE_P(kernels, Pool, ::testing::Values(0, 1, 2, 3, 4, 8),
                         [](const auto& test) { return std::to_string(test.param) + "threads"; });

}  // namespace
}  // namespace waste::kernels
