#include "engine/format/model_config.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <nlohmann/json.hpp>

namespace waste {
namespace {

using nlohmann::json;

// Reads config[key] as an integer in [lo, hi]. Absent keys take `fallback`
// when one is given (>= lo), and are an error otherwise.
Status GetInt(const json& c, const char* key, int64_t lo, int64_t hi, int* out,
              std::optional<int64_t> fallback = std::nullopt) {
  const auto it = c.find(key);
  if (it == c.end() || it->is_null()) {
    if (!fallback) return Status::Error(std::string("config.") + key + " is missing");
    *out = static_cast<int>(*fallback);
    return Status::Ok();
  }
  if (!it->is_number_integer() && !it->is_number_unsigned())
    return Status::Error(std::string("config.") + key + " is not an integer");
  const int64_t v =
      it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX ? INT64_MAX : it->get<int64_t>();
  if (v < lo || v > hi)
    return Status::Error(std::string("config.") + key + " = " + it->dump() + " is outside [" +
                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
  *out = static_cast<int>(v);
  return Status::Ok();
}

// eos_token_id: absent, null, -1, an id, or a list of at most 16 ids.
Status GetEosTokens(const json& c, int vocab, std::vector<int>* out) {
  const auto it = c.find("eos_token_id");
  if (it == c.end() || it->is_null()) return Status::Ok();
  if (!it->is_array()) {
    int id = -1;
    WASTE_RETURN_IF_ERROR(GetInt(c, "eos_token_id", -1, vocab - 1, &id, -1));
    if (id >= 0) out->push_back(id);
    return Status::Ok();
  }
  if (it->empty() || it->size() > 16)
    return Status::Error("config.eos_token_id: a list must hold 1 to 16 ids");
  for (const json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
      return Status::Error("config.eos_token_id holds " + v.dump().substr(0, 40) +
                           ", not a token id in [0, " + std::to_string(vocab) + ")");
    out->push_back(v.get<int>());
  }
  return Status::Ok();
}

Status GetNum(const json& c, const char* key, double lo, double hi, double* out, double fallback,
              const char* where = "config.") {
  const auto it = c.find(key);
  if (it == c.end() || it->is_null()) {
    *out = fallback;
    return Status::Ok();
  }
  if (!it->is_number()) return Status::Error(std::string(where) + key + " is not a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return Status::Error(std::string(where) + key + " = " + std::to_string(v) + " is out of range");
  *out = v;
  return Status::Ok();
}

Status GetBool(const json& c, const char* key, bool* out, bool fallback) {
  const auto it = c.find(key);
  if (it == c.end() || it->is_null()) {
    *out = fallback;
    return Status::Ok();
  }
  if (!it->is_boolean())
    return Status::Error(std::string("config.") + key + " is not true or false");
  *out = it->get<bool>();
  return Status::Ok();
}

// First key present of several spellings (Kimi, DeepSeek, Qwen and
// transformers 5 name the MoE settings differently); the last when none is.
const char* Either(const json& c, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (c.contains(k)) return k;
  return *(keys.end() - 1);
}

constexpr int64_t kMaxDim = 1 << 20;

// Qwen3-Next: layer_types ("linear_attention" or "full_attention" per layer),
// or, when absent, full attention every full_attention_interval-th layer (as
// transformers' Qwen3NextConfig derives it); the Gated DeltaNet shapes.
Status ReadQwen3NextLayers(const json& c, ModelConfig* m) {
  m->layer_kind.assign(m->n_layers, LayerKind::kGatedDeltaNet);
  std::vector<bool> full(m->n_layers, false);
  if (const auto lt = c.find("layer_types"); lt != c.end() && !lt->is_null()) {
    if (!lt->is_array() || lt->size() != static_cast<size_t>(m->n_layers))
      return Status::Error("config.layer_types is not a list of num_hidden_layers entries");
    for (int L = 0; L < m->n_layers; ++L) {
      const json& t = (*lt)[L];
      const std::string type = t.is_string() ? t.get<std::string>() : t.dump();
      if (type != "linear_attention" && type != "full_attention")
        return Status::Error("config.layer_types[" + std::to_string(L) + "] \"" + type +
                             "\" is not linear_attention or full_attention");
      full[L] = type == "full_attention";
    }
  } else {
    int interval = 4;
    WASTE_RETURN_IF_ERROR(GetInt(c, "full_attention_interval", 1, 512, &interval, 4));
    for (int L = 0; L < m->n_layers; ++L) full[L] = (L + 1) % interval == 0;
  }
  for (int L = 0; L < m->n_layers; ++L)
    if (full[L]) m->layer_kind[L] = LayerKind::kGqa;
  WASTE_RETURN_IF_ERROR(GetInt(c, "linear_num_key_heads", 1, 1 << 12, &m->gdn_k_heads));
  WASTE_RETURN_IF_ERROR(GetInt(c, "linear_num_value_heads", 1, 1 << 12, &m->gdn_v_heads));
  WASTE_RETURN_IF_ERROR(GetInt(c, "linear_key_head_dim", 1, 1 << 12, &m->gdn_k_dim));
  WASTE_RETURN_IF_ERROR(GetInt(c, "linear_value_head_dim", 1, 1 << 12, &m->gdn_v_dim));
  WASTE_RETURN_IF_ERROR(GetInt(c, "linear_conv_kernel_dim", 1, 64, &m->conv_kernel, 4));
  if (m->gdn_v_heads % m->gdn_k_heads != 0)
    return Status::Error("config: linear_num_key_heads does not divide linear_num_value_heads");
  return Status::Ok();
}

Status ReadLayerKinds(const json& c, ModelConfig* m) {
  if (m->arch == Arch::kQwen3Next) return ReadQwen3NextLayers(c, m);
  const bool gqa = m->arch == Arch::kQwen3Moe || m->arch == Arch::kGlm4Moe ||
                   m->arch == Arch::kGptOss || m->arch == Arch::kMinimaxM2 || m->arch == Arch::kDots1;
  m->layer_kind.assign(m->n_layers, gqa ? LayerKind::kGqa : LayerKind::kMla);
  // MiniMax's released config lists each layer's attention: 1 full softmax
  // attention; 0 would be MiniMax-01's lightning attention, not built.
  if (const auto at = c.find("attn_type_list"); m->arch == Arch::kMinimaxM2 && at != c.end() &&
                                                 !at->is_null()) {
    if (!at->is_array() || at->size() != static_cast<size_t>(m->n_layers))
      return Status::Error("config.attn_type_list is not a list of num_hidden_layers entries");
    for (const auto& v : *at)
      if (v != 1)
        return Status::Error("config.attn_type_list holds " + v.dump() +
                             ": only 1 (full attention) is implemented");
  }
  const auto lac = c.find("linear_attn_config");
  if (lac == c.end() || lac->is_null()) {
    if (m->arch == Arch::kKimiLinear || m->arch == Arch::kKimiK3)
      return Status::Error("config.linear_attn_config is missing (kimi_linear needs it)");
    return Status::Ok();
  }
  if (!lac->is_object()) return Status::Error("config.linear_attn_config is not an object");
  const bool kimi = m->arch == Arch::kKimiLinear || m->arch == Arch::kKimiK3;
  if (!kimi) return Status::Error("config.linear_attn_config is only implemented for kimi_linear");
  WASTE_RETURN_IF_ERROR(
      GetInt(*lac, "num_heads", 1, 1 << 12, &m->kda_heads).Prefixed("linear_attn_config"));
  WASTE_RETURN_IF_ERROR(
      GetInt(*lac, "head_dim", 1, 1 << 12, &m->kda_head_dim).Prefixed("linear_attn_config"));
  WASTE_RETURN_IF_ERROR(GetInt(*lac, "short_conv_kernel_size", 1, 64, &m->conv_kernel, 4)
                            .Prefixed("linear_attn_config"));
  if (m->arch == Arch::kKimiK3) {
    WASTE_RETURN_IF_ERROR(GetBool(*lac, "use_full_rank_gate", &m->kda_full_rank_gate, false)
                              .Prefixed("linear_attn_config"));
    double lb;
    WASTE_RETURN_IF_ERROR(GetNum(*lac, "gate_lower_bound", -1e3, 0, &lb, 0,
                                 "config.linear_attn_config."));
    m->kda_lower_bound = static_cast<float>(lb);
  } else {
    for (const char* k3 : {"use_full_rank_gate", "gate_lower_bound"}) {
      if (lac->contains(k3) && !(*lac)[k3].is_null())
        return Status::Error(std::string("config.linear_attn_config.") + k3 +
                             " is Kimi K3's, and this config is not K3's");
    }
  }
  const auto kl = lac->find("kda_layers");
  if (kl == lac->end() || !kl->is_array())
    return Status::Error("config.linear_attn_config.kda_layers is missing or not a list");
  for (const auto& v : *kl) {  // 1-based, as the Kimi configs write it
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > m->n_layers)
      return Status::Error("config.linear_attn_config.kda_layers holds " + v.dump() +
                           ", not a layer number in [1, " + std::to_string(m->n_layers) + "]");
    m->layer_kind[v.get<int64_t>() - 1] = LayerKind::kKda;
  }
  return Status::Ok();
}

Status ReadRope(const json& c, ModelConfig* m) {
  // mla_use_nope must be a real boolean: it decides the sequence order.
  WASTE_RETURN_IF_ERROR(GetBool(c, "mla_use_nope", &m->mla_nope, false));
  WASTE_RETURN_IF_ERROR(GetNum(c, "rope_theta", 1.0, 1e12, &m->rope_theta, 10000.0));
  const auto rs = c.find("rope_scaling");
  if (rs == c.end() || rs->is_null() || (rs->is_object() && rs->empty())) return Status::Ok();
  if (!rs->is_object()) return Status::Error("config.rope_scaling is not an object");
  std::string type;
  for (const char* k : {"type", "rope_type"}) {
    if (rs->contains(k) && (*rs)[k].is_string()) type = (*rs)[k].get<std::string>();
  }
  if (type != "yarn")
    return Status::Error("config.rope_scaling type \"" + type +
                         "\" is not implemented (only yarn)");
  YarnConfig& y = m->yarn;
  const char* w = "config.rope_scaling.";
  WASTE_RETURN_IF_ERROR(GetNum(*rs, "factor", 0, 1e6, &y.factor, 1.0, w));
  WASTE_RETURN_IF_ERROR(
      GetNum(*rs, "original_max_position_embeddings", 1, 1e9, &y.original_max_position, 4096, w));
  WASTE_RETURN_IF_ERROR(GetNum(*rs, "beta_fast", 1e-6, 1e6, &y.beta_fast, 32, w));
  WASTE_RETURN_IF_ERROR(GetNum(*rs, "beta_slow", 1e-6, 1e6, &y.beta_slow, 1, w));
  WASTE_RETURN_IF_ERROR(GetNum(*rs, "mscale", 0, 1e3, &y.mscale, 1, w));
  WASTE_RETURN_IF_ERROR(GetNum(*rs, "mscale_all_dim", 0, 1e3, &y.mscale_all_dim, 0, w));
  if (rs->contains("attention_factor") && !(*rs)["attention_factor"].is_null())
    return Status::Error(std::string(w) + "attention_factor is not implemented");
  if (auto t = rs->find("truncate"); t != rs->end() && !t->is_null()) {
    if (!t->is_boolean()) return Status::Error(std::string(w) + "truncate is not true or false");
    y.truncate = t->get<bool>();
  }
  return Status::Ok();
}

// Grouped-query attention's shape (LayerKind::kGqa).
Status ReadGqa(const json& c, ModelConfig* m) {
  WASTE_RETURN_IF_ERROR(
      GetInt(c, "num_key_value_heads", 1, m->n_heads, &m->n_kv_heads, m->n_heads));
  if (m->n_heads % m->n_kv_heads != 0)
    return Status::Error("config.num_key_value_heads does not divide num_attention_heads");
  WASTE_RETURN_IF_ERROR(
      GetInt(c, "head_dim", 2, 4096, &m->head_dim, std::max(2, m->hidden / m->n_heads)));
  double partial;
  WASTE_RETURN_IF_ERROR(GetNum(c, "partial_rotary_factor", 0.0, 1.0, &partial, 1.0));
  m->rotary_dim = static_cast<int>(m->head_dim * partial);  // as HF truncates it
  // MiniMax's released config says rotary_dim (transformers turns it into
  // partial_rotary_factor; both may be present and must agree).
  if (m->arch == Arch::kMinimaxM2 && c.contains("rotary_dim") && !c["rotary_dim"].is_null()) {
    int rd = 0;
    WASTE_RETURN_IF_ERROR(GetInt(c, "rotary_dim", 0, m->head_dim, &rd));
    if (c.contains("partial_rotary_factor") && rd != m->rotary_dim)
      return Status::Error("config.rotary_dim and partial_rotary_factor disagree");
    m->rotary_dim = rd;
  }
  if (m->rotary_dim % 2 != 0)
    return Status::Error(std::string("config.") +
                         (m->arch == Arch::kMinimaxM2 ? "rotary_dim or " : "") +
                         "partial_rotary_factor gives an odd rotary width");
  WASTE_RETURN_IF_ERROR(
      GetBool(c, "attention_bias", &m->attn_bias, m->arch == Arch::kGptOss));  // HF's defaults
  // Qwen3 (and dots1, whose attention is Qwen3's) always norms q and k;
  // GLM-4.5 when use_qk_norm says so.
  m->attn_output_gate = m->arch == Arch::kQwen3Next;
  if (m->attn_output_gate && m->attn_bias)
    return Status::Error("config.attention_bias with qwen3_next's output gate is not implemented");
  if (m->arch == Arch::kQwen3Moe || m->arch == Arch::kQwen3Next || m->arch == Arch::kDots1) {
    m->qk_norm = true;
  } else if (m->arch == Arch::kMinimaxM2) {
    // transformers' MiniMaxM2Attention always norms q and k across all
    // heads; the released config says so as use_qk_norm / qk_norm_type.
    bool use = true;
    WASTE_RETURN_IF_ERROR(GetBool(c, "use_qk_norm", &use, true));
    if (!use) return Status::Error("config.use_qk_norm false is not implemented for minimax_m2");
    if (auto t = c.find("qk_norm_type"); t != c.end() && !t->is_null() && *t != "per_layer")
      return Status::Error("config.qk_norm_type " + t->dump() +
                           " is not implemented (per_layer: across all heads)");
    m->qk_norm = m->qk_norm_all_heads = true;
  } else {
    WASTE_RETURN_IF_ERROR(GetBool(c, "use_qk_norm", &m->qk_norm, false));
  }
  bool sliding = false;
  WASTE_RETURN_IF_ERROR(GetBool(c, "use_sliding_window", &sliding, false));
  if (sliding) return Status::Error("config.use_sliding_window is not implemented");
  m->attn_window.assign(m->n_layers, 0);
  if (m->arch == Arch::kDots1) {
    // dots1's layer_types names a sliding window from max_window_layers on;
    // as released, max_window_layers is num_hidden_layers: none.
    if (const auto lt = c.find("layer_types"); lt != c.end() && !lt->is_null()) {
      if (!lt->is_array() || static_cast<int>(lt->size()) != m->n_layers)
        return Status::Error("config.layer_types is not a list of num_hidden_layers entries");
      for (int L = 0; L < m->n_layers; ++L)
        if ((*lt)[L] != "full_attention")
          return Status::Error("config.layer_types[" + std::to_string(L) + "] " +
                               (*lt)[L].dump() + " is not implemented for dots1 (full_attention)");
    }
  }
  if (m->arch == Arch::kGptOss) {
    // Sinks and the o_proj bias always; the window on the sliding layers.
    m->sinks = true;
    m->o_bias = m->attn_bias;
    int window = 0;
    WASTE_RETURN_IF_ERROR(GetInt(c, "sliding_window", 0, 1 << 24, &window, 0));
    const auto lt = c.find("layer_types");
    const bool listed = lt != c.end() && !lt->is_null();
    if (listed && (!lt->is_array() || static_cast<int>(lt->size()) != m->n_layers))
      return Status::Error("config.layer_types is not a list of num_hidden_layers entries");
    for (int L = 0; L < m->n_layers; ++L) {
      // transformers' default: sliding on the even layers
      std::string type = L % 2 == 0 ? "sliding_attention" : "full_attention";
      if (listed) type = (*lt)[L].is_string() ? (*lt)[L].get<std::string>() : "";
      if (type != "sliding_attention" && type != "full_attention")
        return Status::Error("config.layer_types[" + std::to_string(L) + "] is not " +
                             "sliding_attention or full_attention");
      if (type == "sliding_attention") {
        if (window < 1) return Status::Error("config.sliding_window is missing for layer_types");
        m->attn_window[L] = window;
      }
    }
  }
  return ReadRope(c, m);
}

// The keys only Kimi K3's config has; a kimi_linear config with any of them,
// or whose multimodal wrapper names K3, is K3's.
constexpr const char* kKimiK3Keys[] = {"routed_expert_hidden_size", "latent_moe_use_norm",
                                       "attn_res_block_size",       "activation_situ_beta",
                                       "activation_situ_linear_beta", "mla_use_output_gate"};

// Whether the wrapper's config (the raw config.json around text_config, or
// WARP's _outer) names Kimi K3.
bool NamesKimiK3(const json* outer) {
  if (!outer || !outer->is_object()) return false;
  if (auto mt = outer->find("model_type"); mt != outer->end() && mt->is_string() &&
                                           mt->get<std::string>() == "kimi_k3")
    return true;
  const auto a = outer->find("architectures");
  return a != outer->end() && a->is_array() && !a->empty() && (*a)[0].is_string() &&
         (*a)[0].get<std::string>().starts_with("KimiK3");
}

// Kimi K3's parts of the text config (model_config.h says what each does).
Status ReadKimiK3(const json& c, ModelConfig* m) {
  WASTE_RETURN_IF_ERROR(GetInt(c, "routed_expert_hidden_size", 8, kMaxDim, &m->latent, 0));
  WASTE_RETURN_IF_ERROR(GetBool(c, "latent_moe_use_norm", &m->latent_norm, false));
  if (m->latent_norm && m->latent == 0)
    return Status::Error("config.latent_moe_use_norm without routed_expert_hidden_size");
  if (m->latent % 8 != 0)
    return Status::Error("config.routed_expert_hidden_size must be a multiple of 8 (the VQ vector)");
  WASTE_RETURN_IF_ERROR(GetInt(c, "attn_res_block_size", 0, m->n_layers, &m->attn_res_block, 0));
  WASTE_RETURN_IF_ERROR(GetBool(c, "mla_use_output_gate", &m->mla_output_gate, false));
  std::string act = "silu";
  if (auto a = c.find("hidden_act"); a != c.end() && !a->is_null()) {
    if (!a->is_string()) return Status::Error("config.hidden_act is not a string");
    act = a->get<std::string>();
  }
  if (act != "silu" && act != "situ")
    return Status::Error("config.hidden_act \"" + act + "\" is not implemented (silu, situ)");
  m->situ = act == "situ";
  double beta, linear_beta;
  WASTE_RETURN_IF_ERROR(GetNum(c, "activation_situ_beta", 1e-3, 1e3, &beta, 1.0));
  WASTE_RETURN_IF_ERROR(GetNum(c, "activation_situ_linear_beta", 0, 1e3, &linear_beta, 0.0));
  m->situ_beta = static_cast<float>(beta);
  m->situ_linear_beta = static_cast<float>(linear_beta);
  return Status::Ok();
}

// The text model's config and its wrapper's: the raw release nests the text
// config under text_config; WARP's converter flattens it and keeps the rest
// under _outer.
struct ConfigParts {
  const json* text = nullptr;
  const json* outer = nullptr;
};
Result<ConfigParts> SplitConfig(const json& c) {
  if (!c.is_object()) return Status::Error("config is not an object");
  if (auto t = c.find("text_config"); t != c.end() && !t->is_null()) {
    if (!t->is_object()) return Status::Error("config.text_config is not an object");
    return ConfigParts{&*t, &c};
  }
  if (auto o = c.find("_outer"); o != c.end() && !o->is_null()) {
    if (!o->is_object()) return Status::Error("config._outer is not an object");
    return ConfigParts{&c, &*o};
  }
  return ConfigParts{&c, nullptr};
}

Result<ModelConfig> ReadConfig(const json& c, const json* outer);

// GLM-4.7-Flash and DeepSeek-V3.2: mlp_layer_types ("dense" or "sparse" per
// layer) says which layers are MoE, as the dense ones listed in mlp_only.
// Absent, transformers' default: for glm4_moe_lite the first layer dense, the
// rest sparse, and a first_k_dense_replace that disagrees is refused (it does
// not read the key); for deepseek_v32 the first first_k_dense_replace (3
// absent) layers dense, and the key is not read when the list is given.
Status ReadMlpLayerTypes(const json& c, ModelConfig* m) {
  const bool v32 = m->arch != Arch::kGlm4MoeLite;  // deepseek_v32, glm_moe_dsa
  int first = v32 ? 3 : 1;
  if (v32) WASTE_RETURN_IF_ERROR(GetInt(c, "first_k_dense_replace", 0, m->n_layers, &first, 3));
  std::vector<bool> dense(m->n_layers, false);
  for (int L = 0; L < std::min(first, m->n_layers); ++L) dense[L] = true;
  const auto t = c.find("mlp_layer_types");
  const bool listed = t != c.end() && !t->is_null();
  if (listed) {
    std::fill(dense.begin(), dense.end(), false);
    if (!t->is_array() || t->size() != static_cast<size_t>(m->n_layers))
      return Status::Error("config.mlp_layer_types is not a list of num_hidden_layers entries");
    for (int L = 0; L < m->n_layers; ++L) {
      const json& v = (*t)[L];
      if (v != "dense" && v != "sparse")
        return Status::Error("config.mlp_layer_types[" + std::to_string(L) + "] " + v.dump() +
                             " is not dense or sparse");
      dense[L] = v == "dense";
    }
  }
  if (!v32 && c.contains("first_k_dense_replace") && !c["first_k_dense_replace"].is_null()) {
    WASTE_RETURN_IF_ERROR(GetInt(c, "first_k_dense_replace", 0, m->n_layers, &first));
    for (int L = 0; L < m->n_layers; ++L)
      if ((L < first) != dense[L])
        return Status::Error("config.first_k_dense_replace disagrees with mlp_layer_types, "
                             "which glm4_moe_lite follows");
  }
  if (m->sparse_step != 1 || !m->mlp_only.empty())
    return Status::Error("config: decoder_sparse_step and mlp_only_layers are not " + m->model_type +
                         "'s (mlp_layer_types)");
  m->first_dense = 0;
  for (int L = 0; L < m->n_layers; ++L)
    if (dense[L]) m->mlp_only.push_back(L);
  return Status::Ok();
}

}  // namespace

std::string DefaultTensorPrefix(const json& config) {
  auto parts = SplitConfig(config);
  return parts.ok() && parts->outer ? "language_model." : "";
}

Result<ModelConfig> ModelConfig::FromJson(const json& config) {
  auto parts = SplitConfig(config);
  if (!parts.ok()) return parts.status();
  if (parts->text != &config) {  // errors name the keys where they are
    auto m = ReadConfig(*parts->text, parts->outer);
    if (!m.ok()) return m.status().Prefixed("text_config");
    return m;
  }
  return ReadConfig(config, parts->outer);
}

namespace {

}  // namespace

std::string_view ArchName(Arch a) {
  switch (a) {
    case Arch::kKimiLinear:
      return "kimi_linear";
    case Arch::kDeepseekV3:
      return "deepseek_v3";
    case Arch::kQwen3Moe:
      return "qwen3_moe";
    case Arch::kGlm4Moe:
      return "glm4_moe";
    case Arch::kGptOss:
      return "gpt_oss";
    case Arch::kQwen3Next:
      return "qwen3_next";
    case Arch::kKimiK3:
      return "kimi_k3";
    case Arch::kMinimaxM2:
      return "minimax_m2";
    case Arch::kGlm4MoeLite:
      return "glm4_moe_lite";
    case Arch::kDots1:
      return "dots1";
    case Arch::kDeepseekV32:
      return "deepseek_v32";
    case Arch::kGlmMoeDsa:
      return "glm_moe_dsa";
  }
  return "?";
}

bool ModelConfig::is_moe_layer(int layer) const {
  return n_experts > 0 && layer >= first_dense && (layer + 1) % sparse_step == 0 &&
         !std::binary_search(mlp_only.begin(), mlp_only.end(), layer);
}

int ModelConfig::n_moe_layers() const {
  int n = 0;
  for (int L = 0; L < n_layers; ++L) n += is_moe_layer(L);
  return n;
}

int ModelConfig::first_moe_layer() const {
  for (int L = 0; L < n_layers; ++L)
    if (is_moe_layer(L)) return L;
  return -1;
}

int ModelConfig::n_layers_of(LayerKind kind) const {
  int n = 0;
  for (LayerKind k : layer_kind) n += k == kind;
  return n;
}

namespace {

// MiniMax-M2's router as transformers' MiniMaxM2TopKRouter computes it:
// sigmoid scores, top-k by score plus e_score_correction_bias, the chosen
// scores renormalized, no groups and no scaling (it reads no
// routing_scaling_factor, so neither does waste); no shared expert. The
// released config's keys that would ask for something else are refused.
Status ReadMinimaxRouting(const json& c, const std::string& scoring, ModelConfig* m) {
  if (scoring != "sigmoid")
    return Status::Error("config.scoring_func \"" + scoring +
                         "\" is not implemented for minimax_m2 (sigmoid)");
  bool bias = true;
  WASTE_RETURN_IF_ERROR(GetBool(c, "use_routing_bias", &bias, true));
  if (!bias) return Status::Error("config.use_routing_bias false is not implemented for minimax_m2");
  int shared = 0;
  WASTE_RETURN_IF_ERROR(GetInt(c, "shared_intermediate_size", 0, 0, &shared, 0)
                            .Prefixed("minimax_m2 has no shared expert"));
  if (m->n_shared > 0) return Status::Error("config: minimax_m2 has no shared experts");
  if (m->n_group > 1)
    return Status::Error("config.n_group > 1: minimax_m2's routing has no expert groups");
  m->renormalize = true;
  m->routed_scale = 1.f;
  return Status::Ok();
}

// GLM-5.2's index sharing (GlmMoeDsaConfig): indexer_types "full" or
// "shared" per layer; absent, index_topk_pattern ("F"/"S" a layer, a string
// or a list), else full where max(L - offset + 1, 0) % freq == 0
// (index_topk_freq, 1; index_skip_topk_offset, 2). A shared layer reuses the
// choice of the last full one before it, so the first must be full.
Status ReadIndexerTypes(const json& c, ModelConfig* m) {
  const size_t n = static_cast<size_t>(m->n_layers);
  const auto list = [&](const json& v, const char* key, bool letters) -> Status {
    if (!v.is_array() || v.size() != n)
      return Status::Error(std::string("config.") + key + " is not a list of num_hidden_layers entries");
    for (size_t L = 0; L < n; ++L) {
      const json& e = v[L];
      const bool full = letters ? e == "F" : e == "full", shared = letters ? e == "S" : e == "shared";
      if (!full && !shared)
        return Status::Error(std::string("config.") + key + "[" + std::to_string(L) + "] " +
                             e.dump() + (letters ? " is not F or S" : " is not full or shared"));
      m->index_shared[L] = shared;
    }
    return Status::Ok();
  };
  if (const auto t = c.find("indexer_types"); t != c.end() && !t->is_null()) {
    WASTE_RETURN_IF_ERROR(list(*t, "indexer_types", false));
  } else if (const auto p = c.find("index_topk_pattern"); p != c.end() && !p->is_null()) {
    json letters = json::array();
    if (p->is_string())
      for (char ch : p->get<std::string>()) letters.push_back(std::string(1, ch));
    WASTE_RETURN_IF_ERROR(list(p->is_string() ? letters : *p, "index_topk_pattern", true));
  } else {
    int freq = 1, offset = 2;
    WASTE_RETURN_IF_ERROR(GetInt(c, "index_topk_freq", -(1 << 20), 1 << 20, &freq, 1));
    WASTE_RETURN_IF_ERROR(GetInt(c, "index_skip_topk_offset", -(1 << 20), 1 << 20, &offset, 2));
    freq = std::max(freq, 1);
    for (int L = 0; L < m->n_layers; ++L) m->index_shared[L] = std::max(L - offset + 1, 0) % freq != 0;
  }
  if (m->index_shared[0])
    return Status::Error("config: layer 0's indexer is shared, but no layer before it has one");
  return Status::Ok();
}

// DeepSeek-V3.2's indexer (DeepseekV32Indexer): every layer's attention is
// "indexed_attention"; its heads, their width and the positions it keeps.
Status ReadIndexer(const json& c, ModelConfig* m) {
  if (m->q_lora < 1) return Status::Error("config.q_lora_rank: DSA's indexer reads the query latent");
  WASTE_RETURN_IF_ERROR(GetInt(c, "index_topk", 1, 1 << 24, &m->index_topk, 2048));
  WASTE_RETURN_IF_ERROR(GetInt(c, "index_n_heads", 1, 1 << 10, &m->index_heads, 64));
  WASTE_RETURN_IF_ERROR(GetInt(c, "index_head_dim", 1, 4096, &m->index_dim, 128));
  if (m->index_dim < m->qk_rope)
    return Status::Error("config.index_head_dim is below qk_rope_head_dim (its rotated dims)");
  if (const auto t = c.find("layer_types"); t != c.end() && !t->is_null()) {
    if (!t->is_array() || t->size() != static_cast<size_t>(m->n_layers))
      return Status::Error("config.layer_types is not a list of num_hidden_layers entries");
    for (int L = 0; L < m->n_layers; ++L)
      if ((*t)[L] != "indexed_attention")
        return Status::Error("config.layer_types[" + std::to_string(L) + "] " + (*t)[L].dump() +
                             " is not indexed_attention");
  }
  m->index_rotate_half = m->arch == Arch::kDeepseekV32;
  m->index_shared.assign(m->n_layers, false);
  if (m->arch == Arch::kGlmMoeDsa) WASTE_RETURN_IF_ERROR(ReadIndexerTypes(c, m));
  return Status::Ok();
}

Result<ModelConfig> ReadConfig(const json& c, const json* outer) {
  if (!c.is_object()) return Status::Error("config is not an object");
  ModelConfig m;
  const auto mt = c.find("model_type");
  if (mt == c.end() || !mt->is_string()) return Status::Error("config.model_type is missing");
  m.model_type = mt->get<std::string>();
  if (m.model_type == "kimi_linear" || m.model_type == "kimi_k3") {
    m.arch = Arch::kKimiLinear;
    const bool k3_keys = std::any_of(std::begin(kKimiK3Keys), std::end(kKimiK3Keys),
                                     [&](const char* k) { return c.contains(k); });
    if (m.model_type == "kimi_k3" || k3_keys || NamesKimiK3(outer)) m.arch = Arch::kKimiK3;
  } else if (m.model_type == "deepseek_v3" || m.model_type == "kimi_k2") {
    m.arch = Arch::kDeepseekV3;
  } else if (m.model_type == "qwen3_moe") {
    m.arch = Arch::kQwen3Moe;
  } else if (m.model_type == "glm4_moe") {
    m.arch = Arch::kGlm4Moe;
  } else if (m.model_type == "gpt_oss") {
    m.arch = Arch::kGptOss;
  } else if (m.model_type == "qwen3_next" || m.model_type == "qwen3_5_moe_text") {
    // Qwen3.5 MoE's text model (the text_config of its multimodal wrapper)
    // runs Qwen3-Next's layers; its checkpoint's names differ (convert).
    m.arch = Arch::kQwen3Next;
    m.zero_centered_norms = true;
  } else if (m.model_type == "minimax_m2") {
    m.arch = Arch::kMinimaxM2;
  } else if (m.model_type == "glm4_moe_lite") {
    m.arch = Arch::kGlm4MoeLite;
  } else if (m.model_type == "dots1") {
    m.arch = Arch::kDots1;
  } else if (m.model_type == "deepseek_v32") {
    m.arch = Arch::kDeepseekV32;
  } else if (m.model_type == "glm_moe_dsa") {
    m.arch = Arch::kGlmMoeDsa;
  } else {
    return Status::Error("config.model_type \"" + m.model_type +
                         "\" is not supported (kimi_linear, kimi_k3, deepseek_v3, kimi_k2, "
                         "qwen3_moe, glm4_moe, gpt_oss, qwen3_next, minimax_m2, glm4_moe_lite, "
                         "dots1, qwen3_5_moe_text, deepseek_v32, glm_moe_dsa)");
  }
  m.architecture = m.model_type;
  // K3's text config says KimiLinearForCausalLM; only its wrapper names K3.
  const json& named = m.arch == Arch::kKimiK3 && outer ? *outer : c;
  if (auto a = named.find("architectures");
      a != named.end() && a->is_array() && !a->empty() && (*a)[0].is_string())
    m.architecture = (*a)[0].get<std::string>().substr(0, 128);

  WASTE_RETURN_IF_ERROR(GetInt(c, "hidden_size", 8, kMaxDim, &m.hidden));
  WASTE_RETURN_IF_ERROR(GetInt(c, "num_hidden_layers", 1, 512, &m.n_layers));
  WASTE_RETURN_IF_ERROR(GetInt(c, "vocab_size", 1, 1 << 24, &m.vocab));
  double eps;
  WASTE_RETURN_IF_ERROR(GetNum(c, "rms_norm_eps", 1e-12, 0.5, &eps, 1e-6));
  m.rms_eps = static_cast<float>(eps);
  WASTE_RETURN_IF_ERROR(GetBool(c, "tie_word_embeddings", &m.tie_embeddings, false));
  WASTE_RETURN_IF_ERROR(GetInt(c, "bos_token_id", -1, m.vocab - 1, &m.bos_token, -1));
  WASTE_RETURN_IF_ERROR(GetEosTokens(c, m.vocab, &m.eos_tokens));

  // Feed-forward and routing.
  // GPT-OSS and MiniMax-M2 have no dense layers: their intermediate_size is
  // the experts'.
  const bool all_moe = m.arch == Arch::kGptOss || m.arch == Arch::kMinimaxM2;
  WASTE_RETURN_IF_ERROR(GetInt(c, "intermediate_size", 0, kMaxDim,
                               all_moe ? &m.moe_inter : &m.dense_inter, 0));
  if (!all_moe)
    WASTE_RETURN_IF_ERROR(GetInt(c, "moe_intermediate_size", 0, kMaxDim, &m.moe_inter, 0));
  WASTE_RETURN_IF_ERROR(
      GetInt(c, Either(c, {"num_experts", "n_routed_experts", "num_local_experts"}), 0, 1 << 16, &m.n_experts, 0));
  WASTE_RETURN_IF_ERROR(
      GetInt(c, Either(c, {"num_experts_per_token", "num_experts_per_tok"}), 0, 64, &m.top_k, 0));
  WASTE_RETURN_IF_ERROR(
      GetInt(c, Either(c, {"num_shared_experts", "n_shared_experts"}), 0, 64, &m.n_shared, 0));
  WASTE_RETURN_IF_ERROR(GetInt(c, "first_k_dense_replace", 0, m.n_layers, &m.first_dense, 0));
  WASTE_RETURN_IF_ERROR(GetInt(c, "decoder_sparse_step", 1, 512, &m.sparse_step, 1));
  if (auto mo = c.find("mlp_only_layers"); mo != c.end() && !mo->is_null()) {
    if (!mo->is_array()) return Status::Error("config.mlp_only_layers is not a list");
    for (const auto& v : *mo) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= m.n_layers)
        return Status::Error("config.mlp_only_layers holds " + v.dump() +
                             ", not a layer in [0, " + std::to_string(m.n_layers) + ")");
      m.mlp_only.push_back(v.get<int>());
    }
    std::sort(m.mlp_only.begin(), m.mlp_only.end());
  }
  const bool dsa = m.arch == Arch::kDeepseekV32 || m.arch == Arch::kGlmMoeDsa;
  if (m.arch == Arch::kGlm4MoeLite || dsa) WASTE_RETURN_IF_ERROR(ReadMlpLayerTypes(c, &m));
  int freq = 1;
  WASTE_RETURN_IF_ERROR(GetInt(c, "moe_layer_freq", 1, 64, &freq, 1));
  if (freq != 1) return Status::Error("config.moe_layer_freq other than 1 is not implemented");
  double scale;
  WASTE_RETURN_IF_ERROR(GetNum(c, "routed_scaling_factor", 0, 1e4, &scale, 1.0));
  m.routed_scale = static_cast<float>(scale);
  // moe_renormalize (Kimi) or norm_topk_prob (DeepSeek): by value.
  // Qwen3.5 MoE's router always renormalizes (its config has no key for it).
  const bool qwen35 = m.model_type == "qwen3_5_moe_text";
  WASTE_RETURN_IF_ERROR(
      GetBool(c, Either(c, {"moe_renormalize", "norm_topk_prob"}), &m.renormalize, qwen35));
  if (qwen35 && !m.renormalize)
    return Status::Error(
        "config.norm_topk_prob false is not Qwen3.5 MoE's router (it always "
        "renormalizes the top k)");
  // Qwen3-MoE's and Qwen3-Next's routers are a softmax and have no correction
  // bias, nor has GPT-OSS's; the others say which in scoring_func, and have one.
  const bool qwen = m.arch == Arch::kQwen3Moe || m.arch == Arch::kQwen3Next;
  std::string scoring = qwen ? "softmax" : "sigmoid";
  m.router_bias = !qwen && m.arch != Arch::kGptOss;
  if (m.arch == Arch::kGptOss) {
    // GPT-OSS: a biased router, softmax over the chosen k; biased experts
    // with the clamped SwiGLU.
    m.router_logit_bias = m.softmax_topk = m.expert_bias = true;
    double limit, alpha;
    WASTE_RETURN_IF_ERROR(GetNum(c, "swiglu_limit", 1e-3, 1e6, &limit, 7.0));
    WASTE_RETURN_IF_ERROR(GetNum(c, "swiglu_alpha", 1e-3, 1e3, &alpha, 1.702));
    m.swiglu_limit = static_cast<float>(limit);
    m.swiglu_alpha = static_cast<float>(alpha);
  }
  if (m.arch == Arch::kQwen3Next) {
    // Qwen3NextSparseMoeBlock: a shared expert of shared_expert_intermediate_size
    // behind a sigmoid gate.
    m.shared_expert_gate = true;
    WASTE_RETURN_IF_ERROR(
        GetInt(c, "shared_expert_intermediate_size", 0, kMaxDim, &m.shared_width, 0));
    m.n_shared = m.n_experts > 0 && m.shared_width > 0 ? 1 : 0;
  }
  for (const char* k : {"moe_router_activation_func", "scoring_func"}) {
    if (c.contains(k) && c[k].is_string()) scoring = c[k].get<std::string>();
  }
  if (scoring != "sigmoid" && scoring != "softmax")
    return Status::Error("config router scoring \"" + scoring + "\" is not implemented");
  m.sigmoid_router = scoring == "sigmoid";
  if (c.contains("topk_method") && c["topk_method"].is_string()) {
    const std::string method = c["topk_method"].get<std::string>();
    // DeepSeek-V2's greedy and group_limited_greedy (softmax, no correction
    // bias) are refused, not computed as noaux_tc: transformers' DeepseekV3
    // class ignores the field, but DeepSeek's own V3 code refuses them too.
    if (method != "noaux_tc")
      return Status::Error("config.topk_method \"" + method +
                           "\" is not implemented (only noaux_tc, DeepSeek-V3's grouped routing)");
  }
  WASTE_RETURN_IF_ERROR(
      GetInt(c, Either(c, {"n_group", "num_expert_group"}), 1, 1 << 10, &m.n_group, 1));
  WASTE_RETURN_IF_ERROR(GetInt(c, "topk_group", 1, m.n_group, &m.topk_group, 1));
  if (m.arch == Arch::kMinimaxM2) WASTE_RETURN_IF_ERROR(ReadMinimaxRouting(c, scoring, &m));
  if (m.n_experts > 0) {
    if (m.top_k < 1 || m.top_k > m.n_experts)
      return Status::Error("config: top-k " + std::to_string(m.top_k) + " of " +
                           std::to_string(m.n_experts) + " experts is not a valid routing");
    if (m.moe_inter < 8) return Status::Error("config.moe_intermediate_size is missing or < 8");
    if (m.n_experts % m.n_group != 0)
      return Status::Error("config: n_group does not divide the expert count");
    if (m.hidden % 8 != 0 || m.moe_inter % 8 != 0)
      return Status::Error("config: expert dimensions must be multiples of 8 (the VQ vector)");
  }
  if (m.n_moe_layers() < m.n_layers) {
    if (m.dense_inter < 1) return Status::Error("config.intermediate_size is missing");
  }

  // Attention.
  WASTE_RETURN_IF_ERROR(GetInt(c, "num_attention_heads", 1, 1 << 12, &m.n_heads));
  WASTE_RETURN_IF_ERROR(GetInt(c, "q_lora_rank", 0, kMaxDim, &m.q_lora, 0));
  WASTE_RETURN_IF_ERROR(ReadLayerKinds(c, &m));
  const bool gqa = std::count(m.layer_kind.begin(), m.layer_kind.end(), LayerKind::kGqa) > 0;
  if (gqa) WASTE_RETURN_IF_ERROR(ReadGqa(c, &m));
  const bool mla = std::count(m.layer_kind.begin(), m.layer_kind.end(), LayerKind::kMla) > 0;
  if (mla) {
    WASTE_RETURN_IF_ERROR(GetInt(c, "kv_lora_rank", 1, kMaxDim, &m.kv_lora));
    WASTE_RETURN_IF_ERROR(GetInt(c, "qk_nope_head_dim", 0, 4096, &m.qk_nope));
    WASTE_RETURN_IF_ERROR(GetInt(c, "qk_rope_head_dim", 0, 4096, &m.qk_rope));
    WASTE_RETURN_IF_ERROR(GetInt(c, "v_head_dim", 1, 4096, &m.v_head));
    if (m.qk_nope + m.qk_rope < 1) return Status::Error("config: MLA query head is empty");
    if (m.qk_rope % 2 != 0) return Status::Error("config.qk_rope_head_dim must be even");
    WASTE_RETURN_IF_ERROR(ReadRope(c, &m));
    if (m.yarn.factor > 1.0 && m.yarn.mscale != m.yarn.mscale_all_dim)
      return Status::Error("config.rope_scaling mscale != mscale_all_dim is not implemented");
    // What transformers' MLA classes read and waste's MLA does not do.
    bool bias = false;
    WASTE_RETURN_IF_ERROR(GetBool(c, "attention_bias", &bias, false));
    if (bias) return Status::Error("config.attention_bias is not implemented for MLA");
    double partial;
    WASTE_RETURN_IF_ERROR(GetNum(c, "partial_rotary_factor", 0.0, 1.0, &partial, 1.0));
    if (partial != 1.0)
      return Status::Error("config.partial_rotary_factor other than 1 is not implemented for MLA");
    // Glm4MoeLiteAttention repeats its keys num_attention_heads /
    // num_key_value_heads times; its keys are already one per query head.
    int kv_heads = m.n_heads;
    WASTE_RETURN_IF_ERROR(GetInt(c, "num_key_value_heads", 1, 1 << 12, &kv_heads, m.n_heads));
    if ((m.arch == Arch::kGlm4MoeLite || dsa) && kv_heads != m.n_heads)
      return Status::Error("config.num_key_value_heads other than num_attention_heads is not "
                           "implemented for " + m.model_type);
  }
  if (dsa) {
    WASTE_RETURN_IF_ERROR(ReadIndexer(c, &m));
  } else {
    for (const char* k : {"index_topk", "index_n_heads", "index_head_dim", "indexer_types",
                          "index_topk_pattern", "index_topk_freq", "index_skip_topk_offset"})
      if (c.contains(k) && !c[k].is_null())
        return Status::Error(std::string("config.") + k + " (DSA's indexer) is not implemented for " +
                             m.model_type);
  }
  if (m.arch == Arch::kKimiK3) {
    WASTE_RETURN_IF_ERROR(ReadKimiK3(c, &m));
    if (m.n_kda_layers() > 0 && m.kda_heads > m.kda_head_dim)
      return Status::Error("config: K3's A_log is padded to head_dim, so KDA needs num_heads <= "
                           "head_dim");
  } else {
    for (const char* k : kKimiK3Keys)
      if (c.contains(k)) return Status::Error(std::string("config.") + k + " is Kimi K3's");
  }
  return m;
}

}  // namespace

std::vector<TensorSpec> TrunkSpec(const ModelConfig& c) {
  std::vector<TensorSpec> t;
  const int64_t h = c.hidden;
  auto mat = [&](std::string n, int64_t rows, int64_t cols) {
    t.push_back({std::move(n), {rows, cols}, Storage::kMatrix});
  };
  auto vec = [&](std::string n, std::vector<int64_t> shape) {
    t.push_back({std::move(n), std::move(shape), Storage::kF32});
  };
  mat("model.embed_tokens.weight", c.vocab, h);
  for (int L = 0; L < c.n_layers; ++L) {
    const std::string p = "model.layers." + std::to_string(L) + ".";
    const std::string a = p + "self_attn.";
    vec(p + "input_layernorm.weight", {h});
    vec(p + "post_attention_layernorm.weight", {h});
    if (c.layer_kind[L] == LayerKind::kGatedDeltaNet) {
      // Qwen3-Next's names. in_proj_qkvz's rows come per key head: its q, k
      // (gdn_k_dim each), then the v and z of its value heads; in_proj_ba's
      // per key head the b, then the a, of its value heads.
      const std::string g = p + "linear_attn.";
      const int64_t K = c.gdn_key_width(), V = c.gdn_value_width(), Hv = c.gdn_v_heads;
      mat(g + "in_proj_qkvz.weight", 2 * K + 2 * V, h);
      mat(g + "in_proj_ba.weight", 2 * Hv, h);
      vec(g + "conv1d.weight", {c.gdn_conv_width(), 1, c.conv_kernel});
      vec(g + "dt_bias", {Hv});
      vec(g + "A_log", {Hv});
      vec(g + "norm.weight", {c.gdn_v_dim});
      mat(g + "out_proj.weight", h, V);
    } else if (c.layer_kind[L] == LayerKind::kKda) {
      const int64_t H = c.kda_heads, D = c.kda_head_dim, C = H * D;
      mat(a + "q_proj.weight", C, h);
      mat(a + "k_proj.weight", C, h);
      mat(a + "v_proj.weight", C, h);
      mat(a + "b_proj.weight", H, h);
      mat(a + "f_a_proj.weight", D, h);
      mat(a + "f_b_proj.weight", C, D);
      if (c.kda_full_rank_gate) {
        mat(a + "g_proj.weight", C, h);
      } else {
        mat(a + "g_a_proj.weight", D, h);
        mat(a + "g_b_proj.weight", C, D);
      }
      mat(a + "o_proj.weight", h, C);
      for (const char* conv : {"q_conv1d", "k_conv1d", "v_conv1d"})
        vec(a + conv + ".weight", {C, 1, c.conv_kernel});
      // One value per head; K3 ships it padded with zeros to head_dim.
      vec(a + "A_log", {1, 1, c.arch == Arch::kKimiK3 ? D : H, 1});
      vec(a + "dt_bias", {C});
      vec(a + "o_norm.weight", {D});
    } else if (c.layer_kind[L] == LayerKind::kGqa) {
      mat(a + "q_proj.weight", (c.attn_output_gate ? 2 : 1) * int64_t{c.q_width()}, h);
      mat(a + "k_proj.weight", c.kv_width(), h);
      mat(a + "v_proj.weight", c.kv_width(), h);
      if (c.attn_bias) {
        vec(a + "q_proj.bias", {c.q_width()});
        vec(a + "k_proj.bias", {c.kv_width()});
        vec(a + "v_proj.bias", {c.kv_width()});
      }
      if (c.qk_norm) {
        vec(a + "q_norm.weight", {c.qk_norm_all_heads ? c.q_width() : c.head_dim});
        vec(a + "k_norm.weight", {c.qk_norm_all_heads ? c.kv_width() : c.head_dim});
      }
      mat(a + "o_proj.weight", h, c.q_width());
      if (c.o_bias) vec(a + "o_proj.bias", {h});
      if (c.sinks) vec(a + "sinks", {c.n_heads});
    } else {
      const int64_t qd = c.qk_nope + c.qk_rope;
      if (c.q_lora > 0) {
        mat(a + "q_a_proj.weight", c.q_lora, h);
        vec(a + "q_a_layernorm.weight", {c.q_lora});
        mat(a + "q_b_proj.weight", c.n_heads * qd, c.q_lora);
      } else {
        mat(a + "q_proj.weight", c.n_heads * qd, h);
      }
      mat(a + "kv_a_proj_with_mqa.weight", c.kv_lora + c.qk_rope, h);
      vec(a + "kv_a_layernorm.weight", {c.kv_lora});
      mat(a + "kv_b_proj.weight", int64_t{c.n_heads} * (c.qk_nope + c.v_head), c.kv_lora);
      if (c.mla_output_gate) mat(a + "g_proj.weight", int64_t{c.n_heads} * c.v_head, h);
      mat(a + "o_proj.weight", h, int64_t{c.n_heads} * c.v_head);
      if (c.has_indexer(L)) {  // DSA's indexer; transformers keeps weights_proj in float32
        const std::string i = a + "indexer.";
        mat(i + "wq_b.weight", int64_t{c.index_heads} * c.index_dim, c.q_lora);
        mat(i + "wk.weight", c.index_dim, h);
        vec(i + "k_norm.weight", {c.index_dim});
        vec(i + "k_norm.bias", {c.index_dim});
        t.push_back({i + "weights_proj.weight", {c.index_heads, h}, Storage::kRouter});
      }
    }
    if (c.attn_res_block > 0) {  // Attention Residuals: a norm and a query per sublayer
      for (const char* r : {"self_attention_res_", "mlp_res_"}) {
        vec(p + r + "norm.weight", {h});
        vec(p + r + "proj.weight", {1, h});
      }
    }
    if (c.is_moe_layer(L)) {
      const std::string m = p + "block_sparse_moe.";
      t.push_back({m + "gate.weight", {c.n_experts, h}, Storage::kRouter});
      if (c.router_bias) vec(m + "gate.e_score_correction_bias", {c.n_experts});
      if (c.router_logit_bias) vec(m + "gate.bias", {c.n_experts});
      if (c.latent > 0) {
        mat(m + "routed_expert_down_proj.weight", c.latent, h);
        if (c.latent_norm) vec(m + "routed_expert_norm.weight", {c.latent});
        mat(m + "routed_expert_up_proj.weight", h, c.latent);
      }
      if (c.n_shared > 0) {
        // Qwen3-Next names its one gated shared expert in the singular.
        const std::string se = m + (c.shared_expert_gate ? "shared_expert." : "shared_experts.");
        mat(se + "gate_proj.weight", c.shared_inter(), h);
        mat(se + "up_proj.weight", c.shared_inter(), h);
        mat(se + "down_proj.weight", h, c.shared_inter());
        if (c.shared_expert_gate)
          t.push_back({m + "shared_expert_gate.weight", {1, h}, Storage::kRouter});
      }
    } else {
      mat(p + "mlp.gate_proj.weight", c.dense_inter, h);
      mat(p + "mlp.up_proj.weight", c.dense_inter, h);
      mat(p + "mlp.down_proj.weight", h, c.dense_inter);
    }
  }
  if (c.attn_res_block > 0) {
    vec("model.output_attn_res_norm.weight", {h});
    vec("model.output_attn_res_proj.weight", {1, h});
  }
  vec("model.norm.weight", {h});
  if (!c.tie_embeddings) mat("lm_head.weight", c.vocab, h);
  return t;
}

ParamCount CountParams(const ModelConfig& c) {
  ParamCount p;
  for (const TensorSpec& s : TrunkSpec(c)) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    p.trunk += n;
    if (s.name == "model.embed_tokens.weight") p.embedding = n;
  }
  const int64_t per_expert = 3 * int64_t{c.moe_inter} * c.expert_width();
  p.experts = per_expert * c.n_experts * c.n_moe_layers();
  p.active = p.trunk - p.embedding + per_expert * c.top_k * c.n_moe_layers();
  return p;
}

}  // namespace waste
