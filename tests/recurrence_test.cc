// engine/kernels/recurrence.h: the KDA and Gated DeltaNet state steps and
// the weighted row sum. The scalar references against plain double-precision
// formulas, and every SIMD path against the scalar reference bit for bit (the
// header promises the same bits), on awkward sizes and strides; the Gated
// DeltaNet step also against fla's naive recurrence through a fixture
// (tools/reference/make_gated_delta.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/kernels/cpu.h"
#include "engine/kernels/recurrence.h"

namespace waste::kernels {
namespace {

std::vector<float> Random(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct KdaCase {
  std::vector<float> S, decay, k, v, q;
  float b;
};

KdaCase MakeKda(int d, std::mt19937& rng) {
  KdaCase c;
  c.S = Random(static_cast<size_t>(d) * d, rng);
  c.decay = Random(d, rng, 0.5f, 1.f);
  c.k = Random(d, rng);
  c.v = Random(d, rng);
  c.q = Random(d, rng);
  c.b = 0.37f;
  return c;
}

TEST(KdaStateStep, ScalarFollowsTheFormula) {
  std::mt19937 rng(1);
  for (int d : {1, 5, 16, 48}) {
    KdaCase c = MakeKda(d, rng);
    // The formula in doubles, from the state before the step.
    std::vector<double> S(c.S.begin(), c.S.end()), u(d, 0.0), o(d, 0.0);
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) S[i * d + j] *= c.decay[i];
    for (int j = 0; j < d; ++j) {
      for (int i = 0; i < d; ++i) u[j] += c.k[i] * S[i * d + j];
      u[j] = c.b * (c.v[j] - u[j]);
    }
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) S[i * d + j] += c.k[i] * u[j];
    for (int j = 0; j < d; ++j)
      for (int i = 0; i < d; ++i) o[j] += c.q[i] * S[i * d + j];

    std::vector<float> uf(d), of(d);
    KdaStateStep(c.S.data(), d, c.decay.data(), c.k.data(), c.v.data(), c.b, c.q.data(),
                 uf.data(), of.data(), Isa::kScalar);
    for (int j = 0; j < d; ++j) {
      EXPECT_NEAR(of[j], o[j], 1e-4) << "d " << d << " j " << j;
      EXPECT_NEAR(uf[j], u[j], 1e-5) << "d " << d << " j " << j;
    }
    for (int i = 0; i < d * d; ++i) EXPECT_NEAR(c.S[i], S[i], 1e-5) << "d " << d << " at " << i;
  }
}

TEST(KdaStateStep, EveryIsaGivesTheScalarBits) {
  std::mt19937 rng(2);
  // AVX-512 takes d % 16 == 0 in column blocks of 128, AVX2 d % 8 == 0 in
  // blocks of 32. 16 and 128 are the AVX-512 shapes' edges, 144 and 256
  // cross its column block; 8, 24 and 40 are AVX2's alone (AVX-512 falls
  // back to it), 24 and 40 end in a partial AVX2 block; 12 neither takes.
  for (int d : {8, 12, 16, 24, 40, 128, 144, 256}) {
    const KdaCase base = MakeKda(d, rng);
    KdaCase ref = base;
    std::vector<float> uref(d), oref(d);
    // Three steps in a row, so the state that is compared has been through
    // the update more than once.
    for (int step = 0; step < 3; ++step)
      KdaStateStep(ref.S.data(), d, ref.decay.data(), ref.k.data(), ref.v.data(), ref.b,
                   ref.q.data(), uref.data(), oref.data(), Isa::kScalar);
    for (Isa isa : AvailableIsas()) {
      KdaCase c = base;
      std::vector<float> u(d), o(d);
      for (int step = 0; step < 3; ++step)
        KdaStateStep(c.S.data(), d, c.decay.data(), c.k.data(), c.v.data(), c.b, c.q.data(),
                     u.data(), o.data(), isa);
      EXPECT_TRUE(SameBits(c.S, ref.S)) << IsaName(isa) << " d " << d;
      EXPECT_TRUE(SameBits(u, uref)) << IsaName(isa) << " d " << d;
      EXPECT_TRUE(SameBits(o, oref)) << IsaName(isa) << " d " << d;
    }
  }
}

struct DeltaCase {
  int dk, dv;
  std::vector<float> S, k, v, q;
  float decay, b;
};

DeltaCase MakeDelta(int dk, int dv, std::mt19937& rng) {
  DeltaCase c{dk, dv, Random(static_cast<size_t>(dk) * dv, rng), Random(dk, rng), Random(dv, rng),
              Random(dk, rng), 0.83f, 0.41f};
  return c;
}

TEST(GatedDeltaStateStep, ScalarFollowsTheFormula) {
  std::mt19937 rng(5);
  struct Shape { int dk, dv; };
  for (Shape sh : {Shape{1, 1}, Shape{3, 7}, Shape{16, 32}, Shape{32, 16}, Shape{24, 24}}) {
    DeltaCase c = MakeDelta(sh.dk, sh.dv, rng);
    const int dk = c.dk, dv = c.dv;
    std::vector<double> S(c.S.begin(), c.S.end()), u(dv, 0.0), o(dv, 0.0);
    for (double& x : S) x *= c.decay;
    for (int j = 0; j < dv; ++j) {
      for (int i = 0; i < dk; ++i) u[j] += c.k[i] * S[i * dv + j];
      u[j] = c.b * (c.v[j] - u[j]);
    }
    for (int i = 0; i < dk; ++i)
      for (int j = 0; j < dv; ++j) S[i * dv + j] += c.k[i] * u[j];
    for (int j = 0; j < dv; ++j)
      for (int i = 0; i < dk; ++i) o[j] += c.q[i] * S[i * dv + j];

    std::vector<float> uf(dv), of(dv);
    GatedDeltaStateStep(c.S.data(), dk, dv, c.decay, c.k.data(), c.v.data(), c.b, c.q.data(),
                        uf.data(), of.data(), Isa::kScalar);
    for (int j = 0; j < dv; ++j) {
      EXPECT_NEAR(of[j], o[j], 1e-4) << dk << "x" << dv << " j " << j;
      EXPECT_NEAR(uf[j], u[j], 1e-5) << dk << "x" << dv << " j " << j;
    }
    for (int i = 0; i < dk * dv; ++i) EXPECT_NEAR(c.S[i], S[i], 1e-5) << dk << "x" << dv << " at " << i;
  }
}

// With every row's decay equal, the KDA step is the same computation.
TEST(GatedDeltaStateStep, IsKdaWithOneDecay) {
  std::mt19937 rng(6);
  for (int d : {8, 16, 20}) {
    DeltaCase c = MakeDelta(d, d, rng);
    std::vector<float> S2 = c.S, decay(d, c.decay), u(d), o(d), u2(d), o2(d);
    GatedDeltaStateStep(c.S.data(), d, d, c.decay, c.k.data(), c.v.data(), c.b, c.q.data(),
                        u.data(), o.data(), Isa::kScalar);
    KdaStateStep(S2.data(), d, decay.data(), c.k.data(), c.v.data(), c.b, c.q.data(), u2.data(),
                 o2.data(), Isa::kScalar);
    EXPECT_TRUE(SameBits(c.S, S2)) << d;
    EXPECT_TRUE(SameBits(o, o2)) << d;
  }
}

TEST(GatedDeltaStateStep, EveryIsaGivesTheScalarBits) {
  std::mt19937 rng(7);
  // AVX-512 takes dv % 16 == 0 in column blocks of 128, AVX2 dv % 8 == 0 in
  // blocks of 32; dk is the row count and any. 128 x 128 is Qwen3-Next's
  // head; 160 and 256 cross AVX-512's block, 24 and 40 are AVX2's alone, 12 neither's.
  struct Shape { int dk, dv; };
  for (Shape sh : {Shape{128, 128}, Shape{5, 160}, Shape{16, 256}, Shape{7, 24}, Shape{40, 40},
                   Shape{9, 12}, Shape{64, 16}}) {
    const DeltaCase base = MakeDelta(sh.dk, sh.dv, rng);
    DeltaCase ref = base;
    std::vector<float> uref(sh.dv), oref(sh.dv);
    for (int step = 0; step < 3; ++step)
      GatedDeltaStateStep(ref.S.data(), sh.dk, sh.dv, ref.decay, ref.k.data(), ref.v.data(), ref.b,
                          ref.q.data(), uref.data(), oref.data(), Isa::kScalar);
    for (Isa isa : AvailableIsas()) {
      DeltaCase c = base;
      std::vector<float> u(sh.dv), o(sh.dv);
      for (int step = 0; step < 3; ++step)
        GatedDeltaStateStep(c.S.data(), sh.dk, sh.dv, c.decay, c.k.data(), c.v.data(), c.b,
                            c.q.data(), u.data(), o.data(), isa);
      EXPECT_TRUE(SameBits(c.S, ref.S)) << IsaName(isa) << " " << sh.dk << "x" << sh.dv;
      EXPECT_TRUE(SameBits(u, uref)) << IsaName(isa) << " " << sh.dk << "x" << sh.dv;
      EXPECT_TRUE(SameBits(o, oref)) << IsaName(isa) << " " << sh.dk << "x" << sh.dv;
    }
  }
}

// fla's naive_recurrent_gated_delta_rule, step by step from a random state,
// on every path.
TEST(GatedDeltaStateStep, MatchesFlaNaiveRecurrence) {
  std::ifstream f(std::string(WASTE_FIXTURES) + "/forward/gated-delta.json");
  ASSERT_TRUE(f) << "tests/fixtures/forward/gated-delta.json";
  const nlohmann::json j = nlohmann::json::parse(f);
  const int H = j["heads"], T = j["steps"], dk = j["dk"], dv = j["dv"];
  auto floats = [&](const char* key) { return j[key].get<std::vector<float>>(); };
  const std::vector<float> q = floats("q_scaled"), k = floats("k"), v = floats("v"),
                           decay = floats("decay"), beta = floats("beta"),
                           s0 = floats("initial_state"), o_want = floats("o"),
                           s_want = floats("final_state");
  ASSERT_EQ(s0.size(), static_cast<size_t>(H) * dk * dv);
  ASSERT_EQ(o_want.size(), static_cast<size_t>(T) * H * dv);
  for (Isa isa : AvailableIsas()) {
    std::vector<float> S = s0, u(dv), o(dv);
    double worst = 0;
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const size_t th = static_cast<size_t>(t) * H + h;
        GatedDeltaStateStep(S.data() + static_cast<size_t>(h) * dk * dv, dk, dv, decay[th],
                            k.data() + th * dk, v.data() + th * dv, beta[th], q.data() + th * dk,
                            u.data(), o.data(), isa);
        for (int c = 0; c < dv; ++c)
          worst = std::max(worst, std::abs(double{o[c]} - o_want[th * dv + c]));
      }
    EXPECT_LT(worst, 1e-5) << IsaName(isa);
    for (size_t i = 0; i < S.size(); ++i)
      ASSERT_NEAR(S[i], s_want[i], 1e-5) << IsaName(isa) << " state at " << i;
  }
}

TEST(WeightedRowSum, ScalarIsTheWeightedSum) {
  std::mt19937 rng(3);
  const int64_t n = 7, cols = 33, stride = 40;
  const std::vector<float> a = Random(n, rng), rows = Random(n * stride, rng);
  std::vector<float> y(cols, 123.f);  // overwritten, not added to
  WeightedRowSum(a.data(), rows.data(), n, stride, cols, y.data(), Isa::kScalar);
  for (int64_t c = 0; c < cols; ++c) {
    double want = 0;
    for (int64_t r = 0; r < n; ++r) want += double{a[r]} * rows[r * stride + c];
    EXPECT_NEAR(y[c], want, 1e-5) << "column " << c;
  }
}

TEST(WeightedRowSum, NoRowsGivesZeros) {
  std::vector<float> y(20, 5.f);
  for (Isa isa : AvailableIsas()) {
    WeightedRowSum(nullptr, nullptr, 0, 20, 20, y.data(), isa);
    for (float v : y) EXPECT_EQ(v, 0.f) << IsaName(isa);
  }
}

TEST(WeightedRowSum, EveryIsaGivesTheScalarBitsAndWritesOnlyCols) {
  std::mt19937 rng(4);
  struct Shape { int64_t n, cols, stride; };
  // MLA's shapes (128 rows of 512; n rows of 512 in rows of 576), and
  // widths that leave a partial register or a partial block (AVX-512: 16
  // lanes, 128 columns a block; AVX2: 8 lanes, 64 columns).
  for (Shape s : {Shape{128, 512, 512}, Shape{9, 512, 576}, Shape{1, 1, 1}, Shape{5, 17, 17},
                  Shape{3, 130, 131}, Shape{33, 300, 310}, Shape{4, 8, 8}, Shape{6, 64, 70},
                  Shape{7, 75, 75}}) {
    const std::vector<float> a = Random(s.n, rng), rows = Random(s.n * s.stride, rng);
    std::vector<float> ref(s.cols + 16, -7.f);
    WeightedRowSum(a.data(), rows.data(), s.n, s.stride, s.cols, ref.data(), Isa::kScalar);
    for (Isa isa : AvailableIsas()) {
      std::vector<float> y(s.cols + 16, -7.f);  // the 16 past cols must stay -7
      WeightedRowSum(a.data(), rows.data(), s.n, s.stride, s.cols, y.data(), isa);
      EXPECT_TRUE(SameBits(y, ref)) << IsaName(isa) << " n " << s.n << " cols " << s.cols;
      EXPECT_EQ(y[s.cols], -7.f) << IsaName(isa);
    }
  }
}

}  // namespace
}  // namespace waste::kernels
