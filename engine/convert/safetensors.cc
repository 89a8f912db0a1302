#include "engine/convert/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "engine/format/container.h"

namespace waste::convert {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 256ull << 20;  // DeepSeek-V3's largest shard header is ~100 KB
constexpr int64_t kMaxDim = int64_t{1} << 40;

struct DTypeInfo {
  const char* name;
  DType dtype;
  int bytes;
};
constexpr DTypeInfo kDTypes[] = {
    {"F64", DType::kF64, 8},         {"F32", DType::kF32, 4},         {"F16", DType::kF16, 2},
    {"BF16", DType::kBF16, 2},       {"F8_E4M3", DType::kF8E4M3, 1},  {"F8_E5M2", DType::kF8E5M2, 1},
    {"F8_E8M0", DType::kF8E8M0, 1},  {"I64", DType::kI64, 8},         {"I32", DType::kI32, 4},
    {"I16", DType::kI16, 2},         {"I8", DType::kI8, 1},           {"U8", DType::kU8, 1},
    {"BOOL", DType::kBool, 1},
};

}  // namespace

std::string_view DTypeName(DType d) {
  for (const DTypeInfo& i : kDTypes)
    if (i.dtype == d) return i.name;
  return "?";
}

int DTypeBytes(DType d) {
  for (const DTypeInfo& i : kDTypes)
    if (i.dtype == d) return i.bytes;
  return 0;
}

Result<std::map<std::string, TensorEntry>> ParseSafetensorsHeader(std::string_view text,
                                                                  uint64_t data_start,
                                                                  uint64_t file_size,
                                                                  const std::string& file) {
  auto doc = ParseJson(text, file + ": header");
  if (!doc.ok()) return doc.status();
  if (!doc->is_object()) return Status::Error(file + ": header is not a JSON object");
  const uint64_t data_bytes = file_size - data_start;
  std::map<std::string, TensorEntry> out;
  for (const auto& [name, e] : doc->items()) {
    if (name == "__metadata__") continue;
    const std::string w = file + ": tensor " + name;
    if (name.empty() || name.size() > 1024) return Status::Error(file + ": a tensor name is empty or too long");
    if (!e.is_object()) return Status::Error(w + ": entry is not an object");
    TensorEntry t;
    t.name = name;
    const auto dt = e.find("dtype");
    if (dt == e.end() || !dt->is_string()) return Status::Error(w + ": dtype is missing");
    bool known = false;
    for (const DTypeInfo& i : kDTypes) {
      if (dt->get<std::string>() == i.name) t.dtype = i.dtype, known = true;
    }
    if (!known) return Status::Error(w + ": dtype \"" + dt->get<std::string>() + "\" is not known");
    const auto shape = e.find("shape");
    if (shape == e.end() || !shape->is_array() || shape->size() > 8)
      return Status::Error(w + ": shape is missing or has more than 8 dimensions");
    for (const json& d : *shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxDim)
        return Status::Error(w + ": shape holds " + d.dump() + ", not a dimension");
      t.shape.push_back(d.get<int64_t>());
      if (t.shape.back() != 0 && t.elements > kMaxDim / t.shape.back())
        return Status::Error(w + ": shape " + shape->dump() + " is too large");
      t.elements *= t.shape.back();
    }
    const auto offs = e.find("data_offsets");
    if (offs == e.end() || !offs->is_array() || offs->size() != 2 ||
        !(*offs)[0].is_number_unsigned() || !(*offs)[1].is_number_unsigned())
      return Status::Error(w + ": data_offsets must be [begin, end]");
    const uint64_t begin = (*offs)[0].get<uint64_t>(), end = (*offs)[1].get<uint64_t>();
    if (begin > end || end > data_bytes)
      return Status::Error(w + ": data_offsets [" + std::to_string(begin) + ", " +
                           std::to_string(end) + "] are not inside the " +
                           std::to_string(data_bytes) + " bytes of data");
    const uint64_t want = static_cast<uint64_t>(t.elements) * DTypeBytes(t.dtype);
    if (end - begin != want)
      return Status::Error(w + ": " + std::to_string(end - begin) + " bytes for " +
                           std::to_string(t.elements) + " elements of " +
                           std::string(DTypeName(t.dtype)) + " (" + std::to_string(want) + ")");
    t.offset = data_start + begin;
    t.bytes = want;
    out.emplace(name, std::move(t));
  }
  return out;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path,
                                                               const std::string& name) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::Error(name + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::Error(name + ": not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    close(fd);
    return Status::Error(name + ": " + std::to_string(size) +
                         " bytes, too short for a safetensors header");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (map == MAP_FAILED) return Status::Error(name + ": mmap: " + std::strerror(map_errno));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->name_ = name;
  f->base_ = static_cast<const uint8_t*>(map);
  f->size_ = size;
  uint64_t header;
  std::memcpy(&header, f->base_, 8);
  if (header > size - 8 || header > kMaxHeaderBytes)
    return Status::Error(name + ": header of " + std::to_string(header) +
                         " bytes does not fit the file (" + std::to_string(size) + " bytes)");
  auto tensors = ParseSafetensorsHeader(
      {reinterpret_cast<const char*>(f->base_) + 8, static_cast<size_t>(header)}, 8 + header,
      size, name);
  if (!tensors.ok()) return tensors.status();
  f->tensors_ = std::move(*tensors);
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (base_) munmap(const_cast<uint8_t*>(base_), size_);
}

const TensorEntry* SafetensorsFile::Find(const std::string& tensor) const {
  const auto it = tensors_.find(tensor);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsFile::Release(const TensorEntry& t) const {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t first = (t.offset + page - 1) / page * page;
  const uint64_t last = (t.offset + t.bytes) / page * page;
  if (last > first)
    madvise(const_cast<uint8_t*>(base_) + first, last - first, MADV_DONTNEED);
}

void SafetensorsFile::Prefetch(const TensorEntry& t) const {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t first = t.offset / page * page;
  madvise(const_cast<uint8_t*>(base_) + first, t.offset + t.bytes - first, MADV_WILLNEED);
}

}  // namespace waste::convert
