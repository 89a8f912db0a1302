// Reading GGUF files (llama.cpp's model format), v2 and v3, little-endian:
//
//   "GGUF", u32 version, u64 tensor count, u64 key/value count
//   key/values: string key, u32 value type, value (arrays: u32 element type,
//               u64 count, the elements; strings: u64 length, bytes)
//   tensor infos: string name, u32 dims, u64 ne[dims] (fastest first),
//                 u32 ggml type, u64 offset from the data section
//   padding to general.alignment (default 32), then the data section.
//
// Every byte is untrusted. Open checks before returning: every count and
// length against the bytes left and the bounds below, keys and tensor
// names unique, value types known, arrays of arrays refused, the alignment
// a power of two, each tensor's dimensions (1 to 4, no overflow), its type
// known, its first dimension whole blocks, its offset aligned, its bytes
// exactly what the type's block layout needs, inside the file and
// overlapping no other tensor. Errors name the file and what was wrong
// where. This library does no arithmetic on weights: dequantizing is
// engine/kernels/gguf_dequant.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace waste::gguf {

// True when `path` is a regular file that starts with GGUF's magic.
bool IsGgufFile(const std::string& path);

// ggml's tensor types (ggml.h's enum ggml_type): the code, the name, and the
// block layout (values per block, bytes per block), from ggml-common.h.
struct TypeInfo {
  uint32_t code;
  const char* name;
  uint32_t block_size;
  uint32_t type_size;
};
// The layout of type `code`; nullptr for a code ggml does not define.
const TypeInfo* FindType(uint32_t code);
// "Q4_K", or "type 77" for an unknown code.
std::string TypeName(uint32_t code);

// The type codes engine/kernels/gguf_dequant.h and the tests name.
enum Type : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ1_M = 29,
  kIQ4_XS = 23,
  kBF16 = 30,
  kMXFP4 = 39,
};

// GGUF's metadata value types.
enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* ValueTypeName(ValueType t);

// One metadata value: a scalar, a string, or an array of either.
struct Value {
  ValueType type = ValueType::kU8;
  ValueType elem = ValueType::kU8;   // arrays: the element type
  uint64_t count = 1;                // arrays: elements; scalars 1
  std::string text;                  // a string
  std::vector<std::string> strings;  // an array of strings
  std::vector<uint8_t> raw;          // numbers and bools: their little-endian bytes

  bool is_array() const { return type == ValueType::kArray; }
  // Element i (0 for a scalar) as an integer: integer and bool types, where it fits.
  std::optional<int64_t> Int(uint64_t i = 0) const;
  // Element i as a double: any number type.
  std::optional<double> Float(uint64_t i = 0) const;
  // A one-line rendering for people: arrays as their type and length.
  std::string Describe() const;
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ne0 (the row, fastest) first
  uint32_t type = 0;           // ggml type code, FindType() known
  uint64_t offset = 0;         // in its file, from the file's start
  uint64_t bytes = 0;          // exactly what the type's layout needs
  int file = 0;                // which of a split's files holds it
  uint64_t elements() const;
};

// Bounds beyond the file's own size.
inline constexpr uint64_t kMaxHeaderBytes = 1ull << 30;  // everything before the data
inline constexpr uint64_t kMaxStringBytes = 64ull << 20;
inline constexpr uint64_t kMaxTensorName = 63;  // ggml's GGML_MAX_NAME - 1
inline constexpr uint32_t kMaxDims = 4;

// One GGUF file, its header read and checked.
struct GgufFile {
  std::string path;
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // the data section's start in the file
  uint64_t file_size = 0;
  std::vector<KeyValue> metadata;
  std::vector<TensorInfo> tensors;

  static Result<GgufFile> Open(const std::string& path);
  const Value* Find(std::string_view key) const;
};

// A model as one GGUF file or as its split files (NAME-00001-of-0000N.gguf,
// split.count > 1): every file opened and checked, each one's split.no its
// place in the name, the tensors of all listed together with their file,
// names unique across files, their total split.tensors.count where given.
// The metadata is the first file's.
struct Gguf {
  std::vector<GgufFile> files;
  std::vector<TensorInfo> tensors;

  // Any one file of a split opens the whole split.
  static Result<Gguf> Open(const std::string& path);
  const std::vector<KeyValue>& metadata() const { return files.front().metadata; }
  const Value* Find(std::string_view key) const { return files.front().Find(key); }
  const TensorInfo* FindTensor(std::string_view name) const;
  // A tensor's bytes, read from its file (pread); an error if it is no longer there.
  Result<std::vector<uint8_t>> ReadTensor(const TensorInfo& t) const;
};

}  // namespace waste::gguf
