// The dense trunk as the forward pass sees it: every tensor the model needs,
// resident in memory, as kernel views. The embedding table stays on disk and
// is read a row at a time (one row per token; the table is a large share of
// the trunk). In this process the trunk is read from trunk.bin into memory
// the Trunk owns (Load); attached to wasted it is a view of the daemon's
// shared segment, which the daemon filled with PackTrunk (Over). Both are
// in the packed layout of engine/format/trunk_pack.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/format/container.h"
#include "engine/format/trunk_pack.h"
#include "engine/kernels/matvec.h"
#include "engine/memory/region.h"

namespace waste {

class Trunk {
 public:
  // Views over `bytes`, which someone else packed (the daemon's segment,
  // mapped read-only). Not owned and not read here. The caller guarantees
  // that `bytes` holds what PackTrunk wrote for a container with ct's
  // manifest, and stays mapped and unchanged while the Trunk lives; `ct`
  // must outlive it too. Refuses `size` < PackedTrunkBytes and a base not
  // kTrunkAlign-aligned.
  static Result<std::unique_ptr<Trunk>> Over(const Container& ct, const uint8_t* bytes,
                                             uint64_t size);
  // Packs the trunk of `ct` (which must outlive it) into memory it owns.
  static Result<std::unique_ptr<Trunk>> Load(const Container& ct);

  // A matrix the config says exists (TrunkSpec); nullptr-free by contract:
  // Container::Open has checked presence and shape.
  const kernels::MatrixView& Matrix(const std::string& name) const;
  // An F32 tensor's values.
  const float* Vector(const std::string& name) const;
  // Row `token` of the embedding table, dequantized into out[hidden].
  Status EmbeddingRow(int token, float* out) const;

  const Container& container() const { return *ct_; }
  uint64_t resident_bytes() const { return resident_bytes_; }  // PackedTrunkBytes
  // True when the bytes belong to someone else (Over), false when owned (Load).
  bool shared() const { return shared_; }
  // Whether the owned region got transparent huge pages; false when shared
  // (the segment's owner knows how it was mapped).
  bool huge_pages() const { return bytes_.huge_pages(); }

 private:
  Trunk() = default;
  // The one place views are built, for Load and Over alike.
  static std::unique_ptr<Trunk> View(const Container& ct, const uint8_t* base);

  const Container* ct_ = nullptr;
  Region bytes_;  // Load only: the packed trunk
  uint64_t resident_bytes_ = 0;
  bool shared_ = false;
  std::unordered_map<std::string, kernels::MatrixView> views_;
  const TrunkTensor* embedding_ = nullptr;
};

}  // namespace waste
