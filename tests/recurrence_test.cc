// engine/kernels/recurrence.h: the KDA state step and the weighted row sum.
// The scalar references against plain double-precision formulas, and every
// SIMD path against the scalar reference bit for bit (the header promises
// the same bits), on awkward sizes and strides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

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
