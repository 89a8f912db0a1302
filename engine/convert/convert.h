// `waste convert`: a Hugging Face checkpoint directory to a container.
//
// Order of work, so that bad input is refused before anything is written
// and an interruption loses at most one layer:
//   1. config.json mapped (source_model.h), every shard opened and its
//      header checked, every tensor the container needs found and its shape
//      and dtype checked (checkpoint.h);
//   2. the trunk, tensor by tensor, rows decoded a few MB at a time;
//   3. each MoE layer: codebooks (VQ formats), then the bank, experts
//      decoded and encoded on `jobs` threads a few at a time;
//   4. tokenizer files, then the manifest, last, by rename.
// OUT/convert-state.json records what is finished (the writer's state, the
// per-layer errors) after the trunk and after every layer; --resume goes on
// from it, refusing a state made from another checkpoint or other options.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/convert/vq_fit.h"
#include "engine/format/layout.h"

namespace waste::convert {

struct ConvertOptions {
  std::string src;  // checkpoint directory
  std::string out;  // container directory
  int jobs = 2;
  format::Fmt expert_fmt = format::Fmt::kVQ3R;
  // Bulk of the trunk: 4 (Q4G), 8 (Q8G) or 16 (BF16); 0 picks 16 for BF16R,
  // MXFP4 and INT4 experts (a lossless container) and 4 otherwise. The embedding table and
  // LM head are Q8G unless 16; norms and routers are always F32.
  int trunk_bits = 0;
  // The LM head when the trunk is quantized: 8 (Q8G) or 4 (Q4G, half the
  // bytes a token reads there; llama.cpp's Q4_0 files hold it so).
  int head_bits = 8;
  bool resume = false;
  VqFitOptions fit;
  std::function<void(std::string_view)> progress;  // one line at a time
};

struct LayerSummary {
  int layer = 0;
  int experts = 0;
  double mean_rel_error = 0;  // over the layer's 3 x experts matrices, ||W - Q|| / ||W||
  double max_rel_error = 0;
  uint64_t source_bytes = 0;  // of the checkpoint's expert tensors
  double seconds = 0;
};

struct ConvertSummary {
  std::string model_type;
  uint64_t source_bytes = 0;  // every shard
  uint64_t trunk_bytes = 0;   // trunk.bin
  uint64_t expert_bytes = 0;  // banks and codebooks
  uint64_t written_bytes = 0;
  int64_t trunk_params = 0, expert_params = 0;
  double seconds = 0;  // of this run
  int layers_resumed = 0;  // finished by an earlier run
  std::vector<LayerSummary> layers;
  std::vector<std::string> unused;  // checkpoint tensors the container does not need
  // Layers the checkpoint has past num_hidden_layers, skipped: DeepSeek's and
  // GLM's multi-token-prediction layers (num_nextn_predict_layers).
  std::vector<int> skipped_layers;
  // Tensors of a part the text model does not use, skipped: K3's and K2.5's
  // vision tower (vision_tower.*, mm_projector.*), Qwen3.5 MoE's
  // (model.visual.*). Not in `unused`.
  std::vector<std::string> skipped_vision;
  // Qwen3-Next's and Qwen3.5's multi-token-prediction weights (mtp.*),
  // skipped. Not in `unused`.
  std::vector<std::string> skipped_mtp;
  std::string tokenizer;            // what the tokenizer came from, or why there is none

  double trunk_bits_per_weight() const {
    return trunk_params ? 8.0 * static_cast<double>(trunk_bytes) / trunk_params : 0;
  }
  double expert_bits_per_weight() const {
    return expert_params ? 8.0 * static_cast<double>(expert_bytes) / expert_params : 0;
  }
};

Result<ConvertSummary> Convert(const ConvertOptions& o);

// Parses --expert-format: bf16, mxfp4, int4, q4gr (or q4g), vq3r, vq2r, vq4p (any case).
Result<format::Fmt> ParseExpertFormat(std::string_view name);

inline constexpr const char* kStateFile = "convert-state.json";

}  // namespace waste::convert
