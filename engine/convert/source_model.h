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
//     released; mtp.* (multi-token prediction): not used (waste convert lists them)
//   MiniMax-M2 (model_type minimax_m2), as released and as transformers 5.25
//   writes it: block_sparse_moe.* as the container names it, except
//     model.layers.L.block_sparse_moe.e_score_correction_bias
//       -> model.layers.L.block_sparse_moe.gate.e_score_correction_bias
//     model.layers.L.block_sparse_moe.experts.E.{w1, w3, w2}.weight (as Kimi's);
//   its FP8 release (F8_E4M3 with weight_scale_inv per 128x128 block) is
//   DeepSeek-V3's encoding, dequantized by the same path (checkpoint.h);
//   Qwen3.5 MoE (architectures Qwen3_5MoeForConditionalGeneration, model_type
//   qwen3_5_moe), a multimodal wrapper: config.json's text_config is the text
//   model (model_type qwen3_5_moe_text, Qwen3-Next's layers), its tensors
//   under model.language_model. where the container has model. (lm_head. as
//   is), Qwen3-Next's names otherwise but for the Gated DeltaNet's input
//   projections, released separately:
//     linear_attn.in_proj_qkv [2K + V][hidden] (every q, every k, every v),
//     in_proj_z [V][hidden], in_proj_b and in_proj_a [value heads][hidden]
//   which convert gathers into Qwen3-Next's in_proj_qkvz and in_proj_ba
//   (rows grouped per key head, TrunkSpec): a permutation of rows, lossless,
//   so the forward pass is Qwen3-Next's. The vision tower's model.visual.*:
//   not used (waste convert lists them); mtp.*: not used, listed as Qwen3-Next's are
//   Kimi-Linear (model_type kimi_linear), Moonshot's names, which the container keeps:
//     model.layers.L.block_sparse_moe.experts.E.{w1 (gate), w3 (up), w2 (down)}.weight
//   GPT-OSS (model_type gpt_oss), its experts fused per layer, in MXFP4:
//     model.layers.L.mlp.experts.gate_up_proj_{blocks,scales} [E][2 * inter]...:
//       gate the even rows, up the odd ones; gate_up_proj_bias [E][2 * inter] likewise
//     model.layers.L.mlp.experts.down_proj_{blocks,scales}, down_proj_bias [E][hidden]
//   or, as transformers' save_pretrained writes a fine-tune's BF16 experts,
//   transposed (the parameters' own [E][in][out] layout):
//     model.layers.L.mlp.experts.gate_up_proj [E][hidden][2 * inter] (gate the
//       even columns, up the odd ones), down_proj [E][inter][hidden]
//     model.layers.L.mlp.router.{weight,bias} -> model.layers.L.block_sparse_moe.gate.*
//   Kimi K3 (architectures KimiK3ForConditionalGeneration), a multimodal
//   wrapper: config.json's text_config is the text model (model_type
//   kimi_linear, Moonshot's names as above), its tensors are under
//   language_model. (kept in the container, as WARP's converter keeps them:
//   tensor_prefix), the routed experts in compressed-tensors' MXFP4
//   (BASE.weight_packed, BASE.weight_scale) and the rest BF16; the vision
//   tower's vision_tower.* and mm_projector.*: not used (waste convert lists them)
//   Kimi K2.5 / K2.6 (architectures KimiK25ForConditionalGeneration, or
//   transformers' Kimi_K25ForConditionalGeneration, model_type kimi_k25): the
//   same wrapper around a DeepSeek-V3 text model (text_config model_type
//   kimi_k2 or deepseek_v3), DeepSeek's names under language_model.
//   (language_model.model.layers.L.*, language_model.lm_head.weight), its
//   vision tower as K3's; its released INT4 experts are refused (checkpoint.h)
//   Everything else has the container's name (engine/format/model_config.h, TrunkSpec).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/convert/checkpoint.h"
#include "engine/format/model_config.h"

namespace waste::convert {

// Whose tensor names: Kimi-Linear's are Moonshot's, GPT-OSS's its own, Qwen3.5's under
// model.language_model. (with separate Gated DeltaNet projections), the
// others DeepSeek's.
enum class Family {
  kDeepseekV3,
  kKimiLinear,
  kQwen3Moe,
  kGlm4Moe,
  kGptOss,
  kQwen3Next,
  kMinimaxM2,
  kQwen35Moe
};

// Rows [first, first + rows) of a checkpoint tensor: a trunk tensor of the
// container is one or more of these, in order.
struct RowSpan {
  Weight weight;
  int64_t first = 0, rows = 0;
};

// Where matrix m of a routed expert lies in the checkpoint: its row i is
// row first + i * step of `weight` (each of the matrix's width) or, when
// `transposed` (GPT-OSS's [E][in][out] BF16 experts), column
// column + i * step of the `cols` rows from `first` on.
struct ExpertMatrix {
  Weight weight;
  int64_t first = 0, step = 1, rows = 0, cols = 0;
  bool transposed = false;
  int64_t column = 0;
};

struct SourceModel {
  Family family = Family::kDeepseekV3;
  nlohmann::json config;  // what the container's manifest carries (normalized, below)
  ModelConfig shape;
  // Before every tensor name of the text model, in the checkpoint and in the
  // container (the manifest's tensor_prefix, DefaultTensorPrefix): K3's
  // "language_model.", else "".
  std::string prefix;
  // Rows and columns of gate, up and down of a routed expert (the record's,
  // RecordLayout::For: K3's experts work in the latent width, not hidden).
  int64_t expert_rows[3] = {}, expert_cols[3] = {};

  // The checkpoint's name for a trunk tensor of the container (named
  // without the prefix, as TrunkSpec names it).
  std::string TrunkName(const std::string& container_name) const;
  // Where trunk tensor `container_name` (of `shape`) lies in the checkpoint:
  // the whole of TrunkName's tensor (its shape is the caller's to check), or
  // for Qwen3.5 MoE's in_proj_qkvz and in_proj_ba rows of its four released
  // projections, their shapes checked against the config.
  Result<std::vector<RowSpan>> FindTrunk(const Checkpoint& ck, const std::string& container_name,
                                         const std::vector<int64_t>& shape) const;
  // Rows [first, first + n) of the tensor `spans` make, as float32.
  static Status ReadSpans(const Checkpoint& ck, const std::vector<RowSpan>& spans, int64_t first,
                          int64_t n, float* out);
  // Whether a checkpoint tensor belongs to a part the text model does not
  // use and the container leaves out by design: a wrapper's vision tower
  // (K3's, K2.5's, Qwen3.5's).
  bool IsVisionTensor(const std::string& checkpoint_name) const;
  // Whether it is Qwen3-Next's or Qwen3.5's multi-token-prediction weights
  // (mtp.*), which the container leaves out (a later issue uses them).
  bool IsMtpTensor(const std::string& checkpoint_name) const;
  // Matrix m (0 gate, 1 up, 2 down) of routed expert e, found and its shape
  // checked against the config.
  Result<ExpertMatrix> FindExpert(const Checkpoint& ck, int layer, int expert, int matrix) const;
  // Its rows as float32, rows * cols values.
  static Status ReadExpert(const Checkpoint& ck, const ExpertMatrix& m, float* out);
  // The biases of matrix m's rows of expert e (shape.expert_bias), as float32.
  Status ReadExpertBias(const Checkpoint& ck, int layer, int expert, int matrix,
                        float* out) const;
};

// Reads a config.json. Normalized for the container: a wrapper's text_config
// becomes the config, the wrapper's other keys its "_outer" object (as WARP's
// converter writes it); Qwen3.5 MoE's text_config becomes the config, with the
// wrapper's architectures (its vision keys are not needed); transformers 5's
// rope_parameters become rope_theta /
// rope_scaling; quantization_config and compression_config are dropped (the
// container's weights are not the checkpoint's). Refused by name: an unknown
// model_type, a text_config of another wrapper than K3's, K2.5's (whose text
// model must be DeepSeek-V3's and whose lm_head is not tied) or Qwen3.5's, an activation other
// than silu (K3: silu or situ), tied embeddings,
// rope_interleave false for MLA, and whatever ModelConfig::FromJson refuses.
Result<SourceModel> MapSource(const nlohmann::json& config);

}  // namespace waste::convert
