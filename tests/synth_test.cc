// Synthetic containers: valid, deterministic (same seed, same bytes, however
// many threads write them), and concentrated in their routing.
#include "engine/synth/synth.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "engine/format/container.h"
#include "tests/test_util.h"

namespace waste {
namespace {

std::map<std::string, std::vector<uint8_t>> AllFiles(const std::string& dir) {
  std::map<std::string, std::vector<uint8_t>> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    files[e.path().filename().string()] = waste::testing::FileBytes(e.path().string());
  return files;
}

Result<SynthReport> Write(const std::string& preset, const std::string& dir, int jobs,
                          uint64_t seed = 0) {
  auto spec = SynthPreset(preset);
  EXPECT_TRUE(spec.ok());
  if (seed) spec->seed = seed;
  return WriteSynthetic(*spec, dir, true, jobs, nullptr);
}

TEST(Synth, SameSeedSameBytesWhateverTheThreads) {
  const std::string a = waste::testing::ScratchDir("a"), b = waste::testing::ScratchDir("b");
  ASSERT_TRUE(Write("tiny-kimi", a, 1).ok());
  ASSERT_TRUE(Write("tiny-kimi", b, 3).ok());
  const auto fa = AllFiles(a), fb = AllFiles(b);
  ASSERT_EQ(fa.size(), 11u);  // manifest, trunk, codebooks, 5 banks, 3 tokenizer files
  EXPECT_EQ(fa, fb);
}

TEST(Synth, AnotherSeedOtherBytes) {
  const std::string a = waste::testing::ScratchDir("a"), b = waste::testing::ScratchDir("b");
  ASSERT_TRUE(Write("tiny-kimi", a, 2, 1).ok());
  ASSERT_TRUE(Write("tiny-kimi", b, 2, 2).ok());
  EXPECT_NE(waste::testing::FileBytes(a + "/trunk.bin"),
            waste::testing::FileBytes(b + "/trunk.bin"));
  EXPECT_NE(waste::testing::FileBytes(a + "/experts-L1.bin"),
            waste::testing::FileBytes(b + "/experts-L1.bin"));
}

// Each tiny preset chats in its family's format, with that family's
// specials (their count) and its end of turn as the config's eos.
struct PresetCase {
  const char* preset;
  const char* family;
  size_t specials;
  const char* eos;
};

class Presets : public ::testing::TestWithParam<PresetCase> {};

TEST_P(Presets, OpenAndEveryRecordChecks) {
  const PresetCase& p = GetParam();
  const std::string dir = waste::testing::ScratchDir();
  auto r = Write(p.preset, dir, 2);
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto ct = Container::Open(dir);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  EXPECT_TRUE(ct->has_tokenizer());
  EXPECT_EQ(ct->specials().size(), p.specials);
  ASSERT_TRUE(ct->chat().has_value());
  EXPECT_EQ(ct->chat()->family, p.family);
  EXPECT_EQ(ct->chat()->xtml, std::string(p.family) == "k3-xtml");
  const auto eos = std::find_if(ct->specials().begin(), ct->specials().end(),
                                [&](const SpecialToken& s) { return s.text == p.eos; });
  ASSERT_NE(eos, ct->specials().end()) << p.eos;
  EXPECT_EQ(ct->config().eos_tokens, std::vector<int>{eos->id});
  std::vector<uint8_t> rec(ct->record_bytes());
  for (const ExpertBank& b : ct->manifest().banks)
    for (int e = 0; e < b.experts; ++e) {
      const Status st = ct->ReadRecord(b.layer, e, rec.data(), true);
      ASSERT_TRUE(st.ok()) << st.message();
    }
}

INSTANTIATE_TEST_SUITE_P(
    Small, Presets,
    ::testing::Values(PresetCase{"tiny-kimi", "kimi-k2", 7, "<|im_end|>"},
                      PresetCase{"tiny-deepseek", "deepseek-v3.1", 13,
                                 "<\xEF\xBD\x9C"
                                 "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"},
                      PresetCase{"tiny-deepseek-v32", "deepseek-v3.1", 13,
                                 "<\xEF\xBD\x9C"
                                 "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"},
                      PresetCase{"tiny-qwen3", "qwen3", 9, "<|im_end|>"},
                      PresetCase{"tiny-glm", "glm-4.5", 18, "<|endoftext|>"},
                      PresetCase{"tiny-glm-lite", "glm-4.5", 18, "<|endoftext|>"},
                      PresetCase{"tiny-glm-5", "glm-4.5", 18, "<|endoftext|>"},
                      PresetCase{"tiny-dots1", "qwen3", 9, "<|im_end|>"},
                      PresetCase{"tiny-gpt-oss", "harmony", 10, "<|return|>"},
                      PresetCase{"tiny-k3", "k3-xtml", 10, "<|end_of_msg|>"},
                      PresetCase{"tiny-minimax", "qwen3", 9, "<|im_end|>"}),
    [](const auto& p) {
      std::string n = p.param.preset;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

// tiny-k3 in WARP's K3 layout, so that WARP's engine opens it too: the text
// config flattened with the wrapper under _outer, every trunk tensor under
// language_model., A_log one value per head padded with zeros to head_dim,
// expert records in the latent width.
TEST(Synth, TinyK3IsWarpsK3Layout) {
  const std::string dir = waste::testing::ScratchDir();
  ASSERT_TRUE(Write("tiny-k3", dir, 2).ok());
  auto ct = Container::Open(dir);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  const Manifest& m = ct->manifest();
  EXPECT_EQ(m.arch, "kimi-k3");
  EXPECT_EQ(m.tensor_prefix, "language_model.");
  EXPECT_EQ(m.config_json["_outer"]["architectures"][0], "KimiK3ForConditionalGeneration");
  EXPECT_EQ(m.config_json["model_type"], "kimi_linear");
  for (const TrunkTensor& t : m.trunk) EXPECT_EQ(t.name.rfind("language_model.", 0), 0u) << t.name;
  const TrunkTensor* a_log = m.FindTensor("model.layers.0.self_attn.A_log");
  ASSERT_NE(a_log, nullptr);
  std::vector<float> a(static_cast<size_t>(a_log->elements));
  ASSERT_TRUE(ct->ReadTensorInto(*a_log, {reinterpret_cast<uint8_t*>(a.data()), a.size() * 4}, {})
                  .ok());
  ASSERT_EQ(a.size(), 64u);
  for (int h = 0; h < 4; ++h) EXPECT_NE(a[h], 0.f) << h;
  for (size_t i = 4; i < a.size(); ++i) EXPECT_EQ(a[i], 0.f) << i;
  EXPECT_EQ(ct->record_layout().cols[0], 128);  // gate reads the latent
  EXPECT_EQ(ct->record_layout().rows[2], 128);  // down writes it
  EXPECT_EQ(m.banks.size(), 5u);
}

// tiny-gpt-oss: GPT-OSS's layers at test sizes, its experts MXFP4 as the
// released ones are, a sliding window every other layer.
TEST(Synth, TinyGptOssIsGptOssWithMxfp4Experts) {
  const std::string dir = waste::testing::ScratchDir();
  ASSERT_TRUE(Write("tiny-gpt-oss", dir, 2).ok());
  auto ct = Container::Open(dir);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  EXPECT_EQ(ct->config().arch, Arch::kGptOss);
  EXPECT_EQ(ct->config().vocab, 512);
  EXPECT_EQ(format::FmtName(ct->manifest().quant.fmt), std::string("MXFP4"));
  EXPECT_EQ(ct->manifest().config_json["sliding_window"], 32);
  EXPECT_EQ(ct->manifest().config_json["layer_types"][0], "sliding_attention");
  EXPECT_EQ(ct->manifest().banks.size(), 4u);  // every layer MoE
}

TEST(Synth, ExpertFormatsCanBeChosen) {
  for (const char* fmt : {"VQ2R", "VQ4P", "INT4"}) {
    const std::string dir = waste::testing::ScratchDir(fmt);
    nlohmann::json j = SynthPreset("tiny-kimi")->ToJson();
    j["expert_format"] = fmt;
    auto spec = SynthSpec::FromJson(j);
    ASSERT_TRUE(spec.ok());
    ASSERT_TRUE(WriteSynthetic(*spec, dir, true, 2, nullptr).ok());
    auto ct = Container::Open(dir);
    ASSERT_TRUE(ct.ok()) << ct.status().message();
    EXPECT_EQ(format::FmtName(ct->manifest().quant.fmt), fmt);
  }
}

TEST(Synth, CalibratedRoutingConcentrates) {
  // 64 experts top-6: "the busiest 10%" is six experts. Ask for 60% of the
  // routing on them and check the router-only estimate lands near it.
  nlohmann::json j = SynthPreset("tiny-kimi")->ToJson();
  j["config"]["num_experts"] = 64;
  j["config"]["num_experts_per_token"] = 6;
  j["route_skew"] = -1;
  j["hot_share"] = 0.6;
  auto spec = SynthSpec::FromJson(j);
  ASSERT_TRUE(spec.ok());
  auto r = WriteSynthetic(*spec, waste::testing::ScratchDir(), true, 2, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NEAR(r->hot_share, 0.6, 0.05);
  EXPECT_GT(r->route_skew, 0.0);
  // Uniform routing would share 6/64 of the experts between independent tokens.
  EXPECT_GT(r->independent_overlap, 2.0 * 6 / 64);
}

TEST(Synth, AnchorExpertsMakeTokensShareExperts) {
  // Two experts per layer that nearly every token chooses: with 8 of 256
  // chosen (Kimi-Linear's routing), consecutive tokens share about a third
  // of their experts even though the router sees independent hidden states.
  nlohmann::json j = SynthPreset("tiny-kimi")->ToJson();
  j["config"]["num_experts"] = 256;
  j["config"]["num_experts_per_token"] = 8;
  j["config"]["num_hidden_layers"] = 2;  // one dense layer, one MoE layer
  j["config"]["linear_attn_config"]["kda_layers"] = {1};
  j["config"]["linear_attn_config"]["full_attn_layers"] = {2};
  j["route_skew"] = -1;
  j["hot_share"] = 0.6;
  j["anchor_experts"] = 0;
  auto plain = WriteSynthetic(*SynthSpec::FromJson(j), waste::testing::ScratchDir("plain"), true, 2,
                              nullptr);
  j["anchor_experts"] = 2;
  auto anchored = WriteSynthetic(*SynthSpec::FromJson(j), waste::testing::ScratchDir("anchored"),
                                 true, 2, nullptr);
  ASSERT_TRUE(plain.ok() && anchored.ok());
  EXPECT_NEAR(anchored->hot_share, 0.6, 0.05);
  EXPECT_GT(anchored->independent_overlap, 0.25);
  EXPECT_GT(anchored->independent_overlap, plain->independent_overlap + 0.1);
  j["anchor_experts"] = 65;
  EXPECT_FALSE(SynthSpec::FromJson(j).ok());
}

TEST(Synth, BadSpecsAreRefused) {
  EXPECT_FALSE(SynthPreset("no-such-preset").ok());
  nlohmann::json j = SynthPreset("tiny-kimi")->ToJson();
  j["expert_format"] = "Q4G";
  EXPECT_FALSE(SynthSpec::FromJson(j).ok());
  j = SynthPreset("tiny-kimi")->ToJson();
  j["config"]["vocab_size"] = 100;  // smaller than the synthetic tokenizer
  auto spec = SynthSpec::FromJson(j);
  ASSERT_TRUE(spec.ok());
  auto r = WriteSynthetic(*spec, waste::testing::ScratchDir(), true, 1, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("too small for the synthetic tokenizer"), std::string::npos);
}

// A spec file is untrusted: a field of the wrong type is an error naming the
// field, not a thrown type_error (a string where a number belongs threw).
TEST(Synth, WrongTypedSpecFieldsAreNamed) {
  using nlohmann::json;
  const json good = SynthPreset("tiny-kimi")->ToJson();
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& j) { j["preset"] = 5; }, "synth config: preset is not a string"},
      {[](json& j) { j["expert_format"] = 3; }, "synth config: expert_format is not a string"},
      {[](json& j) { j["trunk_bits"] = "4"; }, "synth config: trunk_bits is not an integer"},
      {[](json& j) { j["trunk_bits"] = 4.5; }, "synth config: trunk_bits is not an integer"},
      {[](json& j) { j["seed"] = -1; }, "synth config: seed = -1 is outside"},
      {[](json& j) { j["anchor_experts"] = json::array(); },
       "synth config: anchor_experts is not an integer"},
      {[](json& j) { j["hot_share"] = "0.6"; }, "synth config: hot_share is not a number"},
      {[](json& j) { j["route_skew"] = true; }, "synth config: route_skew is not a number"},
      {[](json& j) { j["config"] = json::array(); }, "synth config: config is not an object"},
      {[](json& j) { j["config"]["vocab_size"] = "512"; },
       "synth config: config.vocab_size is not an integer"},
  };
  for (const auto& [damage, want] : cases) {
    json j = good;
    damage(j);
    auto spec = SynthSpec::FromJson(j);
    ASSERT_FALSE(spec.ok()) << j.dump();
    EXPECT_NE(spec.status().message().find(want), std::string::npos) << spec.status().message();
  }
  // Built in code rather than read: the writer reads vocab_size safely too.
  SynthSpec spec = *SynthPreset("tiny-kimi");
  spec.config["vocab_size"] = "512";
  auto r = WriteSynthetic(spec, waste::testing::ScratchDir(), true, 1, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("config.vocab_size is not an integer"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace waste

namespace waste {
namespace {

// Shapes at the edges of what a config may say: each writes a container
// that opens and reads back (a --config file is untrusted input too).
TEST(Synth, EdgeShapesWriteAndOpen) {
  using nlohmann::json;
  const std::vector<std::pair<const char*, std::function<void(json&)>>> cases = {
      {"every_layer_dense", [](json& c) { c["first_k_dense_replace"] = 6; }},
      {"no_experts_at_all",
       [](json& c) {
         c["num_experts"] = 0;
         c["num_experts_per_token"] = 0;
       }},
      {"no_dense_layer", [](json& c) { c["first_k_dense_replace"] = 0; }},
      {"one_layer",
       [](json& c) {
         c["num_hidden_layers"] = 1;
         c["first_k_dense_replace"] = 0;
         c["linear_attn_config"]["kda_layers"] = {1};
         c["linear_attn_config"]["full_attn_layers"] = json::array();
       }},
      {"top_k_is_every_expert", [](json& c) { c["num_experts_per_token"] = 16; }},
      {"all_mla", [](json& c) { c["linear_attn_config"]["kda_layers"] = json::array(); }},
      {"all_kda", [](json& c) { c["linear_attn_config"]["kda_layers"] = {1, 2, 3, 4, 5, 6}; }},
      {"no_shared_expert", [](json& c) { c["num_shared_experts"] = 0; }},
      {"tied_embeddings", [](json& c) { c["tie_word_embeddings"] = true; }},
  };
  for (const auto& [name, edit] : cases) {
    SCOPED_TRACE(name);
    json j = SynthPreset("tiny-kimi")->ToJson();
    edit(j["config"]);
    auto spec = SynthSpec::FromJson(j);
    ASSERT_TRUE(spec.ok()) << spec.status().message();
    const std::string dir = waste::testing::ScratchDir(name);
    auto r = WriteSynthetic(*spec, dir, true, 2, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().message();
    auto ct = Container::Open(dir);
    ASSERT_TRUE(ct.ok()) << ct.status().message();
    std::vector<uint8_t> rec(ct->record_bytes());
    for (const ExpertBank& b : ct->manifest().banks)
      for (int e = 0; e < b.experts; ++e)
        ASSERT_TRUE(ct->ReadRecord(b.layer, e, rec.data(), true).ok());
  }
}

}  // namespace
}  // namespace waste
