// The architecture plan: each family's layers get the attention kind, the
// feed-forward and the shared expert their configs say, and a config asking
// for a kind its family has not is refused by name.
#include "engine/model/architecture.h"

#include <gtest/gtest.h>

#include "engine/synth/synth.h"

namespace waste {
namespace {

ModelConfig Parse(const char* preset) {
  auto c = ModelConfig::FromJson(SynthPreset(preset)->config);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? *c : ModelConfig{};
}

TEST(Architecture, KimiLinearLayersFollowTheConfig) {
  const ModelConfig c = Parse("kimi-linear-48b");
  auto plans = PlanLayers(c);
  ASSERT_TRUE(plans.ok()) << plans.status().message();
  ASSERT_EQ(plans->size(), 27u);
  for (int L = 0; L < c.n_layers; ++L) {
    const LayerPlan& p = (*plans)[L];
    EXPECT_EQ(p.attention, c.layer_kind[L]) << L;
    EXPECT_EQ(p.ffn, L < c.first_dense ? FfnKind::kDense : FfnKind::kMoe) << L;
    EXPECT_EQ(p.shared_expert, p.ffn == FfnKind::kMoe) << L;
  }
  EXPECT_EQ((*plans)[0].attention, LayerKind::kKda);
  EXPECT_EQ((*plans)[3].attention, LayerKind::kMla);
}

TEST(Architecture, KimiK3PlansKimiLinearsKindsWithTwoSharedExperts) {
  const ModelConfig c = Parse("tiny-k3");
  ASSERT_EQ(c.arch, Arch::kKimiK3);
  auto plans = PlanLayers(c);
  ASSERT_TRUE(plans.ok()) << plans.status().message();
  const LayerKind K = LayerKind::kKda, M = LayerKind::kMla;
  const std::vector<LayerKind> want = {K, K, K, M, K, M};  // kda_layers 1, 2, 3, 5 (1-based)
  for (int L = 0; L < c.n_layers; ++L) {
    EXPECT_EQ((*plans)[L].attention, want[L]) << L;
    EXPECT_EQ((*plans)[L].ffn, L == 0 ? FfnKind::kDense : FfnKind::kMoe) << L;
    EXPECT_EQ((*plans)[L].shared_expert, L > 0) << L;
  }
}

TEST(Architecture, DeepseekV3IsMlaEverywhere) {
  const ModelConfig c = Parse("tiny-deepseek");
  auto plans = PlanLayers(c);
  ASSERT_TRUE(plans.ok()) << plans.status().message();
  for (int L = 0; L < c.n_layers; ++L) {
    EXPECT_EQ((*plans)[L].attention, LayerKind::kMla) << L;
    EXPECT_EQ((*plans)[L].ffn, c.is_moe_layer(L) ? FfnKind::kMoe : FfnKind::kDense) << L;
  }
  EXPECT_EQ((*plans)[0].ffn, FfnKind::kDense);
}

TEST(Architecture, AKindTheFamilyHasNotIsRefused) {
  ModelConfig c = Parse("tiny-deepseek");
  c.layer_kind[1] = LayerKind::kKda;
  auto plans = PlanLayers(c);
  ASSERT_FALSE(plans.ok());
  EXPECT_NE(plans.status().message().find("layer 1"), std::string::npos);
  EXPECT_NE(plans.status().message().find("KDA"), std::string::npos);
}

TEST(Architecture, TheGqaFamiliesPlanTheirLayers) {
  // Qwen3-MoE: GQA, MoE on every second layer (decoder_sparse_step 2), no shared expert.
  const ModelConfig q = Parse("tiny-qwen3");
  auto plans = PlanLayers(q);
  ASSERT_TRUE(plans.ok()) << plans.status().message();
  for (int L = 0; L < q.n_layers; ++L) {
    EXPECT_EQ((*plans)[L].attention, LayerKind::kGqa) << L;
    EXPECT_EQ((*plans)[L].ffn, L % 2 == 1 ? FfnKind::kMoe : FfnKind::kDense) << L;
    EXPECT_FALSE((*plans)[L].shared_expert) << L;
  }
  // GLM-4.5: GQA, dense first layer, MoE with a shared expert after it.
  const ModelConfig g = Parse("glm-4.5-air");
  plans = PlanLayers(g);
  ASSERT_TRUE(plans.ok()) << plans.status().message();
  EXPECT_EQ((*plans)[0].ffn, FfnKind::kDense);
  EXPECT_TRUE((*plans)[45].shared_expert);
  EXPECT_EQ((*plans)[45].attention, LayerKind::kGqa);
  // A shared expert is not Qwen3-MoE's, nor MLA.
  ModelConfig shared = q;
  shared.n_shared = 1;
  EXPECT_NE(PlanLayers(shared).status().message().find("qwen3_moe has no shared experts"),
            std::string::npos);
  ModelConfig mla = q;
  mla.layer_kind[2] = LayerKind::kMla;
  EXPECT_NE(PlanLayers(mla).status().message().find("has no MLA layers"), std::string::npos);
}

}  // namespace
}  // namespace waste
