// Inside engine/model only: the resolved weights of one layer, as kernel
// views, so that nothing is looked up by name at run time. Each layer kind's
// file resolves its own tensors (names as in TrunkSpec, model_config.h) and
// computes with them; Model::Resolve builds a Layer from its LayerPlan.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "engine/kernels/matvec.h"
#include "engine/model/architecture.h"
#include "engine/model/model.h"
#include "engine/model/rotary.h"
#include "engine/model/trunk.h"

namespace waste {

// Pointers to n rows `step` floats apart from `base`: each token's input or
// output of a product over a chunk (Model::MatVecMany and its kin).
template <class Float>  // float or const float
std::vector<Float*> RowPointers(Float* base, size_t n, size_t step) {
  std::vector<Float*> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = base + i * step;
  return p;
}

// Kimi Delta Attention and its short convolutions (kda.cc).
struct KdaWeights {
  const kernels::MatrixView *q = nullptr, *k = nullptr, *v = nullptr, *b = nullptr;
  // The output gate: g_a then g_b, or K3's full-rank g alone.
  const kernels::MatrixView *f_a = nullptr, *f_b = nullptr, *g_a = nullptr, *g_b = nullptr;
  const kernels::MatrixView *g = nullptr, *o = nullptr;
  const float* conv[3] = {};       // q, k, v: [C][kernel]
  const float* a_log = nullptr;    // [heads] (K3's padded to head_dim: the first heads read)
  const float* dt_bias = nullptr;  // [C]
  const float* o_norm = nullptr;   // [head_dim]
};
// `attn`: the layer's attention prefix, "model.layers.L.self_attn.".
KdaWeights ResolveKda(const Trunk& t, const ModelConfig& c, const std::string& attn);

// Gated DeltaNet with its short convolution (gated_deltanet.cc; the layout of
// in_proj_qkvz and in_proj_ba is TrunkSpec's).
struct GatedDeltaNetWeights {
  const kernels::MatrixView *qkvz = nullptr, *ba = nullptr, *out = nullptr;
  const float* conv = nullptr;     // [gdn_conv_width][kernel]: q, k, then v channels
  const float* a_log = nullptr;    // [value heads]
  const float* dt_bias = nullptr;  // [value heads]
  const float* norm = nullptr;     // [gdn_v_dim]: the gated output norm's weight
};
// `prefix`: the layer's "model.layers.L.linear_attn.".
GatedDeltaNetWeights ResolveGatedDeltaNet(const Trunk& t, const std::string& prefix);

// Multi-head latent attention (mla.cc).
struct MlaWeights {
  // The query: q_a, its norm and q_b when c.q_lora > 0, else q_proj.
  const kernels::MatrixView *q_a = nullptr, *q_b = nullptr, *q_proj = nullptr;
  const float* q_a_norm = nullptr;
  const kernels::MatrixView *kv_a = nullptr, *kv_b = nullptr;
  const float* kv_a_norm = nullptr;
  const kernels::MatrixView* g = nullptr;  // mla_output_gate: the heads' output gate; else null
  const kernels::MatrixView* o = nullptr;
};
MlaWeights ResolveMla(const Trunk& t, const ModelConfig& c, const std::string& attn);
// The rotation of the rope dims of q and k_pe: YaRN's as the config says, or
// none with mla_use_nope. The same for every MLA layer.
Rotary MlaRotary(const ModelConfig& c);
// (qk_nope + qk_rope)^-0.5, times the rotation's softmax factor.
float MlaSoftmaxScale(const ModelConfig& c, const Rotary& r);

// Grouped-query attention (gqa.cc). The optional tensors are null when the
// config has none.
struct GqaWeights {
  const kernels::MatrixView *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  const float *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr;  // attention_bias
  const float *q_norm = nullptr, *k_norm = nullptr;                     // qk_norm: [head_dim]
  const float* o_bias = nullptr;  // o_bias: [hidden]
  const float* sinks = nullptr;   // sinks: [n_heads], a logit in each head's softmax
  int window = 0;                 // the layer's attn_window (set by Model::Resolve); 0: all
};
GqaWeights ResolveGqa(const Trunk& t, const ModelConfig& c, const std::string& attn);
// The rotation of the first rotary_dim dims of every q and k head:
// rotate-half, plain RoPE or YaRN as the config says, YaRN's attention
// factor on cos and sin (HF's convention for these models).
Rotary GqaRotary(const ModelConfig& c);
// head_dim^-0.5.
float GqaSoftmaxScale(const ModelConfig& c);

// A dense MLP (mlp.cc): `prefix` + {gate,up,down}_proj.weight.
struct MlpWeights {
  const kernels::MatrixView *gate = nullptr, *up = nullptr, *down = nullptr;
};
MlpWeights ResolveMlp(const Trunk& t, const std::string& prefix);

struct Model::Layer {
  LayerPlan plan;
  const float* in_norm = nullptr;
  const float* post_norm = nullptr;
  KdaWeights kda;  // plan.attention == kKda
  MlaWeights mla;  // plan.attention == kMla
  GqaWeights gqa;  // plan.attention == kGqa
  GatedDeltaNetWeights gdn;  // plan.attention == kGatedDeltaNet
  // The dense MLP (kDense) or the shared expert (kMoe with shared_expert);
  // null otherwise (Model::DenseMlp).
  const kernels::MatrixView *gate = nullptr, *up = nullptr, *down = nullptr;
  // kMoe with shared_expert and c.shared_expert_gate: the shared expert's
  // output is scaled by sigmoid(shared_gate . h) (Model::DenseMlp).
  const kernels::MatrixView* shared_gate = nullptr;
  // kMoe: the router's matrix, its correction bias (router.h; empty when
  // the config has none) and the bias of its logits (null when none).
  const kernels::MatrixView* router = nullptr;
  std::span<const float> router_bias;
  const float* router_logit_bias = nullptr;
  // kMoe with a latent (c.latent > 0): the routed experts' down and up
  // projections and, with latent_norm, the norm of their weighted sum.
  const kernels::MatrixView *latent_down = nullptr, *latent_up = nullptr;
  const float* latent_norm = nullptr;
  // Attention Residuals (c.attn_res_block > 0): the norm weight and query of
  // the mix before the attention [0] and before the feed-forward [1].
  const float* res_norm[2] = {};
  const float* res_proj[2] = {};
};

}  // namespace waste
