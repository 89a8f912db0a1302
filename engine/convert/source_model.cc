#include "engine/convert/source_model.h"

#include <algorithm>
#include <vector>

#include "engine/format/container.h"

namespace waste::convert {

using nlohmann::json;

namespace {

// The multimodal wrappers whose text model waste runs: Kimi K3's (a
// kimi_linear text model) and Kimi K2.5's / K2.6's (a DeepSeek-V3 one; its
// remote code's name and transformers' own), by config.json's architecture.
constexpr const char* kK3Wrapper = "KimiK3ForConditionalGeneration";
constexpr const char* kK25Wrappers[] = {"KimiK25ForConditionalGeneration",
                                        "Kimi_K25ForConditionalGeneration"};
// Their vision towers' tensors.
constexpr const char* kVision[] = {"vision_tower.", "mm_projector."};
// Qwen3.5 MoE's wrapper, where its text model's tensors lie and its vision tower's.
constexpr const char* kQwen35Wrapper = "Qwen3_5MoeForConditionalGeneration";
constexpr const char* kQwen35Text = "model.language_model.";
constexpr const char* kQwen35Vision = "model.visual.";

}  // namespace

std::string SourceModel::TrunkName(const std::string& name) const {
  if (family == Family::kKimiLinear) return prefix + name;
  if (family == Family::kMinimaxM2) {  // the correction bias sits beside the gate
    const std::string bias = ".block_sparse_moe.gate.e_score_correction_bias";
    const size_t at = name.find(bias);
    if (at == std::string::npos) return name;
    return name.substr(0, at) + ".block_sparse_moe.e_score_correction_bias";
  }
  if (family == Family::kGptOss) {
    const std::string gate = ".block_sparse_moe.gate.";
    const size_t at = name.find(gate);
    if (at == std::string::npos) return name;
    return name.substr(0, at) + ".mlp.router." + name.substr(at + gate.size());
  }
  const std::string moe = ".block_sparse_moe.";
  const size_t at = name.find(moe);
  const std::string n =
      at == std::string::npos ? name : name.substr(0, at) + ".mlp." + name.substr(at + moe.size());
  const std::string model = "model.";
  if (family == Family::kQwen35Moe && n.rfind(model, 0) == 0)
    return kQwen35Text + n.substr(model.size());
  return prefix + n;
}

bool SourceModel::IsVisionTensor(const std::string& name) const {
  if (family == Family::kQwen35Moe) return name.rfind(kQwen35Vision, 0) == 0;
  if (prefix.empty()) return false;  // only a wrapper has a vision tower
  for (const char* v : kVision)
    if (name.rfind(v, 0) == 0) return true;
  return false;
}

namespace {

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

bool SourceModel::IsMtpTensor(const std::string& name) const {
  return (family == Family::kQwen3Next || family == Family::kQwen35Moe) &&
         name.rfind("mtp.", 0) == 0;
}

Result<std::vector<RowSpan>> SourceModel::FindTrunk(const Checkpoint& ck, const std::string& name,
                                                    const std::vector<int64_t>& want) const {
  const std::string qkvz = "linear_attn.in_proj_qkvz.weight", ba = "linear_attn.in_proj_ba.weight";
  const auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  if (family != Family::kQwen35Moe || !(ends(qkvz) || ends(ba))) {
    auto w = ck.Find(TrunkName(name));
    if (!w.ok()) return w.status();
    const int64_t rows = w->rows;
    return std::vector<RowSpan>{{std::move(*w), 0, rows}};
  }
  // in_proj_qkvz from in_proj_qkv and in_proj_z, in_proj_ba from in_proj_b
  // and in_proj_a: per key head g its q, k, v (r value heads) and z rows, or
  // its value heads' b then a rows.
  const ModelConfig& c = shape;
  const int64_t Dk = c.gdn_k_dim, Dv = c.gdn_v_dim, K = c.gdn_key_width(), V = c.gdn_value_width();
  const int64_t Hv = c.gdn_v_heads, r = c.gdn_v_heads / c.gdn_k_heads, h = want.back();
  const bool is_qkvz = ends(qkvz);
  const std::string base = TrunkName(name.substr(0, name.size() - (is_qkvz ? qkvz : ba).size())) +
                           "linear_attn.in_proj_";
  std::vector<Weight> src;
  const std::vector<std::pair<const char*, int64_t>> parts =
      is_qkvz ? std::vector<std::pair<const char*, int64_t>>{{"qkv", 2 * K + V}, {"z", V}}
              : std::vector<std::pair<const char*, int64_t>>{{"b", Hv}, {"a", Hv}};
  for (const auto& [part, rows] : parts) {
    auto w = ck.Find(base + part + ".weight");
    if (!w.ok()) return w.status();
    if (w->shape != std::vector<int64_t>{rows, h})
      return Status::Error(w->where() + " is " + w->describe() + ", the config needs " +
                           ShapeText({rows, h}));
    src.push_back(std::move(*w));
  }
  std::vector<RowSpan> spans;
  for (int64_t g = 0; g < c.gdn_k_heads; ++g) {
    if (is_qkvz) {
      spans.push_back({src[0], g * Dk, Dk});
      spans.push_back({src[0], K + g * Dk, Dk});
      spans.push_back({src[0], 2 * K + g * r * Dv, r * Dv});
      spans.push_back({src[1], g * r * Dv, r * Dv});
    } else {
      spans.push_back({src[0], g * r, r});
      spans.push_back({src[1], g * r, r});
    }
  }
  return spans;
}

Status SourceModel::ReadSpans(const Checkpoint& ck, const std::vector<RowSpan>& spans,
                              int64_t first, int64_t n, float* out) {
  int64_t at = 0;  // the first row of the current span in the whole
  for (const RowSpan& s : spans) {
    const int64_t lo = std::max(first, at), hi = std::min(first + n, at + s.rows);
    if (lo < hi) {
      WASTE_RETURN_IF_ERROR(ck.ReadRows(s.weight, s.first + (lo - at), hi - lo, out));
      out += (hi - lo) * s.weight.cols;
    }
    at += s.rows;
  }
  return Status::Ok();
}

Result<ExpertMatrix> SourceModel::FindExpert(const Checkpoint& ck, int layer, int expert,
                                             int matrix) const {
  const ModelConfig& c = shape;
  const int64_t rows = expert_rows[matrix], cols = expert_cols[matrix];
  const std::string p = (family == Family::kQwen35Moe ? std::string(kQwen35Text) + "layers."
                                                      : prefix + "model.layers.") +
                        std::to_string(layer);
  ExpertMatrix m;
  m.rows = rows;
  m.cols = cols;
  std::vector<int64_t> want = {rows, cols};
  std::string name;
  if (family == Family::kGptOss) {
    name = p + ".mlp.experts." + (matrix == 2 ? "down_proj" : "gate_up_proj");
  } else if (family == Family::kKimiLinear || family == Family::kMinimaxM2) {
    static const char* kimi[3] = {"w1", "w3", "w2"};
    name = p + ".block_sparse_moe.experts." + std::to_string(expert) + "." + kimi[matrix] +
           ".weight";
  } else {
    static const char* ds[3] = {"gate_proj", "up_proj", "down_proj"};
    name = p + ".mlp.experts." + std::to_string(expert) + "." + ds[matrix] + ".weight";
  }
  auto w = ck.Find(name);
  if (!w.ok()) return w.status();
  if (family == Family::kGptOss) {
    const int64_t per = matrix == 2 ? rows : 2 * rows;  // rows of one expert in the fused tensor
    m.step = matrix == 2 ? 1 : 2;
    if (w->storage == Storage::kMxfp4) {
      want = {c.n_experts, per, cols};
      m.first = expert * per + (matrix == 1 ? 1 : 0);
    } else {  // a fine-tune's BF16 as transformers saves it: [E][in][out]
      want = {c.n_experts, cols, per};
      m.transposed = true;
      m.first = expert * cols;
      m.column = matrix == 1 ? 1 : 0;
    }
  }
  if (w->shape != want)
    return Status::Error(w->where() + " is " + w->describe() + ", the config needs " +
                         ShapeText(want));
  m.weight = std::move(*w);
  return m;
}

Status SourceModel::ReadExpert(const Checkpoint& ck, const ExpertMatrix& m, float* out) {
  if (m.transposed) {
    const int64_t per = m.weight.cols;
    std::vector<float> in(static_cast<size_t>(m.cols * per));
    WASTE_RETURN_IF_ERROR(ck.ReadRows(m.weight, m.first, m.cols, in.data()));
    for (int64_t i = 0; i < m.rows; ++i)
      for (int64_t k = 0; k < m.cols; ++k)
        out[i * m.cols + k] = in[static_cast<size_t>(k * per + m.column + i * m.step)];
    return Status::Ok();
  }
  if (m.step == 1) return ck.ReadRows(m.weight, m.first, m.rows, out);
  for (int64_t i = 0; i < m.rows; ++i)
    WASTE_RETURN_IF_ERROR(ck.ReadRows(m.weight, m.first + i * m.step, 1, out + i * m.weight.cols));
  return Status::Ok();
}

Status SourceModel::ReadExpertBias(const Checkpoint& ck, int layer, int expert, int matrix,
                                   float* out) const {
  const ModelConfig& c = shape;
  if (family != Family::kGptOss)
    return Status::Error("only GPT-OSS checkpoints have expert biases");
  const std::string name = "model.layers." + std::to_string(layer) + ".mlp.experts." +
                           (matrix == 2 ? "down_proj_bias" : "gate_up_proj_bias");
  auto w = ck.Find(name);
  if (!w.ok()) return w.status();
  const int64_t per = matrix == 2 ? c.hidden : 2 * c.moe_inter;
  if (w->shape != std::vector<int64_t>{c.n_experts, per})
    return Status::Error(w->where() + " is " + w->describe() + ", the config needs " +
                         ShapeText({c.n_experts, per}));
  std::vector<float> row(static_cast<size_t>(per));
  WASTE_RETURN_IF_ERROR(ck.ReadRows(*w, expert, 1, row.data()));
  if (matrix == 2) {
    std::copy(row.begin(), row.end(), out);
  } else {
    for (int64_t i = 0; i < c.moe_inter; ++i) out[i] = row[static_cast<size_t>(2 * i + matrix)];
  }
  return Status::Ok();
}

Result<SourceModel> MapSource(const json& top) {
  if (!top.is_object()) return Status::Error("config.json: not a JSON object");
  SourceModel s;
  json in = top;
  if (top.contains("text_config")) {
    const auto a = top.find("architectures");
    const std::string arch =
        a != top.end() && a->is_array() && !a->empty() && (*a)[0].is_string() ? (*a)[0] : "";
    const auto outer_type = top.find("model_type");
    const bool k25 = std::find(std::begin(kK25Wrappers), std::end(kK25Wrappers), arch) !=
                         std::end(kK25Wrappers) ||
                     (outer_type != top.end() && *outer_type == "kimi_k25");
    const bool qwen35 = arch == kQwen35Wrapper;
    if (arch != kK3Wrapper && !k25 && !qwen35)
      return Status::Error(std::string("config.json: a nested text_config (a multimodal "
                                       "wrapper) is supported for Kimi K3 (") +
                           kK3Wrapper + "), Kimi K2.5 (" + kK25Wrappers[0] +
                           ") and Qwen3.5 MoE (" + kQwen35Wrapper +
                           ") only, not for architectures " +
                           (a != top.end() ? a->dump() : std::string("(none)")));
    if (k25 && top["text_config"].is_object()) {
      const json& t = top["text_config"];
      const auto tt = t.find("model_type");
      if (tt == t.end() || (*tt != "deepseek_v3" && *tt != "kimi_k2"))
        return Status::Error("config.json: Kimi K2.5's text_config.model_type is " +
                             (tt == t.end() ? std::string("missing") : tt->dump()) +
                             ", not deepseek_v3 or kimi_k2");
      // The release's lm_head is its own tensor; a wrapper that ties it is not.
      if (auto tie = top.find("tie_word_embeddings"); tie != top.end() && *tie == true)
        return Status::Error("config.json: tie_word_embeddings is not implemented");
    }
    if (!top["text_config"].is_object())
      return Status::Error("config.json: text_config is not an object");
    if (qwen35) {
      in = top["text_config"];
      if (in.value("model_type", "") != "qwen3_5_moe_text")
        return Status::Error("config.json: " + std::string(kQwen35Wrapper) +
                             "'s text_config.model_type is not qwen3_5_moe_text");
      in["architectures"] = *a;
      if (top.contains("tie_word_embeddings") && !in.contains("tie_word_embeddings"))
        in["tie_word_embeddings"] = top["tie_word_embeddings"];
    } else {
      // WARP's container layout: the text model's config, with the wrapper's
      // keys (its architectures name K3) under _outer.
      json outer = top;
      outer.erase("text_config");
      outer.erase("quantization_config");
      outer.erase("compression_config");
      in = top["text_config"];
      in["_outer"] = std::move(outer);
    }
  }
  const auto mt = in.find("model_type");
  const std::string type = mt != in.end() && mt->is_string() ? mt->get<std::string>() : "";
  // GLM-4.7-Flash's and DeepSeek-V3.2's tensors are named as DeepSeek-V3's
  // (V3.2's indexer under self_attn.indexer.), dots.llm1's as GLM-4.5's.
  if (type == "deepseek_v3" || type == "kimi_k2" || type == "glm4_moe_lite" ||
      type == "deepseek_v32" || type == "glm_moe_dsa") {
    s.family = Family::kDeepseekV3;
  } else if (type == "kimi_linear") {
    s.family = Family::kKimiLinear;
  } else if (type == "qwen3_moe") {
    s.family = Family::kQwen3Moe;
  } else if (type == "glm4_moe" || type == "dots1") {
    s.family = Family::kGlm4Moe;
  } else if (type == "gpt_oss") {
    s.family = Family::kGptOss;
  } else if (type == "qwen3_next") {
    s.family = Family::kQwen3Next;
  } else if (type == "minimax_m2") {
    s.family = Family::kMinimaxM2;
  } else if (type == "qwen3_5_moe_text" && in.contains("architectures") &&
             in["architectures"].is_array() && !in["architectures"].empty() &&
             in["architectures"][0] == kQwen35Wrapper) {
    s.family = Family::kQwen35Moe;
  } else {
    return Status::Error("config.json: model_type \"" + type +
                         "\" is not one waste convert understands (deepseek_v3, kimi_k2, "
                         "kimi_linear, qwen3_moe, glm4_moe, gpt_oss, qwen3_next, minimax_m2, "
                         "glm4_moe_lite, dots1, deepseek_v32, glm_moe_dsa, and qwen3_5_moe_text inside " +
                         kQwen35Wrapper + ")");
  }
  if (in.contains("text_config"))
    return Status::Error("config.json: text_config holds another text_config");
  json c = in;
  c.erase("quantization_config");
  c.erase("compression_config");
  // MLA rotates interleaved pairs; GQA's families rotate half the dims
  // against the other half, whatever the key says.
  const bool gqa = s.family == Family::kQwen3Moe || s.family == Family::kGlm4Moe ||
                   s.family == Family::kGptOss || s.family == Family::kMinimaxM2;
  if (auto ri = c.find("rope_interleave");
      !gqa && ri != c.end() && ri->is_boolean() && !ri->get<bool>())
    return Status::Error(
        "config.json: rope_interleave false (rotate-half RoPE) is not implemented for MLA");
  // transformers 5 writes the rotary settings as rope_parameters.
  if (auto rp = c.find("rope_parameters"); rp != c.end() && rp->is_object()) {
    const json p = *rp;
    if (!c.contains("rope_theta") && p.contains("rope_theta")) c["rope_theta"] = p["rope_theta"];
    if (!c.contains("partial_rotary_factor") && p.contains("partial_rotary_factor"))
      c["partial_rotary_factor"] = p["partial_rotary_factor"];
    // Qwen3.5's multimodal rotary (mrope_section, mrope_interleaved) takes each
    // frequency from the temporal, height or width position; transformers gives
    // a text token the same three, so for text it is plain RoPE whatever the
    // sections (the fixture's json records it).
    std::string rt = "default";
    for (const char* k : {"type", "rope_type"})
      if (p.contains(k) && p[k].is_string()) rt = p[k].get<std::string>();
    if (!c.contains("rope_scaling") || c["rope_scaling"].is_null()) {
      if (rt != "default") {
        json scaling = p;
        scaling.erase("rope_theta");
        scaling.erase("partial_rotary_factor");
        scaling.erase("mrope_section");
        scaling.erase("mrope_interleaved");
        scaling["type"] = rt;
        c["rope_scaling"] = scaling;
      }
    }
    c.erase("rope_parameters");
  }
  auto shape = ModelConfig::FromJson(c);
  if (!shape.ok()) return shape.status().Prefixed("config.json");
  // K3's config reads its activation (silu or situ); the others' is SiLU.
  if (auto act = c.find("hidden_act"); shape->arch != Arch::kKimiK3 && act != c.end() &&
                                       !act->is_null() && *act != "silu")
    return Status::Error("config.json: hidden_act " + act->dump() + " is not implemented (silu)");
  if (shape->tie_embeddings)
    return Status::Error("config.json: tie_word_embeddings is not implemented");
  s.shape = *shape;
  s.prefix = DefaultTensorPrefix(c);
  s.config = std::move(c);
  if (s.shape.n_experts > 0) {
    auto lay = RecordLayout::For(s.shape, ExpertQuant::For(format::Fmt::kBF16R));
    if (!lay.ok()) return lay.status().Prefixed("config.json");
    for (int m = 0; m < 3; ++m) s.expert_rows[m] = lay->rows[m], s.expert_cols[m] = lay->cols[m];
  }
  return s;
}

}  // namespace waste::convert
