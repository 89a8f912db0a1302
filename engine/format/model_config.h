// The model's shape, read from the `config` object of manifest.json (a
// Hugging Face config.json, as WARP's converter copies it) and bounded so that
// no dimension can size an allocation or a loop beyond reason.
//
// Two families are understood: Kimi-Linear (model_type kimi_linear: KDA and
// MLA layers, MoE with a shared expert) and the DeepSeek-V3 family
// (deepseek_v3, kimi_k2: MLA with YaRN rotary, grouped noaux_tc routing).
// Anything else, and any setting of theirs that this project does not
// implement, is refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace waste {

enum class Arch { kKimiLinear, kDeepseekV3 };

enum class LayerKind { kKda, kMla };

struct YarnConfig {
  double factor = 1.0;  // <= 1 means plain RoPE
  double original_max_position = 4096;
  double beta_fast = 32;
  double beta_slow = 1;
  double mscale = 1;
  double mscale_all_dim = 0;
};

struct ModelConfig {
  Arch arch = Arch::kKimiLinear;
  std::string model_type;    // as written in the config
  std::string architecture;  // architectures[0], or the model_type

  int hidden = 0;  // residual width
  int n_layers = 0;
  int vocab = 0;
  float rms_eps = 1e-5f;
  bool tie_embeddings = false;
  int bos_token = -1;
  int eos_token = -1;

  // Feed-forward. Layers [0, first_dense) are dense, the rest MoE.
  int dense_inter = 0;  // intermediate width of a dense layer
  int moe_inter = 0;    // intermediate width of one routed expert
  int n_experts = 0;    // routed experts per MoE layer
  int top_k = 0;        // experts chosen per token
  int n_shared = 0;     // shared experts (their width is n_shared * moe_inter)
  int first_dense = 0;
  bool sigmoid_router = true;  // false: softmax scores
  bool renormalize = false;    // top-k weights divided by their sum
  float routed_scale = 1.f;
  int n_group = 1;     // grouped top-k: groups of experts ...
  int topk_group = 1;  // ... of which this many are kept
  // block_sparse_moe.gate.e_score_correction_bias exists (DeepSeek-V3, Kimi).
  bool router_correction_bias = true;
  // GPT-OSS's router: its linear layer has a bias (block_sparse_moe.gate.bias)
  // added to the logits, and the top_k logits are softmaxed among themselves.
  bool router_logit_bias = false;
  bool softmax_topk = false;
  // Routed experts: gate, up and down rows have biases (in the records), and
  // with swiglu_limit > 0 the activation is GPT-OSS's clamped SwiGLU,
  // g = min(gate, limit), u = clamp(up, -limit, limit),
  // (u + 1) * g * sigmoid(swiglu_alpha * g); else SiLU(gate) * up.
  bool expert_bias = false;
  float swiglu_limit = 0.f;
  float swiglu_alpha = 1.702f;

  // Multi-head latent attention.
  int n_heads = 0;
  int q_lora = 0;   // 0: q_proj straight from the hidden state
  int kv_lora = 0;  // latent KV width
  int qk_nope = 0;
  int qk_rope = 0;
  int v_head = 0;
  bool mla_nope = false;  // true: the rope dims pass through unrotated (Kimi-Linear)
  double rope_theta = 10000;
  YarnConfig yarn;

  // Kimi Delta Attention.
  int kda_heads = 0;
  int kda_head_dim = 0;
  int conv_kernel = 0;

  std::vector<LayerKind> layer_kind;  // [n_layers]

  bool is_moe_layer(int layer) const { return n_experts > 0 && layer >= first_dense; }
  int n_moe_layers() const { return n_experts > 0 ? n_layers - first_dense : 0; }
  int n_kda_layers() const;
  int kda_width() const { return kda_heads * kda_head_dim; }
  int shared_inter() const { return moe_inter * n_shared; }

  // Reads and bounds-checks a config object. Errors name the key.
  static Result<ModelConfig> FromJson(const nlohmann::json& config);
};

// One trunk tensor the forward pass needs, with the shape it must have.
enum class Storage {
  kMatrix,  // any trunk format; the writer quantizes it
  kRouter,  // any trunk format; the writer keeps it F32
  kF32,     // norms, biases, convolutions: must be F32 (shape checked by element count)
};

struct TensorSpec {
  std::string name;  // without the manifest's tensor_prefix
  std::vector<int64_t> shape;
  Storage storage;
};

// Every trunk tensor of a model of this shape, in a stable order: the single
// statement of tensor names and shapes that the synthetic writer, the
// container check and the parameter count share.
std::vector<TensorSpec> TrunkSpec(const ModelConfig& c);

// Parameter counts: total, and used per token (every trunk tensor except the
// embedding table, plus top_k routed experts per MoE layer).
struct ParamCount {
  int64_t trunk = 0;
  int64_t embedding = 0;
  int64_t experts = 0;  // all routed experts
  int64_t active = 0;
  int64_t total() const { return trunk + experts; }
};
ParamCount CountParams(const ModelConfig& c);

std::string_view ArchName(Arch a);

}  // namespace waste
