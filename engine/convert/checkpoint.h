// A Hugging Face checkpoint directory as published: config.json, the
// safetensors shards (those model.safetensors.index.json lists, or every
// *.safetensors file when there is no index), and the tokenizer files.
//
// A weight is found by its model name whatever its storage:
//   plain      NAME in F32, F16 or BF16
//   FP8 block  NAME in F8_E4M3 with NAME_scale_inv ([ceil(rows/128)][ceil(cols/128)]
//              float32 or bf16; the block from config.quantization_config.weight_block_size)
//   MXFP4      BASE.weight_packed (U8, [rows][cols/2]) and BASE.weight_scale (U8 or
//              F8_E8M0, [rows][cols/32]) for NAME = BASE.weight; or, as GPT-OSS
//              ships its experts, NAME_blocks (U8 [..., rows, cols/32, 16]) and
//              NAME_scales (U8 [..., rows, cols/32])
//   INT4       compressed-tensors' pack-quantized (Kimi K2.5's and K2-Thinking's
//              experts): BASE.weight_packed (I32, [rows][cols/8]), BASE.weight_scale
//              (BF16, [rows][cols/32]) and BASE.weight_shape (I32 or I64, [rows, cols]),
//              when config.quantization_config says int, 4 bits, symmetric, groups
//              of 32 (any other scheme is refused by name)
// and decoded to float32 rows. Every shard, tensor entry and scale shape is
// checked before use; errors name the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/convert/safetensors.h"

namespace waste::convert {

enum class Storage { kPlain, kFp8Block, kMxfp4, kInt4 };

// One weight: where its bytes are and the shape the model sees.
struct Weight {
  std::string name;
  Storage storage = Storage::kPlain;
  std::vector<int64_t> shape;  // logical (MXFP4, INT4: unpacked)
  int64_t rows = 1, cols = 1;  // shape viewed as [product of leading dims][last dim]
  const SafetensorsFile* file = nullptr;
  const TensorEntry* data = nullptr;   // the values (packed codes for MXFP4, INT4)
  const TensorEntry* scale = nullptr;  // FP8, MXFP4 and INT4 only
  const SafetensorsFile* scale_file = nullptr;  // the shard holding `scale`
  int block_rows = 128, block_cols = 128;  // FP8 block; MXFP4, INT4: 1 x 32

  std::string where() const;  // "FILE: tensor NAME"
  std::string describe() const;  // dtype and shape, for messages
};

class Checkpoint {
 public:
  static Result<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  uint64_t shard_bytes() const { return shard_bytes_; }  // all shards together
  int shard_count() const { return static_cast<int>(files_.size()); }

  // The weight called `name`; an error naming it when the checkpoint has none.
  Result<Weight> Find(const std::string& name) const;
  bool Has(const std::string& name) const;

  // Rows [first, first + n) of `w` as float32, n * w.cols values. Refuses a
  // value that is not finite, naming the tensor and the row. Thread-safe.
  Status ReadRows(const Weight& w, int64_t first, int64_t n, float* out) const;
  // Row `row` of an MXFP4 weight as stored: cols / 2 code bytes (low nibble
  // first) and cols / 32 E8M0 scales. Refuses scale 255 (NaN). Thread-safe.
  Status ReadMxfp4Row(const Weight& w, int64_t row, uint8_t* codes, uint8_t* scales) const;
  // Row `row` of an INT4 weight as stored: cols / 2 code bytes (the int32
  // words' bytes) and cols / 32 bf16 scales (2 bytes each). Refuses a scale
  // that is not finite. Thread-safe.
  Status ReadInt4Row(const Weight& w, int64_t row, uint8_t* codes, uint8_t* scales) const;
  // Drops the pages `w` occupies from this process (they stay cached).
  void Release(const Weight& w) const;
  // Starts reading `w` in ahead of ReadRows (SafetensorsFile::Prefetch).
  void Prefetch(const Weight& w) const;
  // The same for the codes of rows [first, first + n) only.
  void ReleaseRows(const Weight& w, int64_t first, int64_t n) const;

  // Tensors no Find has asked for: what the conversion left out.
  std::vector<std::string> Unused() const;

 private:
  Checkpoint() = default;
  const TensorEntry* Entry(const std::string& name, const SafetensorsFile** file) const;
  Status FindInt4(const std::string& name, Weight* w) const;

  std::string dir_;
  nlohmann::json config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, int> where_;  // tensor -> index in files_
  uint64_t shard_bytes_ = 0;
  int fp8_block_rows_ = 128, fp8_block_cols_ = 128;
  // Why an I32 weight_packed cannot be read ("" when quantization_config
  // gives the INT4 scheme waste holds).
  std::string int4_refusal_;
  mutable std::mutex used_mu_;
  mutable std::set<std::string> used_;
};

}  // namespace waste::convert
