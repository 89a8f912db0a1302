// Kimi K2.5 / K2.6 (kimi_k25) against transformers: a tiny random
// Kimi_K25ForConditionalGeneration (tools/convert_fixtures/make_kimi_k25.py)
// in the release's layout: config.json's text_config (DeepSeek-V3's, model_type
// kimi_k2) inside the wrapper, the text model under language_model., a vision
// tower and projector, one tensor of a multi-token-prediction layer, experts
// in BF16. Converted in this process to BF16R: the wrapper is unwrapped, the
// vision tower and the MTP layer are skipped by name, the conversion is
// lossless, and the logits over 300 positions are transformers' (the
// checkpoint loaded back in float32) on every instruction-set path, within
// 1e-5 of each row's largest with the same top 10. The release's INT4
// compressed-tensors experts are refused by name.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "engine/convert/convert.h"
#include "engine/convert/source_model.h"
#include "engine/convert/verify.h"
#include "engine/format/container.h"
#include "engine/kernels/cpu.h"
#include "tests/test_util.h"

namespace waste::convert {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kFixtures = std::string(WASTE_FIXTURES) + "/convert/";
const std::string kCheckpoint = kFixtures + "kimi-k25";

json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

ConvertOptions Options(const std::string& src, const std::string& out) {
  ConvertOptions o;
  o.src = src;
  o.out = out;
  o.expert_fmt = format::Fmt::kBF16R;
  return o;
}

TEST(KimiK25, UnwrapsTheTextModelAndMatchesTransformers) {
  const std::string out = waste::testing::ScratchDir() + "/bf16";
  auto r = Convert(Options(kCheckpoint, out));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->layers.size(), 2u);  // layers 1 and 2; layer 0 is dense
  // The MTP layer's tensor is left out and its layer listed as skipped.
  EXPECT_EQ(r->unused, std::vector<std::string>{"language_model.model.layers.3.enorm.weight"});
  EXPECT_EQ(r->skipped_layers, std::vector<int>{3});
  ASSERT_FALSE(r->skipped_vision.empty());
  for (const std::string& v : r->skipped_vision)
    EXPECT_TRUE(v.starts_with("vision_tower.") || v.starts_with("mm_projector.")) << v;

  VerifyOptions vo;
  vo.container = out;
  vo.source = kCheckpoint;
  auto v = Verify(vo);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
  EXPECT_EQ(v->records, 2 * 8);
  for (const VerifyLayer& l : v->layers) EXPECT_EQ(l.max_rel_error, 0.0) << "layer " << l.layer;
  EXPECT_EQ(v->trunk_max_rel_error, 0.0) << v->trunk_worst;

  auto ct = Container::Open(out);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  EXPECT_EQ(ct->config().arch, Arch::kDeepseekV3);
  EXPECT_EQ(ct->manifest().tensor_prefix, "language_model.");
  const json meta = ReadJson(kFixtures + "kimi-k25.json");
  const auto prompt = meta["prompt"].get<std::vector<int>>();
  ASSERT_EQ(prompt.size(), 300u);
  const std::vector<float> want = waste::testing::FileFloats(kFixtures + "kimi-k25.logits.bin");
  for (const auto& [isa, V, got] : waste::testing::LogitsOnEveryIsa(out, prompt, 8)) {
    ASSERT_EQ(want.size(), prompt.size() * V);
    const double worst = waste::testing::ExpectLogitsNear(
        got, want, V, 1e-5f, std::string("kimi-k25 ") + kernels::IsaName(isa));
    std::printf("kimi-k25 %s: worst max|diff| / max|logit| %.3g\n", kernels::IsaName(isa), worst);
  }
}

// The release's routed experts are compressed-tensors' pack-quantized INT4
// (BASE.weight_packed I32 [out, in / 8], weight_scale, weight_shape): refused
// by name, not read as MXFP4's U8 weight_packed.
TEST(KimiK25, Int4ExpertsAreRefusedByName) {
  const std::string dir = waste::testing::ScratchDir();
  const std::string src = dir + "/src";
  fs::create_directories(src);
  fs::copy_file(kCheckpoint + "/config.json", src + "/config.json");
  // The model's file with one expert's gate renamed to an I32 weight_packed.
  const std::vector<uint8_t> bytes = waste::testing::FileBytes(kCheckpoint + "/model.safetensors");
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  json h = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(header));
  const std::string base = "language_model.model.layers.2.mlp.experts.5.gate_proj.weight";
  json e = h.at(base);
  h.erase(base);
  const int64_t begin = e["data_offsets"][0].get<int64_t>();
  h[base + "_packed"] = {
      {"dtype", "I32"}, {"shape", {32, 8}}, {"data_offsets", {begin, begin + 1024}}};
  const std::string text = h.dump();
  const uint64_t size = text.size();
  std::ofstream f(src + "/model.safetensors", std::ios::binary);
  f.write(reinterpret_cast<const char*>(&size), 8);
  f << text;
  f.write(reinterpret_cast<const char*>(bytes.data() + 8 + header),
          static_cast<std::streamsize>(bytes.size() - 8 - header));
  f.close();
  auto r = Convert(Options(src, dir + "/out"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor " + base + "_packed is I32 [32, 8]: "
                                      "compressed-tensors' pack-quantized INT4"),
            std::string::npos)
      << r.status().message();
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

// What the wrapper's config may not say is refused by name.
TEST(KimiK25, ConfigRefusalsByName) {
  const json base = ReadJson(kCheckpoint + "/config.json");
  auto refusal = [&](const std::function<void(json&)>& change) {
    json c = base;
    change(c);
    auto s = MapSource(c);
    return s.ok() ? std::string("accepted") : s.status().message();
  };
  EXPECT_EQ(refusal([](json&) {}), "accepted");
  // The released architecture name (Moonshot's remote code) and transformers' both unwrap.
  EXPECT_EQ(refusal([](json& c) { c["architectures"] = {"KimiK25ForConditionalGeneration"}; }),
            "accepted");
  EXPECT_NE(refusal([](json& c) { c["text_config"]["model_type"] = "kimi_linear"; })
                .find("Kimi K2.5's text_config.model_type is \"kimi_linear\""),
            std::string::npos);
  EXPECT_NE(refusal([](json& c) { c["tie_word_embeddings"] = true; }).find("tie_word_embeddings"),
            std::string::npos);
  EXPECT_NE(refusal([](json& c) {
              c["architectures"] = {"LlavaForConditionalGeneration"};
              c["model_type"] = "llava";
            }).find("a nested text_config (a multimodal wrapper) is supported for Kimi K3"),
            std::string::npos);
}

}  // namespace
}  // namespace waste::convert
