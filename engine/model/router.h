// MoE routing: from router logits to the chosen experts and their weights.
// Sigmoid or softmax scores; the correction bias steers which experts are
// chosen but not their weights; grouped top-k (DeepSeek-V3's noaux_tc)
// first keeps the topk_group best groups, each group scored by the sum of
// its two best biased scores; then top_k experts; then optional
// renormalization and the routed scaling factor. With softmax_topk
// (GPT-OSS) instead: the top_k logits (ties to the lower id), their softmax
// among themselves, times the routed scaling factor; the correction bias is
// not used.
#pragma once

#include <span>

#include "engine/format/model_config.h"

namespace waste {

struct Routing {
  int expert[64];
  float weight[64];
  int count = 0;
};

// logits[n_experts] -> routing. bias may be empty (no correction).
void Route(const ModelConfig& c, std::span<const float> logits, std::span<const float> bias,
           Routing* out);

}  // namespace waste
