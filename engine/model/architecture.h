// Which layers a model has: one entry per family saying which attention
// kinds its layers take and what follows the attention, and the plan of
// every layer that ForwardPass::Resolve (forward.h) builds from it and
// ForwardPass::Chunk runs. The forward pass reads the plan, never the
// family, so a new family adds an entry here and a file for each layer kind
// it brings, with its entry in attention.cc's table (docs/MODELS.md,
// "Adding a family").
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "engine/format/model_config.h"
#include "base/status.h"

namespace waste {

// What follows a layer's attention.
enum class FfnKind {
  kDense,  // a dense MLP in the trunk (mlp.cc)
  kMoe,    // routed experts from the expert source (router.cc chooses them, moe.cc applies them)
};

// What one layer runs, in this order: RMSNorm, attention, residual; RMSNorm,
// feed-forward, residual.
struct LayerPlan {
  // kKda: kda.cc; kMla: mla.cc; kGqa: gqa.cc; kGatedDeltaNet: gated_deltanet.cc
  // (each kind's maker in attention.cc's table)
  LayerKind attention = LayerKind::kMla;
  FfnKind ffn = FfnKind::kDense;
  // kMoe: a dense MLP (mlp.cc) beside the routed experts, on every token.
  bool shared_expert = false;
};

// A family, as data: what its layers may be. The config says which layer is
// which: its attention kind (ModelConfig::layer_kind), dense or MoE
// (ModelConfig::is_moe_layer: first_k_dense_replace, decoder_sparse_step,
// mlp_only_layers),
// and how many shared experts.
struct Family {
  Arch arch;
  std::span<const LayerKind> attention;  // the kinds its layers may have
  bool moe = false;                      // it may have MoE layers
  bool shared_expert = false;            // its MoE layers may have shared experts
};

// Every layer's plan, from c's family and c itself. Refuses, by name, a
// family without an entry and a config asking for what its family has not.
Result<std::vector<LayerPlan>> PlanLayers(const ModelConfig& c);

}  // namespace waste
