// Kimi K3 against its two oracles (tests/fixtures/k3/): WARP's converter's
// container of a tiny random K3 checkpoint in the released layout (5 layers,
// KDA and MLA, Attention-Residual blocks of 2, 16 experts top-4 on a 32-wide
// latent, SiTU, the full-rank KDA gate and bounded decay, NoPE MLA with q_lora
// and its output gate), and the logits at all 72 positions of a prompt from
// the PyTorch reference (tools/reference/k3_model.py) and from WARP's own
// engine. waste runs the same container in this process and through a
// detached wasted on every instruction-set path this CPU has: every logit
// within 1e-4 of the row's largest and the same ordered top 10 at every
// position, against both. And the same on `waste synth --preset tiny-k3`'s
// container, which WARP ran too, and on waste convert's lossless container of
// the checkpoint against the reference on the checkpoint.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/experts/cache.h"
#include "engine/kernels/cpu.h"
#include "engine/model/model.h"
#include "tests/support/detached_wasted.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using waste::testing::Bin;
using waste::testing::Outcome;
using waste::testing::Shell;

const std::string kDir = std::string(WASTE_FIXTURES) + "/k3/";


struct Fixture {
  json meta = json::parse(std::ifstream(kDir + "k3.json"));
  std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  std::vector<float> reference = waste::testing::FileFloats(kDir + "reference.logits.bin");
  std::vector<float> warp = waste::testing::FileFloats(kDir + "warp.logits.bin");
  int vocab() const { return meta["vocab"].get<int>(); }
};

// Both oracles at once; `what` names the run in the failures.
void ExpectBothOracles(const std::vector<float>& got, const Fixture& fx, const std::string& what) {
  const double ref = waste::testing::ExpectLogitsNear(got, fx.reference, fx.vocab(), 1e-4f,
                                                      what + " vs the reference");
  const double warp =
      waste::testing::ExpectLogitsNear(got, fx.warp, fx.vocab(), 1e-4f, what + " vs WARP");
  std::printf("%s: worst max|diff| / max|logit| %.3g against the reference, %.3g against WARP\n",
              what.c_str(), ref, warp);
}

TEST(KimiK3, FixtureIsWhatItSays) {
  const Fixture fx;
  ASSERT_GE(fx.prompt.size(), 64u);
  ASSERT_EQ(fx.reference.size(), fx.prompt.size() * fx.vocab());
  ASSERT_EQ(fx.warp.size(), fx.reference.size());
  auto ct = Container::Open(kDir + "warp-vq3r");
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  const ModelConfig& c = ct->config();
  EXPECT_EQ(c.vocab, fx.vocab());
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_layers_of(LayerKind::kKda), 3);
  EXPECT_EQ(c.n_layers_of(LayerKind::kMla), 2);
  // The two oracles differ (WARP flushes f16-subnormal codebook entries,
  // README.md) but by far less than the tolerance.
  const double apart = fx.meta["agreement"]["warp_vs_reference"]["worst_rel"].get<double>();
  EXPECT_GT(apart, 0.0);
  EXPECT_LT(apart, 5e-5);
}

TEST(KimiK3, InProcessMatchesBothOraclesOnEveryIsa) {
  const Fixture fx;
  auto ct = Container::Open(kDir + "warp-vq3r");
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  CacheOptions co;
  co.slots = 16;
  auto cache = ExpertCache::Create(*ct, co);
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  const int n = static_cast<int>(fx.prompt.size());
  for (kernels::Isa isa : kernels::AvailableIsas()) {
    ModelOptions mo;
    mo.isa = isa;
    mo.chunk = 24;  // the prompt in three chunks: state carried across them
    auto model = Model::Load(*ct, cache->get(), mo);
    ASSERT_TRUE(model.ok()) << model.status().message();
    Session s = (*model)->NewSession(n);
    std::vector<float> got;
    ASSERT_TRUE((*model)->Forward(s, fx.prompt, nullptr, &got).ok());
    ExpectBothOracles(got, fx, std::string("k3 ") + kernels::IsaName(isa));
  }
  // Token by token, the decode path, on the default path.
  auto model = Model::Load(*ct, cache->get(), ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status().message();
  Session s = (*model)->NewSession(n);
  std::vector<float> got, row(fx.vocab());
  for (int id : fx.prompt) {
    ASSERT_TRUE((*model)->Forward(s, std::span<const int>(&id, 1), row.data()).ok());
    got.insert(got.end(), row.begin(), row.end());
  }
  ExpectBothOracles(got, fx, "k3 token by token");
}

// `waste synth --preset tiny-k3` (6 layers, 32 experts on a 128-wide latent,
// Q4G/Q8G trunk), the container written again here byte for byte: WARP ran
// the same bytes for the fixture (k3.json records their sha256).
TEST(KimiK3, SyntheticPresetMatchesBothOraclesOnEveryIsa) {
  const json meta = json::parse(std::ifstream(kDir + "k3.json"))["tiny_k3"];
  const std::vector<int> prompt = meta["prompt_ids"].get<std::vector<int>>();
  const std::vector<float> reference =
      waste::testing::FileFloats(kDir + "tiny-k3.reference.logits.bin");
  const std::vector<float> warp = waste::testing::FileFloats(kDir + "tiny-k3.warp.logits.bin");
  const int V = meta["vocab"].get<int>();
  const std::string c = waste::testing::ScratchDir() + "/tiny-k3";
  const Outcome synth =
      Shell(Bin("waste") + " synth --preset tiny-k3 --seed 1 --force --quiet " + c);
  ASSERT_EQ(synth.code, 0) << synth.out;
  auto ct = Container::Open(c);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  CacheOptions co;
  co.slots = 32;
  auto cache = ExpertCache::Create(*ct, co);
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  for (kernels::Isa isa : kernels::AvailableIsas()) {
    ModelOptions mo;
    mo.isa = isa;
    auto model = Model::Load(*ct, cache->get(), mo);
    ASSERT_TRUE(model.ok()) << model.status().message();
    Session s = (*model)->NewSession(static_cast<int>(prompt.size()));
    std::vector<float> got;
    ASSERT_TRUE((*model)->Forward(s, prompt, nullptr, &got).ok());
    const std::string what = std::string("tiny-k3 ") + kernels::IsaName(isa);
    const double r =
        waste::testing::ExpectLogitsNear(got, reference, V, 1e-4f, what + " vs the reference");
    const double w = waste::testing::ExpectLogitsNear(got, warp, V, 1e-4f, what + " vs WARP");
    std::printf("%s: worst max|diff| / max|logit| %.3g against the reference, %.3g against WARP\n",
                what.c_str(), r, w);
  }
}

// The checkpoint itself (tests/fixtures/convert/kimi-k3: make_k3_checkpoint.py's
// bytes) through waste convert's lossless container (MXFP4 records, BF16
// trunk) against the reference on the raw checkpoint, MXFP4 decoded.
TEST(KimiK3, LosslessConversionMatchesTheReferenceOnTheCheckpoint) {
  const Fixture fx;
  const std::vector<float> want = waste::testing::FileFloats(kDir + "checkpoint.logits.bin");
  const std::string c = waste::testing::ScratchDir() + "/lossless";
  const Outcome conv = Shell(Bin("waste") + " convert " + std::string(WASTE_FIXTURES) +
                             "/convert/kimi-k3 " + c + " --expert-format mxfp4 --quiet");
  ASSERT_EQ(conv.code, 0) << conv.out;
  auto ct = Container::Open(c);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  CacheOptions co;
  co.slots = 16;
  auto cache = ExpertCache::Create(*ct, co);
  ASSERT_TRUE(cache.ok()) << cache.status().message();
  for (kernels::Isa isa : kernels::AvailableIsas()) {
    ModelOptions mo;
    mo.isa = isa;
    auto model = Model::Load(*ct, cache->get(), mo);
    ASSERT_TRUE(model.ok()) << model.status().message();
    Session s = (*model)->NewSession(static_cast<int>(fx.prompt.size()));
    std::vector<float> got;
    ASSERT_TRUE((*model)->Forward(s, fx.prompt, nullptr, &got).ok());
    const std::string what = std::string("k3 lossless ") + kernels::IsaName(isa);
    const double worst =
        waste::testing::ExpectLogitsNear(got, want, fx.vocab(), 1e-4f, what + " vs the reference");
    std::printf("%s: worst max|diff| / max|logit| %.3g against the reference on the checkpoint\n",
                what.c_str(), worst);
  }
}

// The same through the programs a user runs: a detached wasted on a copy of
// the container, and waste eval attached to it on every path.
TEST(KimiK3, ThroughWastedOnEveryIsa) {
  const Fixture fx;
  const std::string dir = waste::testing::ScratchDir(), c = dir + "/container";
  fs::copy(kDir + "warp-vq3r", c, fs::copy_options::recursive);
  waste::testing::DetachedWasted wasted;
  const Outcome start = wasted.Start(c, dir);
  ASSERT_EQ(start.code, 0) << start.out;
  std::string ids;
  for (int id : fx.prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  for (kernels::Isa isa : kernels::AvailableIsas()) {
    const std::string what = std::string("k3 ") + kernels::IsaName(isa) + " through wasted";
    const std::string file = dir + "/logits-" + kernels::IsaName(isa);
    const Outcome run =
        Shell(Bin("waste") + " eval " + c + " --ids " + ids + " --threads 2 --isa " +
              kernels::IsaName(isa) + " --logits " + file + " --socket " + wasted.socket());
    ASSERT_EQ(run.code, 0) << run.out;
    EXPECT_EQ(run.out.find("in this process"), std::string::npos) << run.out;  // attached
    ExpectBothOracles(waste::testing::FileFloats(file), fx, what);
  }
  const Outcome stop = wasted.Stop();
  EXPECT_EQ(stop.code, 0) << stop.out;
}

}  // namespace
}  // namespace waste
