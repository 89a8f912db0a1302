// Synthetic containers: structurally valid, full of deterministic
// pseudo-random weights scaled so activations stay finite, with a small
// tokenizer so the programs can be driven with text. Same spec and seed,
// same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/format/layout.h"

namespace waste {

struct SynthSpec {
  std::string name;       // preset name, or "custom"
  nlohmann::json config;  // Hugging Face style config (model_type, sizes, ...)
  format::Fmt expert_fmt = format::Fmt::kVQ3R;
  int trunk_bits = 4;  // bulk of the trunk: 4 (Q4G) or 8 (Q8G); embedding and head are Q8G
  int head_bits = 8;   // the LM head: 8 (Q8G) or 4 (Q4G)
  uint64_t seed = 1;
  // Routing concentration: the correction bias is route_skew * N(0, 1) per
  // expert. A negative value asks WriteSynthetic to choose the skew that
  // puts `hot_share` of the routing on the busiest 10% of experts.
  double route_skew = -1;
  double hot_share = 0.6;
  // Experts per MoE layer whose bias puts them in nearly every token's
  // choice. A static bias alone cannot make consecutive tokens share experts
  // (the random model's hidden states barely persist); a few such experts
  // are how a trained model's routing overlaps from token to token.
  int anchor_experts = 0;

  nlohmann::json ToJson() const;
  static Result<SynthSpec> FromJson(const nlohmann::json& j);  // a --config file
};

std::vector<std::string> SynthPresetNames();
Result<SynthSpec> SynthPreset(std::string_view name);

struct SynthReport {
  uint64_t bytes = 0;
  double seconds = 0;
  double route_skew = 0;  // the skew used
  // Router-only estimates over random hidden states, drawn independently
  // per token (the real previous-token overlap needs the forward pass).
  double hot_share = 0;            // share of choices on the busiest 10% of experts
  double independent_overlap = 0;  // expected share of experts shared with the previous token
};

// Writes the container for `spec` into `out`. `jobs` threads fill expert
// records; `progress` receives one line per finished layer.
Result<SynthReport> WriteSynthetic(const SynthSpec& spec, const std::string& out, bool overwrite,
                                   int jobs, const std::function<void(std::string_view)>& progress);

}  // namespace waste
