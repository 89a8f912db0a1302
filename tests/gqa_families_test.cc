// The grouped-query-attention families against transformers: tiny random
// Qwen3-MoE and GLM-4.5 checkpoints written by their own classes'
// save_pretrained (tools/convert_fixtures/make_gqa_families.py), converted
// losslessly in this process, verified against their source, and run over a
// 300-token prompt on every instruction-set path this CPU has: every logit
// within 1e-4 of the row's largest and the same top 10 at every position.
// long_prompt_daemon_test runs the same fixtures through wasted.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/convert/convert.h"
#include "engine/convert/source_model.h"
#include "engine/convert/verify.h"
#include "engine/experts/cache.h"
#include "engine/kernels/cpu.h"
#include "engine/model/model.h"
#include "tests/test_util.h"

namespace waste::convert {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kFixtures = std::string(WASTE_FIXTURES) + "/convert/";

json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

class GqaFamily : public ::testing::TestWithParam<const char*> {};

TEST_P(GqaFamily, LosslessConversionMatchesTransformersAtEveryPosition) {
  const std::string name = GetParam();
  const json meta = ReadJson(kFixtures + "gqa_families.json");
  const json& fx = meta["cases"][name];
  ASSERT_TRUE(fx.is_object()) << name << " is not in gqa_families.json";
  const std::string out = waste::testing::ScratchDir() + "/out";
  ConvertOptions o;
  o.src = kFixtures + fx["checkpoint"].get<std::string>();
  o.out = out;
  o.expert_fmt = *ParseExpertFormat("bf16");
  auto r = Convert(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->layers.size(), 3u);  // one of the four layers is dense
  for (const LayerSummary& l : r->layers) EXPECT_EQ(l.max_rel_error, 0.0) << "layer " << l.layer;
  // GLM's multi-token-prediction layer, past num_hidden_layers, is skipped and said so.
  EXPECT_EQ(r->skipped_layers, name == "glm4-moe" ? std::vector<int>{4} : std::vector<int>{});

  VerifyOptions vo;
  vo.container = out;
  vo.source = o.src;
  auto v = Verify(vo);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
  EXPECT_EQ(v->records, 3 * 16);
  EXPECT_EQ(v->trunk_max_rel_error, 0.0) << v->trunk_worst;

  const auto prompt = meta["prompt_ids"].get<std::vector<int>>();
  ASSERT_GE(prompt.size(), 256u);
  const std::vector<float> want = waste::testing::FileFloats(kFixtures + fx["logits"].get<std::string>());
  for (const auto& [isa, V, got] : waste::testing::LogitsOnEveryIsa(out, prompt, 16)) {
    ASSERT_EQ(want.size(), prompt.size() * V);
    const double worst = waste::testing::ExpectLogitsNear(got, want, V, 1e-4f,
                                                          name + " " + kernels::IsaName(isa));
    std::printf("%s %s: worst max|diff| / max|logit| %.3g\n", name.c_str(), kernels::IsaName(isa),
                worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GqaFamily, ::testing::Values("qwen3-moe", "glm4-moe"),
                         [](const auto& p) {
                           return std::string(p.param[0] == 'q' ? "qwen3_moe" : "glm4_moe");
                         });

// What the families' configs may ask for that is not built, refused by name.
TEST(GqaConfig, UnbuiltSettingsAreRefusedByName) {
  const json base = ReadJson(kFixtures + "qwen3-moe/config.json");
  auto refusal = [&](const char* key, const json& value) {
    json c = base;
    c[key] = value;
    auto s = MapSource(c);
    return s.ok() ? std::string("accepted") : s.status().message();
  };
  EXPECT_NE(refusal("tie_word_embeddings", true).find("tie_word_embeddings"), std::string::npos);
  EXPECT_NE(refusal("use_sliding_window", true).find("use_sliding_window"), std::string::npos);
  EXPECT_NE(refusal("hidden_act", "gelu").find("hidden_act"), std::string::npos);
  EXPECT_NE(refusal("num_key_value_heads", 3).find("num_key_value_heads"), std::string::npos);
  EXPECT_NE(refusal("mlp_only_layers", json::array({7})).find("mlp_only_layers"),
            std::string::npos);
  // rotate-half is what these families do: rope_interleave false is no refusal here.
  EXPECT_EQ(refusal("rope_interleave", false), "accepted");
}

}  // namespace
}  // namespace waste::convert
