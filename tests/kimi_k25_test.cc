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
// compressed-tensors experts (tools/convert_fixtures/make_kimi_k25_int4.py:
// the same model, its experts packed by compressed-tensors) convert to INT4
// records holding the checkpoint's codes and scales, and their logits are
// transformers' on compressed-tensors' dequantized weights, one token at a
// time and in prefill chunks; the INT4 schemes waste does not hold are
// refused by name.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "engine/convert/checkpoint.h"
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
const std::string kInt4Checkpoint = kFixtures + "kimi-k25-int4";

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

// An I32 weight_packed (compressed-tensors' pack-quantized INT4) in a
// checkpoint whose config.json does not say how it was packed: refused by
// name, not read as MXFP4's U8 weight_packed.
TEST(KimiK25, Int4WithoutItsSchemeIsRefusedByName) {
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
  EXPECT_NE(r.status().message().find("config.json has no quantization_config"),
            std::string::npos)
      << r.status().message();
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

// The INT4 checkpoint to INT4 records: the record holds the checkpoint's
// bytes (codes and bf16 scales), Verify finds no difference from the
// source's values, and the logits are transformers' on every Isa, one token
// at a time and in chunks of 32, the two bit for bit the same.
TEST(KimiK25, Int4ExpertsConvertLosslesslyAndMatchTransformers) {
  const std::string out = waste::testing::ScratchDir() + "/int4";
  ConvertOptions o = Options(kInt4Checkpoint, out);
  o.expert_fmt = format::Fmt::kINT4;
  auto r = Convert(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->unused, std::vector<std::string>{"language_model.model.layers.3.enorm.weight"});

  VerifyOptions vo;
  vo.container = out;
  vo.source = kInt4Checkpoint;
  auto v = Verify(vo);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
  EXPECT_EQ(v->records, 2 * 8);
  for (const VerifyLayer& l : v->layers) EXPECT_EQ(l.max_rel_error, 0.0) << "layer " << l.layer;

  auto ct = Container::Open(out);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  EXPECT_EQ(ct->manifest().quant.fmt, format::Fmt::kINT4);
  auto ck = Checkpoint::Open(kInt4Checkpoint);
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  const RecordLayout& lay = ct->record_layout();
  std::vector<uint8_t> rec(lay.record_bytes);
  for (const int L : {1, 2}) {
    for (const int e : {0, 7}) {
      ASSERT_TRUE(ct->ReadRecord(L, e, rec.data(), true).ok());
      const uint8_t* scales = rec.data() + lay.scales_off;
      int m = 0;
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        const std::string name = "language_model.model.layers." + std::to_string(L) +
                                 ".mlp.experts." + std::to_string(e) + "." + proj + ".weight";
        auto w = (*ck)->Find(name);
        ASSERT_TRUE(w.ok()) << w.status().message();
        ASSERT_EQ(w->storage, Storage::kInt4);
        const auto codes = w->file->Bytes(*w->data);
        const auto sc = w->scale_file->Bytes(*w->scale);
        ASSERT_EQ(codes.size(), static_cast<size_t>(lay.rows[m] * lay.cols[m] / 2));
        EXPECT_EQ(std::memcmp(rec.data() + lay.matrix_off[m], codes.data(), codes.size()), 0)
            << name;
        EXPECT_EQ(std::memcmp(scales, sc.data(), sc.size()), 0) << name;
        scales += sc.size();
        ++m;
      }
    }
  }

  const json meta = ReadJson(kFixtures + "kimi-k25-int4.json");
  const auto prompt = meta["prompt"].get<std::vector<int>>();
  const std::vector<float> want =
      waste::testing::FileFloats(kFixtures + "kimi-k25-int4.logits.bin");
  ModelOptions one;
  one.chunk = 1;
  const auto tokens = waste::testing::LogitsOnEveryIsa(out, prompt, 8, one);
  const auto chunks = waste::testing::LogitsOnEveryIsa(out, prompt, 8);
  ASSERT_EQ(tokens.size(), chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const auto& [isa, V, got] = chunks[i];
    ASSERT_EQ(want.size(), prompt.size() * V);
    const double worst = waste::testing::ExpectLogitsNear(
        got, want, V, 1e-5f, std::string("kimi-k25-int4 ") + kernels::IsaName(isa));
    std::printf("kimi-k25-int4 %s: worst max|diff| / max|logit| %.3g\n", kernels::IsaName(isa),
                worst);
    EXPECT_EQ(tokens[i].logits, got) << kernels::IsaName(isa) << ": one token at a time";
  }
}

// --expert-format int4 keeps INT4 experts; a BF16 checkpoint's are refused.
TEST(KimiK25, Int4RecordsNeedInt4Experts) {
  ConvertOptions o = Options(kCheckpoint, waste::testing::ScratchDir() + "/out");
  o.expert_fmt = format::Fmt::kINT4;
  auto r = Convert(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--expert-format int4 keeps the checkpoint's "
                                      "compressed-tensors INT4 experts bit for bit, and "),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("is BF16 [32, 64]"), std::string::npos)
      << r.status().message();
}

// INT4 schemes other than the release's (int, 4 bits, symmetric, groups of
// 32 along a row, weights only) are refused by the field that differs.
TEST(KimiK25, OtherInt4SchemesAreRefusedByName) {
  const json base = ReadJson(kInt4Checkpoint + "/config.json");
  const std::string dir = waste::testing::ScratchDir();
  int n = 0;
  auto refusal = [&](const std::function<void(json&)>& change) {
    const std::string src = dir + "/src" + std::to_string(n++);
    fs::create_directories(src);
    fs::copy_file(kInt4Checkpoint + "/model.safetensors", src + "/model.safetensors");
    json c = base;
    change(c);
    waste::testing::WriteText(src + "/config.json", c.dump());
    ConvertOptions o = Options(src, src + "/out");
    o.expert_fmt = format::Fmt::kINT4;
    auto r = Convert(o);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  const std::string at = "quantization_config.config_groups.group_0.";
  auto weights = [](const char* key, json value) {
    return [=](json& c) {
      c["quantization_config"]["config_groups"]["group_0"]["weights"][key] = value;
    };
  };
  const std::pair<std::function<void(json&)>, std::string> cases[] = {
      {weights("symmetric", false), at + "weights.symmetric is false, waste holds true"},
      {weights("group_size", 128), at + "weights.group_size is 128, waste holds 32"},
      {weights("num_bits", 8), at + "weights.num_bits is 8, waste holds 4"},
      {weights("strategy", "channel"), at + "weights.strategy is channel, waste holds group"},
      {weights("actorder", "group"), at + "weights.actorder is group (waste holds none)"},
      {[](json& c) {
         c["quantization_config"]["config_groups"]["group_0"]["input_activations"] = {
             {"num_bits", 8}};
       },
       at + "input_activations is set (waste holds weight-only INT4)"},
      {[](json& c) { c["quantization_config"]["format"] = "int-quantized"; },
       "quantization_config.format is int-quantized, not pack-quantized"},
      {[](json& c) { c.erase("quantization_config"); }, "config.json has no quantization_config"},
  };
  for (const auto& [change, why] : cases) {
    const std::string msg = refusal(change);
    EXPECT_NE(msg.find("tensor language_model.model.layers.1.mlp.experts.0.gate_proj."
                       "weight_packed is I32 [32, 8]: compressed-tensors' pack-quantized INT4, "
                       "and " + why),
              std::string::npos)
        << msg;
  }
}

// An asymmetric checkpoint's weight_zero_point (here in place of one
// weight_shape, same bytes) is refused by name whatever the config says.
TEST(KimiK25, Int4ZeroPointIsRefusedByName) {
  const std::string dir = waste::testing::ScratchDir();
  const std::string src = dir + "/src";
  fs::create_directories(src);
  fs::copy_file(kInt4Checkpoint + "/config.json", src + "/config.json");
  const std::vector<uint8_t> bytes =
      waste::testing::FileBytes(kInt4Checkpoint + "/model.safetensors");
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  json h = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(header));
  const std::string base = "language_model.model.layers.1.mlp.experts.0.gate_proj.weight";
  h[base + "_zero_point"] = h.at(base + "_shape");
  h.erase(base + "_shape");
  const std::string text = h.dump();
  const uint64_t size = text.size();
  std::ofstream f(src + "/model.safetensors", std::ios::binary);
  f.write(reinterpret_cast<const char*>(&size), 8);
  f << text;
  f.write(reinterpret_cast<const char*>(bytes.data() + 8 + header),
          static_cast<std::streamsize>(bytes.size() - 8 - header));
  f.close();
  ConvertOptions o = Options(src, dir + "/out");
  o.expert_fmt = format::Fmt::kINT4;
  auto r = Convert(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor " + base + "_zero_point: an INT4 zero point or "
                                      "group index is not held"),
            std::string::npos)
      << r.status().message();
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
