// The attention kinds' table: each LayerKind and the maker of its layers.
// A new kind is its file (its class, its maker declared in layer.h) and an
// entry here. And the model's rotation, which its MLA or GQA layers share.

#include <algorithm>
#include <memory>

#include "engine/model/layer.h"

namespace waste {
namespace {

struct AttentionKind {
  LayerKind kind;
  std::unique_ptr<AttentionLayer> (*make)(const LayerBuild& b);
};

constexpr AttentionKind kAttentionKinds[] = {
    {LayerKind::kKda, MakeKda},
    {LayerKind::kGatedDeltaNet, MakeGatedDeltaNet},
    {LayerKind::kMla, MakeMla},
    {LayerKind::kGqa, MakeGqa},
};

}  // namespace

std::unique_ptr<AttentionLayer> MakeAttention(LayerKind kind, const LayerBuild& b) {
  for (const AttentionKind& k : kAttentionKinds)
    if (k.kind == kind) return k.make(b);
  return nullptr;
}

void SetRotation(const ModelConfig& c, LayerContext& ctx) {
  // One rotation and scale for the model's attention: no family mixes MLA
  // and GQA layers (PlanLayers has checked the kinds against the family).
  const bool gqa = std::count(c.layer_kind.begin(), c.layer_kind.end(), LayerKind::kGqa) > 0;
  ctx.rotary = gqa ? GqaRotary(c) : MlaRotary(c);
  ctx.softmax_scale = gqa ? GqaSoftmaxScale(c) : MlaSoftmaxScale(c, ctx.rotary);
}

}  // namespace waste
