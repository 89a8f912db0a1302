#include "engine/model/trunk.h"

#include <unistd.h>

#include <cstring>

namespace waste {

Result<std::unique_ptr<Trunk>> Trunk::Load(const Container& ct) {
  std::unique_ptr<Trunk> t(new Trunk());
  t->ct_ = &ct;
  const Manifest& m = ct.manifest();
  t->embedding_ = m.FindTensor("model.embed_tokens.weight");
  uint64_t total = 0;
  for (const TrunkTensor& tt : m.trunk)
    if (&tt != t->embedding_) total += (tt.stored_bytes() + 63) / 64 * 64;
  auto region = Region::Allocate(total);
  if (!region.ok()) return region.status().Prefixed("trunk");
  t->bytes_ = std::move(*region);
  uint64_t at = 0;
  std::vector<uint8_t> payload, scales;
  for (const TrunkTensor& tt : m.trunk) {
    if (&tt == t->embedding_) continue;
    WASTE_RETURN_IF_ERROR(ct.ReadTensor(tt, &payload, &scales));
    uint8_t* dst = t->bytes_.data() + at;
    std::memcpy(dst, payload.data(), payload.size());
    std::memcpy(dst + payload.size(), scales.data(), scales.size());
    kernels::MatrixView v;
    v.fmt = tt.fmt;
    v.bf16 = tt.bf16;
    v.cols = tt.shape.back();
    v.rows = tt.elements / v.cols;
    v.group = tt.group;
    v.payload = dst;
    v.scales = tt.scale_bytes ? reinterpret_cast<const uint16_t*>(dst + payload.size()) : nullptr;
    const std::string name = tt.name.substr(m.tensor_prefix.size());
    t->views_[name] = v;
    at += (tt.stored_bytes() + 63) / 64 * 64;
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
