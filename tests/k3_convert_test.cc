// waste convert on Kimi K3's released checkpoint layout: a tiny random K3
// checkpoint (tests/fixtures/convert/kimi-k3, written by
// tools/reference/make_k3_checkpoint.py): config.json's text_config inside
// KimiK3ForConditionalGeneration, the text model under language_model., the
// routed experts in compressed-tensors' MXFP4 (weight_packed U8 [out, in/2],
// low nibble first; weight_scale U8 E8M0 [out, in/32]) on the latent width,
// the rest BF16, and a few vision-tower tensors.
//
// Checked: the container's config and names are the ones WARP's converter
// writes for K3; the MXFP4 record (fmt 10) holds the source's code and scale
// bytes, read here straight from the shard files; the decoded values equal a
// decode written in this file; the MXFP4 container's logits are the BF16R
// container's; the vision tower is skipped and listed; VQ3R and VQ4P convert
// and verify; every kind of damage is an error naming what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include <nlohmann/json.hpp>

#include "engine/convert/checkpoint.h"
#include "engine/convert/convert.h"
#include "engine/convert/safetensors.h"
#include "engine/convert/source_model.h"
#include "engine/convert/verify.h"
#include "engine/experts/cache.h"
#include "engine/format/container.h"
#include "engine/kernels/cpu.h"
#include "engine/model/model.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace waste::convert {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kCheckpoint = std::string(WASTE_FIXTURES) + "/convert/kimi-k3";
const std::string kPrefix = "language_model.";
// The fixture's shape (make_k3_checkpoint.py): 5 layers, layer 0 dense, 16
// experts of 32 rows on a 32-wide latent of the 64-wide hidden state.
constexpr int kLayers = 5, kExperts = 16, kInter = 32, kLatent = 32, kHidden = 64;

json ReadJson(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

std::string ExpertName(int layer, int expert, int matrix) {
  static const char* tag[3] = {"w1", "w3", "w2"};
  return kPrefix + "model.layers." + std::to_string(layer) + ".block_sparse_moe.experts." +
         std::to_string(expert) + "." + tag[matrix];
}

// The tensors' bytes as the shard files hold them, found through the index
// and each file's own header, not through the converter's reader.
class RawShards {
 public:
  explicit RawShards(const std::string& dir) : dir_(dir) {
    index_ = ReadJson(dir + "/model.safetensors.index.json")["weight_map"];
  }
  std::vector<uint8_t> Tensor(const std::string& name, std::string* dtype = nullptr,
                              std::vector<int64_t>* shape = nullptr) {
    const std::string file = index_.at(name).get<std::string>();
    auto [it, fresh] = files_.try_emplace(file);
    Shard& f = it->second;
    if (fresh) {
      f.bytes = waste::testing::FileBytes(dir_ + "/" + file);
      std::memcpy(&f.data_start, f.bytes.data(), 8);
      f.header = json::parse(f.bytes.begin() + 8,
                             f.bytes.begin() + 8 + static_cast<int64_t>(f.data_start));
      f.data_start += 8;
    }
    const json& e = f.header.at(name);
    if (dtype) *dtype = e["dtype"].get<std::string>();
    if (shape) *shape = e["shape"].get<std::vector<int64_t>>();
    const uint64_t begin = f.data_start + e["data_offsets"][0].get<uint64_t>();
    const uint64_t end = f.data_start + e["data_offsets"][1].get<uint64_t>();
    return {f.bytes.begin() + static_cast<int64_t>(begin),
            f.bytes.begin() + static_cast<int64_t>(end)};
  }

 private:
  struct Shard {
    std::vector<uint8_t> bytes;
    json header;
    uint64_t data_start = 0;
  };
  std::string dir_;
  json index_;
  std::map<std::string, Shard> files_;
};

// MXFP4 decoded here: E2M1 (sign bit 3, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4,
// 6), column 2i in the low nibble of byte i, times 2^(e - 127) per 32 columns.
std::vector<float> DecodeMxfp4(const std::vector<uint8_t>& codes,
                               const std::vector<uint8_t>& scales, int64_t rows, int64_t cols) {
  static const float kMag[8] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t b = codes[static_cast<size_t>(r * (cols / 2) + c / 2)];
      const int nib = (c % 2 == 0) ? (b & 15) : (b >> 4);
      const float v = (nib & 8 ? -1.f : 1.f) * kMag[nib & 7];
      const int e = scales[static_cast<size_t>(r * (cols / 32) + c / 32)];
      out[static_cast<size_t>(r * cols + c)] = std::ldexp(v, e - 127);
    }
  }
  return out;
}

ConvertOptions Options(const std::string& src, const std::string& out, const char* fmt) {
  ConvertOptions o;
  o.src = src;
  o.out = out;
  o.expert_fmt = *ParseExpertFormat(fmt);
  o.fit.sample_experts = 4;
  o.fit.iterations = 4;
  return o;
}

std::string ConvertError(const ConvertOptions& o) {
  auto r = Convert(o);
  return r.ok() ? std::string("converted") : r.status().message();
}

// --------------------------------------------------------------- the layout

TEST(K3Source, ConfigAndNamesAreWarpsLayout) {
  auto ck = Checkpoint::Open(kCheckpoint);
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  auto sm = MapSource((*ck)->config());
  ASSERT_TRUE(sm.ok()) << sm.status().message();
  EXPECT_EQ(sm->prefix, kPrefix);
  EXPECT_EQ(sm->family, Family::kKimiLinear);  // Moonshot's names, under the prefix
  // The text model's config with the wrapper's keys under _outer, nothing
  // of the checkpoint's quantization.
  EXPECT_FALSE(sm->config.contains("text_config"));
  EXPECT_EQ(sm->config["model_type"], "kimi_linear");
  EXPECT_EQ(sm->config["_outer"]["architectures"][0], "KimiK3ForConditionalGeneration");
  EXPECT_TRUE(sm->config["_outer"].contains("vision_config"));
  EXPECT_FALSE(sm->config["_outer"].contains("quantization_config"));
  EXPECT_FALSE(sm->config.contains("quantization_config"));
  // The experts work in the latent width.
  EXPECT_EQ(sm->expert_rows[0], kInter);
  EXPECT_EQ(sm->expert_cols[0], kLatent);
  EXPECT_EQ(sm->expert_rows[2], kLatent);
  EXPECT_EQ(sm->expert_cols[2], kInter);
  EXPECT_EQ(sm->TrunkName("model.norm.weight"), kPrefix + "model.norm.weight");
  EXPECT_TRUE(sm->IsVisionTensor("vision_tower.patch_embed.proj.weight"));
  EXPECT_TRUE(sm->IsVisionTensor("mm_projector.proj.0.weight"));
  EXPECT_FALSE(sm->IsVisionTensor(kPrefix + "model.norm.weight"));
}

// compressed-tensors' layout is fmt 10's: the reader's codes and scales are
// the file's bytes, and its values are this file's decode of them.
TEST(K3Source, CompressedTensorsMxfp4IsReadAsStored) {
  auto ck = Checkpoint::Open(kCheckpoint);
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  auto sm = MapSource((*ck)->config());
  ASSERT_TRUE(sm.ok()) << sm.status().message();
  RawShards raw(kCheckpoint);
  for (int m = 0; m < 3; ++m) {
    const int L = 2, e = 11;
    auto x = sm->FindExpert(**ck, L, e, m);
    ASSERT_TRUE(x.ok()) << x.status().message();
    ASSERT_EQ(x->weight.storage, Storage::kMxfp4);
    const int64_t rows = sm->expert_rows[m], cols = sm->expert_cols[m];
    std::string dt, st;
    std::vector<int64_t> pshape, sshape;
    const std::vector<uint8_t> codes = raw.Tensor(ExpertName(L, e, m) + ".weight_packed", &dt,
                                                  &pshape);
    const std::vector<uint8_t> scales = raw.Tensor(ExpertName(L, e, m) + ".weight_scale", &st,
                                                   &sshape);
    EXPECT_EQ(dt, "U8");
    EXPECT_EQ(st, "U8");
    EXPECT_EQ(pshape, (std::vector<int64_t>{rows, cols / 2}));
    EXPECT_EQ(sshape, (std::vector<int64_t>{rows, cols / 32}));
    std::vector<uint8_t> rc(static_cast<size_t>(cols / 2)), rs(static_cast<size_t>(cols / 32));
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE((*ck)->ReadMxfp4Row(x->weight, r, rc.data(), rs.data()).ok());
      EXPECT_EQ(std::memcmp(rc.data(), codes.data() + r * (cols / 2), rc.size()), 0) << r;
      EXPECT_EQ(std::memcmp(rs.data(), scales.data() + r * (cols / 32), rs.size()), 0) << r;
    }
    std::vector<float> got(static_cast<size_t>(rows * cols));
    ASSERT_TRUE(SourceModel::ReadExpert(**ck, *x, got.data()).ok());
    const std::vector<float> want = DecodeMxfp4(codes, scales, rows, cols);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "matrix " << m;
    // Not all zeros: the nibbles and the scales vary.
    int nonzero = 0;
    for (float v : want) nonzero += v != 0.f;
    EXPECT_GT(nonzero, rows * cols / 2);
  }
}

// ------------------------------------------------------------- conversion

// The lossless MXFP4 record: every record of every layer holds the source's
// code bytes, then its scale bytes, as the shard files hold them; the trunk
// is the BF16 source; the vision tower is skipped and listed.
TEST(K3Convert, Mxfp4RecordKeepsTheCheckpointsBits) {
  const std::string out = waste::testing::ScratchDir() + "/mxfp4";
  auto r = Convert(Options(kCheckpoint, out, "mxfp4"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->layers.size(), static_cast<size_t>(kLayers - 1));
  EXPECT_TRUE(r->unused.empty()) << r->unused.front();
  EXPECT_TRUE(r->skipped_layers.empty());
  std::vector<std::string> vision = r->skipped_vision;
  std::sort(vision.begin(), vision.end());
  EXPECT_EQ(vision, (std::vector<std::string>{"mm_projector.proj.0.weight",
                                              "mm_projector.proj.2.weight",
                                              "vision_tower.encoder.final_layernorm.weight",
                                              "vision_tower.patch_embed.proj.bias",
                                              "vision_tower.patch_embed.proj.weight"}));

  const json man = ReadJson(out + "/manifest.json");
  EXPECT_EQ(man["tensor_prefix"], kPrefix);
  EXPECT_EQ(man["config"]["_outer"]["architectures"][0], "KimiK3ForConditionalGeneration");
  EXPECT_EQ(man["config"]["routed_expert_hidden_size"], kLatent);
  for (const json& t : man["trunk"]) {
    const std::string name = t["name"].get<std::string>();
    EXPECT_EQ(name.rfind(kPrefix, 0), 0u) << name;
  }

  auto ct = Container::Open(out);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  EXPECT_EQ(ct->manifest().quant.fmt, format::Fmt::kMXFP4);
  const RecordLayout& lay = ct->record_layout();
  ASSERT_EQ(lay.cols[0], kLatent);
  ASSERT_EQ(lay.rows[2], kLatent);
  std::vector<uint8_t> rec(ct->record_bytes());
  RawShards raw(kCheckpoint);
  int records = 0;
  for (int L = 1; L < kLayers; ++L) {
    for (int e = 0; e < kExperts; ++e, ++records) {
      ASSERT_TRUE(ct->ReadRecord(L, e, rec.data(), true).ok());
      const uint8_t* scales = rec.data() + lay.scales_off;
      for (int m = 0; m < 3; ++m) {
        const std::vector<uint8_t> codes = raw.Tensor(ExpertName(L, e, m) + ".weight_packed");
        const std::vector<uint8_t> sc = raw.Tensor(ExpertName(L, e, m) + ".weight_scale");
        ASSERT_EQ(codes.size(), static_cast<size_t>(lay.rows[m] * lay.cols[m] / 2));
        EXPECT_EQ(std::memcmp(rec.data() + lay.matrix_off[m], codes.data(), codes.size()), 0)
            << "layer " << L << " expert " << e << " matrix " << m;
        EXPECT_EQ(std::memcmp(scales, sc.data(), sc.size()), 0)
            << "layer " << L << " expert " << e << " matrix " << m;
        scales += sc.size();
      }
      EXPECT_EQ(scales - rec.data(), static_cast<ptrdiff_t>(lay.payload_end));
    }
  }
  EXPECT_EQ(records, (kLayers - 1) * kExperts);

  VerifyOptions vo;
  vo.container = out;
  vo.source = kCheckpoint;
  auto v = Verify(vo);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
  EXPECT_EQ(v->records, (kLayers - 1) * kExperts);
  ASSERT_EQ(v->layers.size(), static_cast<size_t>(kLayers - 1));
  for (const VerifyLayer& l : v->layers) EXPECT_EQ(l.max_rel_error, 0.0) << "layer " << l.layer;
  EXPECT_EQ(v->trunk_max_rel_error, 0.0) << v->trunk_worst;
}

// MXFP4 and BF16R are both lossless of the same dequantized experts (an
// E2M1 value times a power of two is a bfloat16), and the trunks are the same
// BF16: the two containers' logits agree to float rounding at every position
// (the two expert kernels sum in different orders), on every instruction-set
// path this CPU has.
TEST(K3Convert, Mxfp4AndBf16rGiveTheSameLogits) {
  const std::string dir = waste::testing::ScratchDir();
  std::vector<float> logits[2];
  const char* fmts[2] = {"mxfp4", "bf16"};
  std::vector<int> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 270);
  for (kernels::Isa isa : kernels::AvailableIsas()) {
    for (int k = 0; k < 2; ++k) {
      const std::string out = dir + "/" + fmts[k];
      if (!fs::exists(out + "/manifest.json")) {
        auto r = Convert(Options(kCheckpoint, out, fmts[k]));
        ASSERT_TRUE(r.ok()) << r.status().message();
      }
      auto ct = Container::Open(out);
      ASSERT_TRUE(ct.ok()) << ct.status().message();
      ASSERT_EQ(ct->config().arch, Arch::kKimiK3);
      CacheOptions co;
      co.slots = 16;
      auto cache = ExpertCache::Create(*ct, co);
      ASSERT_TRUE(cache.ok()) << cache.status().message();
      ModelOptions mo;
      mo.isa = isa;
      auto model = Model::Load(*ct, cache->get(), mo);
      ASSERT_TRUE(model.ok()) << model.status().message();
      Session s = (*model)->NewSession(static_cast<int>(prompt.size()));
      ASSERT_TRUE((*model)->Forward(s, prompt, nullptr, &logits[k]).ok());
    }
    const int V = 280;
    ASSERT_EQ(logits[0].size(), prompt.size() * V);
    const double worst = waste::testing::ExpectLogitsNear(
        logits[0], logits[1], V, 1e-5f, std::string("mxfp4 vs bf16r ") + kernels::IsaName(isa));
    std::printf("kimi-k3 mxfp4 vs bf16r %s: worst max|diff| / max|logit| %.3g\n",
                kernels::IsaName(isa), worst);
  }
}

// The k-means formats fit codebooks to the dequantized MXFP4 rows, one
// expert at a time; verify measures the error against the source.
class K3Vq : public ::testing::TestWithParam<const char*> {};

TEST_P(K3Vq, ConvertsAndVerifies) {
  const std::string out = waste::testing::ScratchDir() + "/" + GetParam();
  auto r = Convert(Options(kCheckpoint, out, GetParam()));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->skipped_vision.size(), 5u);
  ASSERT_EQ(r->layers.size(), static_cast<size_t>(kLayers - 1));
  VerifyOptions vo;
  vo.container = out;
  vo.source = kCheckpoint;
  auto v = Verify(vo);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->problems.empty()) << v->problems.front();
  for (size_t i = 0; i < v->layers.size(); ++i) {
    const VerifyLayer& l = v->layers[i];
    // Three residual stages on 8-wide vectors of random MXFP4 weights: well
    // under the weights' own size, and never exact.
    EXPECT_GT(l.mean_rel_error, 0.01) << "layer " << l.layer;
    EXPECT_LT(l.max_rel_error, 0.5) << "layer " << l.layer;
    // The converter's own figure is verify's.
    EXPECT_NEAR(r->layers[i].mean_rel_error, l.mean_rel_error, 1e-3) << "layer " << l.layer;
  }
  EXPECT_GT(v->trunk_max_rel_error, 0.0);  // the trunk is Q4G
  EXPECT_LT(v->trunk_max_rel_error, 0.2) << v->trunk_worst;
}

INSTANTIATE_TEST_SUITE_P(Formats, K3Vq, ::testing::Values("vq3r", "vq4p"));

// `waste convert` says what it skipped; `waste verify` finds nothing wrong.
TEST(K3Cli, ConvertSaysTheVisionTowerIsSkippedAndVerifyPasses) {
  const std::string dir = waste::testing::ScratchDir();
  const std::string waste = testing::Bin("waste");
  auto r = waste::testing::Shell(waste + " convert " + kCheckpoint + " " + dir +
                                 "/out --expert-format mxfp4 --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* want : {"(kimi_k3) from", "the vision tower skipped: 5 tensors",
                           "bits per weight (mxfp4)",
                           "tokenizer: from tiktoken.model"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  EXPECT_EQ(r.out.find("not needed by the container"), std::string::npos) << r.out;
  r = waste::testing::Shell(waste + " verify " + dir + "/out --source " + kCheckpoint);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("64 expert records (headers, crc32) checked"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no problems"), std::string::npos) << r.out;
}

// -------------------------------------------------------------- bad input

std::string CopyCheckpoint(const std::string& dir) {
  const std::string dst = dir + "/src";
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(kCheckpoint))
    fs::copy_file(e.path(), dst + "/" + e.path().filename().string());
  return dst;
}

// Puts tensor `name` as `dtype` `shape` with `data` in a shard of its own
// and points the index at it: how a damaged or different tensor arrives.
void ReplaceTensor(const std::string& src, const std::string& name, const std::string& dtype,
                   const std::vector<int64_t>& shape, const std::vector<uint8_t>& data) {
  static int n = 0;
  const std::string file = "model-damage-" + std::to_string(n++) + ".safetensors";
  const json h = {{name, {{"dtype", dtype}, {"shape", shape},
                          {"data_offsets", {0, static_cast<int64_t>(data.size())}}}}};
  const std::string text = h.dump();
  const uint64_t size = text.size();
  std::ofstream f(src + "/" + file, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&size), 8);
  f << text;
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  f.close();
  json idx = ReadJson(src + "/model.safetensors.index.json");
  idx["weight_map"][name] = file;
  std::ofstream(src + "/model.safetensors.index.json") << idx.dump();
}

// Drops tensor `name` from the index and from its shard's header (whose
// other entries keep their offsets: the header is padded to its old size).
void RemoveTensor(const std::string& src, const std::string& name) {
  json idx = ReadJson(src + "/model.safetensors.index.json");
  const std::string old = idx["weight_map"][name].get<std::string>();
  idx["weight_map"].erase(name);
  std::ofstream(src + "/model.safetensors.index.json") << idx.dump();
  const std::string path = src + "/" + old;
  std::vector<uint8_t> bytes = waste::testing::FileBytes(path);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  json h = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<int64_t>(header));
  h.erase(name);
  std::string text = h.dump();
  text.resize(header, ' ');  // the same data offsets: pad the header to its old size
  std::memcpy(bytes.data() + 8, text.data(), header);
  waste::testing::WriteText(path, std::string(bytes.begin(), bytes.end()));
}

TEST(K3BadInput, ExpertDamageIsNamed) {
  const std::string dir = waste::testing::ScratchDir();
  const std::string e3 = ExpertName(3, 5, 0);  // w1 of expert 5, layer 3: [32, 32]
  struct Case {
    const char* what;
    std::function<void(const std::string&)> damage;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"scale of the wrong dtype",
       [&](const std::string& s) {
         ReplaceTensor(s, e3 + ".weight_scale", "F16", {32, 1}, std::vector<uint8_t>(64, 0x3c));
       },
       "tensor " + e3 + ".weight_scale is F16 [32, 1], MXFP4 scales of [32, 32] need U8 [32, 1]"},
      {"scale of the wrong shape",
       [&](const std::string& s) {
         ReplaceTensor(s, e3 + ".weight_scale", "U8", {32, 2}, std::vector<uint8_t>(64, 127));
       },
       "tensor " + e3 + ".weight_scale is U8 [32, 2], MXFP4 scales of [32, 32] need U8 [32, 1]"},
      {"missing scale", [&](const std::string& s) { RemoveTensor(s, e3 + ".weight_scale"); },
       "tensor " + e3 + ".weight_packed has no " + e3 + ".weight_scale"},
      {"codes not U8",
       [&](const std::string& s) {
         ReplaceTensor(s, e3 + ".weight_packed", "I8", {32, 16}, std::vector<uint8_t>(512, 0));
       },
       "tensor " + e3 + ".weight_packed is I8 [32, 16], MXFP4 codes must be U8 [rows, cols / 2]"},
      {"expert of the hidden width, not the latent",
       [&](const std::string& s) {
         ReplaceTensor(s, e3 + ".weight_packed", "U8", {32, 32}, std::vector<uint8_t>(1024, 0));
         ReplaceTensor(s, e3 + ".weight_scale", "U8", {32, 2}, std::vector<uint8_t>(64, 127));
       },
       "tensor " + e3 + ".weight is MXFP4 [32, 64], the config needs [32, 32]"},
      {"expert missing", [&](const std::string& s) {
         RemoveTensor(s, e3 + ".weight_packed");
         RemoveTensor(s, e3 + ".weight_scale");
       },
       "the checkpoint has no tensor " + e3 + ".weight"},
      {"latent projection of the wrong shape",
       [&](const std::string& s) {
         ReplaceTensor(s, kPrefix + "model.layers.2.block_sparse_moe.routed_expert_down_proj.weight",
                       "BF16", {kHidden, kLatent}, std::vector<uint8_t>(2 * kHidden * kLatent, 0));
       },
       "routed_expert_down_proj.weight is BF16 [64, 32], the config needs [32, 64]"},
      {"shared expert missing",
       [&](const std::string& s) {
         RemoveTensor(s, kPrefix + "model.layers.4.block_sparse_moe.shared_experts.up_proj.weight");
       },
       "the checkpoint has no tensor " + kPrefix +
           "model.layers.4.block_sparse_moe.shared_experts.up_proj.weight"},
  };
  for (const Case& c : cases) {
    const std::string case_dir = dir + "/" + std::to_string(&c - cases.data());
    const std::string src = CopyCheckpoint(case_dir);
    c.damage(src);
    for (const char* fmt : {"mxfp4", "vq3r"}) {
      const std::string e = ConvertError(Options(src, case_dir + "/out", fmt));
      EXPECT_NE(e.find(c.want), std::string::npos) << c.what << " (" << fmt << "): " << e;
      EXPECT_FALSE(fs::exists(case_dir + "/out")) << c.what;
    }
  }
}

// A NaN scale (E8M0 255) is refused when the expert is read, naming it.
TEST(K3BadInput, NanScaleIsNamed) {
  const std::string dir = waste::testing::ScratchDir();
  const std::string src = CopyCheckpoint(dir);
  const std::string w = ExpertName(1, 7, 2);  // w2: [32, 32]
  std::vector<uint8_t> sc = RawShards(src).Tensor(w + ".weight_scale");
  sc[5] = 255;
  ReplaceTensor(src, w + ".weight_scale", "U8", {32, 1}, sc);
  std::string e = ConvertError(Options(src, dir + "/out-mxfp4", "mxfp4"));
  EXPECT_NE(e.find(w + ".weight: row 5 has the E8M0 scale 255 (NaN)"), std::string::npos) << e;
  e = ConvertError(Options(src, dir + "/out-vq", "vq3r"));
  EXPECT_NE(e.find(w + ".weight: row 5 holds a value that is not finite"), std::string::npos) << e;
}

TEST(K3BadInput, TruncatedShardIsNamed) {
  const std::string dir = waste::testing::ScratchDir();
  const std::string src = CopyCheckpoint(dir);
  const std::string shard = src + "/model-00002-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 100);
  const std::string e = ConvertError(Options(src, dir + "/out", "mxfp4"));
  EXPECT_NE(e.find("model-00002-of-00002.safetensors"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir + "/out"));
  fs::resize_file(shard, 4);  // not even the header's size
  EXPECT_NE(ConvertError(Options(src, dir + "/out", "mxfp4")).find("model-00002-of-00002"),
            std::string::npos);
}

TEST(K3BadInput, ConfigDamageIsNamed) {
  const std::string dir = waste::testing::ScratchDir();
  const std::string src = CopyCheckpoint(dir);
  const json base = ReadJson(src + "/config.json");
  auto error = [&](const json& c) {
    std::ofstream(src + "/config.json") << c.dump();
    return ConvertError(Options(src, dir + "/out", "mxfp4"));
  };
  json c = base;
  c["architectures"] = {"LlavaForConditionalGeneration"};
  std::string e = error(c);
  EXPECT_NE(e.find("a nested text_config (a multimodal wrapper) is supported for Kimi K3"),
            std::string::npos)
      << e;
  c = base;
  c["text_config"] = "kimi";
  e = error(c);
  EXPECT_NE(e.find("text_config is not an object"), std::string::npos) << e;
  c = base;
  c["text_config"]["routed_expert_hidden_size"] = 48;  // the latent is 32 wide
  e = error(c);
  EXPECT_NE(e.find("routed_expert_down_proj.weight is BF16 [32, 64], the config needs [48, 64]"),
            std::string::npos)
      << e;
  c = base;
  c["text_config"]["hidden_act"] = "gelu";
  e = error(c);
  EXPECT_NE(e.find("hidden_act"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(dir + "/out"));
}

}  // namespace
}  // namespace waste::convert
