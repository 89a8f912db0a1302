#include "engine/model/architecture.h"

#include <algorithm>
#include <string>

namespace waste {
namespace {

// Kimi-Linear: KDA where linear_attn_config.kda_layers lists the layer, MLA
// elsewhere (mla_use_nope: no rotary); MoE with a shared expert.
constexpr LayerKind kKimiLinearAttention[] = {LayerKind::kKda, LayerKind::kMla};
// DeepSeek-V3, Kimi-K2: MLA everywhere (YaRN rotary on the rope dims); MoE
// with a shared expert after the first dense layers; grouped routing
// (router.h; the config's n_group and topk_group). GLM-4.7-Flash the same,
// its dense layers where mlp_layer_types says; DeepSeek-V3.2 and GLM-5 that again, with
// DSA's indexer inside each MLA layer (mla.cc, dsa.cc).
constexpr LayerKind kDeepseekV3Attention[] = {LayerKind::kMla};
// Qwen3-MoE: GQA with q/k norms everywhere; MoE without a shared expert
// where decoder_sparse_step and mlp_only_layers say; softmax routing.
// GLM-4.5: GQA with partial rotary and q/k/v biases; MoE with a shared
// expert after the first dense layers; DeepSeek-V3's routing.
// GPT-OSS: GQA with sinks, q/k/v/o biases and a sliding window on the
// layers layer_types names; MoE everywhere, biased experts, no shared expert.
// MiniMax-M2: GQA with q/k norms across all heads and partial rotary; MoE
// everywhere, no shared expert; sigmoid routing with a correction bias.
// dots.llm1: Qwen3's GQA (q/k norms); DeepSeek-V3's MoE layers (grouped
// sigmoid routing, shared experts) after the first dense layers.
constexpr LayerKind kGqaAttention[] = {LayerKind::kGqa};
// Qwen3-Next: Gated DeltaNet where layer_types says linear_attention, gated
// GQA (q/k norms, partial rotary, an output gate) where full_attention;
// zero-centered RMSNorms; MoE with a gated shared expert, softmax routing.
constexpr LayerKind kQwen3NextAttention[] = {LayerKind::kGatedDeltaNet, LayerKind::kGqa};

// Kimi K3: Kimi-Linear's layer kinds; its parts (latent MoE, Attention
// Residuals, SiTU, KDA's full-rank gate and bounded decay, MLA's output
// gate) are config facts the layers read (model_config.h).
constexpr Family kFamilies[] = {
    {Arch::kKimiLinear, kKimiLinearAttention, /*moe=*/true, /*shared_expert=*/true},
    {Arch::kDeepseekV3, kDeepseekV3Attention, /*moe=*/true, /*shared_expert=*/true},
    {Arch::kQwen3Moe, kGqaAttention, /*moe=*/true, /*shared_expert=*/false},
    {Arch::kGlm4Moe, kGqaAttention, /*moe=*/true, /*shared_expert=*/true},
    {Arch::kGptOss, kGqaAttention, /*moe=*/true, /*shared_expert=*/false},
    {Arch::kQwen3Next, kQwen3NextAttention, /*moe=*/true, /*shared_expert=*/true},
    {Arch::kKimiK3, kKimiLinearAttention, /*moe=*/true, /*shared_expert=*/true},
    {Arch::kMinimaxM2, kGqaAttention, /*moe=*/true, /*shared_expert=*/false},
    {Arch::kGlm4MoeLite, kDeepseekV3Attention, /*moe=*/true, /*shared_expert=*/true},
    {Arch::kDots1, kGqaAttention, /*moe=*/true, /*shared_expert=*/true},
    {Arch::kDeepseekV32, kDeepseekV3Attention, /*moe=*/true, /*shared_expert=*/true},
    {Arch::kGlmMoeDsa, kDeepseekV3Attention, /*moe=*/true, /*shared_expert=*/true},
};

std::string_view KindName(LayerKind k) {
  switch (k) {
    case LayerKind::kKda:
      return "KDA";
    case LayerKind::kMla:
      return "MLA";
    case LayerKind::kGqa:
      return "GQA";
    case LayerKind::kGatedDeltaNet:
      return "Gated DeltaNet";
  }
  return "?";
}

// The family entry for `arch`; nullptr when there is none.
const Family* FindFamily(Arch arch) {
  for (const Family& f : kFamilies)
    if (f.arch == arch) return &f;
  return nullptr;
}

}  // namespace

Result<std::vector<LayerPlan>> PlanLayers(const ModelConfig& c) {
  const std::string family(ArchName(c.arch));
  const Family* f = FindFamily(c.arch);
  if (!f) return Status::Error("no architecture entry for " + family);
  if (c.n_experts > 0 && !f->moe) return Status::Error(family + " has no MoE layers");
  if (c.n_shared > 0 && !f->shared_expert) return Status::Error(family + " has no shared experts");
  std::vector<LayerPlan> plans(c.n_layers);
  for (int L = 0; L < c.n_layers; ++L) {
    LayerPlan& p = plans[L];
    p.attention = c.layer_kind[L];
    if (std::find(f->attention.begin(), f->attention.end(), p.attention) == f->attention.end())
      return Status::Error("layer " + std::to_string(L) + ": " + family + " has no " +
                           std::string(KindName(p.attention)) + " layers");
    p.ffn = c.is_moe_layer(L) ? FfnKind::kMoe : FfnKind::kDense;
    p.shared_expert = p.ffn == FfnKind::kMoe && c.n_shared > 0;
  }
  return plans;
}

}  // namespace waste
