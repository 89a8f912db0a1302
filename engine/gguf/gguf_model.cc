#include "engine/gguf/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <unordered_set>

namespace waste::gguf {
namespace {

using nlohmann::json;

// The architectures mapped: general.architecture, the config's model_type
// and the class transformers names.
struct Family {
  const char* gguf;
  const char* model_type;
  const char* hf_class;
};
constexpr Family kFamilies[] = {
    {"qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM"},
    {"deepseek2", "deepseek_v3", "DeepseekV3ForCausalLM"},
    {"glm4moe", "glm4_moe", "Glm4MoeForCausalLM"},
    {"gpt-oss", "gpt_oss", "GptOssForCausalLM"},
    {"qwen3next", "qwen3_next", "Qwen3NextForCausalLM"},
    {"kimi-linear", "kimi_linear", "KimiLinearForCausalLM"},
};

// Reads the metadata of one architecture, "<arch>.key", with errors that name the key.
class Meta {
 public:
  Meta(const Gguf& g, std::string arch) : g_(g), arch_(std::move(arch)) {}
  std::string Key(std::string_view k) const { return arch_ + "." + std::string(k); }
  const Value* Find(std::string_view k) const { return g_.Find(Key(k)); }
  bool Has(std::string_view k) const { return Find(k) != nullptr; }

  // An integer scalar in [lo, hi]; absent: `fallback`, or an error without one.
  Result<int64_t> Int(std::string_view k, int64_t lo, int64_t hi,
                      std::optional<int64_t> fallback = std::nullopt) const {
    const Value* v = Find(k);
    if (!v) {
      if (fallback) return *fallback;
      return Status::Error(Key(k) + " is missing");
    }
    const auto n = v->is_array() ? std::nullopt : v->Int();
    if (!n) return Status::Error(Key(k) + " is not an integer (" + v->Describe() + ")");
    if (*n < lo || *n > hi)
      return Status::Error(Key(k) + " = " + std::to_string(*n) + " is outside [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return *n;
  }
  // An integer that may be written per layer (llama.cpp's get_key_or_arr):
  // every layer's must be the same, as waste's config has one.
  Result<int64_t> SameInt(std::string_view k, int64_t lo, int64_t hi,
                          std::optional<int64_t> fallback = std::nullopt) const {
    const Value* v = Find(k);
    if (!v || !v->is_array()) return Int(k, lo, hi, fallback);
    if (v->count == 0) return Status::Error(Key(k) + " is an empty array");
    std::optional<int64_t> first;
    for (uint64_t i = 0; i < v->count; ++i) {
      const auto n = v->Int(i);
      if (!n) return Status::Error(Key(k) + " is not an array of integers");
      if (first && *n != *first)
        return Status::Error(Key(k) + " differs between layers, which is not implemented");
      first = n;
    }
    if (*first < lo || *first > hi)
      return Status::Error(Key(k) + " = " + std::to_string(*first) + " is outside [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return *first;
  }
  // A finite number in [lo, hi]; absent: `fallback`, or an error without one.
  Result<double> Num(std::string_view k, double lo, double hi,
                     std::optional<double> fallback = std::nullopt) const {
    const Value* v = Find(k);
    if (!v) {
      if (fallback) return *fallback;
      return Status::Error(Key(k) + " is missing");
    }
    const auto x = v->is_array() ? std::nullopt : v->Float();
    if (!x) return Status::Error(Key(k) + " is not a number (" + v->Describe() + ")");
    if (!std::isfinite(*x) || *x < lo || *x > hi)
      return Status::Error(Key(k) + " = " + std::to_string(*x) + " is out of range");
    return *x;
  }
  Result<bool> Bool(std::string_view k, bool fallback) const {
    const Value* v = Find(k);
    if (!v) return fallback;
    if (v->type != ValueType::kBool) return Status::Error(Key(k) + " is not a bool");
    return v->Int().value_or(0) != 0;
  }

 private:
  const Gguf& g_;
  std::string arch_;
};

#define WASTE_ASSIGN(lhs, expr)                   \
  do {                                            \
    auto waste_r_ = (expr);                       \
    if (!waste_r_.ok()) return waste_r_.status(); \
    lhs = *waste_r_;                              \
  } while (0)

constexpr int64_t kMaxDim = 1 << 20;

bool HasTensor(const Gguf& g, const std::string& name) {
  return g.FindTensor(name) != nullptr;
}

// The rotary scaling: none, or YaRN. `deepseek_log_mul` (MLA): deepseek2's
// converter writes yarn_log_multiplier as 0.1 * mscale_all_dim (llama.cpp's
// loader divides it back); llama.cpp has no mscale of its own and takes
// mscale = mscale_all_dim, the only case waste's MLA implements. GQA's YaRN
// has neither (transformers' attention factor from the factor alone).
Status ReadRope(const Meta& m, bool deepseek_log_mul, bool truncate, json* c) {
  WASTE_ASSIGN((*c)["rope_theta"], m.Num("rope.freq_base", 1, 1e12, 10000.0));
  const Value* type = m.Find("rope.scaling.type");
  const std::string t = type ? type->text : "none";
  if (type && type->type != ValueType::kString)
    return Status::Error(m.Key("rope.scaling.type") + " is not a string");
  if (t == "none") return Status::Ok();
  if (t != "yarn")
    return Status::Error(m.Key("rope.scaling.type") + " \"" + t +
                         "\" is not implemented (none, yarn)");
  for (const char* k : {"rope.scaling.attn_factor", "rope.scaling.yarn_attn_factor",
                        "rope.scaling.yarn_ext_factor"}) {
    // llama.cpp's defaults (1, and -1 for "computed") are what waste computes.
    if (m.Has(k)) return Status::Error(m.Key(k) + " is not implemented");
  }
  json y = {{"type", "yarn"}, {"truncate", truncate}};
  WASTE_ASSIGN(y["factor"], m.Num("rope.scaling.factor", 0, 1e6));
  WASTE_ASSIGN(y["original_max_position_embeddings"],
               m.Int("rope.scaling.original_context_length", 1, int64_t{1} << 30));
  WASTE_ASSIGN(y["beta_fast"], m.Num("rope.scaling.yarn_beta_fast", 1e-6, 1e6, 32.0));
  WASTE_ASSIGN(y["beta_slow"], m.Num("rope.scaling.yarn_beta_slow", 1e-6, 1e6, 1.0));
  double log_mul;
  WASTE_ASSIGN(log_mul, m.Num("rope.scaling.yarn_log_multiplier", 0, 1e3, 0.0));
  if (log_mul != 0 && !deepseek_log_mul)
    return Status::Error(m.Key("rope.scaling.yarn_log_multiplier") +
                         " is only implemented for MLA (deepseek2)");
  if (deepseek_log_mul) {
    // Stored as float32: its float32 quotient is the config's value.
    const double mscale = static_cast<float>(log_mul / 0.1);
    y["mscale"] = y["mscale_all_dim"] = mscale;
  }
  (*c)["rope_scaling"] = std::move(y);
  return Status::Ok();
}

// MLA's shape (deepseek2, kimi-linear). Newer converters write the MQA form
// (key_length kv_lora + rope, value_length kv_lora) and the per-head sizes
// as key_length_mla / value_length_mla; older ones the per-head sizes as
// key_length / value_length.
Status ReadMla(const Meta& m, json* c) {
  int64_t kv_lora, rope, key, value;
  WASTE_ASSIGN(kv_lora, m.Int("attention.kv_lora_rank", 1, kMaxDim));
  WASTE_ASSIGN(rope, m.Int("rope.dimension_count", 0, 4096));
  WASTE_ASSIGN((*c)["q_lora_rank"], m.Int("attention.q_lora_rank", 0, kMaxDim, 0));
  (*c)["kv_lora_rank"] = kv_lora;
  const bool mla_keys = m.Has("attention.key_length_mla");
  const std::string k = mla_keys ? "attention.key_length_mla" : "attention.key_length";
  const std::string v = mla_keys ? "attention.value_length_mla" : "attention.value_length";
  WASTE_ASSIGN(key, m.Int(k, 1, 8192));
  WASTE_ASSIGN(value, m.Int(v, 1, 4096));
  if (key < rope) return Status::Error(m.Key(k) + " is shorter than rope.dimension_count");
  (*c)["qk_rope_head_dim"] = rope;
  (*c)["qk_nope_head_dim"] = key - rope;
  (*c)["v_head_dim"] = value;
  return Status::Ok();
}

// GQA's shape: head_dim from key_length (value_length must agree), the
// rotary width from rope.dimension_count.
Status ReadGqa(const Meta& m, int64_t hidden, int64_t heads, json* c) {
  int64_t head_dim, rope;
  WASTE_ASSIGN(head_dim, m.Int("attention.key_length", 2, 4096, hidden / heads));
  int64_t value;
  WASTE_ASSIGN(value, m.Int("attention.value_length", 2, 4096, head_dim));
  if (value != head_dim)
    return Status::Error(m.Key("attention.value_length") + " differs from key_length");
  WASTE_ASSIGN(rope, m.Int("rope.dimension_count", 0, head_dim, head_dim));
  (*c)["head_dim"] = head_dim;
  (*c)["partial_rotary_factor"] = static_cast<double>(rope) / static_cast<double>(head_dim);
  WASTE_ASSIGN((*c)["num_key_value_heads"], m.Int("attention.head_count_kv", 1, heads, heads));
  return Status::Ok();
}

// Reads the metadata into a config.json's keys.
Result<json> ConfigJson(const Gguf& g, const Family& f) {
  const Meta m(g, f.gguf);
  const std::string a = f.gguf;
  json c = {{"model_type", f.model_type}, {"architectures", {f.hf_class}}};
  int64_t layers, hidden, heads;
  WASTE_ASSIGN(layers, m.Int("block_count", 1, 512));
  WASTE_ASSIGN(hidden, m.Int("embedding_length", 8, kMaxDim));
  WASTE_ASSIGN(heads, m.Int("attention.head_count", 1, 1 << 12));
  int64_t nextn;
  WASTE_ASSIGN(nextn, m.Int("nextn_predict_layers", 0, layers - 1, 0));
  // GLM's multi-token-prediction layers follow the others (skipped, as convert does).
  c["num_hidden_layers"] = layers - nextn;
  c["hidden_size"] = hidden;
  c["num_attention_heads"] = heads;
  WASTE_ASSIGN(c["rms_norm_eps"], m.Num("attention.layer_norm_rms_epsilon", 1e-12, 0.5));

  // The vocabulary is the embedding's rows; vocab_size, where written, agrees.
  const TensorInfo* embd = g.FindTensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2)
    return Status::Error("token_embd.weight is missing or not a matrix");
  int64_t vocab;
  WASTE_ASSIGN(vocab, m.Int("vocab_size", 1, 1 << 24, static_cast<int64_t>(embd->dims[1])));
  if (vocab != static_cast<int64_t>(embd->dims[1]))
    return Status::Error(m.Key("vocab_size") + " disagrees with token_embd.weight's rows");
  c["vocab_size"] = vocab;
  if (!HasTensor(g, "output.weight"))
    return Status::Error("output.weight is missing: tied embeddings are not implemented");
  c["tie_word_embeddings"] = false;
  for (const auto& [key, hf] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                                std::pair{"tokenizer.ggml.eos_token_id", "eos_token_id"}}) {
    if (const Value* v = g.Find(key)) {
      const auto id = v->is_array() ? std::nullopt : v->Int();
      if (!id) return Status::Error(std::string(key) + " is not an integer");
      c[hf] = *id;
    }
  }

  // Feed-forward and routing.
  WASTE_ASSIGN(c["num_experts"], m.Int("expert_count", 1, 1 << 16));
  WASTE_ASSIGN(c["num_experts_per_tok"], m.Int("expert_used_count", 1, 64));
  WASTE_ASSIGN(c["moe_intermediate_size"], m.SameInt("expert_feed_forward_length", 1, kMaxDim));
  WASTE_ASSIGN(c["intermediate_size"], m.SameInt("feed_forward_length", 0, kMaxDim, 0));
  WASTE_ASSIGN(c["first_k_dense_replace"], m.Int("leading_dense_block_count", 0, layers, 0));
  WASTE_ASSIGN(c["n_shared_experts"], m.Int("expert_shared_count", 0, 64, 0));
  WASTE_ASSIGN(c["n_group"], m.Int("expert_group_count", 1, 1 << 10, 1));
  WASTE_ASSIGN(c["topk_group"], m.Int("expert_group_used_count", 1, 1 << 10, 1));
  WASTE_ASSIGN(c["routed_scaling_factor"], m.Num("expert_weights_scale", 0, 1e4, 1.0));
  WASTE_ASSIGN(c["norm_topk_prob"], m.Bool("expert_weights_norm", false));
  // llama.cpp's gating functions: 1 softmax, 2 sigmoid (3, sqrtsoftplus, is
  // no family of waste's). Absent: each family's default in llama.cpp; for
  // deepseek2 softmax (DeepSeek-V2's files), except GLM-4.7-Flash's, which
  // llama.cpp knows by 47 or 48 layers and 154,880 tokens.
  const std::string gating = a == "qwen3moe" || a == "qwen3next" ? "softmax" : "sigmoid";
  const bool glm_lite = (layers == 47 || layers == 48) && embd->dims[1] == 154880;
  int64_t func;
  WASTE_ASSIGN(func, m.Int("expert_gating_func", 1, 3,
                           (a == "deepseek2" && !glm_lite) || gating == "softmax" ? 1 : 2));
  if (func == 3)
    return Status::Error(m.Key("expert_gating_func") + " 3 (sqrtsoftplus) is not implemented");
  const std::string scoring = func == 1 ? "softmax" : "sigmoid";
  if (a == "deepseek2" && scoring == "softmax")
    return Status::Error(m.Key("expert_gating_func") +
                         " is softmax (DeepSeek-V2's router; llama.cpp's default when the key "
                         "is missing), which is not implemented: only sigmoid (DeepSeek-V3's)");
  if (a != "deepseek2" && a != "kimi-linear" && scoring != gating)
    return Status::Error(m.Key("expert_gating_func") + " is " + scoring + ", not " + a + "'s " +
                         gating);
  c["scoring_func"] = scoring;

  // Attention, per family.
  if (a == "qwen3moe") {
    // llama.cpp's qwen3moe has no dense layers and always renormalizes.
    c["norm_topk_prob"] = true;
    WASTE_RETURN_IF_ERROR(ReadGqa(m, hidden, heads, &c));
    if (c["partial_rotary_factor"] != 1.0)
      return Status::Error(m.Key("rope.dimension_count") +
                           " is not head_dim (qwen3moe rotates it all)");
    c.erase("partial_rotary_factor");
    WASTE_RETURN_IF_ERROR(ReadRope(m, false, true, &c));
  } else if (a == "deepseek2") {
    WASTE_RETURN_IF_ERROR(ReadMla(m, &c));
    c["topk_method"] = "noaux_tc";
    WASTE_RETURN_IF_ERROR(ReadRope(m, true, true, &c));
  } else if (a == "glm4moe") {
    WASTE_RETURN_IF_ERROR(ReadGqa(m, hidden, heads, &c));
    c["attention_bias"] = HasTensor(g, "blk.0.attn_q.bias");
    c["use_qk_norm"] = HasTensor(g, "blk.0.attn_q_norm.weight");
    c["num_nextn_predict_layers"] = nextn;
    WASTE_RETURN_IF_ERROR(ReadRope(m, false, true, &c));
  } else if (a == "gpt-oss") {
    // Its experts' width is intermediate_size; every layer MoE, with biases.
    c["intermediate_size"] = c["moe_intermediate_size"];
    c.erase("moe_intermediate_size");
    WASTE_RETURN_IF_ERROR(ReadGqa(m, hidden, heads, &c));
    c.erase("partial_rotary_factor");
    c["attention_bias"] = true;
    // llama.cpp slides the even layers, as transformers' default layer_types.
    WASTE_ASSIGN(c["sliding_window"], m.Int("attention.sliding_window", 1, 1 << 24));
    // Every released GPT-OSS config has YaRN's truncate false; a GGUF does
    // not say, and llama.cpp does not truncate.
    WASTE_RETURN_IF_ERROR(ReadRope(m, false, false, &c));
  } else if (a == "qwen3next") {
    WASTE_RETURN_IF_ERROR(ReadGqa(m, hidden, heads, &c));
    c["norm_topk_prob"] = true;  // as llama.cpp's qwen3next computes it
    WASTE_ASSIGN(c["shared_expert_intermediate_size"],
                 m.Int("expert_shared_feed_forward_length", 0, kMaxDim, 0));
    int64_t v_heads, inner;
    WASTE_ASSIGN(c["linear_conv_kernel_dim"], m.Int("ssm.conv_kernel", 1, 64));
    WASTE_ASSIGN(c["linear_key_head_dim"], m.Int("ssm.state_size", 1, 4096));
    WASTE_ASSIGN(c["linear_num_key_heads"], m.Int("ssm.group_count", 1, 4096));
    WASTE_ASSIGN(v_heads, m.Int("ssm.time_step_rank", 1, 4096));
    WASTE_ASSIGN(inner, m.Int("ssm.inner_size", 1, kMaxDim));
    if (inner % v_heads != 0)
      return Status::Error(m.Key("ssm.inner_size") + " is not whole value heads");
    c["linear_num_value_heads"] = v_heads;
    c["linear_value_head_dim"] = inner / v_heads;
    if (const Value* rl = m.Find("attention.recurrent_layers")) {
      if (!rl->is_array() || rl->count != static_cast<uint64_t>(layers))
        return Status::Error(m.Key("attention.recurrent_layers") + " is not one bool per layer");
      json types = json::array();
      for (uint64_t L = 0; L < rl->count; ++L)
        types.push_back(rl->Int(L).value_or(0) ? "linear_attention" : "full_attention");
      c["layer_types"] = std::move(types);
    } else {
      WASTE_ASSIGN(c["full_attention_interval"], m.Int("full_attention_interval", 1, 512, 4));
    }
    WASTE_RETURN_IF_ERROR(ReadRope(m, false, true, &c));
  } else {  // kimi-linear
    WASTE_RETURN_IF_ERROR(ReadMla(m, &c));
    // llama.cpp's kimi-linear rotates nothing, as Kimi-Linear's mla_use_nope.
    c["mla_use_nope"] = true;
    // llama.cpp's kimi-linear always renormalizes, whatever the file says.
    c["moe_renormalize"] = true;
    c.erase("norm_topk_prob");
    // KDA layers are those with no K/V heads (head_count_kv per layer).
    const Value* kv = m.Find("attention.head_count_kv");
    if (!kv || !kv->is_array() || kv->count != static_cast<uint64_t>(layers))
      return Status::Error(m.Key("attention.head_count_kv") +
                           " is missing or not one count per layer (0 marks a KDA layer)");
    json kda = json::array();
    for (uint64_t L = 0; L < kv->count; ++L)
      if (kv->Int(L).value_or(-1) == 0) kda.push_back(L + 1);  // 1-based, as Kimi's configs
    json lac = {{"num_heads", heads}, {"kda_layers", std::move(kda)}};
    WASTE_ASSIGN(lac["head_dim"], m.Int("kda.head_dim", 1, 4096));
    WASTE_ASSIGN(lac["short_conv_kernel_size"], m.Int("ssm.conv_kernel", 1, 64));
    c["linear_attn_config"] = std::move(lac);
    WASTE_RETURN_IF_ERROR(ReadRope(m, true, true, &c));
  }
  return c;
}

// The GGUF name of a trunk tensor TrunkSpec names; "" for one with none.
std::string GgufName(const std::string& arch, const std::string& name) {
  if (name == "model.embed_tokens.weight") return "token_embd.weight";
  if (name == "model.norm.weight") return "output_norm.weight";
  if (name == "lm_head.weight") return "output.weight";
  const std::string lp = "model.layers.";
  if (!name.starts_with(lp)) return "";
  const size_t dot = name.find('.', lp.size());
  const std::string layer = name.substr(lp.size(), dot - lp.size());
  const std::string rest = name.substr(dot + 1);
  // GLM's and GPT-OSS's post-attention norm has a name of its own.
  const bool post = arch == "glm4moe" || arch == "gpt-oss";
  static const std::pair<const char*, const char*> kSuffix[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"self_attn.sinks", "attn_sinks.weight"},
      {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
      {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
      {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
      {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
      {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
      {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
      {"block_sparse_moe.gate.bias", "ffn_gate_inp.bias"},
      {"block_sparse_moe.gate.e_score_correction_bias", "exp_probs_b.bias"},
      {"block_sparse_moe.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"block_sparse_moe.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
      {"block_sparse_moe.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
  };
  if (rest == "post_attention_layernorm.weight")
    return "blk." + layer + (post ? ".post_attention_norm.weight" : ".ffn_norm.weight");
  for (const auto& [w, gg] : kSuffix)
    if (rest == w) return "blk." + layer + "." + gg;
  return "";
}

TensorRef Ref(const TensorInfo& t) {
  return {t.name, t.type, t.dims, t.file, t.offset, t.bytes};
}

std::string Dims(const std::vector<uint64_t>& d) {
  std::string s = "{";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "}";
}

// A GGUF tensor of exactly these dims (ne0 first); F32 when `f32`.
Result<TensorRef> Need(const Gguf& g, const std::string& name, std::vector<uint64_t> dims, bool f32,
                       const std::string& what) {
  const TensorInfo* t = g.FindTensor(name);
  if (!t) return Status::Error(name + " is missing (" + what + ")");
  if (t->dims != dims)
    return Status::Error(name + " is " + Dims(t->dims) + ", not " + Dims(dims) + " (" + what + ")");
  if (f32 && t->type != kF32)
    return Status::Error(name + " is " + TypeName(t->type) + ", not F32 (" + what + ")");
  return Ref(*t);
}

// The tensors llama.cpp's converter changes in value, not only in place,
// which waste's layers would need undone: refused by name.
Status RefuseTensors(const std::string& arch) {
  if (arch == "qwen3next")
    return Status::Error(
        "qwen3next's tensors are not mapped yet: llama.cpp's converter stores ssm_a as "
        "-exp(A_log), the RMSNorm weights as 1 + w, and in_proj_qkvz's rows regrouped into "
        "ssm_in (q, k, v) and ssm_in_z; waste's Gated DeltaNet reads the checkpoint's");
  if (arch == "kimi-linear")
    return Status::Error(
        "kimi-linear's tensors are not mapped yet: llama.cpp's converter stores ssm_a as "
        "-exp(A_log) and dt_bias as ssm_dt.bias; waste's KDA reads the checkpoint's A_log");
  return Status::Ok();
}

Status MapExperts(const Gguf& g, GgufModel* out) {
  const ModelConfig& c = out->config;
  const uint64_t E = c.n_experts, inter = c.moe_inter, w = c.expert_width();
  out->experts.resize(c.n_layers);
  for (int L = 0; L < c.n_layers; ++L) {
    if (!c.is_moe_layer(L)) continue;
    const std::string p = "blk." + std::to_string(L) + ".";
    ExpertTensors& x = out->experts[L];
    const std::string what = "layer " + std::to_string(L) + "'s experts";
    if (const TensorInfo* gu = g.FindTensor(p + "ffn_gate_up_exps.weight")) {
      // Merged: each expert's gate rows, then its up rows.
      auto r = Need(g, gu->name, {w, 2 * inter, E}, false, what);
      if (!r.ok()) return r.status();
      x.matrix[0] = x.matrix[1] = *r;
      x.merged_gate_up = true;
    } else {
      for (int m = 0; m < 2; ++m) {
        auto r = Need(g, p + (m == 0 ? "ffn_gate_exps.weight" : "ffn_up_exps.weight"),
                      {w, inter, E}, false, what);
        if (!r.ok()) return r.status();
        x.matrix[m] = *r;
      }
    }
    auto down = Need(g, p + "ffn_down_exps.weight", {inter, w, E}, false, what);
    if (!down.ok()) return down.status();
    x.matrix[2] = *down;
    x.has_bias = c.expert_bias;
    if (c.expert_bias) {
      static const char* kBias[] = {"ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"};
      for (int m = 0; m < 3; ++m) {
        auto b = Need(g, p + kBias[m], {m == 2 ? w : inter, E}, true, what + "' biases");
        if (!b.ok()) return b.status();
        x.bias[m] = *b;
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<GgufModel> MapConfig(const Gguf& g) {
  const Value* av = g.Find("general.architecture");
  if (!av || av->type != ValueType::kString)
    return Status::Error("general.architecture is missing or not a string");
  const Family* f = nullptr;
  for (const Family& x : kFamilies)
    if (av->text == x.gguf) f = &x;
  if (!f)
    return Status::Error("general.architecture \"" + av->text +
                         "\" is not one waste maps (qwen3moe, deepseek2, glm4moe, gpt-oss, "
                         "qwen3next, kimi-linear)");
  auto c = ConfigJson(g, *f);
  if (!c.ok()) return c.status();
  auto config = ModelConfig::FromJson(*c);
  if (!config.ok()) return config.status().Prefixed("the config this GGUF's metadata gives");
  GgufModel out;
  out.architecture = f->gguf;
  out.config_json = std::move(*c);
  out.config = std::move(*config);
  return out;
}

Result<GgufModel> MapModel(const Gguf& g) {
  auto mapped = MapConfig(g);
  if (!mapped.ok()) return mapped;
  GgufModel& out = *mapped;
  WASTE_RETURN_IF_ERROR(RefuseTensors(out.architecture));
  const ModelConfig& c = out.config;
  std::unordered_set<std::string> used;
  auto mark = [&](const TensorRef& r) { used.insert(r.name); };
  for (const TensorSpec& s : TrunkSpec(c)) {
    TrunkTensor t{s.name, s.shape, s.storage, Layout::kSame, {}};
    const std::string name = GgufName(out.architecture, s.name);
    if (name.empty()) return Status::Error(s.name + " has no GGUF name waste knows");
    std::vector<uint64_t> dims;
    uint64_t n = 1;
    for (auto it = s.shape.rbegin(); it != s.shape.rend(); ++it) {
      dims.push_back(static_cast<uint64_t>(*it));
      n *= static_cast<uint64_t>(*it);
    }
    const std::string kvb = "self_attn.kv_b_proj.weight";
    if (s.storage == Storage::kF32) {
      // Norms, biases, sinks: F32, checked by element count as TrunkSpec's are.
      const TensorInfo* v = g.FindTensor(name);
      if (!v) return Status::Error(name + " is missing (" + s.name + ")");
      if (v->elements() != n || v->type != kF32)
        return Status::Error(name + " is " + TypeName(v->type) + " " + Dims(v->dims) + ", not " +
                             std::to_string(n) + " F32 values (" + s.name + ")");
      t.parts = {Ref(*v)};
    } else if (s.name.ends_with(kvb) && !HasTensor(g, name)) {
      const std::string p = name.substr(0, name.size() - std::string("attn_kv_b.weight").size());
      const uint64_t H = c.n_heads, lora = c.kv_lora;
      auto kb = Need(g, p + "attn_k_b.weight", {uint64_t(c.qk_nope), lora, H}, false, s.name);
      if (!kb.ok()) return kb.status();
      auto vb = Need(g, p + "attn_v_b.weight", {lora, uint64_t(c.v_head), H}, false, s.name);
      if (!vb.ok()) return vb.status();
      t.layout = Layout::kMlaKvbSplit;
      t.parts = {*kb, *vb};
    } else {
      auto r = Need(g, name, dims, false, s.name);
      if (!r.ok()) return r.status();
      t.parts = {*r};
    }
    for (const TensorRef& r : t.parts) mark(r);
    out.trunk.push_back(std::move(t));
  }
  WASTE_RETURN_IF_ERROR(MapExperts(g, &out));
  for (const ExpertTensors& x : out.experts) {
    for (int m = 0; m < 3; ++m) {
      if (!x.matrix[m].name.empty()) mark(x.matrix[m]);
      if (x.has_bias) mark(x.bias[m]);
    }
  }
  // What is left must be a layer the config does not run (GLM's
  // multi-token prediction); anything else is a tensor waste would ignore.
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const std::string& n = g.tensors[i].name;
    if (used.contains(n)) continue;
    int layer = -1;
    if (n.starts_with("blk.")) layer = std::atoi(n.c_str() + 4);
    if (layer >= c.n_layers) {
      out.skipped.push_back(n);
      continue;
    }
    return Status::Error(n + " (" + TypeName(g.tensors[i].type) + " " + Dims(g.tensors[i].dims) +
                         ") is a tensor waste does not map for " + out.architecture);
  }
  return mapped;
}

ExpertSlice GgufModel::Slice(int layer, int expert, int m) const {
  const ExpertTensors& x = experts[layer];
  const TensorRef& t = x.matrix[m];
  const uint64_t E = t.dims[2];
  const uint64_t per = t.bytes / E;  // one expert's bytes of the tensor
  ExpertSlice s{t.file,
                t.offset + per * static_cast<uint64_t>(expert),
                per,
                t.type,
                static_cast<int64_t>(t.dims[1]),
                static_cast<int64_t>(t.dims[0])};
  if (x.merged_gate_up && m < 2) {  // the expert's gate rows, then its up rows
    s.bytes = per / 2;
    s.offset += m == 1 ? per / 2 : 0;
    s.rows /= 2;
  }
  return s;
}

ExpertSlice GgufModel::BiasSlice(int layer, int expert, int m) const {
  const TensorRef& t = experts[layer].bias[m];
  const uint64_t per = t.dims[0] * sizeof(float);
  return {t.file,
          t.offset + per * static_cast<uint64_t>(expert),
          per,
          t.type,
          static_cast<int64_t>(t.dims[0]),
          1};
}

uint64_t GgufModel::ExpertBytes(int layer) const {
  uint64_t n = 0;
  for (int m = 0; m < 3; ++m) {
    n += Slice(layer, 0, m).bytes;
    if (experts[layer].has_bias) n += BiasSlice(layer, 0, m).bytes;
  }
  return n;
}

}  // namespace waste::gguf
