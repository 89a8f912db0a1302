// Sampling and stop strings.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "engine/model/sampler.h"
#include "engine/model/stop.h"

namespace waste {
namespace {

const std::vector<float> kLogits = {0.1f, 2.0f, 1.5f, -1.0f, 2.0f, 0.0f};

TEST(Sampler, GreedyIsTheFirstArgmax) {
  Sampler s({});
  EXPECT_EQ(s.Sample(kLogits), 1);
}

TEST(Sampler, SameSeedSameChoices) {
  SamplerOptions o;
  o.temperature = 1.f;
  o.seed = 42;
  Sampler a(o), b(o);
  std::vector<int> x, y;
  for (int i = 0; i < 50; ++i) x.push_back(a.Sample(kLogits)), y.push_back(b.Sample(kLogits));
  EXPECT_EQ(x, y);
  o.seed = 43;
  Sampler c(o);
  std::vector<int> z;
  for (int i = 0; i < 50; ++i) z.push_back(c.Sample(kLogits));
  EXPECT_NE(x, z);
}

TEST(Sampler, TopKAndTopPRestrictTheChoice) {
  SamplerOptions o;
  o.temperature = 1.f;
  o.top_k = 2;  // ids 1 and 4 (tied at 2.0)
  Sampler k2(o);
  for (int i = 0; i < 200; ++i) {
    const int t = k2.Sample(kLogits);
    EXPECT_TRUE(t == 1 || t == 4) << t;
  }
  o.top_k = 0;
  o.top_p = 0.01f;  // only the single most likely survives
  Sampler p(o);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(p.Sample(kLogits), 1);
}

TEST(Sampler, FollowsTheDistribution) {
  SamplerOptions o;
  o.temperature = 1.f;
  o.seed = 7;
  Sampler s(o);
  const std::vector<float> l = {0.f, std::log(3.f)};  // p = 1/4, 3/4
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.Sample(l);
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.015);
}

TEST(StopMatcher, StopsAcrossPieces) {
  StopMatcher m({"<|end|>", "\n\n"});
  std::string out;
  for (const char* piece : {"Hello", " world", "<|e", "nd", "|>", "never"}) out += m.Feed(piece);
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "Hello world");
  EXPECT_EQ(m.matched(), "<|end|>");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcher, ReleasesWhatTurnsOutNotToBeAStop) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.Feed("abcST"), "abc");  // "ST" might start STOP
  EXPECT_EQ(m.Feed("OX"), "STOX");
  EXPECT_EQ(m.Feed("S"), "");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Flush(), "S");
}

TEST(StopMatcher, EarliestStopWins) {
  StopMatcher m({"cd", "b"});
  EXPECT_EQ(m.matched(), "");
  EXPECT_EQ(m.Feed("abcd"), "a");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "b");
}

}  // namespace
}  // namespace waste
