// The dense trunk as the forward pass sees it: every tensor the model needs,
// resident in memory, as kernel views. The embedding table stays on disk and
// is read a row at a time (one row per token; the table is a large share of
// the trunk). In this process the trunk is read from trunk.bin; attached to
// wasted it will be the daemon's shared segment.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/format/container.h"
#include "engine/kernels/matvec.h"
#include "engine/memory/region.h"

namespace waste {

class Trunk {
 public:
  // Reads every trunk tensor but the embedding table from `ct` into memory.
  static Result<std::unique_ptr<Trunk>> Load(const Container& ct);

  // A matrix the config says exists (TrunkSpec); nullptr-free by contract:
  // Load has checked presence and shape.
  const kernels::MatrixView& Matrix(const std::string& name) const;
  // An F32 tensor's values.
  const float* Vector(const std::string& name) const;
  // Row `token` of the embedding table, dequantized into out[hidden].
  Status EmbeddingRow(int token, float* out) const;

  uint64_t resident_bytes() const { return bytes_.size(); }
  bool huge_pages() const { return bytes_.huge_pages(); }

 private:
  Trunk() = default;
  const Container* ct_ = nullptr;
  Region bytes_;  // all resident tensors, each payload then scales
  std::unordered_map<std::string, kernels::MatrixView> views_;
  const TrunkTensor* embedding_ = nullptr;
};

}  // namespace waste
