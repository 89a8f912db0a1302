// The trained demo model (models/demo-moe) against its own PyTorch forward
// pass and `tokenizers` (tools/demo_model/make_fixtures.py): converted
// losslessly it tokenizes, scores and generates as they do; converted to
// VQ3R its held-out perplexity stays within a pinned margin of BF16R's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/convert/convert.h"
#include "engine/experts/cache.h"
#include "engine/kernels/cpu.h"
#include "engine/model/model.h"
#include "engine/model/perplexity.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using nlohmann::json;

const std::string kModel = std::string(WASTE_MODELS) + "/demo-moe";
const std::string kFixtures = std::string(WASTE_FIXTURES) + "/demo/";

// VQ3R's held-out perplexity over BF16R's, minus one, on the fixture's 4
// windows, both as `waste convert` writes them by default (VQ3R with a Q4G
// trunk; BF16R with a BF16 one): measured +0.85% (28.4256 against 28.1874)
// on 2026-12-01 (docs/log/2026-12-01.md, "the demo model"). A change of the VQ
// fitting, the trunk's quantization or the kernels that moves it past this
// bound must say why.
constexpr double kVq3rPerplexityMargin = 0.02;

json Fixture() {
  std::ifstream f(kFixtures + "demo.json");
  return json::parse(f);
}

// A converted container with its in-process cache, model and tokenizer.
struct Loaded {
  std::unique_ptr<Container> ct;
  std::unique_ptr<ExpertCache> cache;
  std::unique_ptr<Model> model;
  std::optional<Tokenizer> tokenizer;
};

// The demo model converted to `fmt` (bf16 or vq3r) once per process, into a
// directory of this process's own (ctest runs each test in a process of its
// own, several at once). Empty, with the failure recorded, when it fails.
std::string Converted(const std::string& fmt) {
  static std::map<std::string, std::string> done;
  if (auto it = done.find(fmt); it != done.end()) return it->second;
  const std::string out = ::testing::TempDir() + "/waste-demo-model-" +
                          std::to_string(::getpid()) + "/" + fmt;
  std::filesystem::remove_all(out);
  convert::ConvertOptions o;
  o.src = kModel;
  o.out = out;
  o.jobs = 2;
  o.expert_fmt = *convert::ParseExpertFormat(fmt);
  auto r = convert::Convert(o);
  if (!r.ok()) {
    ADD_FAILURE() << fmt << ": " << r.status().message();
    return "";
  }
  return done[fmt] = out;
}

Loaded Load(const std::string& fmt, kernels::Isa isa = kernels::BestIsa()) {
  Loaded l;
  const std::string dir = Converted(fmt);
  if (dir.empty()) return l;
  auto ct = Container::Open(dir);
  EXPECT_TRUE(ct.ok()) << ct.status().message();
  if (!ct.ok()) return l;
  l.ct = std::make_unique<Container>(std::move(*ct));
  CacheOptions co;
  co.slots = 64;
  auto cache = ExpertCache::Create(*l.ct, co);
  EXPECT_TRUE(cache.ok()) << cache.status().message();
  if (!cache.ok()) return l;
  l.cache = std::move(*cache);
  ModelOptions mo;
  mo.isa = isa;
  auto model = Model::Load(*l.ct, l.cache.get(), mo);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (model.ok()) l.model = std::move(*model);
  auto tok = Tokenizer::Load(dir);
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  if (tok.ok()) l.tokenizer = std::move(*tok);
  return l;
}

TEST(DemoModel, HeldOutTextTokenizesAsTokenizersDoes) {
  json fx = Fixture();
  Loaded l = Load("bf16");
  ASSERT_TRUE(l.tokenizer);
  const std::vector<int32_t> got = l.tokenizer->Encode(fx["tokenize"]["text"].get<std::string>());
  const auto want = fx["tokenize"]["ids"].get<std::vector<int32_t>>();
  ASSERT_GT(want.size(), 1000u);
  EXPECT_EQ(got, want);
  EXPECT_EQ(l.tokenizer->Decode(got), fx["tokenize"]["text"].get<std::string>());
}

// Every position of the prompt within 1e-4 of the row's largest logit, and
// the same top 10 (demo.json records how far each row's 10th is from its
// 11th), on every instruction-set path this CPU has.
TEST(DemoModel, LosslessLogitsMatchPyTorch) {
  json fx = Fixture();
  for (kernels::Isa isa : kernels::AvailableIsas()) {
    Loaded l = Load("bf16", isa);
    ASSERT_TRUE(l.model);
    const int V = l.model->config().vocab;
    ASSERT_EQ(V, fx["logits"]["vocab"].get<int>());
    const auto prompt = fx["logits"]["prompt_ids"].get<std::vector<int>>();
    const std::vector<float> want = waste::testing::FileFloats(kFixtures + "demo.logits.bin");
    ASSERT_EQ(want.size(), prompt.size() * V);
    Session s = l.model->NewSession(static_cast<int>(prompt.size()));
    std::vector<float> got;
    ASSERT_TRUE(l.model->Forward(s, prompt, nullptr, &got).ok());
    const double worst = waste::testing::ExpectLogitsNear(
        got, want, V, 1e-4f, std::string("BF16R ") + kernels::IsaName(isa));
    std::printf("%s: worst max|diff| / max|logit| over %zu positions: %.3g\n",
                kernels::IsaName(isa), prompt.size(), worst);
  }
}

// The prompt's text through waste's tokenizer, then greedy decoding one token
// at a time: PyTorch's continuation, token for token.
TEST(DemoModel, GreedyContinuationIsPyTorchs) {
  json fx = Fixture();
  Loaded l = Load("bf16");
  ASSERT_TRUE(l.model && l.tokenizer);
  const json& g = fx["greedy"];
  std::vector<int> prompt = {l.model->config().bos_token};
  for (int32_t id : l.tokenizer->Encode(g["prompt"].get<std::string>())) prompt.push_back(id);
  ASSERT_EQ(prompt, g["prompt_ids"].get<std::vector<int>>());
  const auto want = g["continuation_ids"].get<std::vector<int>>();
  const int V = l.model->config().vocab;
  Session s = l.model->NewSession(static_cast<int>(prompt.size() + want.size()));
  std::vector<float> logits(V);
  ASSERT_TRUE(l.model->Forward(s, prompt, logits.data()).ok());
  std::vector<int> got;
  while (got.size() < want.size()) {
    const int next = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    got.push_back(next);
    const int one[1] = {next};
    ASSERT_TRUE(l.model->Forward(s, one, logits.data()).ok());
  }
  EXPECT_EQ(got, want);
  std::vector<int32_t> text_ids(got.begin(), got.end());
  EXPECT_EQ(l.tokenizer->Decode(text_ids), g["continuation_text"].get<std::string>());
}

// Held-out perplexity, windowed as PyTorch's was: BF16R's equals PyTorch's
// to 4 digits; VQ3R's stays within kVq3rPerplexityMargin of BF16R's.
TEST(DemoModel, PerplexityMatchesPyTorchAndVq3rStaysNear) {
  json fx = Fixture();
  const json& p = fx["perplexity"];
  std::ifstream f(kModel + "/heldout.txt");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  double bf16 = 0;
  for (const std::string fmt : {"bf16", "vq3r"}) {
    SCOPED_TRACE(fmt);
    Loaded l = Load(fmt);
    ASSERT_TRUE(l.model && l.tokenizer);
    std::vector<int> ids = {l.model->config().bos_token};
    for (int32_t id : l.tokenizer->Encode(text)) ids.push_back(id);
    auto score =
        ScorePerplexity(*l.model, ids, p["window"].get<int>(), p["windows"].get<int>());
    ASSERT_TRUE(score.ok()) << score.status().message();
    EXPECT_EQ(score->scored, p["scored"].get<uint64_t>());
    const double ppl = score->perplexity();
    std::printf("%s: perplexity %.6f (PyTorch %.6f)\n", fmt.c_str(), ppl,
                p["perplexity"].get<double>());
    if (fmt == "bf16") {
      bf16 = ppl;
      EXPECT_NEAR(ppl / p["perplexity"].get<double>(), 1.0, 1e-4);
    } else {
      EXPECT_GT(ppl / bf16 - 1, -kVq3rPerplexityMargin);
      EXPECT_LT(ppl / bf16 - 1, kVq3rPerplexityMargin);
    }
  }
}

}  // namespace
}  // namespace waste
