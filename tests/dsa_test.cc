// DeepSeek-V3.2 (deepseek_v32: MLA with DeepSeek Sparse Attention's
// lightning indexer) and GLM-5 (glm_moe_dsa: the same with its own rotary
// and GLM-5.2's index sharing) against transformers: tiny random checkpoints
// written by their own classes' save_pretrained (tools/convert_fixtures/make_dsa.py),
// converted losslessly in this process and run over a 2,100-token prompt
// with index_topk 64, so that every position past 63 attends the indexer's
// choice, on every instruction-set path this CPU has: every logit within
// 1e-5 of the row's largest and the same top 10. The reference is the
// checkpoint loaded back with from_pretrained(dtype=float32). Also: the
// choice itself on ties, token-by-token and chunked runs giving the same
// bits, and a session saved and loaded mid-prompt carrying the index keys.
// long_prompt_daemon_test (DsaWasted) runs the fixture through wasted.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/convert/convert.h"
#include "engine/convert/source_model.h"
#include "engine/convert/verify.h"
#include "engine/kernels/cpu.h"
#include "engine/model/architecture.h"
#include "engine/model/dsa.h"
#include "engine/model/session_io.h"
#include "tests/test_util.h"

namespace waste::convert {
namespace {

using nlohmann::json;

const std::string kFixtures = std::string(WASTE_FIXTURES) + "/convert/";

json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

std::vector<int> Kept(const std::vector<char>& keep) {
  std::vector<int> out;
  for (size_t t = 0; t < keep.size(); ++t)
    if (keep[t]) out.push_back(static_cast<int>(t));
  return out;
}

// The choice on its own: the top-k scores, ties to the lower position, and
// everything while there are no more positions than top-k.
TEST(DsaSelect, KeepsTheTopKWithTiesToTheLowerPosition) {
  std::vector<char> keep;
  DsaSelect(std::vector<float>{0.5f, -1.f, 3.f}, 4, keep);
  EXPECT_EQ(Kept(keep), (std::vector<int>{0, 1, 2}));
  DsaSelect(std::vector<float>{0.5f, -1.f, 3.f, 2.f}, 4, keep);
  EXPECT_EQ(Kept(keep), (std::vector<int>{0, 1, 2, 3}));
  DsaSelect(std::vector<float>{0.5f, -1.f, 3.f, 2.f, 0.25f}, 3, keep);
  EXPECT_EQ(Kept(keep), (std::vector<int>{0, 2, 3}));
  // Four scores of 0 (every head's relu zero) for the last two places.
  DsaSelect(std::vector<float>{0.f, -2.f, 0.f, 5.f, 0.f, 0.f, 1.f}, 4, keep);
  EXPECT_EQ(Kept(keep), (std::vector<int>{0, 2, 3, 6}));
  DsaSelect(std::vector<float>{-1.f, -1.f, -1.f, -1.f}, 1, keep);
  EXPECT_EQ(Kept(keep), (std::vector<int>{0}));
}

struct Case {
  const char* name;
  Arch arch;
};

// One family's fixture, converted once for its tests.
class Dsa : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    meta_ = ReadJson(kFixtures + "dsa.json");
    ASSERT_TRUE(meta_["cases"].contains(GetParam().name)) << GetParam().name;
    src_ = kFixtures + GetParam().name;
    dir_ = waste::testing::ScratchDir() + "/dsa";
    ConvertOptions o;
    o.src = src_;
    o.out = dir_;
    o.expert_fmt = *ParseExpertFormat("bf16");
    auto r = Convert(o);
    ASSERT_TRUE(r.ok()) << r.status().message();
    summary_ = *r;
  }
  std::vector<int> Prompt() const { return meta_["prompt_ids"].get<std::vector<int>>(); }

  json meta_;
  std::string src_, dir_;
  ConvertSummary summary_;
};

TEST_P(Dsa, LosslessConversionMatchesTransformersAtEveryPosition) {
  const std::string name = GetParam().name;
  std::vector<int> moe;
  for (const LayerSummary& l : summary_.layers) {
    moe.push_back(l.layer);
    EXPECT_EQ(l.max_rel_error, 0.0) << "layer " << l.layer;
  }
  EXPECT_EQ(moe, std::vector<int>{1});
  EXPECT_EQ(summary_.skipped_layers, std::vector<int>{2});  // the MTP layer, by name

  VerifyOptions vo;
  vo.container = dir_;
  vo.source = src_;
  auto v = Verify(vo);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
  EXPECT_EQ(v->records, 8);
  EXPECT_EQ(v->trunk_max_rel_error, 0.0) << v->trunk_worst;
  auto ct = Container::Open(dir_);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  EXPECT_EQ(ct->config().arch, GetParam().arch);

  const std::vector<int> prompt = Prompt();
  ASSERT_GE(prompt.size(), 2100u);
  const int topk = meta_["index_topk"].get<int>();
  ASSERT_LT(topk, 2100);  // the choice is exercised, not dense attention
  const std::vector<float> want = waste::testing::FileFloats(kFixtures + name + ".logits.bin");
  for (const auto& [isa, V, got] : waste::testing::LogitsOnEveryIsa(dir_, prompt, 8)) {
    ASSERT_EQ(want.size(), prompt.size() * V);
    const double worst = waste::testing::ExpectLogitsNear(got, want, V, 1e-5f,
                                                          name + " " + kernels::IsaName(isa));
    std::printf("%s %s: worst max|diff| / max|logit| %.3g\n", name.c_str(), kernels::IsaName(isa),
                worst);
  }
}

// Token by token, in chunks, and through a session saved mid-prompt and
// loaded again: the same bits, so the index keys are the session's state.
TEST_P(Dsa, ChunksTokensAndSavedSessionsGiveTheSameBits) {
  // 400 positions: past the top-k of 64, and cheap enough token by token.
  std::vector<int> prompt = Prompt();
  prompt.resize(400);
  auto ct = Container::Open(dir_);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  CacheOptions co;
  co.slots = 8;
  auto cache = ExpertCache::Create(*ct, co);
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  const int n = static_cast<int>(prompt.size());
  auto run = [&](int chunk, int split, std::vector<float>* all) {
    ModelOptions mo;
    mo.chunk = chunk;
    auto m = Model::Load(*ct, cache->get(), mo);
    ASSERT_TRUE(m.ok()) << m.status().message();
    Session s = (*m)->NewSession(n);
    std::vector<float> first, rest;
    ASSERT_TRUE((*m)->Forward(s, std::span(prompt).first(split), nullptr, &first).ok());
    if (split < n) {  // the rest from the state saved at `split` and loaded back
      const std::string path = waste::testing::ScratchDir() + "/dsa.session";
      ASSERT_TRUE(SaveSession(*ct, s, path).ok());
      auto loaded = LoadSession(**m, path, n);
      ASSERT_TRUE(loaded.ok()) << loaded.status().message();
      ASSERT_TRUE((*m)->Forward(*loaded, std::span(prompt).subspan(split), nullptr, &rest).ok());
    }
    first.insert(first.end(), rest.begin(), rest.end());
    *all = std::move(first);
  };
  std::vector<float> chunked, tokens, resumed;
  run(32, n, &chunked);
  run(1, n, &tokens);
  run(45, 250, &resumed);
  ASSERT_EQ(chunked.size(), tokens.size());
  EXPECT_TRUE(chunked == tokens) << "token by token differs from chunks of 32";
  EXPECT_TRUE(chunked == resumed) << "a session saved at 250 and loaded differs";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Dsa,
                         ::testing::Values(Case{"deepseek-v32", Arch::kDeepseekV32},
                                           Case{"glm-moe-dsa", Arch::kGlmMoeDsa}),
                         [](const auto& p) {
                           return std::string(p.param.arch == Arch::kDeepseekV32 ? "deepseek_v32"
                                                                                 : "glm_moe_dsa");
                         });

std::string Refusal(const json& base, const char* key, const json& value) {
  json c = base;
  c[key] = value;
  auto s = MapSource(c);
  return s.ok() ? std::string("accepted") : s.status().message();
}

TEST(DsaConfig, MapsToMlaWithTheIndexerAndRefusesWhatItDoesNotDo) {
  const json base = ReadJson(kFixtures + "deepseek-v32/config.json");
  auto s = MapSource(base);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->shape.arch, Arch::kDeepseekV32);
  EXPECT_EQ(s->family, Family::kDeepseekV3);  // DeepSeek-V3's tensor names
  EXPECT_EQ(s->shape.index_topk, 64);
  EXPECT_EQ(s->shape.index_heads, 16);
  EXPECT_EQ(s->shape.index_dim, 16);
  EXPECT_TRUE(s->shape.index_rotate_half);
  EXPECT_EQ(s->shape.mla_row(0), 16 + 8 + 16);
  auto plans = PlanLayers(s->shape);
  ASSERT_TRUE(plans.ok()) << plans.status().message();
  ASSERT_EQ(plans->size(), 2u);
  EXPECT_EQ((*plans)[0].ffn, FfnKind::kDense);
  EXPECT_EQ((*plans)[1].ffn, FfnKind::kMoe);

  json absent = base;  // transformers' default: first_k_dense_replace dense layers
  absent.erase("mlp_layer_types");
  absent["first_k_dense_replace"] = 2;
  auto d = MapSource(absent);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->shape.n_moe_layers(), 0);

  EXPECT_NE(Refusal(base, "layer_types", json::array({"indexed_attention", "full_attention"}))
                .find("layer_types[1]"),
            std::string::npos);
  EXPECT_NE(Refusal(base, "index_topk", 0).find("index_topk"), std::string::npos);
  EXPECT_NE(Refusal(base, "index_head_dim", 4).find("index_head_dim"), std::string::npos);
  EXPECT_NE(Refusal(base, "q_lora_rank", 0).find("q_lora_rank"), std::string::npos);
  EXPECT_NE(Refusal(base, "num_key_value_heads", 1).find("num_key_value_heads"),
            std::string::npos);
  json v3 = base;  // an indexer's key in a family without one
  v3["model_type"] = "deepseek_v3";
  EXPECT_NE(Refusal(v3, "index_topk", 64).find("index_topk"), std::string::npos);
}

// GLM-5: the indexer's rotary interleaved; GLM-5.2's shared layers by
// indexer_types, index_topk_pattern or the freq/offset schedule.
TEST(DsaConfig, GlmMoeDsaReadsItsIndexSharing) {
  const json base = ReadJson(kFixtures + "glm-moe-dsa/config.json");
  auto s = MapSource(base);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->shape.arch, Arch::kGlmMoeDsa);
  EXPECT_FALSE(s->shape.index_rotate_half);
  EXPECT_EQ(s->shape.index_shared, (std::vector<bool>{false, true}));
  EXPECT_EQ(s->shape.mla_row(0), 16 + 8 + 16);
  EXPECT_EQ(s->shape.mla_row(1), 16 + 8);  // a shared layer keeps no index key

  json c = base;
  c["num_hidden_layers"] = 6;
  c["mlp_layer_types"] = json::array({"dense", "sparse", "sparse", "sparse", "sparse", "sparse"});
  c.erase("indexer_types");
  c.erase("layer_types");
  c["index_topk_pattern"] = "FSSFFS";
  auto p = MapSource(c);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->shape.index_shared, (std::vector<bool>{false, true, true, false, false, true}));
  c.erase("index_topk_pattern");
  c["index_topk_freq"] = 3;  // transformers: full where max(L - 2 + 1, 0) % 3 == 0
  p = MapSource(c);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->shape.index_shared, (std::vector<bool>{false, false, true, true, false, true}));
  c["index_topk_pattern"] = "SFFFFF";
  p = MapSource(c);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("layer 0"), std::string::npos);
  c["index_topk_pattern"] = "FXFFFF";
  p = MapSource(c);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("index_topk_pattern[1]"), std::string::npos);
  EXPECT_NE(Refusal(base, "indexer_types", json::array({"full", "dense"})).find("indexer_types[1]"),
            std::string::npos);
}

}  // namespace
}  // namespace waste::convert
