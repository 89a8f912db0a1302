// The trunk packed for residence in memory, a function of the manifest
// alone: every trunk tensor under the tensor prefix but the embedding table
// (which stays on disk and is read a row at a time), in manifest order, each its payload then its
// scales, each starting at a multiple of kTrunkAlign bytes from the base;
// padding is zero. wasted packs it into its shared trunk segment; the
// forward pass packs it into memory of its own or views the daemon's
// (engine/model/trunk.h), both through PackedTrunkLayout.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "engine/format/container.h"

namespace waste {

// Alignment of every tensor in the packed layout, relative to its base.
constexpr uint64_t kTrunkAlign = 64;

// A tensor's place in the packed layout.
struct PackedTensor {
  const TrunkTensor* t = nullptr;  // in the manifest
  uint64_t at = 0;                 // from the base of the packed trunk
};

// Where each packed tensor of `m` goes, in manifest order; the total the
// packed layout takes in *bytes.
std::vector<PackedTensor> PackedTrunkLayout(const Manifest& m, uint64_t* bytes);
// Bytes the packed layout of `m` takes.
uint64_t PackedTrunkBytes(const Manifest& m);
// Reads the trunk of `ct` into dst[0, PackedTrunkBytes(ct.manifest())) in
// the packed layout, padding zeroed, straight from trunk.bin. Refuses a
// destination smaller than that; writes nothing past it.
Status PackTrunk(const Container& ct, uint8_t* dst, uint64_t dst_bytes);

}  // namespace waste
