// engine/gguf/gguf_model (a GGUF mapped to waste's model) against the same
// tiny model as transformers wrote it: tests/fixtures/gguf/mapped/ holds a
// Qwen3-MoE and a DeepSeek-V3 checkpoint (transformers' classes) and the
// GGUFs llama.cpp's own converter made of them (tools/gguf/
// make_mapped_fixtures.py). The mapped config must be what waste reads from
// the config.json, and every mapped tensor and expert slice must hold the
// checkpoint's values (BF16 GGUFs of bf16 checkpoints: exact). Damaged
// metadata is refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/convert/checkpoint.h"
#include "engine/convert/source_model.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_model.h"
#include "engine/kernels/gguf_dequant.h"

namespace waste {
namespace {

using convert::Checkpoint;
using convert::SourceModel;
using gguf::Gguf;
using gguf::GgufModel;
using gguf::TrunkTensor;

const std::string kDir = std::string(WASTE_FIXTURES) + "/gguf/mapped/";

SourceModel ReadHf(const std::string& family) {
  std::ifstream f(kDir + family + "-hf/config.json");
  auto sm = convert::MapSource(nlohmann::json::parse(f));
  EXPECT_TRUE(sm.ok()) << sm.status().message();
  return *sm;
}

// Every field of ModelConfig; doubles as float32, which is what GGUF stores.
void ExpectSameConfig(const ModelConfig& g, const ModelConfig& h) {
#define SAME(f) EXPECT_EQ(g.f, h.f) << #f
#define SAME_F(f) EXPECT_EQ(static_cast<float>(g.f), static_cast<float>(h.f)) << #f
  SAME(arch);
  SAME(model_type);
  SAME(architecture);
  SAME(hidden);
  SAME(n_layers);
  SAME(vocab);
  SAME(rms_eps);
  SAME(zero_centered_norms);
  SAME(tie_embeddings);
  SAME(bos_token);
  SAME(eos_tokens);
  SAME(dense_inter);
  SAME(moe_inter);
  SAME(n_experts);
  SAME(top_k);
  SAME(n_shared);
  SAME(first_dense);
  SAME(sparse_step);
  SAME(mlp_only);
  SAME(sigmoid_router);
  SAME(renormalize);
  SAME(router_bias);
  SAME(routed_scale);
  SAME(shared_width);
  SAME(shared_expert_gate);
  SAME(n_group);
  SAME(topk_group);
  SAME(router_logit_bias);
  SAME(softmax_topk);
  SAME(expert_bias);
  SAME(swiglu_limit);
  SAME(swiglu_alpha);
  SAME(n_heads);
  SAME(q_lora);
  SAME(kv_lora);
  SAME(qk_nope);
  SAME(qk_rope);
  SAME(v_head);
  SAME(mla_nope);
  SAME_F(rope_theta);
  SAME_F(yarn.factor);
  SAME_F(yarn.original_max_position);
  SAME_F(yarn.beta_fast);
  SAME_F(yarn.beta_slow);
  SAME_F(yarn.mscale);
  SAME_F(yarn.mscale_all_dim);
  SAME(yarn.truncate);
  SAME(n_kv_heads);
  SAME(head_dim);
  SAME(rotary_dim);
  SAME(qk_norm);
  SAME(qk_norm_all_heads);
  SAME(attn_bias);
  SAME(o_bias);
  SAME(sinks);
  SAME(attn_window);
  SAME(attn_output_gate);
  SAME(kda_heads);
  SAME(kda_head_dim);
  SAME(conv_kernel);
  SAME(latent);
  SAME(gdn_k_heads);
  SAME(gdn_v_heads);
  SAME(gdn_k_dim);
  SAME(gdn_v_dim);
  SAME(layer_kind);
#undef SAME
#undef SAME_F
}

// `bytes` bytes at (file, offset) of the GGUF, dequantized.
std::vector<float> Dequant(const Gguf& g, int file, uint64_t offset, uint64_t bytes, uint32_t type,
                           int64_t n) {
  std::ifstream f(g.files[file].path, std::ios::binary);
  std::vector<uint8_t> raw(bytes);
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(bytes));
  std::vector<float> out(n);
  EXPECT_TRUE(kernels::GgufDequantize(type, raw, out).ok());
  return out;
}

std::vector<float> Dequant(const Gguf& g, const gguf::TensorRef& r) {
  int64_t n = 1;
  for (uint64_t d : r.dims) n *= static_cast<int64_t>(d);
  return Dequant(g, r.file, r.offset, r.bytes, r.type, n);
}

// The checkpoint's values of trunk tensor `name`, as float32.
std::vector<float> HfTrunk(const SourceModel& sm, const Checkpoint& ck, const TrunkTensor& t) {
  auto spans = sm.FindTrunk(ck, t.name, t.shape);
  EXPECT_TRUE(spans.ok()) << t.name << ": " << spans.status().message();
  int64_t rows = 0, cols = 0;
  for (const auto& s : *spans) rows += s.rows, cols = s.weight.cols;
  std::vector<float> v(rows * cols);
  EXPECT_TRUE(SourceModel::ReadSpans(ck, *spans, 0, rows, v.data()).ok());
  return v;
}

class Mapped : public ::testing::TestWithParam<std::string> {};

TEST_P(Mapped, TheConfigIsTheConfigJsonsAsWasteReadsIt) {
  auto g = Gguf::Open(kDir + GetParam() + ".gguf");
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto m = gguf::MapConfig(*g);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->architecture, GetParam());
  ExpectSameConfig(m->config, ReadHf(GetParam()).shape);
}

TEST_P(Mapped, EveryTrunkTensorHoldsTheCheckpointsValues) {
  auto g = Gguf::Open(kDir + GetParam() + ".gguf");
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto m = gguf::MapModel(*g);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const SourceModel sm = ReadHf(GetParam());
  auto ck = Checkpoint::Open(kDir + GetParam() + "-hf");
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  const auto spec = TrunkSpec(m->config);
  ASSERT_EQ(m->trunk.size(), spec.size());
  int split = 0;
  for (size_t i = 0; i < spec.size(); ++i) {
    const TrunkTensor& t = m->trunk[i];
    EXPECT_EQ(t.name, spec[i].name);
    const std::vector<float> want = HfTrunk(sm, **ck, t);
    std::vector<float> got;
    if (t.layout == gguf::Layout::kSame) {
      got = Dequant(*g, t.parts[0]);
    } else {
      // kv_b_proj per head: its qk_nope key rows (k_b's [kv_lora][qk_nope]
      // transposed), then its v_head value rows (v_b's as they are).
      ++split;
      const ModelConfig& c = m->config;
      const std::vector<float> kb = Dequant(*g, t.parts[0]), vb = Dequant(*g, t.parts[1]);
      const int64_t L = c.kv_lora, nope = c.qk_nope, vh = c.v_head;
      for (int64_t h = 0; h < c.n_heads; ++h) {
        for (int64_t r = 0; r < nope; ++r)
          for (int64_t l = 0; l < L; ++l) got.push_back(kb[(h * L + l) * nope + r]);
        got.insert(got.end(), vb.begin() + h * vh * L, vb.begin() + (h + 1) * vh * L);
      }
    }
    ASSERT_EQ(got.size(), want.size()) << t.name;
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << t.name;
  }
  // DeepSeek's kv_b_proj comes split, one per layer, as newer converters write it.
  EXPECT_EQ(split, GetParam() == "deepseek2" ? m->config.n_layers : 0);
}

TEST_P(Mapped, EveryExpertSliceHoldsTheCheckpointsExpert) {
  auto g = Gguf::Open(kDir + GetParam() + ".gguf");
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto m = gguf::MapModel(*g);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const SourceModel sm = ReadHf(GetParam());
  auto ck = Checkpoint::Open(kDir + GetParam() + "-hf");
  ASSERT_TRUE(ck.ok()) << ck.status().message();
  const ModelConfig& c = m->config;
  int checked = 0;
  for (int L = 0; L < c.n_layers; ++L) {
    if (!c.is_moe_layer(L)) continue;
    for (int e = 0; e < c.n_experts; ++e) {
      for (int k = 0; k < 3; ++k) {
        const gguf::ExpertSlice s = m->Slice(L, e, k);
        auto em = sm.FindExpert(**ck, L, e, k);
        ASSERT_TRUE(em.ok()) << em.status().message();
        ASSERT_EQ(s.rows, em->rows);
        ASSERT_EQ(s.cols, em->cols);
        std::vector<float> want(em->rows * em->cols);
        ASSERT_TRUE(SourceModel::ReadExpert(**ck, *em, want.data()).ok());
        const std::vector<float> got =
            Dequant(*g, s.file, s.offset, s.bytes, s.type, s.rows * s.cols);
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << "layer " << L << " expert " << e << " matrix " << k;
        ++checked;
      }
    }
    EXPECT_EQ(m->ExpertBytes(L), 3u * c.moe_inter * c.hidden * 2);  // BF16
  }
  EXPECT_EQ(checked, 3 * c.n_experts * c.n_moe_layers());
}

INSTANTIATE_TEST_SUITE_P(Families, Mapped, ::testing::Values("qwen3moe", "deepseek2"));

// The other architectures, from what llama.cpp's converter wrote for the
// checkpoints of tests/fixtures/convert/ (`<arch>.json`: every key/value but
// the tokenizer's, every tensor's name, dims and type; the GGUFs are not
// committed), made into a Gguf in memory: the mapping reads no tensor data.
Gguf FromJson(const std::string& arch) {
  std::ifstream f(kDir + arch + ".json");
  const nlohmann::json j = nlohmann::json::parse(f);
  Gguf g;
  g.files.emplace_back();
  auto put = [](std::vector<uint8_t>& raw, gguf::ValueType t, const nlohmann::json& v) {
    auto bytes = [&raw](const auto x) {
      const auto* p = reinterpret_cast<const uint8_t*>(&x);
      raw.insert(raw.end(), p, p + sizeof x);
    };
    switch (t) {
      case gguf::ValueType::kU8:
      case gguf::ValueType::kBool:
        bytes(v.get<uint8_t>());
        break;
      case gguf::ValueType::kI8:
        bytes(v.get<int8_t>());
        break;
      case gguf::ValueType::kU16:
        bytes(v.get<uint16_t>());
        break;
      case gguf::ValueType::kI16:
        bytes(v.get<int16_t>());
        break;
      case gguf::ValueType::kU32:
        bytes(v.get<uint32_t>());
        break;
      case gguf::ValueType::kI32:
        bytes(v.get<int32_t>());
        break;
      case gguf::ValueType::kU64:
        bytes(v.get<uint64_t>());
        break;
      case gguf::ValueType::kI64:
        bytes(v.get<int64_t>());
        break;
      case gguf::ValueType::kF32:
        bytes(v.get<float>());
        break;
      case gguf::ValueType::kF64:
        bytes(v.get<double>());
        break;
      default:
        ADD_FAILURE() << "value type " << int(t);
    }
  };
  for (const auto& e : j["metadata"]) {
    gguf::KeyValue kv{e["key"], {}};
    gguf::Value& v = kv.value;
    v.type = static_cast<gguf::ValueType>(e["type"].get<uint32_t>());
    if (v.type == gguf::ValueType::kString) {
      v.text = e["value"];
    } else if (v.is_array()) {
      v.elem = static_cast<gguf::ValueType>(e["elem"].get<uint32_t>());
      v.count = e["value"].size();
      for (const auto& x : e["value"]) {
        if (v.elem == gguf::ValueType::kString)
          v.strings.push_back(x);
        else
          put(v.raw, v.elem, x);
      }
    } else {
      put(v.raw, v.type, e["value"]);
    }
    g.files.front().metadata.push_back(std::move(kv));
  }
  for (const auto& e : j["tensors"]) {
    gguf::TensorInfo t;
    t.name = e["name"];
    t.dims = e["dims"].get<std::vector<uint64_t>>();
    t.type = e["type"];
    const gguf::TypeInfo* type = gguf::FindType(t.type);
    EXPECT_NE(type, nullptr) << t.name;
    t.bytes = t.elements() / type->block_size * type->type_size;
    g.tensors.push_back(std::move(t));
  }
  return g;
}

class Converted : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(Converted, TheConfigIsTheConfigJsonsAsWasteReadsIt) {
  const auto& [arch, checkpoint] = GetParam();
  const Gguf g = FromJson(arch);
  auto m = gguf::MapConfig(g);
  ASSERT_TRUE(m.ok()) << m.status().message();
  std::ifstream f(std::string(WASTE_FIXTURES) + "/convert/" + checkpoint + "/config.json");
  auto sm = convert::MapSource(nlohmann::json::parse(f));
  ASSERT_TRUE(sm.ok()) << sm.status().message();
  // The special tokens are the tokenizer's metadata, which these lack (the
  // converter's vocabulary step was skipped): not compared here.
  EXPECT_EQ(m->config.bos_token, -1);
  m->config.bos_token = sm->shape.bos_token;
  m->config.eos_tokens = sm->shape.eos_tokens;
  ExpectSameConfig(m->config, sm->shape);
  // The tensors: mapped, shapes checked, where waste's layers read llama.cpp's
  // values as they are; refused by name where the converter changed them.
  auto mm = gguf::MapModel(g);
  if (arch == "qwen3next" || arch == "kimi-linear") {
    ASSERT_FALSE(mm.ok());
    EXPECT_NE(mm.status().message().find("-exp(A_log)"), std::string::npos)
        << mm.status().message();
    return;
  }
  ASSERT_TRUE(mm.ok()) << mm.status().message();
  EXPECT_EQ(mm->trunk.size(), TrunkSpec(mm->config).size());
  // GLM's multi-token-prediction layer is the one left out.
  for (const std::string& n : mm->skipped) EXPECT_TRUE(n.starts_with("blk.4.")) << n;
  EXPECT_EQ(mm->skipped.empty(), arch != "glm4moe");
  for (int L = 0; L < mm->config.n_layers; ++L) {
    if (!mm->config.is_moe_layer(L)) continue;
    EXPECT_EQ(mm->experts[L].has_bias, arch == "gpt-oss");
    const gguf::ExpertSlice down = mm->Slice(L, 1, 2);
    EXPECT_EQ(down.rows, mm->config.hidden);
    EXPECT_EQ(down.cols, mm->config.moe_inter);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Converted,
                         ::testing::Values(std::pair{"glm4moe", "glm4-moe"},
                                           std::pair{"gpt-oss", "gpt-oss"},
                                           std::pair{"qwen3next", "qwen3-next"},
                                           std::pair{"kimi-linear", "kimi-linear"}),
                         [](const auto& param_info) {
                           std::string n = param_info.param.first;
                           std::erase(n, '-');
                           return n;
                         });

// The fixture's metadata with `key` set to a u32 `v`, or removed (v < 0).
Gguf WithKey(const std::string& family, const std::string& key, int64_t v) {
  auto g = Gguf::Open(kDir + family + ".gguf");
  EXPECT_TRUE(g.ok());
  auto& md = g->files.front().metadata;
  std::erase_if(md, [&](const gguf::KeyValue& kv) { return kv.key == key; });
  if (v >= 0) {
    gguf::KeyValue kv{key, {}};
    kv.value.type = gguf::ValueType::kU32;
    const auto u = static_cast<uint32_t>(v);
    kv.value.raw.resize(4);
    std::memcpy(kv.value.raw.data(), &u, 4);
    md.push_back(std::move(kv));
  }
  return std::move(*g);
}

void ExpectRefused(const Gguf& g, const std::string& words) {
  auto m = gguf::MapModel(g);
  ASSERT_FALSE(m.ok()) << "accepted, wanted: " << words;
  EXPECT_NE(m.status().message().find(words), std::string::npos) << m.status().message();
}

TEST(GgufModelRefuses, MissingOrOutOfRangeKeysByName) {
  ExpectRefused(WithKey("qwen3moe", "qwen3moe.expert_count", -1),
                "qwen3moe.expert_count is missing");
  ExpectRefused(WithKey("qwen3moe", "qwen3moe.expert_used_count", 9), "top-k 9 of 8 experts");
  ExpectRefused(WithKey("qwen3moe", "qwen3moe.block_count", 0),
                "qwen3moe.block_count = 0 is outside [1, 512]");
  ExpectRefused(WithKey("qwen3moe", "qwen3moe.rope.dimension_count", 8),
                "qwen3moe.rope.dimension_count is not head_dim");
  ExpectRefused(WithKey("qwen3moe", "qwen3moe.attention.layer_norm_rms_epsilon", -1),
                "qwen3moe.attention.layer_norm_rms_epsilon is missing");
  ExpectRefused(WithKey("deepseek2", "deepseek2.attention.kv_lora_rank", -1),
                "deepseek2.attention.kv_lora_rank is missing");
  ExpectRefused(WithKey("deepseek2", "deepseek2.expert_gating_func", -1), "DeepSeek-V2's router");
  ExpectRefused(WithKey("deepseek2", "deepseek2.expert_gating_func", 3), "sqrtsoftplus");
  // Shapes the tensors do not have: the expert width (the shared expert's
  // too, met first), the number of experts (the router's rows, met first).
  ExpectRefused(WithKey("deepseek2", "deepseek2.expert_feed_forward_length", 24),
                "blk.1.ffn_gate_shexp.weight is {64, 16}, not {64, 24}");
  ExpectRefused(WithKey("qwen3moe", "qwen3moe.expert_count", 4),
                "blk.0.ffn_gate_inp.weight is {64, 8}, not {64, 4}");
  ExpectRefused(WithKey("deepseek2", "deepseek2.expert_shared_count", 0),
                "blk.1.ffn_down_shexp.weight");
}

TEST(GgufModelRefuses, OtherArchitecturesAndTensorsByName) {
  auto g = Gguf::Open(kDir + "qwen3moe.gguf");
  ASSERT_TRUE(g.ok());
  for (auto& kv : g->files.front().metadata)
    if (kv.key == "general.architecture") kv.value.text = "llama";
  ExpectRefused(*g, "general.architecture \"llama\" is not one waste maps");

  auto h = Gguf::Open(kDir + "deepseek2.gguf");
  ASSERT_TRUE(h.ok());
  // A tensor waste would ignore, and one it needs, each named.
  for (auto& t : h->tensors)
    if (t.name == "blk.1.exp_probs_b.bias") t.name = "blk.1.exp_probs_c.bias";
  ExpectRefused(*h, "blk.1.exp_probs_b.bias is missing");
  auto k = Gguf::Open(kDir + "deepseek2.gguf");
  ASSERT_TRUE(k.ok());
  for (auto& t : k->tensors)
    if (t.name == "blk.0.attn_norm.weight") t.type = gguf::kF16;
  ExpectRefused(*k, "blk.0.attn_norm.weight is F16 {64}, not 64 F32 values");
  auto o = Gguf::Open(kDir + "deepseek2.gguf");
  ASSERT_TRUE(o.ok());
  std::erase_if(o->tensors, [](const gguf::TensorInfo& t) { return t.name == "output.weight"; });
  ExpectRefused(*o, "tied embeddings are not implemented");
}

// The merged layout (ffn_gate_up_exps, as llama.cpp's --fuse-gate-up-exps
// writes it): each expert's gate rows, then its up rows.
TEST(GgufModelSlices, AMergedGateUpIsCutIntoGateThenUp) {
  GgufModel m;
  m.experts.resize(1);
  gguf::ExpertTensors& x = m.experts[0];
  const uint64_t hidden = 64, inter = 16, E = 8, row = hidden * 2;  // BF16 rows
  x.matrix[0] = x.matrix[1] = {"blk.0.ffn_gate_up_exps.weight",
                               gguf::kBF16,
                               {hidden, 2 * inter, E},
                               1,
                               4096,
                               row * 2 * inter * E};
  x.matrix[2] = {"blk.0.ffn_down_exps.weight", gguf::kBF16, {inter, hidden, E}, 0, 0,
                 inter * 2 * hidden * E};
  x.merged_gate_up = true;
  const gguf::ExpertSlice gate = m.Slice(0, 3, 0), up = m.Slice(0, 3, 1);
  EXPECT_EQ(gate.file, 1);
  EXPECT_EQ(gate.offset, 4096 + 3 * row * 2 * inter);
  EXPECT_EQ(up.offset, gate.offset + row * inter);
  EXPECT_EQ(gate.bytes, row * inter);
  EXPECT_EQ(up.bytes, row * inter);
  EXPECT_EQ(gate.rows, 16);
  EXPECT_EQ(gate.cols, 64);
  EXPECT_EQ(m.Slice(0, 3, 2).rows, 64);
  EXPECT_EQ(m.ExpertBytes(0), 3 * row * inter);
}

}  // namespace
}  // namespace waste
