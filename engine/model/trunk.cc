#include "engine/model/trunk.h"

#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

namespace waste {

Result<std::unique_ptr<Trunk>> Trunk::Over(const Container& ct, const uint8_t* bytes,
                                           uint64_t size) {
  const uint64_t need = PackedTrunkBytes(ct.manifest());
  if (size < need)
    return Status::Error("trunk: the packed trunk needs " + std::to_string(need) +
                         " bytes, the memory given has only " + std::to_string(size));
  if (need > 0 && bytes == nullptr) return Status::Error("trunk: packed memory is null");
  if (reinterpret_cast<uintptr_t>(bytes) % kTrunkAlign != 0)
    return Status::Error("trunk: packed memory is not " + std::to_string(kTrunkAlign) +
                         "-byte aligned");
  std::unique_ptr<Trunk> t = View(ct, bytes);
  t->shared_ = true;
  return t;
}

Result<std::unique_ptr<Trunk>> Trunk::Load(const Container& ct) {
  auto region = Region::Allocate(PackedTrunkBytes(ct.manifest()));
  if (!region.ok()) return region.status().Prefixed("trunk");
  WASTE_RETURN_IF_ERROR(PackTrunk(ct, region->data(), region->size()));
  std::unique_ptr<Trunk> t = View(ct, region->data());
  t->bytes_ = std::move(*region);
  return t;
}

std::unique_ptr<Trunk> Trunk::View(const Container& ct, const uint8_t* base) {
  std::unique_ptr<Trunk> t(new Trunk());
  t->ct_ = &ct;
  const Manifest& m = ct.manifest();
  t->embedding_ = m.FindTensor("model.embed_tokens.weight");
  for (const PackedTensor& p : PackedTrunkLayout(m, &t->resident_bytes_)) {
    const TrunkTensor& tt = *p.t;
    kernels::MatrixView v;
    v.fmt = tt.fmt;
    v.bf16 = tt.bf16;
    v.cols = tt.shape.back();
    v.rows = tt.elements / v.cols;
    v.group = tt.group;
    v.payload = base + p.at;
    v.scales = tt.scale_bytes ? reinterpret_cast<const uint16_t*>(base + p.at + tt.payload_bytes)
                              : nullptr;
    t->views_[tt.name.substr(m.tensor_prefix.size())] = v;
  }
  return t;
}

const kernels::MatrixView& Trunk::Matrix(const std::string& name) const {
  return views_.at(name);
}

const float* Trunk::Vector(const std::string& name) const {
  return reinterpret_cast<const float*>(views_.at(name).payload);
}

Status Trunk::EmbeddingRow(int token, float* out) const {
  const TrunkTensor& e = *embedding_;
  const int64_t cols = e.shape.back(), rows = e.elements / cols;
  if (token < 0 || token >= rows)
    return Status::Error("token id " + std::to_string(token) + " is outside the vocabulary of " +
                         std::to_string(rows));
  kernels::MatrixView v;
  v.fmt = e.fmt;
  v.bf16 = e.bf16;
  v.rows = 1;
  v.cols = cols;
  v.group = e.group;
  const uint64_t row_bytes = e.payload_bytes / static_cast<uint64_t>(rows);
  const uint64_t scale_bytes = e.scale_bytes / static_cast<uint64_t>(rows);
  std::vector<uint8_t> buf(row_bytes + scale_bytes);
  auto read = [&](uint8_t* dst, uint64_t n, uint64_t off) {
    return pread(ct_->trunk_fd(), dst, n, static_cast<off_t>(off)) == static_cast<ssize_t>(n);
  };
  if (!read(buf.data(), row_bytes, e.offset + row_bytes * static_cast<uint64_t>(token)) ||
      (scale_bytes && !read(buf.data() + row_bytes, scale_bytes,
                            e.scale_offset + scale_bytes * static_cast<uint64_t>(token))))
    return Status::Error("trunk.bin: reading embedding row " + std::to_string(token) + " failed");
  v.payload = buf.data();
  v.scales = scale_bytes ? reinterpret_cast<const uint16_t*>(buf.data() + row_bytes) : nullptr;
  kernels::DequantRow(v, 0, out);
  return Status::Ok();
}

}  // namespace waste
