// The 1,024-token prompts of tests/fixtures/convert/long (transformers'
// logits at every position; tools/convert_fixtures/make_long_prompt.py)
// through the programs a user runs: `waste convert` of the committed
// checkpoint with the fixture's config, a detached `wasted` serving the
// container, and `waste eval --ids ... --logits` attached to it on every
// instruction-set path this CPU has. convert_test's LongPrompt checks the
// same fixtures in one process; this is the same tolerance through the
// daemon. Two of the four cases: DeepSeek-V3 with YaRN (the rotary pairs
// that drifted, issue 19) and Kimi-Linear (its NoPE MLA layer and the
// linear-attention state), which between them run every layer kind.
// GqaWasted does the same for the grouped-query-attention families
// (gqa_families_test's fixtures: Qwen3-MoE and GLM-4.5 over 300 tokens),
// minimax_m2_test's (MiniMax-M2) and glm_lite_dots_test's (GLM-4.7-Flash's
// MLA and dots.llm1) and dsa_test's (DeepSeek-V3.2's and GLM-5's indexers
// over 2,100 positions, top-k 64), with `waste verify --source` of the container and
// the same top 10 at every position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/kernels/cpu.h"
#include "tests/support/detached_wasted.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace {

using nlohmann::json;
using waste::testing::Bin;
using waste::testing::Outcome;
using waste::testing::Shell;
namespace fs = std::filesystem;

const std::string kFixtures = std::string(WASTE_FIXTURES) + "/convert/";

json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

// A detached wasted per test, on socket_.
class WastedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = waste::testing::ScratchDir();
    socket_ = dir_ + "/wasted.sock";
  }
  void TearDown() override {
    if (!wasted_.running()) return;
    const Outcome r = wasted_.Stop();
    EXPECT_EQ(r.code, 0) << r.out;
  }
  // Detached, on socket_: wasted returns once it listens.
  void StartDaemon(const std::string& container) {
    const Outcome r = wasted_.Start(container, dir_);
    ASSERT_EQ(r.code, 0) << r.out;
  }

  std::string dir_, socket_;
  waste::testing::DetachedWasted wasted_;
};

class LongWasted : public WastedTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(LongWasted, EveryIsaMatches) {
  const std::string name = GetParam();
  const json meta = ReadJson(kFixtures + "long/long.json");
  const json& fx = meta["cases"][name];
  ASSERT_TRUE(fx.is_object()) << name << " is not in long.json";

  // The checkpoint with the case's config, converted losslessly.
  const std::string src = dir_ + "/src", c = dir_ + "/container";
  fs::copy(kFixtures + fx["checkpoint"].get<std::string>(), src, fs::copy_options::recursive);
  json config = ReadJson(src + "/config.json");
  for (const auto& [k, v] : fx["config"].items()) config[k] = v;
  std::ofstream(src + "/config.json") << config.dump(1);
  const Outcome conv = Shell(Bin("waste") + " convert " + src + " " + c +
                             " --expert-format bf16 --quiet");
  ASSERT_EQ(conv.code, 0) << conv.out;
  ASSERT_NO_FATAL_FAILURE(StartDaemon(c));

  const auto prompt = meta["prompts"][fx["prompt"].get<std::string>()].get<std::vector<int>>();
  ASSERT_EQ(prompt.size(), meta["positions"].get<size_t>());
  std::string ids;
  for (int id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const std::vector<float> want = waste::testing::FileFloats(kFixtures + "long/" + name + ".logits.bin");
  ASSERT_EQ(want.size() % prompt.size(), 0u);
  const int V = static_cast<int>(want.size() / prompt.size());

  for (waste::kernels::Isa isa : waste::kernels::AvailableIsas()) {
    const std::string what = name + " " + waste::kernels::IsaName(isa) + " through wasted";
    const std::string file = dir_ + "/logits-" + waste::kernels::IsaName(isa);
    const Outcome run = Shell(Bin("waste") + " eval " + c + " --ids " + ids +
                              " --threads 2 --isa " + waste::kernels::IsaName(isa) +
                              " --logits " + file + " --socket " + socket_);
    ASSERT_EQ(run.code, 0) << run.out;
    // Attached, not the in-process fallback.
    EXPECT_EQ(run.out.find("in this process"), std::string::npos) << run.out;
    const std::vector<float> got = waste::testing::FileFloats(file);
    ASSERT_EQ(got.size(), want.size()) << what;
    const waste::testing::EveryPosition r =
        waste::testing::ExpectEveryPositionNear(got, want, V, 1e-4f, what);
    EXPECT_GT(r.argmax_checked, 900) << "too many near ties to check the argmax";
    std::printf("%s: worst max|diff| / max|logit| %.3g at position %d; argmax checked at %d\n",
                what.c_str(), r.worst, r.worst_at, r.argmax_checked);
  }
  // The experts came from the daemon's cache.
  const Outcome st = Shell(Bin("wastectl") + " status --json --socket " + socket_);
  ASSERT_EQ(st.code, 0) << st.out;
  const json s = json::parse(st.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(s.is_object()) << st.out;
  EXPECT_GT(s.value("reads", 0), 0) << st.out;
  EXPECT_EQ(s.value("read_errors", -1), 0) << st.out;
}

// The committed Qwen3-MoE, GLM-4.5, GLM-4.7-Flash and dots.llm1 checkpoints
// (transformers' save_pretrained; tools/convert_fixtures/make_gqa_families.py
// and make_glm_lite_dots.py) converted by `waste convert`, checked by `waste
// verify --source`, and served.
struct GqaCase {
  const char* index;  // the fixtures' JSON under tests/fixtures/convert
  const char* name;
  float tolerance;  // of each row's largest |logit|
};

class GqaWasted : public WastedTest, public ::testing::WithParamInterface<GqaCase> {};

TEST_P(GqaWasted, EveryIsaMatchesAtEveryPosition) {
  const std::string name = GetParam().name, index = GetParam().index;
  const json meta = ReadJson(kFixtures + index);
  const json& fx = meta["cases"][name];
  ASSERT_TRUE(fx.is_object()) << name << " is not in " << index;
  const std::string src = kFixtures + fx["checkpoint"].get<std::string>(), c = dir_ + "/container";
  const Outcome conv = Shell(Bin("waste") + " convert " + src + " " + c +
                             " --expert-format bf16 --quiet");
  ASSERT_EQ(conv.code, 0) << conv.out;
  const Outcome ver = Shell(Bin("waste") + " verify " + c + " --source " + src + " --quiet");
  ASSERT_EQ(ver.code, 0) << ver.out;
  ASSERT_NO_FATAL_FAILURE(StartDaemon(c));

  const auto prompt = meta["prompt_ids"].get<std::vector<int>>();
  std::string ids;
  for (int id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const std::vector<float> want =
      waste::testing::FileFloats(kFixtures + fx["logits"].get<std::string>());
  ASSERT_EQ(want.size() % prompt.size(), 0u);
  const int V = static_cast<int>(want.size() / prompt.size());
  for (waste::kernels::Isa isa : waste::kernels::AvailableIsas()) {
    const std::string what = name + " " + waste::kernels::IsaName(isa) + " through wasted";
    const std::string file = dir_ + "/logits-" + waste::kernels::IsaName(isa);
    const Outcome run = Shell(Bin("waste") + " eval " + c + " --ids " + ids +
                              " --threads 2 --isa " + waste::kernels::IsaName(isa) +
                              " --logits " + file + " --socket " + socket_);
    ASSERT_EQ(run.code, 0) << run.out;
    EXPECT_EQ(run.out.find("in this process"), std::string::npos) << run.out;
    const double worst = waste::testing::ExpectLogitsNear(waste::testing::FileFloats(file), want,
                                                          V, GetParam().tolerance, what);
    std::printf("%s: worst max|diff| / max|logit| %.3g\n", what.c_str(), worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Gqa, GqaWasted,
                         ::testing::Values(GqaCase{"gqa_families.json", "qwen3-moe", 1e-4f},
                                           GqaCase{"gqa_families.json", "glm4-moe", 1e-4f},
                                           GqaCase{"minimax_m2.json", "minimax-m2", 1e-5f},
                                           GqaCase{"glm_lite_dots.json", "glm4-moe-lite", 1e-5f},
                                           GqaCase{"glm_lite_dots.json", "dots1", 1e-5f},
                                           GqaCase{"dsa.json", "deepseek-v32", 1e-5f},
                                           GqaCase{"dsa.json", "glm-moe-dsa", 1e-5f}),
                         [](const auto& p) {
                           std::string n = p.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

INSTANTIATE_TEST_SUITE_P(Long, LongWasted,
                         ::testing::Values("deepseek-v3-yarn", "kimi-linear"),
                         [](const auto& p) {
                           std::string n = p.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
