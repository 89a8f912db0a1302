// The engine against an independent reference: logits from transformers'
// DeepseekV3 (tiny-deepseek) and a PyTorch Kimi-Linear built on fla's KDA
// (tiny-kimi), committed as fixtures by tools/reference/make_fixtures.py.
// Every position: the same argmax and top-10, and every logit within 1e-4 of
// the row's largest magnitude; on every instruction-set path this CPU has
// (scalar, AVX2, AVX-512), each a test of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "engine/kernels/cpu.h"
#include "engine/model/model.h"
#include "engine/synth/synth.h"
#include "tests/sha256.h"
#include "tests/support/tiny_engine.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using nlohmann::json;

const std::string kFixtures = std::string(WASTE_FIXTURES) + "/forward/";

using waste::testing::FileFloats;
using waste::testing::TopK;

// Compares one row of logits; `what` names it in failures.
void CompareRow(const float* got, const float* want, int vocab, const std::string& what) {
  float scale = 0.f, worst = 0.f;
  for (int i = 0; i < vocab; ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(got[i] - want[i]));
  }
  EXPECT_LE(worst, 1e-4f * scale) << what << ": max |difference| " << worst
                                  << " against largest logit " << scale;
  EXPECT_EQ(TopK(got, vocab, 10), TopK(want, vocab, 10)) << what << ": top-10 differs";
}

class Reference : public ::testing::TestWithParam<std::tuple<const char*, kernels::Isa>> {};

TEST_P(Reference, LogitsMatchTheReference) {
  const std::string preset = std::get<0>(GetParam());
  std::ifstream jf(kFixtures + preset + ".json");
  ASSERT_TRUE(jf) << "missing fixture " << kFixtures + preset + ".json";
  const json fx = json::parse(jf);
  const std::string dir = waste::testing::ScratchDir();
  auto spec = SynthPreset(preset);
  ASSERT_TRUE(spec.ok());
  spec->seed = fx["seed"].get<uint64_t>();
  waste::testing::TinyEngineOptions o;
  o.slots = 16;
  o.model.isa = std::get<1>(GetParam());
  auto engine = waste::testing::TinyEngine::Create(*spec, dir, o);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  for (const auto& [name, sha] : fx["container"]["files_sha256"].items())
    ASSERT_EQ(waste::testing::Sha256Hex(waste::testing::FileBytes(dir + "/" + name)),
              sha.get<std::string>())
        << name
        << " is not the file the fixture was made from: waste synth changed. Regenerate with "
           "`python3 tools/reference/make_fixtures.py --waste build/bin/waste --out "
           "tests/fixtures/forward`";

  Model& m = (*engine)->model();
  const int V = m.config().vocab;

  // The rotary table and attention scale, which short prompts barely exercise.
  const json& att = fx["attention"];
  EXPECT_NEAR(m.softmax_scale(), att["softmax_scale"].get<double>(), 1e-6);
  if (att.contains("rope") && !att["rope"].is_null()) {
    const auto want = att["rope"]["inv_freq"].get<std::vector<float>>();
    const auto got = m.rope_inv_freq();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_FLOAT_EQ(got[i], want[i]) << "inv_freq[" << i << "]";
  }

  const auto prompt = fx["prompt_ids"].get<std::vector<int>>();
  const auto fed = fx["decode_input_ids"].get<std::vector<int>>();
  const std::vector<float> prefill = FileFloats(kFixtures + preset + ".prefill_logits.bin");
  const std::vector<float> rows = FileFloats(kFixtures + preset + ".logits.bin");
  ASSERT_EQ(prefill.size(), prompt.size() * V);
  ASSERT_EQ(rows.size(), (fed.size() + 1) * V);

  Session s = m.NewSession(64);
  std::vector<float> all;
  ASSERT_TRUE(m.Forward(s, prompt, nullptr, &all).ok());
  for (size_t p = 0; p < prompt.size(); ++p)
    CompareRow(all.data() + p * V, prefill.data() + p * V, V,
               "prompt position " + std::to_string(p));
  CompareRow(all.data() + (prompt.size() - 1) * V, rows.data(), V, "row 0");
  std::vector<float> logits(V);
  for (size_t i = 0; i < fed.size(); ++i) {
    const int t[1] = {fed[i]};
    ASSERT_TRUE(m.Forward(s, t, logits.data()).ok());
    CompareRow(logits.data(), rows.data() + (i + 1) * V, V, "decode step " + std::to_string(i + 1));
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, Reference,
                         ::testing::Combine(::testing::Values("tiny-kimi", "tiny-deepseek"),
                                            ::testing::ValuesIn(kernels::AvailableIsas())),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param)[5] == 'k' ? "kimi" : "deepseek") +
                                  "_" + kernels::IsaName(std::get<1>(p.param));
                         });

}  // namespace
}  // namespace waste
