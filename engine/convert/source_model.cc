#include "engine/convert/source_model.h"

namespace waste::convert {

using nlohmann::json;

std::string SourceModel::TrunkName(const std::string& name) const {
  if (family == Family::kKimiLinear) return name;
  const std::string moe = ".block_sparse_moe.";
  const size_t at = name.find(moe);
  if (at == std::string::npos) return name;
  return name.substr(0, at) + ".mlp." + name.substr(at + moe.size());
}

std::string SourceModel::ExpertName(int layer, int expert, int matrix) const {
  const std::string p = "model.layers." + std::to_string(layer);
  if (family == Family::kKimiLinear) {
    static const char* kimi[3] = {"w1", "w3", "w2"};
    return p + ".block_sparse_moe.experts." + std::to_string(expert) + "." + kimi[matrix] +
           ".weight";
  }
  static const char* ds[3] = {"gate_proj", "up_proj", "down_proj"};
  return p + ".mlp.experts." + std::to_string(expert) + "." + ds[matrix] + ".weight";
}

Result<SourceModel> MapSource(const json& in) {
  if (!in.is_object()) return Status::Error("config.json: not a JSON object");
  SourceModel s;
  const auto mt = in.find("model_type");
  const std::string type = mt != in.end() && mt->is_string() ? mt->get<std::string>() : "";
  if (type == "deepseek_v3" || type == "kimi_k2") {
    s.family = Family::kDeepseekV3;
  } else if (type == "kimi_linear") {
    s.family = Family::kKimiLinear;
  } else if (type == "qwen3_moe") {
    s.family = Family::kQwen3Moe;
  } else if (type == "glm4_moe") {
    s.family = Family::kGlm4Moe;
  } else if (type == "qwen3_next") {
    s.family = Family::kQwen3Next;
  } else {
    return Status::Error("config.json: model_type \"" + type +
                         "\" is not one waste convert understands (deepseek_v3, kimi_k2, "
                         "kimi_linear, qwen3_moe, glm4_moe, qwen3_next)");
  }
  if (in.contains("text_config"))
    return Status::Error("config.json: a nested text_config (a multimodal wrapper) is not supported");
  json c = in;
  c.erase("quantization_config");
  c.erase("compression_config");
  if (auto act = c.find("hidden_act"); act != c.end() && !act->is_null() &&
                                       (!act->is_string() || act->get<std::string>() != "silu"))
    return Status::Error("config.json: hidden_act " + act->dump() + " is not implemented (silu)");
  // MLA rotates interleaved pairs; GQA's families rotate half the dims
  // against the other half, whatever the key says.
  const bool gqa = s.family == Family::kQwen3Moe || s.family == Family::kGlm4Moe;
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
    std::string rt = "default";
    for (const char* k : {"type", "rope_type"})
      if (p.contains(k) && p[k].is_string()) rt = p[k].get<std::string>();
    if (!c.contains("rope_scaling") || c["rope_scaling"].is_null()) {
      if (rt != "default") {
        json scaling = p;
        scaling.erase("rope_theta");
        scaling.erase("partial_rotary_factor");
        scaling["type"] = rt;
        c["rope_scaling"] = scaling;
      }
    }
    c.erase("rope_parameters");
  }
  auto shape = ModelConfig::FromJson(c);
  if (!shape.ok()) return shape.status().Prefixed("config.json");
  if (shape->tie_embeddings)
    return Status::Error("config.json: tie_word_embeddings is not implemented");
  s.shape = *shape;
  s.config = std::move(c);
  return s;
}

}  // namespace waste::convert
