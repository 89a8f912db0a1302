// --experts-per-token N (ModelOptions::experts_per_token): the router keeps
// the first N of its own ranking, weighted as the family's router weighs its
// choice; N = top_k is the default path bit for bit, N < top_k changes the
// logits, anything outside 1..top_k is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "engine/experts/cache.h"
#include "engine/format/container.h"
#include "engine/model/model.h"
#include "engine/model/router.h"
#include "engine/synth/synth.h"
#include "tests/support/tiny_engine.h"
#include "tests/test_util.h"

namespace waste {
namespace {

// Each family's router: DeepSeek-V3's (sigmoid, correction bias, groups,
// renormalised, scaled), Qwen3-MoE's without renormalisation (softmax),
// GPT-OSS's (softmax over the chosen).
std::vector<ModelConfig> Routers() {
  ModelConfig ds;
  ds.n_experts = 32, ds.top_k = 8, ds.n_group = 4, ds.topk_group = 2;
  ds.sigmoid_router = true, ds.renormalize = true, ds.routed_scale = 2.5f;
  ModelConfig qwen = ds;
  qwen.n_group = 1, qwen.topk_group = 1, qwen.sigmoid_router = false, qwen.renormalize = false;
  qwen.routed_scale = 1.f;
  ModelConfig oss = qwen;
  oss.softmax_topk = true, oss.top_k = 4;
  return {ds, qwen, oss};
}

TEST(ExpertsPerToken, TheRouterKeepsTheBestOfItsRankingAndRenormalisesAsTheFamily) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.f, 2.f);
  for (const ModelConfig& full : Routers()) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> logits(full.n_experts), bias(full.n_experts);
      for (float& x : logits) x = d(rng);
      for (float& x : bias) x = 0.1f * d(rng);
      const std::span<const float> b = full.softmax_topk ? std::span<const float>() : bias;
      Routing all;
      Route(full, logits, b, &all);
      ASSERT_EQ(all.count, full.top_k);
      for (int n = 1; n <= full.top_k; ++n) {
        ModelConfig cut = full;
        cut.top_k = n;
        Routing r;
        Route(cut, logits, b, &r);
        ASSERT_EQ(r.count, n);
        float sum = 0.f, full_sum = 0.f;
        for (int j = 0; j < n; ++j) {
          EXPECT_EQ(r.expert[j], all.expert[j]) << "rank " << j << " of " << n;
          sum += r.weight[j];
          full_sum += all.weight[j];
        }
        if (full.renormalize || full.softmax_topk) {
          // The N weights sum to the routing scale, in the full choice's proportions.
          EXPECT_NEAR(sum, full.routed_scale, 1e-5f);
          for (int j = 0; j < n; ++j)
            EXPECT_NEAR(r.weight[j], all.weight[j] * full.routed_scale / full_sum, 1e-5f);
        } else {
          for (int j = 0; j < n; ++j) EXPECT_EQ(r.weight[j], all.weight[j]);
        }
        if (n == full.top_k) {
          EXPECT_EQ(0, std::memcmp(r.weight, all.weight, sizeof(float) * n));
        }
      }
    }
  }
}

class Cut : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    testing::TinyEngineOptions o;
    o.load = false;  // each case loads its own, with its experts per token
    auto e = testing::TinyEngine::Create(GetParam(), testing::ScratchDir(), o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine_ = std::move(*e);
  }

  Result<std::unique_ptr<Model>> Load(int n) {
    ModelOptions mo;
    mo.threads = 2;
    mo.experts_per_token = n;
    mo.on_route = [this](int, int, std::span<const int> e) {
      routed_ = std::max(routed_, static_cast<int>(e.size()));
    };
    return Model::Load(engine_->container(), engine_->cache(), mo);
  }

  // Every position's logits of a 12-token prompt, then 3 steps on fixed tokens.
  std::vector<float> Logits(int n) {
    auto m = Load(n);
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (!m.ok()) return {};
    const int V = engine_->container().config().vocab;
    std::vector<int> prompt;
    for (int i = 0; i < 12; ++i) prompt.push_back((3 + 37 * i) % V);
    Session s = (*m)->NewSession(32);
    std::vector<float> all, last(V);
    EXPECT_TRUE((*m)->Forward(s, prompt, nullptr, &all).ok());
    for (int step = 0; step < 3; ++step) {
      const int t[1] = {(5 + 11 * step) % V};
      EXPECT_TRUE((*m)->Forward(s, t, last.data()).ok());
      all.insert(all.end(), last.begin(), last.end());
    }
    return all;
  }

  std::unique_ptr<testing::TinyEngine> engine_;
  int routed_ = 0;  // the most experts a token was routed to
};

TEST_P(Cut, TopKIsTheDefaultBitForBitAndFewerChangeTheLogits) {
  const int k = engine_->container().config().top_k;
  ASSERT_GE(k, 2);
  const std::vector<float> base = Logits(0);
  EXPECT_EQ(routed_, k);
  const std::vector<float> same = Logits(k);
  ASSERT_EQ(same.size(), base.size());
  EXPECT_EQ(0, std::memcmp(same.data(), base.data(), base.size() * 4));
  for (int n = 1; n < k; n *= 2) {
    routed_ = 0;
    const std::vector<float> cut = Logits(n);
    ASSERT_EQ(cut.size(), base.size());
    EXPECT_EQ(routed_, n);
    double diff = 0;
    for (size_t i = 0; i < base.size(); ++i) {
      ASSERT_TRUE(std::isfinite(cut[i]));
      diff = std::max(diff, static_cast<double>(std::fabs(cut[i] - base[i])));
    }
    EXPECT_GT(diff, 1e-4) << n << " of " << k << " experts: the logits did not move";
  }
}

TEST_P(Cut, OutsideOneToTopKIsRefusedByName) {
  const int k = engine_->container().config().top_k;
  for (int n : {-1, k + 1, 1000}) {
    auto m = Load(n);
    ASSERT_FALSE(m.ok()) << n;
    EXPECT_EQ(m.status().message(), "experts per token " + std::to_string(n) +
                                        ": must be 1 to the model's top_k, " + std::to_string(k));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Cut,
                         ::testing::Values("tiny-kimi", "tiny-deepseek", "tiny-qwen3", "tiny-glm"),
                         [](const auto& p) {
                           std::string s = p.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace waste
