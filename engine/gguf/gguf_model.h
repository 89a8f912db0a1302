// A GGUF (llama.cpp's model file) mapped to the model waste runs: its
// metadata to waste's ModelConfig (the struct `waste convert` fills from a
// config.json), and its tensors to the trunk tensors TrunkSpec names and to
// each routed expert's three matrices. Nothing is read but the headers
// gguf.h already holds: this library does no arithmetic and no I/O of its
// own, so wasted can link it.
//
// Architectures mapped (general.architecture): qwen3moe, deepseek2
// (DeepSeek-V3 / R1, Kimi K2), glm4moe, gpt-oss, qwen3next and kimi-linear.
// The config of all six; the tensors of the first four (qwen3next's and
// kimi-linear's tensors are refused by name: llama.cpp's converter changes
// their values, not only their layout; gguf_model.cc says how). Any other
// architecture, a key a family needs that is missing or out of range, a
// tensor missing or of the wrong shape or type, is refused by name.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/format/model_config.h"
#include "engine/gguf/gguf.h"

namespace waste::gguf {

// Where one GGUF tensor's bytes are.
struct TensorRef {
  std::string name;            // the GGUF's
  uint32_t type = 0;           // ggml type code
  std::vector<uint64_t> dims;  // ne0 (the row) first
  int file = 0;                // which of a split's files
  uint64_t offset = 0;         // from that file's start
  uint64_t bytes = 0;
};

// How a trunk tensor is made of GGUF tensors.
enum class Layout {
  // One GGUF tensor, the same values in the same order: GGUF's dims are the
  // shape reversed (ne0 is a row's length).
  kSame,
  // MLA's kv_b_proj [heads * (qk_nope + v_head)][kv_lora] as newer
  // converters split it: parts[0] attn_k_b, per head the key rows
  // transposed (ne {qk_nope, kv_lora, heads}: head h is a [kv_lora][qk_nope]
  // matrix), parts[1] attn_v_b, per head the value rows as they are (ne
  // {kv_lora, v_head, heads}). Older GGUFs keep one attn_kv_b (kSame).
  kMlaKvbSplit,
};

// One trunk tensor the forward pass needs (TrunkSpec's name and shape).
struct TrunkTensor {
  std::string name;            // waste's, as TrunkSpec names it
  std::vector<int64_t> shape;  // waste's, as TrunkSpec gives it (rows first)
  Storage storage = Storage::kMatrix;
  Layout layout = Layout::kSame;
  std::vector<TensorRef> parts;  // kSame: one; kMlaKvbSplit: k_b, v_b
};

// One matrix of one routed expert: `rows` rows of `cols` values, row-major
// in ggml's blocks of `type`, at (file, offset), `bytes` long; a contiguous
// slice of the layer's ffn_{gate,up,down}_exps (or of ffn_gate_up_exps,
// whose expert holds its gate rows, then its up rows).
struct ExpertSlice {
  int file = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint32_t type = 0;
  int64_t rows = 0, cols = 0;
};

// A MoE layer's expert tensors.
struct ExpertTensors {
  // gate, up, down; with a merged gate_up, gate and up are the same tensor.
  std::array<TensorRef, 3> matrix;
  bool merged_gate_up = false;
  // GPT-OSS's expert biases (ffn_{gate,up,down}_exps.bias, F32, ne {rows, E}).
  bool has_bias = false;
  std::array<TensorRef, 3> bias;
};

struct GgufModel {
  std::string architecture;  // general.architecture
  // The config.json keys the metadata stands for, and `config` read from
  // them by ModelConfig::FromJson (so its checks and bounds are a checkpoint's).
  nlohmann::json config_json;
  ModelConfig config;
  std::vector<TrunkTensor> trunk;      // TrunkSpec's order
  std::vector<ExpertTensors> experts;  // [n_layers]; used where config.is_moe_layer
  std::vector<std::string> skipped;    // GGUF tensors not mapped (multi-token prediction)

  // Matrix m (0 gate, 1 up, 2 down) of expert e of MoE layer `layer`.
  ExpertSlice Slice(int layer, int expert, int m) const;
  // Its bias (has_bias only): `rows` float32 values.
  ExpertSlice BiasSlice(int layer, int expert, int m) const;
  // The bytes of one expert of `layer` (its three matrices and any biases).
  uint64_t ExpertBytes(int layer) const;
};

// The config alone (tensor infos are read for what they imply: the
// vocabulary, the head, GLM's biases and q/k norms). Errors name the key.
Result<GgufModel> MapConfig(const Gguf& g);

// The config and every tensor, shapes and types checked against it.
Result<GgufModel> MapModel(const Gguf& g);

}  // namespace waste::gguf
