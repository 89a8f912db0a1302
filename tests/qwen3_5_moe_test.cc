// Qwen3.5 MoE against transformers: a tiny random checkpoint written by its
// own Qwen3_5MoeForConditionalGeneration.save_pretrained, the released layout
// (tools/convert_fixtures/make_qwen3_5_moe.py: the text model under
// text_config and model.language_model., separate Gated DeltaNet input
// projections, gated GQA layers with multimodal rotary, 16 experts top-4 with
// a gated shared expert, a vision tower), converted losslessly, verified
// against its source, and run over a 300-token prompt on every
// instruction-set path this CPU has, in this process and through a detached
// wasted: every logit within 1e-5 of the row's largest and the same top 10
// at every position.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/convert/convert.h"
#include "engine/convert/source_model.h"
#include "engine/convert/verify.h"
#include "engine/kernels/cpu.h"
#include "engine/model/model.h"
#include "tests/support/detached_wasted.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace waste::convert {
namespace {

using nlohmann::json;
using waste::testing::Bin;
using waste::testing::Outcome;
using waste::testing::Shell;

const std::string kFixtures = std::string(WASTE_FIXTURES) + "/convert/";
const std::string kSource = kFixtures + "qwen3.5-moe";
constexpr float kTolerance = 1e-5f;

json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

struct Fixture {
  json meta = ReadJson(kFixtures + "qwen3.5-moe.json");
  std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  std::vector<float> want = waste::testing::FileFloats(kFixtures + "qwen3.5-moe.logits.bin");
  int vocab() const { return static_cast<int>(want.size() / prompt.size()); }
};

TEST(Qwen35Moe, LosslessConversionMatchesTransformersAtEveryPosition) {
  const Fixture fx;
  ASSERT_GE(fx.prompt.size(), 300u);
  // The maker's own check that text positions make the multimodal rotary plain RoPE.
  const json& mrope = fx.meta["text_positions_make_mrope_plain_rope"];
  EXPECT_EQ(mrope["max_abs_cos_sin_difference_vs_rotate_half_rope"], 0.0);
  EXPECT_EQ(mrope["max_abs_logit_difference_plain_rope_model_vs_multimodal"], 0.0);

  const std::string out = waste::testing::ScratchDir() + "/out";
  ConvertOptions o;
  o.src = kSource;
  o.out = out;
  o.expert_fmt = *ParseExpertFormat("bf16");
  auto r = Convert(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->model_type, "qwen3_5_moe_text");
  ASSERT_EQ(r->layers.size(), 4u);  // every layer is MoE
  for (const LayerSummary& l : r->layers) EXPECT_EQ(l.max_rel_error, 0.0) << "layer " << l.layer;
  EXPECT_TRUE(r->unused.empty()) << r->unused.front();
  ASSERT_FALSE(r->skipped_vision.empty());
  for (const std::string& name : r->skipped_vision)
    EXPECT_EQ(name.rfind("model.visual.", 0), 0u) << name;

  VerifyOptions vo;
  vo.container = out;
  vo.source = o.src;
  auto v = Verify(vo);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
  EXPECT_EQ(v->records, 4 * 16);
  EXPECT_EQ(v->trunk_max_rel_error, 0.0) << v->trunk_worst;

  auto ct = Container::Open(out);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  const ModelConfig& c = ct->config();
  EXPECT_EQ(c.arch, Arch::kQwen3Next);
  EXPECT_TRUE(c.renormalize);
  EXPECT_EQ(c.n_layers_of(LayerKind::kGatedDeltaNet), 2);
  EXPECT_EQ(c.n_layers_of(LayerKind::kGqa), 2);
  ModelOptions mo;
  mo.chunk = 48;  // chunks that straddle transformers' 64-token chunks of the delta rule
  for (const auto& [isa, V, got] : waste::testing::LogitsOnEveryIsa(out, fx.prompt, 16, mo)) {
    ASSERT_EQ(fx.want.size(), fx.prompt.size() * V);
    const double worst = waste::testing::ExpectLogitsNear(
        got, fx.want, V, kTolerance, std::string("qwen3.5-moe ") + kernels::IsaName(isa));
    std::printf("qwen3.5-moe %s: worst max|diff| / max|logit| %.3g\n", kernels::IsaName(isa),
                worst);
  }
}

// The released checkpoints carry multi-token-prediction weights (mtp.*),
// which transformers' classes do not build: a shard of two added to a copy
// of the fixture is reported skipped by name, not converted.
TEST(Qwen35Moe, MultiTokenPredictionWeightsAreSkippedByName) {
  const std::string dir = waste::testing::ScratchDir(), src = dir + "/source";
  std::filesystem::copy(kSource, src);
  // A safetensors shard: its header's length, the header, two BF16 [2, 2] tensors.
  const std::string header =
      R"({"mtp.fc.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
      R"("mtp.norm.weight":{"dtype":"BF16","shape":[2,2],"data_offsets":[8,16]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  bytes += header;
  bytes += std::string(16, '\0');
  std::ofstream(src + "/mtp.safetensors", std::ios::binary) << bytes;
  json index = ReadJson(src + "/model.safetensors.index.json");
  index["weight_map"]["mtp.fc.weight"] = "mtp.safetensors";
  index["weight_map"]["mtp.norm.weight"] = "mtp.safetensors";
  std::ofstream(src + "/model.safetensors.index.json") << index.dump();

  ConvertOptions o;
  o.src = src;
  o.out = dir + "/out";
  o.expert_fmt = *ParseExpertFormat("bf16");
  auto r = Convert(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->skipped_mtp, (std::vector<std::string>{"mtp.fc.weight", "mtp.norm.weight"}));
  EXPECT_TRUE(r->unused.empty()) << r->unused.front();
}

// The same through the programs a user runs: waste convert, a detached
// wasted, and waste eval attached to it on every path.
TEST(Qwen35Moe, ThroughWastedOnEveryIsa) {
  const Fixture fx;
  const std::string dir = waste::testing::ScratchDir(), c = dir + "/container";
  const Outcome conv =
      Shell(Bin("waste") + " convert " + kSource + " " + c + " --expert-format bf16 --quiet");
  ASSERT_EQ(conv.code, 0) << conv.out;
  const Outcome verify = Shell(Bin("waste") + " verify " + c + " --source " + kSource + " --quiet");
  ASSERT_EQ(verify.code, 0) << verify.out;
  waste::testing::DetachedWasted wasted;
  const Outcome start = wasted.Start(c, dir);
  ASSERT_EQ(start.code, 0) << start.out;
  std::string ids;
  for (int id : fx.prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  for (kernels::Isa isa : kernels::AvailableIsas()) {
    const std::string what =
        std::string("qwen3.5-moe ") + kernels::IsaName(isa) + " through wasted";
    const std::string file = dir + "/logits-" + kernels::IsaName(isa);
    const Outcome run =
        Shell(Bin("waste") + " eval " + c + " --ids " + ids + " --threads 2 --isa " +
              kernels::IsaName(isa) + " --logits " + file + " --socket " + wasted.socket());
    ASSERT_EQ(run.code, 0) << run.out;
    EXPECT_EQ(run.out.find("in this process"), std::string::npos) << run.out;  // attached
    const std::vector<float> got = waste::testing::FileFloats(file);
    const double worst =
        waste::testing::ExpectLogitsNear(got, fx.want, fx.vocab(), kTolerance, what);
    std::printf("%s: worst max|diff| / max|logit| %.3g\n", what.c_str(), worst);
  }
  const Outcome stop = wasted.Stop();
  EXPECT_EQ(stop.code, 0) << stop.out;
}

// The wrapper's config: its text_config is the model, the wrapper's
// architectures kept; what is not Qwen3.5 MoE's is refused by name.
TEST(Qwen35MoeConfig, TheWrapperIsUnwrappedAndOthersRefusedByName) {
  const json base = ReadJson(kSource + "/config.json");
  auto s = MapSource(base);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->family, Family::kQwen35Moe);
  EXPECT_EQ(s->prefix, "");
  EXPECT_EQ(s->shape.architecture, "Qwen3_5MoeForConditionalGeneration");
  EXPECT_TRUE(s->shape.zero_centered_norms);
  EXPECT_TRUE(s->shape.shared_expert_gate);
  EXPECT_EQ(s->shape.rotary_dim, 8);                 // 0.25 of 32
  EXPECT_FALSE(s->config.contains("rope_scaling"));  // mrope is plain RoPE for text
  EXPECT_EQ(s->TrunkName("model.layers.2.block_sparse_moe.gate.weight"),
            "model.language_model.layers.2.mlp.gate.weight");
  EXPECT_EQ(s->TrunkName("lm_head.weight"), "lm_head.weight");
  EXPECT_TRUE(s->IsVisionTensor("model.visual.blocks.0.attn.qkv.weight"));
  EXPECT_FALSE(s->IsVisionTensor("mtp.fc.weight"));

  auto refusal = [&](const json& c) {
    auto r = MapSource(c);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  json c = base;
  c["text_config"]["norm_topk_prob"] = false;
  EXPECT_NE(refusal(c).find("norm_topk_prob"), std::string::npos);
  c = base;
  c["text_config"]["model_type"] = "qwen3_next";
  EXPECT_NE(refusal(c).find("qwen3_5_moe_text"), std::string::npos);
  c = base;
  c["architectures"] = {"SomeOtherForConditionalGeneration"};
  EXPECT_NE(refusal(c).find("SomeOtherForConditionalGeneration"), std::string::npos);
  // The text model alone, without the wrapper that says whose names it has.
  EXPECT_NE(refusal(base["text_config"]).find("qwen3_5_moe_text"), std::string::npos);
  c = base;
  c["text_config"]["attention_bias"] = true;
  EXPECT_NE(refusal(c).find("attention_bias"), std::string::npos);
}

// A checkpoint whose separate projections do not have the config's shapes
// is refused naming the tensor.
TEST(Qwen35MoeConfig, ProjectionsOfAnotherShapeAreRefusedByName) {
  json base = ReadJson(kSource + "/config.json");
  base["text_config"]["linear_value_head_dim"] = 8;
  auto s = MapSource(base);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto ck = Checkpoint::Open(kSource);
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  const std::string name = "model.layers.0.linear_attn.in_proj_qkvz.weight";
  auto spans = s->FindTrunk(**ck, name, {2 * 32 + 2 * 32, 64});
  ASSERT_FALSE(spans.ok());
  EXPECT_NE(spans.status().message().find("model.language_model.layers.0.linear_attn.in_proj_qkv"),
            std::string::npos)
      << spans.status().message();
}

}  // namespace
}  // namespace waste::convert
