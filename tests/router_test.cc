// Routing: the bias steers the choice but not the weights; grouped top-k
// keeps only the best groups; renormalization and scaling; GPT-OSS's
// softmax over the chosen k.
#include "engine/model/router.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace waste {
namespace {

ModelConfig Config(int n, int k, int groups, int keep) {
  ModelConfig c;
  c.n_experts = n;
  c.top_k = k;
  c.n_group = groups;
  c.topk_group = keep;
  c.sigmoid_router = true;
  c.renormalize = true;
  c.routed_scale = 2.f;
  return c;
}

float Sigmoid(float x) {
  return 1.f / (1.f + std::exp(-x));
}

TEST(Router, BiasChoosesWeightsDoNot) {
  const ModelConfig c = Config(4, 2, 1, 1);
  const std::vector<float> logits = {2.f, 1.f, 0.f, -1.f};
  const std::vector<float> bias = {0.f, 0.f, 0.f, 5.f};  // expert 3 wins the choice
  Routing r;
  Route(c, logits, bias, &r);
  ASSERT_EQ(r.count, 2);
  EXPECT_EQ(r.expert[0], 3);
  EXPECT_EQ(r.expert[1], 0);
  const float s3 = Sigmoid(-1.f), s0 = Sigmoid(2.f);
  EXPECT_FLOAT_EQ(r.weight[0], 2.f * s3 / (s3 + s0));  // unbiased scores, renormalized, scaled
  EXPECT_FLOAT_EQ(r.weight[1], 2.f * s0 / (s3 + s0));
}

TEST(Router, GroupedTopKKeepsTheBestGroups) {
  // 8 experts in 4 groups of 2; keep 2 groups. Group score = sum of its two scores.
  const ModelConfig c = Config(8, 2, 4, 2);
  //                          g0          g1          g2          g3
  const std::vector<float> l = {3.f, -5.f, 1.f, 1.f, 2.5f, -5.f, 0.5f, 0.5f};
  Routing r;
  Route(c, l, {}, &r);
  // Group sums: g0 0.95+0.007, g1 0.73*2, g2 0.92+0.007, g3 0.62*2 -> g1 and g3 win,
  // so expert 0 (the single best score) is not chosen.
  ASSERT_EQ(r.count, 2);
  EXPECT_EQ(r.expert[0], 2);
  EXPECT_EQ(r.expert[1], 3);
}

TEST(Router, SoftmaxScores) {
  ModelConfig c = Config(3, 1, 1, 1);
  c.sigmoid_router = false;
  c.renormalize = false;
  c.routed_scale = 1.f;
  Routing r;
  Route(c, std::vector<float>{0.f, std::log(3.f), 0.f}, {}, &r);
  EXPECT_EQ(r.expert[0], 1);
  EXPECT_FLOAT_EQ(r.weight[0], 0.6f);
}

// GPT-OSS: top-k of the raw logits, then a softmax over those k only
// (transformers' GptOssTopKRouter); ties go to the lower id.
TEST(Router, SoftmaxOverTheChosenK) {
  ModelConfig c = Config(6, 3, 1, 1);
  c.softmax_topk = true;
  c.routed_scale = 1.f;
  const std::vector<float> logits = {0.5f, 3.f, -2.f, 3.f, 1.f, 0.9f};
  Routing r;
  Route(c, logits, {}, &r);
  ASSERT_EQ(r.count, 3);
  EXPECT_EQ(r.expert[0], 1);
  EXPECT_EQ(r.expert[1], 3);
  EXPECT_EQ(r.expert[2], 4);
  const double z = 2 * std::exp(0.0) + std::exp(1.0 - 3.0);
  EXPECT_NEAR(r.weight[0], 1.0 / z, 1e-7);
  EXPECT_NEAR(r.weight[1], 1.0 / z, 1e-7);
  EXPECT_NEAR(r.weight[2], std::exp(-2.0) / z, 1e-7);
  EXPECT_NEAR(r.weight[0] + r.weight[1] + r.weight[2], 1.0, 1e-6);
}

}  // namespace
}  // namespace waste
