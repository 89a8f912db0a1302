// Sampling (greedy, temperature, top-k, top-p, seeds; logit_bias and the
// presence and frequency penalties against OpenAI's definition written out)
// and stop strings.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
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

// OpenAI's definition written out over the whole vocabulary: the logits
// with the bias added and, for each token chosen count[j] times so far,
// count[j] * frequency + (count[j] > 0) * presence taken off.
std::vector<float> Reference(std::vector<float> l, const std::map<int, float>& bias,
                             const std::vector<int>& count, float frequency, float presence) {
  for (size_t j = 0; j < l.size(); ++j) {
    if (bias.count(static_cast<int>(j))) l[j] += bias.at(static_cast<int>(j));
    if (count[j] > 0) l[j] -= static_cast<float>(count[j]) * frequency + presence;
  }
  return l;
}

TEST(Sampler, BiasAndPenaltiesFollowOpenAIsDefinition) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> logit(0.f, 3.f);
  const std::map<int, float> bias = {{3, 2.5f}, {7, -1.f}, {20, 0.75f}};
  for (const float temperature : {0.f, 0.8f}) {
    SamplerOptions plain;
    plain.temperature = temperature;
    plain.top_k = 12;
    plain.top_p = 0.9f;
    plain.seed = 11;
    SamplerOptions o = plain;
    o.logit_bias.assign(bias.begin(), bias.end());
    o.frequency_penalty = 0.7f;
    o.presence_penalty = 0.4f;
    // The same draws from the same seed: the adjusted sampler must choose
    // what a plain one chooses from the reference's logits.
    Sampler adjusted(o), reference(plain), unadjusted(plain);
    std::vector<int> count(24, 0);
    int differs = 0;
    for (int step = 0; step < 300; ++step) {
      std::vector<float> l(24);
      for (float& x : l) x = logit(rng);
      const std::vector<float> before = l;
      const int got = adjusted.Sample(l);
      ASSERT_EQ(got, reference.Sample(Reference(l, bias, count, 0.7f, 0.4f)))
          << "temperature " << temperature << " step " << step;
      ASSERT_EQ(l, before);  // the caller's logits are left as they were
      differs += got != unadjusted.Sample(l);
      ++count[got];
    }
    EXPECT_GT(differs, 30) << temperature;  // the adjustments changed the choices
  }
}

TEST(Sampler, PenaltiesWorkedByHand) {
  const std::vector<float> l = {2.f, 1.5f, 0.f};
  const auto greedy = [&](float frequency, float presence) {
    SamplerOptions o;
    o.frequency_penalty = frequency;
    o.presence_penalty = presence;
    Sampler s(o);
    std::vector<int> out;
    for (int i = 0; i < 6; ++i) out.push_back(s.Sample(l));
    return out;
  };
  // 2 | 1 1.5 | 1 .5 | 0 .5 | 0 -.5 0 (a tie: the lower id) | -1 -.5 0
  EXPECT_EQ(greedy(1.f, 0.f), (std::vector<int>{0, 1, 0, 1, 0, 2}));
  // Presence counts once: 2 | 1.4 1.5 | 1.4 .9, and so on.
  EXPECT_EQ(greedy(0.f, 0.6f), (std::vector<int>{0, 1, 0, 0, 0, 0}));
  // Negative penalties favour repeats.
  EXPECT_EQ(greedy(-1.f, -2.f), (std::vector<int>(6, 0)));
  EXPECT_EQ(greedy(0.f, 0.f), (std::vector<int>(6, 0)));
}

TEST(Sampler, ABiasOfAHundredDecides) {
  SamplerOptions o;
  o.logit_bias = {{3, 100.f}, {99, 100.f}};  // 99 is past the logits: skipped
  Sampler up(o);
  o.temperature = 1.f;
  Sampler sampled(o);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(up.Sample(kLogits), 3);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sampled.Sample(kLogits), 3);
  o.logit_bias = {{1, -100.f}, {4, -100.f}};
  Sampler down(o);
  for (int i = 0; i < 200; ++i) {
    const int t = down.Sample(kLogits);
    EXPECT_TRUE(t != 1 && t != 4) << t;
  }
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
