// The model's shape, read from the `config` object of manifest.json (a
// Hugging Face config.json, as WARP's converter copies it) and bounded so that
// no dimension can size an allocation or a loop beyond reason.
//
// The families understood: Kimi-Linear (model_type kimi_linear: KDA and MLA
// layers, MoE with a shared expert), the DeepSeek-V3 family (deepseek_v3,
// kimi_k2: MLA with YaRN rotary, grouped noaux_tc routing), Qwen3-MoE
// (qwen3_moe: GQA with q/k norms, softmax routing, no shared expert),
// GLM-4.5 (glm4_moe: GQA with partial rotary and biases, DeepSeek-V3's
// routing, a shared expert), Qwen3-Next (qwen3_next: Gated DeltaNet and
// gated GQA layers, softmax routing, a gated shared expert; Qwen3.5 MoE's text
// model, qwen3_5_moe_text, is the same arch), MiniMax-M2
// (minimax_m2: GQA with q/k norms across all heads and partial rotary,
// sigmoid routing with a correction bias and no groups, no shared expert,
// every layer MoE) and Kimi K3
// (Kimi-Linear's layers with K3's parts: a latent MoE, Attention Residuals,
// SiTU, KDA's full-rank output gate and bounded decay, MLA's output gate; its
// config nested under text_config, or flattened with the wrapper's keys under
// _outer as WARP's converter writes it), GLM-4.7-Flash (glm4_moe_lite:
// DeepSeek-V3's MLA and routing, which MoE layers mlp_layer_types says) and
// dots.llm1 (dots1: Qwen3's GQA with q/k norms, DeepSeek-V3's routing and
// shared experts) and DeepSeek-V3.2 (deepseek_v32: GLM-4.7-Flash's layers
// with DeepSeek Sparse Attention's indexer in every MLA layer) and GLM-5
// (glm_moe_dsa: the same, its indexer's rotary interleaved, and GLM-5.2's
// layers that share the previous indexer's choice). Anything else,
// and any setting of theirs that this project does not implement, is
// refused by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace waste {

enum class Arch {
  kKimiLinear,
  kDeepseekV3,
  kQwen3Moe,
  kGlm4Moe,
  kGptOss,
  kQwen3Next,
  kKimiK3,
  kMinimaxM2,
  kGlm4MoeLite,
  kDots1,
  kDeepseekV32,
  kGlmMoeDsa,
};

// kGqa: grouped-query attention with a K/V cache (engine/model/gqa.cc);
// kGatedDeltaNet: engine/model/gated_deltanet.cc.
enum class LayerKind { kKda, kMla, kGqa, kGatedDeltaNet };

struct YarnConfig {
  double factor = 1.0;  // <= 1 means plain RoPE
  double original_max_position = 4096;
  double beta_fast = 32;
  double beta_slow = 1;
  double mscale = 1;
  double mscale_all_dim = 0;
  bool truncate = true;  // the correction range rounded out to whole dims (HF's default)
};

struct ModelConfig {
  Arch arch = Arch::kKimiLinear;
  std::string model_type;    // as written in the config
  std::string architecture;  // architectures[0], or the model_type

  int hidden = 0;  // residual width
  int n_layers = 0;
  int vocab = 0;
  float rms_eps = 1e-5f;
  // Qwen3-Next's RMSNorms (input, post-attention, final, q and k) store w
  // and scale by 1 + w (Qwen3NextRMSNorm); Gated DeltaNet's gated norm is plain.
  bool zero_centered_norms = false;
  bool tie_embeddings = false;
  int bos_token = -1;
  // eos_token_id, an id or a list of them (several released configs give
  // a list); each ends generation. Empty: none given.
  std::vector<int> eos_tokens;

  // Feed-forward. Layers [0, first_dense) are dense; of the rest, layer L
  // is MoE when (L + 1) % sparse_step == 0 and L is not in mlp_only
  // (Qwen3-MoE's decoder_sparse_step and mlp_only_layers).
  int dense_inter = 0;  // intermediate width of a dense layer
  int moe_inter = 0;    // intermediate width of one routed expert
  int n_experts = 0;    // routed experts per MoE layer
  int top_k = 0;        // experts chosen per token
  int n_shared = 0;     // shared experts (their width is shared_inter())
  int first_dense = 0;
  int sparse_step = 1;
  std::vector<int> mlp_only;  // sorted
  bool sigmoid_router = true;  // false: softmax scores
  bool renormalize = false;    // top-k weights divided by their sum
  bool router_bias = true;     // the router has e_score_correction_bias (not Qwen3-MoE's or Qwen3-Next's)
  float routed_scale = 1.f;
  // Qwen3-Next: one shared expert of shared_expert_intermediate_size, its
  // output scaled by sigmoid(shared_expert_gate . h).
  int shared_width = 0;  // > 0: the shared expert's width, whatever n_shared
  bool shared_expert_gate = false;
  int n_group = 1;     // grouped top-k: groups of experts ...
  int topk_group = 1;  // ... of which this many are kept
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

  // Grouped-query attention (LayerKind::kGqa): n_heads query heads of
  // head_dim, n_kv_heads key/value heads, each shared by n_heads /
  // n_kv_heads query heads. The first rotary_dim dims of each head rotate
  // (rotate-half; GLM's partial_rotary_factor), with rope_theta and yarn.
  int n_kv_heads = 0;
  int head_dim = 0;
  int rotary_dim = 0;
  bool qk_norm = false;    // RMSNorm over head_dim on q and k, before the rotation
  // MiniMax-M2: the q and k norms span every head at once (one RMSNorm over
  // q_width, one over kv_width, their weights that long), not head by head.
  bool qk_norm_all_heads = false;
  bool attn_bias = false;  // q_proj, k_proj, v_proj have biases
  // GPT-OSS: o_proj has a bias; a learned logit per query head
  // (self_attn.sinks) joins the softmax's denominator; attn_window[L] > 0
  // limits layer L's keys to the latest attn_window[L] positions
  // (sliding_window, on the layers layer_types names sliding_attention).
  bool o_bias = false;
  bool sinks = false;
  std::vector<int> attn_window;  // [n_layers]; 0: every position
  // Qwen3-Next's gated attention: q_proj gives each head's query, then as
  // many gate values; the head's output is scaled by sigmoid(gate) before o_proj.
  bool attn_output_gate = false;

  // Kimi Delta Attention.
  int kda_heads = 0;
  int kda_head_dim = 0;
  int conv_kernel = 0;

  // Kimi K3's parts (Arch::kKimiK3 only; each read by the layer it changes).
  // Latent MoE (routed_expert_hidden_size > 0): the routed experts work on
  // latent = routed_expert_down_proj . h, their weighted sum is RMSNormed
  // (latent_moe_use_norm) and projected back by routed_expert_up_proj; the
  // router and the shared experts read h itself.
  int latent = 0;
  bool latent_norm = false;
  // Attention Residuals (attn_res_block_size > 0): each sublayer's input is a
  // softmax mix of the block representations so far and the block's running
  // sum; a block starts every attn_res_block layers (engine/model/attn_res.h).
  int attn_res_block = 0;
  // hidden_act "situ": every GLU (dense MLP, shared and routed experts) is
  // beta*tanh(g/beta)*sigmoid(g) * linear_beta*tanh(u/linear_beta) (u as is
  // when linear_beta is 0) instead of SiLU(g) * u.
  bool situ = false;
  float situ_beta = 1.f;
  float situ_linear_beta = 0.f;
  // KDA: one full-rank g_proj instead of g_a_proj . g_b_proj for the output
  // gate (use_full_rank_gate); the decay log g = lower_bound *
  // sigmoid(exp(A_log[head]) * z) instead of -exp(A_log[head]) * softplus(z)
  // when kda_lower_bound < 0 (gate_lower_bound). K3 pads A_log to head_dim.
  bool kda_full_rank_gate = false;
  float kda_lower_bound = 0.f;
  // MLA: the heads' output scaled by sigmoid(g_proj . h) before o_proj
  // (mla_use_output_gate).
  bool mla_output_gate = false;
  // DeepSeek Sparse Attention (deepseek_v32, glm_moe_dsa): index_topk > 0
  // gives every MLA layer a lightning indexer of index_heads heads of
  // index_dim, whose key (index_dim values a position) joins the latent
  // cache row, and whose scores keep index_topk positions for MLA's softmax
  // (engine/model/dsa.h); except a layer index_shared marks (GLM-5.2's
  // "shared" indexer_types), which has no indexer and attends the positions
  // the previous layer with one chose. The first qk_rope dims of the
  // indexer's q and k rotate: rotate-half when index_rotate_half (V3.2),
  // interleaved pairs otherwise (GLM-5).
  int index_topk = 0;
  int index_heads = 0;
  int index_dim = 0;
  bool index_rotate_half = true;
  std::vector<bool> index_shared;  // [n_layers] when index_topk > 0

  // Gated DeltaNet (Qwen3-Next's linear attention; conv_kernel is its
  // linear_conv_kernel_dim). Each key head serves gdn_v_heads / gdn_k_heads
  // consecutive value heads.
  int gdn_k_heads = 0;
  int gdn_v_heads = 0;
  int gdn_k_dim = 0;
  int gdn_v_dim = 0;

  std::vector<LayerKind> layer_kind;  // [n_layers]

  bool is_moe_layer(int layer) const;
  int n_moe_layers() const;
  int first_moe_layer() const;  // -1: none
  int n_kda_layers() const { return n_layers_of(LayerKind::kKda); }
  int n_layers_of(LayerKind k) const;
  int kda_width() const { return kda_heads * kda_head_dim; }
  int gdn_key_width() const { return gdn_k_heads * gdn_k_dim; }
  int gdn_value_width() const { return gdn_v_heads * gdn_v_dim; }
  // The channels of the short convolution: q, k (key width each) and v.
  int gdn_conv_width() const { return 2 * gdn_key_width() + gdn_value_width(); }
  // The routed experts' input and output width: the latent, else hidden.
  int expert_width() const { return latent > 0 ? latent : hidden; }
  // Block representations Attention Residuals keeps at most: one per block
  // (the first is the embedding).
  int attn_res_blocks() const {
    return attn_res_block > 0 ? (n_layers + attn_res_block - 1) / attn_res_block : 0;
  }
  int shared_inter() const { return shared_width > 0 ? shared_width : moe_inter * n_shared; }
  // Layer L's indexer (DSA, not shared).
  bool has_indexer(int L) const { return index_topk > 0 && !index_shared[L]; }
  // MLA's cache row per position at layer L: the normed latent, the rotated
  // k_pe and (its indexer's) the index key.
  int mla_row(int L) const { return kv_lora + qk_rope + (has_indexer(L) ? index_dim : 0); }
  int q_width() const { return n_heads * head_dim; }      // GQA
  int kv_width() const { return n_kv_heads * head_dim; }  // GQA, of k and of v

  // Reads and bounds-checks a config object. Errors name the key.
  static Result<ModelConfig> FromJson(const nlohmann::json& config);
};

// The prefix of the trunk's tensor names a container of this config carries
// when its manifest names none: "language_model." for a multimodal wrapper's
// config (a nested text_config, or WARP's flattened one with _outer), as
// WARP's converter and engine have it; "" otherwise.
std::string DefaultTensorPrefix(const nlohmann::json& config);

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
