// MiniMax-M2 against transformers: a tiny random checkpoint written by
// MiniMaxM2ForCausalLM's save_pretrained under the released tensor names
// (tools/convert_fixtures/make_minimax_m2.py), converted losslessly in this
// process, verified against its source, and run over a 300-token prompt on
// every instruction-set path this CPU has: every logit within 1e-5 of the
// row's largest and the same top 10 at every position, against the logits of
// the checkpoint loaded back in float32; and its FP8 copy in the released
// layout, to the same logits. long_prompt_daemon_test runs the bf16 fixture
// through wasted.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/convert/convert.h"
#include "engine/convert/verify.h"
#include "engine/kernels/cpu.h"
#include "tests/test_util.h"

namespace waste::convert {
namespace {

using nlohmann::json;

const std::string kFixtures = std::string(WASTE_FIXTURES) + "/convert/";

// `checkpoint` (a key of the fixture's case) converted to BF16 experts in
// this process, verified against its source, and its logits at every
// position on every ISA path against transformers'.
void ConvertAndMatch(const std::string& checkpoint, const std::vector<int>& skipped_layers) {
  std::ifstream f(kFixtures + "minimax_m2.json");
  const json meta = json::parse(f);
  const json& fx = meta["cases"]["minimax-m2"];
  const std::string out = waste::testing::ScratchDir() + "/out";
  ConvertOptions o;
  o.src = kFixtures + fx[checkpoint].get<std::string>();
  o.out = out;
  o.expert_fmt = *ParseExpertFormat("bf16");
  auto r = Convert(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->layers.size(), 4u);  // every layer is MoE
  for (const LayerSummary& l : r->layers) EXPECT_EQ(l.max_rel_error, 0.0) << "layer " << l.layer;
  EXPECT_EQ(r->skipped_layers, skipped_layers);

  VerifyOptions vo;
  vo.container = out;
  vo.source = o.src;
  auto v = Verify(vo);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
  EXPECT_EQ(v->records, 4 * 16);
  EXPECT_EQ(v->trunk_max_rel_error, 0.0) << v->trunk_worst;

  const auto prompt = meta["prompt_ids"].get<std::vector<int>>();
  ASSERT_EQ(prompt.size(), 300u);
  const std::vector<float> want =
      waste::testing::FileFloats(kFixtures + fx["logits"].get<std::string>());
  for (const auto& [isa, V, got] : waste::testing::LogitsOnEveryIsa(out, prompt, 16)) {
    ASSERT_EQ(want.size(), prompt.size() * V);
    const std::string what = checkpoint + " " + kernels::IsaName(isa);
    const double worst = waste::testing::ExpectLogitsNear(got, want, V, 1e-5f, what);
    std::printf("%s: worst max|diff| / max|logit| %.3g\n", what.c_str(), worst);
  }
}

// The multi-token-prediction layer past num_hidden_layers: skipped, and said so.
TEST(MinimaxM2, LosslessConversionMatchesTransformersAtEveryPosition) {
  ConvertAndMatch("checkpoint", {4});
}

// The released FP8 layout (F8_E4M3 with weight_scale_inv per block, as
// DeepSeek-V3's) goes through the same dequantization: the fixture's FP8
// copy holds the same values exactly, so it converts losslessly to the same
// logits.
TEST(MinimaxM2, Fp8CheckpointConvertsToTheSameModel) {
  ConvertAndMatch("fp8_checkpoint", {});
}

}  // namespace
}  // namespace waste::convert
