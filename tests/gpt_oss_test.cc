// GPT-OSS against transformers: a tiny random GptOssForCausalLM whose
// experts are written in the released MXFP4 layout
// (tools/convert_fixtures/make_gpt_oss.py), converted in this process to the
// MXFP4 record (the checkpoint's codes and scales bit for bit) and to BF16R,
// verified against its source, and run over a 288-token prompt (past the
// sliding window of 32) on every instruction-set path this CPU has: every
// logit within 1e-4 of the row's largest and the same top 10 at every
// position. The MXFP4 container is also served by a detached wasted and read
// through `waste eval` on every path. A VQ conversion keeps the biases and
// runs. A fine-tune's BF16 experts as transformers saves them
// (make_gpt_oss_bf16.py) convert to BF16R losslessly and run within 1e-5.
// What is not built is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/convert/checkpoint.h"
#include "engine/convert/convert.h"
#include "engine/convert/source_model.h"
#include "engine/convert/verify.h"
#include "engine/experts/cache.h"
#include "engine/format/encoding.h"
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
const std::string kCheckpoint = kFixtures + "gpt-oss";


json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

std::string Converted(const char* fmt, const std::string& src = kCheckpoint, int layers = 4) {
  const std::string out = waste::testing::ScratchDir() + "/" + fmt;
  ConvertOptions o;
  o.src = src;
  o.out = out;
  o.expert_fmt = *ParseExpertFormat(fmt);
  auto r = Convert(o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return "";
  EXPECT_EQ(r->layers.size(), static_cast<size_t>(layers));
  EXPECT_TRUE(r->unused.empty()) << r->unused.front();
  return out;
}

class GptOss : public ::testing::TestWithParam<const char*> {};

TEST_P(GptOss, ConversionMatchesTransformersAtEveryPosition) {
  const std::string fmt = GetParam();
  const std::string out = Converted(fmt.c_str());
  ASSERT_FALSE(out.empty());
  VerifyOptions vo;
  vo.container = out;
  vo.source = kCheckpoint;
  auto v = Verify(vo);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
  EXPECT_EQ(v->records, 4 * 8);
  for (const VerifyLayer& l : v->layers) EXPECT_EQ(l.max_rel_error, 0.0) << "layer " << l.layer;
  EXPECT_EQ(v->trunk_max_rel_error, 0.0) << v->trunk_worst;

  auto ct = Container::Open(out);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  EXPECT_EQ(ct->manifest().quant.fmt, fmt == "mxfp4" ? format::Fmt::kMXFP4 : format::Fmt::kBF16R);
  const ModelConfig& c = ct->config();
  EXPECT_EQ(c.attn_window, (std::vector<int>{32, 0, 32, 0}));
  EXPECT_TRUE(c.sinks && c.o_bias && c.expert_bias && c.softmax_topk && c.router_logit_bias);
  EXPECT_FLOAT_EQ(c.swiglu_limit, 7.f);
  const json meta = ReadJson(kFixtures + "gpt-oss.json");
  const auto prompt = meta["prompt"].get<std::vector<int>>();
  ASSERT_GE(prompt.size(), 256u);
  const std::vector<float> want = waste::testing::FileFloats(kFixtures + "gpt-oss.logits.bin");
  for (const auto& [isa, V, got] : waste::testing::LogitsOnEveryIsa(out, prompt, 8)) {
    ASSERT_EQ(want.size(), prompt.size() * V);
    const double worst = waste::testing::ExpectLogitsNear(got, want, V, 1e-4f,
                                                          fmt + " " + kernels::IsaName(isa));
    std::printf("gpt-oss %s %s: worst max|diff| / max|logit| %.3g\n", fmt.c_str(),
                kernels::IsaName(isa), worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GptOss, ::testing::Values("mxfp4", "bf16"));

// A fine-tune as transformers saves it (make_gpt_oss_bf16.py): BF16 experts
// in the parameters' [E][in][out] layout, hidden 64 and expert width 32 so a
// transposed read cannot pass. The BF16R record keeps them bit for bit, and
// the model gives transformers' float32 logits (the checkpoint loaded back
// with from_pretrained) over 300 positions on every path: within 1e-5 of each
// row's largest and the same top 10.
TEST(GptOssFineTune, Bf16ExpertsConvertLosslessly) {
  const std::string src = kFixtures + "gpt-oss-bf16";
  const std::string out = Converted("bf16", src, 2);
  ASSERT_FALSE(out.empty());
  VerifyOptions vo;
  vo.container = out;
  vo.source = src;
  auto v = Verify(vo);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
  EXPECT_EQ(v->records, 2 * 4);
  for (const VerifyLayer& l : v->layers) EXPECT_EQ(l.max_rel_error, 0.0) << "layer " << l.layer;
  EXPECT_EQ(v->trunk_max_rel_error, 0.0) << v->trunk_worst;

  // Expert 3's up row 5 is column 2 * 5 + 1 of its gate_up_proj slab.
  auto ck = Checkpoint::Open(src);
  ASSERT_TRUE(ck.ok());
  auto sm = MapSource((*ck)->config());
  ASSERT_TRUE(sm.ok()) << sm.status().message();
  auto up = sm->FindExpert(**ck, 1, 3, 1);
  ASSERT_TRUE(up.ok()) << up.status().message();
  std::vector<float> slab(64 * 64), mat(32 * 64);
  ASSERT_TRUE((*ck)->ReadRows(up->weight, 3 * 64, 64, slab.data()).ok());
  ASSERT_TRUE(SourceModel::ReadExpert(**ck, *up, mat.data()).ok());
  for (int k = 0; k < 64; ++k) EXPECT_EQ(mat[5 * 64 + k], slab[k * 64 + 11]) << k;

  const json meta = ReadJson(kFixtures + "gpt-oss-bf16.json");
  const auto prompt = meta["prompt"].get<std::vector<int>>();
  ASSERT_EQ(prompt.size(), 300u);
  const std::vector<float> want =
      waste::testing::FileFloats(kFixtures + "gpt-oss-bf16.logits.bin");
  for (const auto& [isa, V, got] : waste::testing::LogitsOnEveryIsa(out, prompt, 4)) {
    ASSERT_EQ(want.size(), prompt.size() * V);
    const double worst = waste::testing::ExpectLogitsNear(
        got, want, V, 1e-5f, std::string("gpt-oss bf16 fine-tune ") + kernels::IsaName(isa));
    std::printf("gpt-oss bf16 fine-tune %s: worst max|diff| / max|logit| %.3g\n",
                kernels::IsaName(isa), worst);
  }
}

// The MXFP4 record holds the checkpoint's bytes: gate the even rows of
// gate_up_proj, up the odd ones, then down; the scales likewise; then the
// float32 biases.
TEST(GptOssRecord, HoldsTheCheckpointBytes) {
  const std::string out = Converted("mxfp4");
  ASSERT_FALSE(out.empty());
  auto ct = Container::Open(out);
  ASSERT_TRUE(ct.ok());
  auto ck = Checkpoint::Open(kCheckpoint);
  ASSERT_TRUE(ck.ok());
  auto sm = MapSource((*ck)->config());
  ASSERT_TRUE(sm.ok());
  const RecordLayout& lay = ct->record_layout();
  std::vector<uint8_t> rec(ct->record_bytes());
  const int L = 3, e = 5;
  ASSERT_TRUE(ct->ReadRecord(L, e, rec.data(), true).ok());
  const uint8_t* scales = rec.data() + lay.scales_off;
  for (int m = 0; m < 3; ++m) {
    auto x = sm->FindExpert(**ck, L, e, m);
    ASSERT_TRUE(x.ok()) << x.status().message();
    const int64_t cols = lay.cols[m], blocks = cols / 32;
    std::vector<uint8_t> codes(static_cast<size_t>(cols / 2)), sc(static_cast<size_t>(blocks));
    for (int64_t r = 0; r < lay.rows[m]; ++r) {
      ASSERT_TRUE((*ck)->ReadMxfp4Row(x->weight, x->first + r * x->step, codes.data(), sc.data()).ok());
      EXPECT_EQ(std::memcmp(codes.data(), rec.data() + lay.matrix_off[m] + r * (cols / 2),
                            codes.size()), 0) << "matrix " << m << " row " << r;
      EXPECT_EQ(std::memcmp(sc.data(), scales + r * blocks, sc.size()), 0);
    }
    scales += lay.rows[m] * blocks;
  }
  EXPECT_EQ(scales - rec.data(), static_cast<ptrdiff_t>(lay.bias_off));
  EXPECT_EQ(lay.payload_end, lay.bias_off + 4 * (2 * 64 + 64));
}

// The VQ formats fit codebooks to the dequantized MXFP4 rows; the biases ride
// in the records exactly (verify counts a changed bias as a relative error
// of 1), and the model runs on them.
TEST(GptOssVq, BiasesSurviveAndTheModelRuns) {
  const std::string out = Converted("vq4p");
  ASSERT_FALSE(out.empty());
  VerifyOptions vo;
  vo.container = out;
  vo.source = kCheckpoint;
  auto v = Verify(vo);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
  for (const VerifyLayer& l : v->layers) EXPECT_LT(l.max_rel_error, 0.5) << "layer " << l.layer;
  auto ct = Container::Open(out);
  ASSERT_TRUE(ct.ok());
  ASSERT_NE(ct->record_layout().bias_off, 0u);
  CacheOptions co;
  co.slots = 8;
  auto cache = ExpertCache::Create(*ct, co);
  ASSERT_TRUE(cache.ok());
  auto model = Model::Load(*ct, cache->get(), ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status().message();
  const std::vector<int> prompt = {1, 17, 42, 99, 5, 300, 12, 7};
  Session s = (*model)->NewSession(static_cast<int>(prompt.size()));
  std::vector<float> got;
  ASSERT_TRUE((*model)->Forward(s, prompt, nullptr, &got).ok());
  ASSERT_EQ(got.size(), prompt.size() * 320);
  for (float x : got) ASSERT_TRUE(std::isfinite(x));
}

// What is not built, or cannot be kept bit for bit, is refused by name.
TEST(GptOssConfig, RefusalsByName) {
  const json base = ReadJson(kCheckpoint + "/config.json");
  auto refusal = [&](const char* key, const json& value) {
    json c = base;
    c[key] = value;
    auto s = MapSource(c);
    return s.ok() ? std::string("accepted") : s.status().message();
  };
  EXPECT_EQ(refusal("sliding_window", 32), "accepted");
  EXPECT_NE(refusal("layer_types", json::array({"full_attention"})).find("layer_types"),
            std::string::npos);
  EXPECT_NE(refusal("layer_types", json::array({"chunked", "full_attention", "full_attention",
                                                "full_attention"}))
                .find("layer_types[0]"),
            std::string::npos);
  EXPECT_NE(refusal("tie_word_embeddings", true).find("tie_word_embeddings"), std::string::npos);
  // MXFP4 records only from MXFP4 experts: Qwen3-MoE's and the fine-tune's are BF16.
  for (const char* bf16 : {"qwen3-moe", "gpt-oss-bf16"}) {
    ConvertOptions o;
    o.src = kFixtures + bf16;
    o.out = waste::testing::ScratchDir() + "/refused-" + bf16;
    o.expert_fmt = format::Fmt::kMXFP4;
    auto r = Convert(o);
    ASSERT_FALSE(r.ok()) << bf16;
    EXPECT_NE(r.status().message().find("--expert-format mxfp4"), std::string::npos)
        << r.status().message();
  }
  // A fine-tune's experts in another shape than [E][in][out] are refused by name.
  auto ck = Checkpoint::Open(kFixtures + "gpt-oss-bf16");
  ASSERT_TRUE(ck.ok());
  json c = (*ck)->config();
  c["intermediate_size"] = 64;
  auto sm = MapSource(c);
  ASSERT_TRUE(sm.ok()) << sm.status().message();
  auto x = sm->FindExpert(**ck, 0, 0, 2);
  ASSERT_FALSE(x.ok());
  EXPECT_NE(x.status().message().find("mlp.experts.down_proj is BF16 [4, 32, 64], the config "
                                      "needs [4, 64, 64]"),
            std::string::npos)
      << x.status().message();
}

// The MXFP4 container through the programs a user runs: a detached wasted
// and `waste eval` attached to it, on every instruction-set path.
TEST(GptOssWasted, EveryIsaMatches) {
  const std::string dir = waste::testing::ScratchDir();
  const std::string c = dir + "/container";
  const Outcome conv = Shell(Bin("waste") + " convert " + kCheckpoint + " " + c +
                             " --expert-format mxfp4 --quiet");
  ASSERT_EQ(conv.code, 0) << conv.out;
  waste::testing::DetachedWasted wasted;
  const Outcome start = wasted.Start(c, dir);
  ASSERT_EQ(start.code, 0) << start.out;
  const json meta = ReadJson(kFixtures + "gpt-oss.json");
  const auto prompt = meta["prompt"].get<std::vector<int>>();
  std::string ids;
  for (int id : prompt) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const std::vector<float> want = waste::testing::FileFloats(kFixtures + "gpt-oss.logits.bin");
  const int V = static_cast<int>(want.size() / prompt.size());
  for (kernels::Isa isa : kernels::AvailableIsas()) {
    const std::string what = std::string("gpt-oss ") + kernels::IsaName(isa) + " through wasted";
    const std::string file = dir + "/logits-" + kernels::IsaName(isa);
    const Outcome run = Shell(Bin("waste") + " eval " + c + " --ids " + ids +
                              " --threads 2 --isa " + kernels::IsaName(isa) + " --logits " + file +
                              " --socket " + wasted.socket());
    ASSERT_EQ(run.code, 0) << run.out;
    EXPECT_EQ(run.out.find("in this process"), std::string::npos) << run.out;
    const std::vector<float> got = waste::testing::FileFloats(file);
    ASSERT_EQ(got.size(), want.size()) << what;
    const waste::testing::EveryPosition r =
        waste::testing::ExpectEveryPositionNear(got, want, V, 1e-4f, what);
    std::printf("%s: worst max|diff| / max|logit| %.3g at position %d; argmax checked at %d\n",
                what.c_str(), r.worst, r.worst_at, r.argmax_checked);
  }
  const Outcome st = Shell(Bin("wastectl") + " status --json --socket " + wasted.socket());
  EXPECT_EQ(st.code, 0) << st.out;
  const json s = json::parse(st.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_GT(s.value("reads", 0), 0) << st.out;
  EXPECT_EQ(s.value("read_errors", -1), 0) << st.out;
  const Outcome stop = wasted.Stop();
  EXPECT_EQ(stop.code, 0) << stop.out;
}

}  // namespace
}  // namespace waste::convert
