// One safetensors file, memory-mapped and read without trusting it:
//
//   u64 LE header_size | header JSON (header_size bytes) | tensor data
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]} relative to the start of the data; "__metadata__" holds
// strings. Open checks every entry against the file before anything is
// read: a known dtype, dimensions that do not overflow, offsets inside the
// data, and end - begin equal to the element count times the dtype's size.
// Errors name the file and the tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace waste::convert {

enum class DType { kF64, kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kF8E8M0, kI64, kI32, kI16, kI8, kU8,
                   kBool };

std::string_view DTypeName(DType d);
int DTypeBytes(DType d);

struct TensorEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major; empty for a scalar
  int64_t elements = 1;
  uint64_t offset = 0;  // of the first byte, from the start of the file
  uint64_t bytes = 0;
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and checks its header. `name` is how errors call
  // the file (its name in the checkpoint directory).
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path,
                                                       const std::string& name);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* Find(const std::string& tensor) const;

  // The tensor's bytes, inside the mapping (checked at Open).
  std::span<const uint8_t> Bytes(const TensorEntry& t) const {
    return {base_ + t.offset, static_cast<size_t>(t.bytes)};
  }
  // Drops the pages of a tensor that has been consumed from this process's
  // resident set (they stay in the page cache), so reading a checkpoint of
  // hundreds of GB does not grow the converter's footprint.
  void Release(const TensorEntry& t) const;
  // Asks the kernel to start reading a tensor in now, in large requests: page
  // faults on a mapping read ahead only 128 KiB at a time, which on a disk
  // with milliseconds of latency per request runs at tens of MB/s.
  void Prefetch(const TensorEntry& t) const;

 private:
  SafetensorsFile() = default;
  std::string name_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  std::map<std::string, TensorEntry> tensors_;
};

// Parses a header (the JSON text) against a file of `file_size` bytes whose
// data starts at `data_start`. Exposed for tests of hostile headers.
Result<std::map<std::string, TensorEntry>> ParseSafetensorsHeader(std::string_view json,
                                                                  uint64_t data_start,
                                                                  uint64_t file_size,
                                                                  const std::string& file);

}  // namespace waste::convert
