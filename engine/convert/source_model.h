// What a checkpoint's config.json and tensor names mean to the container:
// the families the engine runs, as their checkpoints are published.
//
//   DeepSeek-V3 family (model_type deepseek_v3, kimi_k2: V3, R1, Kimi K2),
//   Qwen3-MoE (qwen3_moe) and GLM-4.5 (glm4_moe), as released and as
//   transformers 5.24's save_pretrained writes them (per-expert names too):
//     model.layers.L.mlp.{gate, shared_experts}.*  -> model.layers.L.block_sparse_moe.*
//     model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight  (routed experts)
//     model.layers.N.* for N >= num_hidden_layers (multi-token prediction,
//     DeepSeek's and GLM's num_nextn_predict_layers): not used
//   Qwen3-Next (model_type qwen3_next): the same mlp. -> block_sparse_moe.
//     (gate, shared_expert, shared_expert_gate, experts.E.*), linear_attn.* as
//     released; mtp.* (multi-token prediction): not used (waste convert lists it)
//   Kimi-Linear (model_type kimi_linear), Moonshot's names, which the container keeps:
//     model.layers.L.block_sparse_moe.experts.E.{w1 (gate), w3 (up), w2 (down)}.weight
//   GPT-OSS (model_type gpt_oss), its experts fused per layer, in MXFP4:
//     model.layers.L.mlp.experts.gate_up_proj_{blocks,scales} [E][2 * inter]...:
//       gate the even rows, up the odd ones; gate_up_proj_bias [E][2 * inter] likewise
//     model.layers.L.mlp.experts.down_proj_{blocks,scales}, down_proj_bias [E][hidden]
//     model.layers.L.mlp.router.{weight,bias} -> model.layers.L.block_sparse_moe.gate.*
//   Everything else has the container's name (engine/format/model_config.h, TrunkSpec).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/convert/checkpoint.h"
#include "engine/format/model_config.h"

namespace waste::convert {

// Whose tensor names: Kimi-Linear's are Moonshot's, GPT-OSS's its own, the
// others DeepSeek's.
enum class Family { kDeepseekV3, kKimiLinear, kQwen3Moe, kGlm4Moe, kGptOss, kQwen3Next };

// Where matrix m of a routed expert lies in the checkpoint: rows
// first + i * step of `weight`, i < rows, each of the matrix's width.
struct ExpertMatrix {
  Weight weight;
  int64_t first = 0, step = 1, rows = 0;
};

struct SourceModel {
  Family family = Family::kDeepseekV3;
  nlohmann::json config;  // what the container's manifest carries (normalized, below)
  ModelConfig shape;

  // The checkpoint's name for a trunk tensor of the container.
  std::string TrunkName(const std::string& container_name) const;
  // Matrix m (0 gate, 1 up, 2 down) of routed expert e, found and its shape
  // checked against the config.
  Result<ExpertMatrix> FindExpert(const Checkpoint& ck, int layer, int expert, int matrix) const;
  // Its rows as float32, rows * cols values.
  static Status ReadExpert(const Checkpoint& ck, const ExpertMatrix& m, float* out);
  // The biases of matrix m's rows of expert e (shape.expert_bias), as float32.
  Status ReadExpertBias(const Checkpoint& ck, int layer, int expert, int matrix,
                        float* out) const;
};

// Reads a config.json. Normalized for the container: transformers 5's
// rope_parameters become rope_theta / rope_scaling; quantization_config and
// compression_config are dropped (the container's weights are not the
// checkpoint's). Refused by name: an unknown model_type, an activation other
// than silu, tied embeddings, rope_interleave false for MLA, and whatever
// ModelConfig::FromJson refuses.
Result<SourceModel> MapSource(const nlohmann::json& config);

}  // namespace waste::convert
