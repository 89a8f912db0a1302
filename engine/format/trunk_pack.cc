#include "engine/format/trunk_pack.h"

#include <cstring>
#include <string>

namespace waste {

namespace {

uint64_t Padded(uint64_t n) {
  return (n + kTrunkAlign - 1) / kTrunkAlign * kTrunkAlign;
}

}  // namespace

std::vector<PackedTensor> PackedTrunkLayout(const Manifest& m, uint64_t* bytes) {
  const TrunkTensor* embedding = m.FindTensor("model.embed_tokens.weight");
  std::vector<PackedTensor> out;
  uint64_t at = 0;
  for (const TrunkTensor& tt : m.trunk) {
    // Outside the prefix lies what the text model never reads (K3's vision
    // tower and projector): not made resident.
    if (&tt == embedding || !tt.name.starts_with(m.tensor_prefix)) continue;
    out.push_back({&tt, at});
    at += Padded(tt.stored_bytes());
  }
  *bytes = at;
  return out;
}

uint64_t PackedTrunkBytes(const Manifest& m) {
  uint64_t bytes = 0;
  PackedTrunkLayout(m, &bytes);
  return bytes;
}

Status PackTrunk(const Container& ct, uint8_t* dst, uint64_t dst_bytes) {
  uint64_t need = 0;
  const std::vector<PackedTensor> layout = PackedTrunkLayout(ct.manifest(), &need);
  if (dst_bytes < need)
    return Status::Error("trunk: packing needs " + std::to_string(need) +
                         " bytes, the destination has only " + std::to_string(dst_bytes));
  if (need > 0 && dst == nullptr) return Status::Error("trunk: packing into a null destination");
  for (const PackedTensor& p : layout) {
    const TrunkTensor& tt = *p.t;
    uint8_t* at = dst + p.at;
    WASTE_RETURN_IF_ERROR(
        ct.ReadTensorInto(tt, {at, tt.payload_bytes}, {at + tt.payload_bytes, tt.scale_bytes}));
    // Zero padding: the packed bytes are then a function of the container alone.
    std::memset(at + tt.stored_bytes(), 0, Padded(tt.stored_bytes()) - tt.stored_bytes());
  }
  return Status::Ok();
}

}  // namespace waste
