#include "engine/gguf/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <regex>
#include <set>
#include <span>

namespace waste::gguf {
namespace {

// From ggml-common.h (QK_K = 256), as the gguf package's GGML_QUANT_SIZES has them.
constexpr TypeInfo kTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 40},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},    {40, "NVFP4", 64, 36},
    {41, "Q1_0", 128, 18},
};

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32

// Bytes of one element of a number or bool type; 0 for string and array.
uint64_t ScalarBytes(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool:
      return 1;
    case ValueType::kU16:
    case ValueType::kI16:
      return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32:
      return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64:
      return 8;
    case ValueType::kString:
    case ValueType::kArray:
      return 0;
  }
  return 0;
}

bool KnownValueType(uint32_t t) {
  return t <= static_cast<uint32_t>(ValueType::kF64);
}

// Sequential reads of the header through a window of pread'd bytes; no
// read past the file's end or kMaxHeaderBytes.
class Cursor {
 public:
  Cursor(int fd, uint64_t file_size, const std::string& name)
      : fd_(fd),
        limit_(std::min(file_size, kMaxHeaderBytes)),
        capped_(file_size > kMaxHeaderBytes),
        name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return limit_ - pos_; }

  Status Read(void* dst, uint64_t n, const std::string& what) {
    if (n > left())
      return Error(what + " (" + std::to_string(n) + " bytes) runs past the end of the " +
                   (capped_ ? "1 GiB a header may take" : "file"));
    auto* out = static_cast<uint8_t*>(dst);
    while (n > 0) {
      if (pos_ < win_start_ || pos_ >= win_start_ + win_.size()) WASTE_RETURN_IF_ERROR(Fill());
      const uint64_t take = std::min<uint64_t>(n, win_start_ + win_.size() - pos_);
      std::memcpy(out, win_.data() + (pos_ - win_start_), take);
      out += take;
      pos_ += take;
      n -= take;
    }
    return Status::Ok();
  }
  template <class T>
  Status Get(T* v, const std::string& what) {
    return Read(v, sizeof(T), what);
  }
  Status String(std::string* s, uint64_t max, const std::string& what) {
    uint64_t n = 0;
    WASTE_RETURN_IF_ERROR(Get(&n, what + "'s length"));
    if (n > max)
      return Error(what + " is " + std::to_string(n) + " bytes, more than " + std::to_string(max));
    s->resize(n);
    return Read(s->data(), n, what);
  }
  Status Error(const std::string& what) const {
    return Status::Error(name_ + ": at offset " + std::to_string(pos_) + ": " + what);
  }

 private:
  Status Fill() {
    win_.resize(std::min<uint64_t>(1 << 20, left()));
    win_start_ = pos_;
    uint64_t done = 0;
    while (done < win_.size()) {
      const ssize_t got =
          pread(fd_, win_.data() + done, win_.size() - done, static_cast<off_t>(pos_ + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        win_.clear();
        return Error(got < 0 ? std::string("read: ") + std::strerror(errno) : "short read");
      }
      done += static_cast<uint64_t>(got);
    }
    return Status::Ok();
  }

  int fd_;
  uint64_t limit_;
  bool capped_;
  const std::string& name_;
  uint64_t pos_ = 0;
  uint64_t win_start_ = 0;
  std::vector<uint8_t> win_;
};

Status ReadValue(Cursor& c, ValueType type, const std::string& what, Value* v) {
  v->type = type;
  if (type == ValueType::kString) return c.String(&v->text, kMaxStringBytes, what);
  if (type != ValueType::kArray) {
    v->raw.resize(ScalarBytes(type));
    return c.Read(v->raw.data(), v->raw.size(), what);
  }
  uint32_t elem = 0;
  WASTE_RETURN_IF_ERROR(c.Get(&elem, what + "'s element type"));
  if (!KnownValueType(elem))
    return c.Error(what + ": unknown element type " + std::to_string(elem));
  v->elem = static_cast<ValueType>(elem);
  if (v->elem == ValueType::kArray) return c.Error(what + ": arrays of arrays are not read");
  WASTE_RETURN_IF_ERROR(c.Get(&v->count, what + "'s count"));
  // Each element takes at least its size (a string its u64 length).
  const uint64_t min_bytes = v->elem == ValueType::kString ? 8 : ScalarBytes(v->elem);
  if (v->count > c.left() / min_bytes)
    return c.Error(what + ": " + std::to_string(v->count) + " elements do not fit in the file");
  if (v->elem == ValueType::kString) {
    v->strings.resize(v->count);
    for (uint64_t i = 0; i < v->count; ++i)
      WASTE_RETURN_IF_ERROR(
          c.String(&v->strings[i], kMaxStringBytes, what + "[" + std::to_string(i) + "]"));
    return Status::Ok();
  }
  v->raw.resize(v->count * min_bytes);
  return c.Read(v->raw.data(), v->raw.size(), what);
}

// Checks one tensor info's dimensions and type and sets its byte size.
Status SizeTensor(const Cursor& c, TensorInfo* t) {
  const std::string what = "tensor '" + t->name + "'";
  const TypeInfo* type = FindType(t->type);
  if (!type) return c.Error(what + ": unknown ggml type " + std::to_string(t->type));
  if (t->dims[0] % type->block_size != 0)
    return c.Error(what + ": its rows of " + std::to_string(t->dims[0]) + " are not whole " +
                   type->name + " blocks of " + std::to_string(type->block_size));
  // Elements and bytes each within int64, as ggml requires.
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  uint64_t elements = 1;
  for (const uint64_t d : t->dims) {
    if (d > kMax || (d != 0 && elements > kMax / d)) return c.Error(what + ": its size overflows");
    elements *= d;
  }
  const uint64_t row_blocks = t->dims[0] / type->block_size;
  if (row_blocks > kMax / type->type_size) return c.Error(what + ": its size overflows");
  uint64_t bytes = row_blocks * type->type_size;
  for (size_t i = 1; i < t->dims.size(); ++i) {
    if (t->dims[i] != 0 && bytes > kMax / t->dims[i]) return c.Error(what + ": its size overflows");
    bytes *= t->dims[i];
  }
  t->bytes = bytes;
  return Status::Ok();
}

Status ParseFile(int fd, GgufFile* f) {
  const std::string& name = f->path;
  Cursor c(fd, f->file_size, name);
  uint32_t magic = 0;
  WASTE_RETURN_IF_ERROR(c.Get(&magic, "the magic"));
  if (magic != kMagic) return Status::Error(name + ": not a GGUF file (no GGUF magic)");
  WASTE_RETURN_IF_ERROR(c.Get(&f->version, "the version"));
  if (f->version == 1) return Status::Error(name + ": GGUF v1 is not read (v2 and v3 are)");
  if (f->version != 2 && f->version != 3) {
    if ((f->version & 0xffff) == 0) return Status::Error(name + ": a big-endian GGUF is not read");
    return Status::Error(name + ": GGUF version " + std::to_string(f->version) +
                         " is not read (v2 and v3 are)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  WASTE_RETURN_IF_ERROR(c.Get(&n_tensors, "the tensor count"));
  WASTE_RETURN_IF_ERROR(c.Get(&n_kv, "the key/value count"));
  // The smallest key/value: an empty key, a type, a u8; the smallest tensor
  // info: an empty name, one dimension, a type and an offset.
  if (n_kv > c.left() / 13)
    return c.Error(std::to_string(n_kv) + " key/values do not fit in the file");
  if (n_tensors > c.left() / 32)
    return c.Error(std::to_string(n_tensors) + " tensors do not fit in the file");

  std::set<std::string, std::less<>> keys;
  for (uint64_t i = 0; i < n_kv; ++i) {
    KeyValue kv;
    const std::string at = "key/value " + std::to_string(i);
    WASTE_RETURN_IF_ERROR(c.String(&kv.key, 65535, at + "'s key"));
    if (!keys.insert(kv.key).second) return c.Error("key '" + kv.key + "' appears twice");
    uint32_t type = 0;
    WASTE_RETURN_IF_ERROR(c.Get(&type, "key '" + kv.key + "''s type"));
    if (!KnownValueType(type))
      return c.Error("key '" + kv.key + "': unknown value type " + std::to_string(type));
    WASTE_RETURN_IF_ERROR(
        ReadValue(c, static_cast<ValueType>(type), "key '" + kv.key + "'", &kv.value));
    f->metadata.push_back(std::move(kv));
  }

  if (const Value* a = f->Find("general.alignment")) {
    const auto v = a->Int();
    if (a->type != ValueType::kU32 || !v || *v == 0 || (*v & (*v - 1)) != 0)
      return Status::Error(name + ": general.alignment must be a u32 power of two, is " +
                           a->Describe());
    f->alignment = static_cast<uint64_t>(*v);
  }

  std::set<std::string, std::less<>> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    WASTE_RETURN_IF_ERROR(
        c.String(&t.name, kMaxTensorName, "tensor " + std::to_string(i) + "'s name"));
    if (!names.insert(t.name).second) return c.Error("tensor '" + t.name + "' appears twice");
    const std::string what = "tensor '" + t.name + "'";
    uint32_t n_dims = 0;
    WASTE_RETURN_IF_ERROR(c.Get(&n_dims, what + "'s dimension count"));
    if (n_dims < 1 || n_dims > kMaxDims)
      return c.Error(what + " has " + std::to_string(n_dims) + " dimensions (1 to 4 are read)");
    t.dims.resize(n_dims);
    WASTE_RETURN_IF_ERROR(c.Read(t.dims.data(), 8ull * n_dims, what + "'s dimensions"));
    WASTE_RETURN_IF_ERROR(c.Get(&t.type, what + "'s type"));
    WASTE_RETURN_IF_ERROR(c.Get(&t.offset, what + "'s offset"));
    WASTE_RETURN_IF_ERROR(SizeTensor(c, &t));
    if (t.offset % f->alignment != 0)
      return c.Error(what + ": offset " + std::to_string(t.offset) + " is not a multiple of " +
                     "the alignment " + std::to_string(f->alignment));
    f->tensors.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t pad = (f->alignment - c.pos() % f->alignment) % f->alignment;
  f->data_offset = c.pos() + pad;
  if (f->data_offset > f->file_size && !f->tensors.empty())
    return Status::Error(name + ": the data section starts past the end of the file");
  for (TensorInfo& t : f->tensors) {
    const uint64_t room = f->file_size - std::min(f->file_size, f->data_offset);
    if (t.offset > room || t.bytes > room - t.offset)
      return Status::Error(name + ": tensor '" + t.name + "' (" + std::to_string(t.bytes) +
                           " bytes at data offset " + std::to_string(t.offset) +
                           ") runs past the end of the file");
    t.offset += f->data_offset;
  }
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : f->tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->bytes > by_offset[i]->offset)
      return Status::Error(name + ": tensors '" + by_offset[i - 1]->name + "' and '" +
                           by_offset[i]->name + "' overlap");
  return Status::Ok();
}

template <class T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// A split's numbers from its u16 keys; nullopt where absent.
Result<std::optional<int64_t>> SplitKey(const GgufFile& f, const char* key) {
  const Value* v = f.Find(key);
  if (!v) return std::optional<int64_t>();
  const auto n = v->Int();
  if (v->is_array() || !n || *n < 0)
    return Status::Error(f.path + ": " + key + " is " + v->Describe());
  return std::optional<int64_t>(*n);
}

}  // namespace

bool IsGgufFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st;
  uint32_t magic = 0;
  const bool yes =
      fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, &magic, 4, 0) == 4 && magic == kMagic;
  close(fd);
  return yes;
}

const TypeInfo* FindType(uint32_t code) {
  for (const TypeInfo& t : kTypes)
    if (t.code == code) return &t;
  return nullptr;
}

std::string TypeName(uint32_t code) {
  const TypeInfo* t = FindType(code);
  return t ? t->name : "type " + std::to_string(code);
}

const char* ValueTypeName(ValueType t) {
  static constexpr const char* kNames[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                           "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

std::optional<int64_t> Value::Int(uint64_t i) const {
  const ValueType t = is_array() ? elem : type;
  const uint64_t size = ScalarBytes(t);
  if (size == 0 || i >= count || (i + 1) * size > raw.size()) return std::nullopt;
  const uint8_t* p = raw.data() + i * size;
  switch (t) {
    case ValueType::kU8:
    case ValueType::kBool:
      return *p;
    case ValueType::kI8:
      return Load<int8_t>(p);
    case ValueType::kU16:
      return Load<uint16_t>(p);
    case ValueType::kI16:
      return Load<int16_t>(p);
    case ValueType::kU32:
      return Load<uint32_t>(p);
    case ValueType::kI32:
      return Load<int32_t>(p);
    case ValueType::kI64:
      return Load<int64_t>(p);
    case ValueType::kU64: {
      const auto u = Load<uint64_t>(p);
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(u);
    }
    default:
      return std::nullopt;
  }
}

std::optional<double> Value::Float(uint64_t i) const {
  const ValueType t = is_array() ? elem : type;
  if (i >= count || (i + 1) * ScalarBytes(t) > raw.size()) return std::nullopt;
  if (t == ValueType::kF32) return Load<float>(raw.data() + 4 * i);
  if (t == ValueType::kF64) return Load<double>(raw.data() + 8 * i);
  if (t == ValueType::kU64) return static_cast<double>(Load<uint64_t>(raw.data() + 8 * i));
  const auto n = Int(i);
  return n ? std::optional<double>(static_cast<double>(*n)) : std::nullopt;
}

std::string Value::Describe() const {
  if (is_array())
    return std::string("array of ") + std::to_string(count) + " " + ValueTypeName(elem);
  if (type == ValueType::kString) return text.size() <= 80 ? text : text.substr(0, 77) + "...";
  if (type == ValueType::kBool) return raw.at(0) ? "true" : "false";
  if (type == ValueType::kF32 || type == ValueType::kF64) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *Float());
    return buf;
  }
  if (type == ValueType::kU64) return std::to_string(Load<uint64_t>(raw.data()));
  return std::to_string(*Int());
}

uint64_t TensorInfo::elements() const {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;  // checked at Open: no overflow
  return n;
}

Result<GgufFile> GgufFile::Open(const std::string& path) {
  // O_NONBLOCK: a FIFO under the name does not block the open.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::Error(path + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::Error(path + ": not a regular file");
  }
  GgufFile f;
  f.path = path;
  f.file_size = static_cast<uint64_t>(st.st_size);
  const Status s = ParseFile(fd, &f);
  close(fd);
  if (!s.ok()) return s;
  return f;
}

const Value* GgufFile::Find(std::string_view key) const {
  for (const KeyValue& kv : metadata)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

Result<Gguf> Gguf::Open(const std::string& path) {
  auto first = GgufFile::Open(path);
  if (!first.ok()) return first.status();
  auto count = SplitKey(*first, "split.count");
  if (!count.ok()) return count.status();
  Gguf g;
  if (count->has_value() && **count > 99999)
    return Status::Error(path + ": split.count " + std::to_string(**count) + " is over 99999");
  if (!count->has_value() || **count <= 1) {
    g.files.push_back(std::move(*first));
  } else {
    // llama.cpp's split names: PREFIX-%05d-of-%05d.gguf, numbered from 1.
    static const std::regex kSplitName(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
    std::smatch m;
    if (!std::regex_match(path, m, kSplitName))
      return Status::Error(path + ": split.count is " + std::to_string(**count) +
                           " but the name is not PREFIX-NNNNN-of-NNNNN.gguf");
    if (std::stoll(m[3].str()) != **count)
      return Status::Error(path + ": split.count is " + std::to_string(**count) +
                           " but the name says of " + m[3].str());
    for (int64_t i = 0; i < **count; ++i) {
      char tail[64];
      std::snprintf(tail, sizeof tail, "-%05lld-of-%05lld.gguf", static_cast<long long>(i + 1),
                    static_cast<long long>(**count));
      auto f = GgufFile::Open(m[1].str() + tail);
      if (!f.ok()) return f.status();
      auto no = SplitKey(*f, "split.no");
      if (!no.ok()) return no.status();
      auto its_count = SplitKey(*f, "split.count");
      if (!its_count.ok()) return its_count.status();
      if (*no != std::optional<int64_t>(i) || *its_count != *count)
        return Status::Error(f->path + ": split.no and split.count are not " + std::to_string(i) +
                             " and " + std::to_string(**count) + " as the name says");
      g.files.push_back(std::move(*f));
    }
  }
  std::set<std::string, std::less<>> names;
  for (size_t i = 0; i < g.files.size(); ++i)
    for (TensorInfo t : g.files[i].tensors) {
      if (!names.insert(t.name).second)
        return Status::Error(g.files[i].path + ": tensor '" + t.name + "' is in another file too");
      t.file = static_cast<int>(i);
      g.tensors.push_back(std::move(t));
    }
  auto total = SplitKey(g.files.front(), "split.tensors.count");
  if (!total.ok()) return total.status();
  if (total->has_value() && static_cast<uint64_t>(**total) != g.tensors.size())
    return Status::Error(g.files.front().path + ": split.tensors.count is " +
                         std::to_string(**total) + " but the files hold " +
                         std::to_string(g.tensors.size()) + " tensors");
  return g;
}

const TensorInfo* Gguf::FindTensor(std::string_view name) const {
  for (const TensorInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Result<std::vector<uint8_t>> Gguf::ReadTensor(const TensorInfo& t) const {
  const std::string& path = files.at(static_cast<size_t>(t.file)).path;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(path + ": " + std::strerror(errno));
  std::vector<uint8_t> out(t.bytes);
  uint64_t done = 0;
  while (done < t.bytes) {
    const ssize_t got =
        pread(fd, out.data() + done, t.bytes - done, static_cast<off_t>(t.offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      close(fd);
      return Status::Error(path + ": tensor '" + t.name + "': " +
                           (got < 0 ? std::strerror(errno) : "short read (the file shrank?)"));
    }
    done += static_cast<uint64_t>(got);
  }
  close(fd);
  return out;
}

}  // namespace waste::gguf
