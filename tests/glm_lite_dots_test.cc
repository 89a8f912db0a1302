// GLM-4.7-Flash (glm4_moe_lite) and dots.llm1 (dots1) against transformers:
// tiny random checkpoints written by their own classes' save_pretrained
// (tools/convert_fixtures/make_glm_lite_dots.py), converted losslessly in
// this process, verified against their source, and run over a 300-token
// prompt on every instruction-set path this CPU has: every logit within 1e-5
// of the row's largest and the same top 10 at every position. The reference
// is each checkpoint loaded back with from_pretrained(dtype=float32).
// long_prompt_daemon_test (GqaWasted) runs the same fixtures through wasted.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/convert/convert.h"
#include "engine/convert/source_model.h"
#include "engine/convert/verify.h"
#include "engine/kernels/cpu.h"
#include "engine/model/architecture.h"
#include "tests/test_util.h"

namespace waste::convert {
namespace {

using nlohmann::json;

const std::string kFixtures = std::string(WASTE_FIXTURES) + "/convert/";

json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

struct Case {
  const char* name;
  std::vector<int> moe_layers;
  std::vector<int> skipped;  // multi-token-prediction layers, past num_hidden_layers
};

class GlmLiteDots : public ::testing::TestWithParam<Case> {};

TEST_P(GlmLiteDots, LosslessConversionMatchesTransformersAtEveryPosition) {
  const Case& k = GetParam();
  const std::string name = k.name;
  const json meta = ReadJson(kFixtures + "glm_lite_dots.json");
  const json& fx = meta["cases"][name];
  ASSERT_TRUE(fx.is_object()) << name << " is not in glm_lite_dots.json";
  const std::string out = waste::testing::ScratchDir() + "/out";
  ConvertOptions o;
  o.src = kFixtures + fx["checkpoint"].get<std::string>();
  o.out = out;
  o.expert_fmt = *ParseExpertFormat("bf16");
  auto r = Convert(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::vector<int> moe;
  for (const LayerSummary& l : r->layers) {
    moe.push_back(l.layer);
    EXPECT_EQ(l.max_rel_error, 0.0) << "layer " << l.layer;
  }
  EXPECT_EQ(moe, k.moe_layers);
  EXPECT_EQ(r->skipped_layers, k.skipped);

  VerifyOptions vo;
  vo.container = out;
  vo.source = o.src;
  auto v = Verify(vo);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
  EXPECT_EQ(v->records, static_cast<int>(k.moe_layers.size()) * 16);
  EXPECT_EQ(v->trunk_max_rel_error, 0.0) << v->trunk_worst;

  const auto prompt = meta["prompt_ids"].get<std::vector<int>>();
  ASSERT_GE(prompt.size(), 300u);
  const std::vector<float> want =
      waste::testing::FileFloats(kFixtures + fx["logits"].get<std::string>());
  for (const auto& [isa, V, got] : waste::testing::LogitsOnEveryIsa(out, prompt, 16)) {
    ASSERT_EQ(want.size(), prompt.size() * V);
    const double worst = waste::testing::ExpectLogitsNear(got, want, V, 1e-5f,
                                                          name + " " + kernels::IsaName(isa));
    std::printf("%s %s: worst max|diff| / max|logit| %.3g\n", name.c_str(), kernels::IsaName(isa),
                worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GlmLiteDots,
                         ::testing::Values(Case{"glm4-moe-lite", {1, 3}, {4}},
                                           Case{"dots1", {1, 2, 3}, {}}),
                         [](const auto& p) {
                           return std::string(p.param.name[0] == 'g' ? "glm4_moe_lite" : "dots1");
                         });

std::string Refusal(const json& base, const char* key, const json& value) {
  json c = base;
  c[key] = value;
  auto s = MapSource(c);
  return s.ok() ? std::string("accepted") : s.status().message();
}

// GLM-4.7-Flash: MLA with GLM's router; its dense layers are the ones
// mlp_layer_types names, whatever first_k_dense_replace would say.
TEST(GlmLiteConfig, MapsToMlaWithDenseLayersWhereMlpLayerTypesSays) {
  const json base = ReadJson(kFixtures + "glm4-moe-lite/config.json");
  auto s = MapSource(base);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->shape.arch, Arch::kGlm4MoeLite);
  EXPECT_EQ(s->family, Family::kDeepseekV3);  // DeepSeek-V3's tensor names
  auto plans = PlanLayers(s->shape);
  ASSERT_TRUE(plans.ok()) << plans.status().message();
  ASSERT_EQ(plans->size(), 4u);
  for (int L = 0; L < 4; ++L) {
    EXPECT_EQ((*plans)[L].attention, LayerKind::kMla) << L;
    EXPECT_EQ((*plans)[L].ffn, L % 2 ? FfnKind::kMoe : FfnKind::kDense) << L;
    EXPECT_EQ((*plans)[L].shared_expert, L % 2 == 1) << L;
  }
  EXPECT_TRUE(s->shape.sigmoid_router);
  EXPECT_TRUE(s->shape.router_bias);
  EXPECT_EQ(s->shape.n_group, 4);
  EXPECT_EQ(s->shape.topk_group, 2);
  EXPECT_FLOAT_EQ(s->shape.routed_scale, 1.8f);

  json absent = base;  // transformers' default: the first layer dense, the rest MoE
  absent.erase("mlp_layer_types");
  auto d = MapSource(absent);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->shape.n_moe_layers(), 3);
  EXPECT_FALSE(d->shape.is_moe_layer(0));
  EXPECT_EQ(Refusal(absent, "first_k_dense_replace", 1), "accepted");  // agrees

  EXPECT_NE(Refusal(base, "first_k_dense_replace", 1).find("first_k_dense_replace"),
            std::string::npos);
  EXPECT_NE(Refusal(base, "mlp_layer_types", json::array({"dense", "moe", "dense", "sparse"}))
                .find("mlp_layer_types[1]"),
            std::string::npos);
  EXPECT_NE(Refusal(base, "mlp_layer_types", json::array({"dense"})).find("mlp_layer_types"),
            std::string::npos);
  EXPECT_NE(Refusal(base, "attention_bias", true).find("attention_bias"), std::string::npos);
  EXPECT_NE(Refusal(base, "num_key_value_heads", 2).find("num_key_value_heads"),
            std::string::npos);
  EXPECT_NE(Refusal(base, "rope_interleave", false).find("rope_interleave"), std::string::npos);
  EXPECT_NE(Refusal(base, "tie_word_embeddings", true).find("tie_word_embeddings"),
            std::string::npos);
  json partial = base;
  partial["rope_parameters"]["partial_rotary_factor"] = 0.5;
  auto p = MapSource(partial);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("partial_rotary_factor"), std::string::npos);
}

// dots.llm1: Qwen3's attention (q/k norms always) with DeepSeek-V3's MoE.
TEST(Dots1Config, MapsToGqaWithQkNormsAndGroupedRouting) {
  const json base = ReadJson(kFixtures + "dots1/config.json");
  auto s = MapSource(base);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->shape.arch, Arch::kDots1);
  EXPECT_EQ(s->family, Family::kGlm4Moe);  // GLM-4.5's tensor names
  EXPECT_TRUE(s->shape.qk_norm);
  EXPECT_FALSE(s->shape.attn_bias);
  EXPECT_EQ(s->shape.rotary_dim, 24);
  EXPECT_EQ(s->shape.n_shared, 2);
  EXPECT_TRUE(s->shape.router_bias);
  auto plans = PlanLayers(s->shape);
  ASSERT_TRUE(plans.ok()) << plans.status().message();
  for (int L = 0; L < 4; ++L) EXPECT_EQ((*plans)[L].attention, LayerKind::kGqa) << L;

  json sliding = base;
  sliding["layer_types"][2] = "sliding_attention";
  auto w = MapSource(sliding);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("layer_types[2]"), std::string::npos);
  EXPECT_NE(Refusal(base, "use_sliding_window", true).find("use_sliding_window"),
            std::string::npos);
  EXPECT_NE(Refusal(base, "num_key_value_heads", 3).find("num_key_value_heads"),
            std::string::npos);
  EXPECT_NE(Refusal(base, "hidden_act", "gelu").find("hidden_act"), std::string::npos);
}

}  // namespace
}  // namespace waste::convert
