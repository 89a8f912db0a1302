// The attention kinds' table: each LayerKind and the maker of its layers.
// A new kind is its file (its class, its maker declared in layer.h) and an
// entry here.

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

}  // namespace waste
