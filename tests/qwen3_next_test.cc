// Qwen3-Next against transformers: a tiny random checkpoint written by its
// own Qwen3NextForCausalLM.save_pretrained (tools/convert_fixtures/
// make_qwen3_next.py: Gated DeltaNet and gated GQA layers, zero-centered
// norms, 16 experts top-4 with a gated shared expert), converted losslessly,
// verified against its source, and run over a 300-token prompt on every
// instruction-set path this CPU has, in this process and through a detached
// wasted: every logit within 1e-4 of the row's largest and the same top 10
// at every position.
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
#include "tests/support/detached_wasted.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace waste::convert {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using waste::testing::Bin;
using waste::testing::Outcome;
using waste::testing::Shell;

const std::string kFixtures = std::string(WASTE_FIXTURES) + "/convert/";


json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

struct Fixture {
  json meta = ReadJson(kFixtures + "qwen3-next.json");
  std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  std::vector<float> want = waste::testing::FileFloats(kFixtures + "qwen3-next.logits.bin");
  int vocab() const { return static_cast<int>(want.size() / prompt.size()); }
};

TEST(Qwen3Next, LosslessConversionMatchesTransformersAtEveryPosition) {
  const Fixture fx;
  ASSERT_GE(fx.prompt.size(), 256u);
  const std::string out = waste::testing::ScratchDir() + "/out";
  ConvertOptions o;
  o.src = kFixtures + "qwen3-next";
  o.out = out;
  o.expert_fmt = *ParseExpertFormat("bf16");
  auto r = Convert(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->layers.size(), 4u);  // every layer is MoE
  for (const LayerSummary& l : r->layers) EXPECT_EQ(l.max_rel_error, 0.0) << "layer " << l.layer;
  EXPECT_TRUE(r->unused.empty()) << r->unused.front();

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
  EXPECT_EQ(c.n_layers_of(LayerKind::kGatedDeltaNet), 2);
  EXPECT_EQ(c.n_layers_of(LayerKind::kGqa), 2);
  ModelOptions mo;
  mo.chunk = 48;  // chunks that straddle transformers' 64-token chunks of the delta rule
  for (const auto& [isa, V, got] : waste::testing::LogitsOnEveryIsa(out, fx.prompt, 16, mo)) {
    ASSERT_EQ(fx.want.size(), fx.prompt.size() * V);
    const double worst = waste::testing::ExpectLogitsNear(
        got, fx.want, V, 1e-4f, std::string("qwen3-next ") + kernels::IsaName(isa));
    std::printf("qwen3-next %s: worst max|diff| / max|logit| %.3g\n", kernels::IsaName(isa), worst);
  }
}

// The same through the programs a user runs: waste convert, a detached
// wasted, and waste eval attached to it on every path.
TEST(Qwen3Next, ThroughWastedOnEveryIsa) {
  const Fixture fx;
  const std::string dir = waste::testing::ScratchDir(), c = dir + "/container";
  const Outcome conv = Shell(Bin("waste") + " convert " + kFixtures + "qwen3-next " + c +
                             " --expert-format bf16 --quiet");
  ASSERT_EQ(conv.code, 0) << conv.out;
  const Outcome verify =
      Shell(Bin("waste") + " verify " + c + " --source " + kFixtures + "qwen3-next --quiet");
  ASSERT_EQ(verify.code, 0) << verify.out;
  waste::testing::DetachedWasted wasted;
  const Outcome start = wasted.Start(c, dir);
  ASSERT_EQ(start.code, 0) << start.out;
  std::string ids;
  for (int id : fx.prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  for (kernels::Isa isa : kernels::AvailableIsas()) {
    const std::string what = std::string("qwen3-next ") + kernels::IsaName(isa) + " through wasted";
    const std::string file = dir + "/logits-" + kernels::IsaName(isa);
    const Outcome run = Shell(Bin("waste") + " eval " + c + " --ids " + ids +
                              " --threads 2 --isa " + kernels::IsaName(isa) + " --logits " + file +
                              " --socket " + wasted.socket());
    ASSERT_EQ(run.code, 0) << run.out;
    EXPECT_EQ(run.out.find("in this process"), std::string::npos) << run.out;  // attached
    const std::vector<float> got = waste::testing::FileFloats(file);
    const double worst = waste::testing::ExpectLogitsNear(got, fx.want, fx.vocab(), 1e-4f, what);
    std::printf("%s: worst max|diff| / max|logit| %.3g\n", what.c_str(), worst);
  }
  const Outcome stop = wasted.Stop();
  EXPECT_EQ(stop.code, 0) << stop.out;
}

// What the family's config may ask for that is not built, refused by name.
TEST(Qwen3NextConfig, UnbuiltSettingsAreRefusedByName) {
  const json base = ReadJson(kFixtures + "qwen3-next/config.json");
  auto refusal = [&](const char* key, const json& value) {
    json c = base;
    c[key] = value;
    auto s = MapSource(c);
    return s.ok() ? std::string("accepted") : s.status().message();
  };
  EXPECT_EQ(refusal("hidden_size", 64), "accepted");
  EXPECT_NE(refusal("attention_bias", true).find("attention_bias"), std::string::npos);
  EXPECT_NE(refusal("linear_num_key_heads", 3).find("linear_num_key_heads"), std::string::npos);
  EXPECT_NE(refusal("layer_types", json::array({"linear_attention"})).find("layer_types"),
            std::string::npos);
  EXPECT_NE(refusal("layer_types", json::array({"a", "b", "c", "d"})).find("layer_types[0]"),
            std::string::npos);
  // Without layer_types, full_attention_interval says which layers are GQA.
  json c = base;
  c.erase("layer_types");
  c["full_attention_interval"] = 4;
  auto s = MapSource(c);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->shape.layer_kind[3], LayerKind::kGqa);
  EXPECT_EQ(s->shape.layer_kind[1], LayerKind::kGatedDeltaNet);
}

}  // namespace
}  // namespace waste::convert
