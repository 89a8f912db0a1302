// Opening a container: the files the manifest names, checked against it.
#include "engine/format/container.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>

#include "engine/format/encoding.h"
#include "engine/gguf/gguf.h"

namespace waste {
namespace {

using format::Fmt;
using nlohmann::json;

std::string ErrnoText() {
  return std::strerror(errno);
}

// Opens a file that must be a regular file. O_NONBLOCK keeps a FIFO or a
// device planted under a container's file name from blocking the open; the
// type is then checked and the flag cleared.
Result<int> OpenRegular(const std::string& path, const std::string& name) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::Error(name + ": " + ErrnoText());
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::Error(name + ": not a regular file");
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

Result<uint64_t> FileSize(int fd, const std::string& name) {
  struct stat st;
  if (fstat(fd, &st) != 0) return Status::Error(name + ": " + ErrnoText());
  if (!S_ISREG(st.st_mode)) return Status::Error(name + ": not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

// pread until `n` bytes or an error; a short file is an error.
Status PreadAll(int fd, void* dst, size_t n, uint64_t off, const std::string& name) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t got = pread(fd, p, n, static_cast<off_t>(off));
    if (got < 0) {
      if (errno == EINTR) continue;
      return Status::Error(name + ": read at " + std::to_string(off) + ": " + ErrnoText());
    }
    if (got == 0) return Status::Error(name + ": short read at offset " + std::to_string(off));
    p += got;
    n -= static_cast<size_t>(got);
    off += static_cast<uint64_t>(got);
  }
  return Status::Ok();
}

Status LoadSpecials(const std::string& path, int vocab, std::vector<SpecialToken>* out) {
  auto text = ReadSmallFile(path, 16u << 20);
  if (!text.ok()) return text.status();
  auto doc = ParseJson(*text, "specials.json");
  if (!doc.ok()) return doc.status();
  if (!doc->is_array()) return Status::Error("specials.json: not a list");
  std::set<int> ids;
  for (size_t i = 0; i < doc->size(); ++i) {
    const json& e = (*doc)[i];
    const std::string w = "specials.json: entry " + std::to_string(i);
    if (!e.is_object() || !e.contains("id") || !e.contains("text") ||
        !e["id"].is_number_integer() || !e["text"].is_string())
      return Status::Error(w + " is not {\"id\": int, \"text\": string}");
    const int64_t id = e["id"].get<int64_t>();
    const std::string t = e["text"].get<std::string>();
    if (id < 0 || id >= vocab)
      return Status::Error(w + ": id " + std::to_string(id) + " is outside the vocabulary of " +
                           std::to_string(vocab));
    if (t.empty() || t.size() > 256) return Status::Error(w + ": text is empty or too long");
    if (!ids.insert(static_cast<int>(id)).second)
      return Status::Error(w + ": id " + std::to_string(id) + " appears twice");
    out->push_back({static_cast<int>(id), t});
  }
  return Status::Ok();
}

Status LoadChat(const std::string& path, std::optional<ChatFormat>* out) {
  auto text = ReadSmallFile(path, 1u << 20);
  if (!text.ok()) return text.status();
  auto doc = ParseChat(*text);
  if (!doc.ok()) return doc.status();
  *out = std::move(*doc);
  return Status::Ok();
}

std::string ToHex(unsigned v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%02x", v);
  return buf;
}

// An optional file: absent is fine, present must be a regular file.
Result<bool> OptionalFile(const std::string& dir, const std::string& name) {
  struct stat st;
  if (stat((dir + "/" + name).c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    return Status::Error(name + ": " + ErrnoText());
  }
  if (!S_ISREG(st.st_mode)) return Status::Error(name + ": not a regular file");
  return true;
}

}  // namespace

Result<std::string> ReadSmallFile(const std::string& path, uint64_t max_bytes) {
  const std::string name = path.substr(path.find_last_of('/') + 1);
  auto opened = OpenRegular(path, name);
  if (!opened.ok()) return opened.status();
  const int fd = *opened;
  auto size = FileSize(fd, name);
  if (!size.ok()) {
    close(fd);
    return size.status();
  }
  if (*size > max_bytes) {
    close(fd);
    return Status::Error(name + ": " + std::to_string(*size) + " bytes, more than the " +
                         std::to_string(max_bytes) + " allowed");
  }
  std::string text(*size, '\0');
  Status st = PreadAll(fd, text.data(), text.size(), 0, name);
  close(fd);
  if (!st.ok()) return st;
  return text;
}

Result<Container> Container::Open(const std::string& dir) {
  Container c;
  c.dir_ = dir;
  auto text = ReadSmallFile(dir + "/manifest.json", kMaxManifestBytes);
  if (!text.ok() && gguf::IsGgufFile(dir))
    return Status::Error(
        "a GGUF file: `waste info` reads it, but running a GGUF is not "
        "supported yet (a container is needed; issue 44)");
  if (!text.ok()) return text.status();
  auto m = Manifest::Parse(*text);
  if (!m.ok()) return m.status();
  c.manifest_ = std::move(*m);
  WASTE_RETURN_IF_ERROR(c.OpenFiles());
  return c;
}

Status Container::OpenFiles() {
  const Manifest& m = manifest_;
  const ModelConfig& cfg = m.config;
  total_bytes_ = 0;

  // trunk.bin: every tensor inside the file.
  auto trunk = OpenRegular(dir_ + "/trunk.bin", "trunk.bin");
  if (!trunk.ok()) return trunk.status();
  trunk_fd_ = *trunk;
  auto trunk_size = FileSize(trunk_fd_, "trunk.bin");
  if (!trunk_size.ok()) return trunk_size.status();
  total_bytes_ += *trunk_size;
  for (const TrunkTensor& t : m.trunk) {
    auto past = [&](uint64_t off, uint64_t n) {
      return off > *trunk_size || n > *trunk_size - off;
    };
    if (past(t.offset, t.payload_bytes))
      return Status::Error("trunk.bin: tensor " + t.name + " (off " + std::to_string(t.offset) +
                           ", " + std::to_string(t.payload_bytes) +
                           " bytes) runs past the end of the file (" + std::to_string(*trunk_size) +
                           " bytes)");
    if (t.scale_bytes && past(t.scale_offset, t.scale_bytes))
      return Status::Error("trunk.bin: tensor " + t.name + " scales (scale_off " +
                           std::to_string(t.scale_offset) + ", " + std::to_string(t.scale_bytes) +
                           " bytes) run past the end of the file (" + std::to_string(*trunk_size) +
                           " bytes)");
  }

  if (cfg.n_experts > 0) {
    // codebooks.bin: whole codebooks, each with a header that agrees.
    const ExpertQuant& q = m.quant;
    const uint64_t one = sizeof(format::CodebookHeader) + uint64_t{2} * q.entries * q.vec_dim;
    auto raw = ReadSmallFile(dir_ + "/codebooks.bin", 1ull << 30);
    if (!raw.ok()) return raw.status();
    total_bytes_ += raw->size();
    if (raw->size() % one != 0)
      return Status::Error("codebooks.bin: " + std::to_string(raw->size()) +
                           " bytes is not a whole number of " + std::to_string(one) +
                           "-byte codebooks");
    n_codebooks_ = static_cast<int>(raw->size() / one);
    const size_t per = static_cast<size_t>(q.entries) * q.vec_dim;
    codebooks_.resize(per * static_cast<size_t>(n_codebooks_));
    for (int b = 0; b < n_codebooks_; ++b) {
      format::CodebookHeader h;
      std::memcpy(&h, raw->data() + b * one, sizeof h);
      const std::string w = "codebooks.bin: codebook " + std::to_string(b);
      if (h.magic != format::kMagicCodebook) return Status::Error(w + ": bad magic");
      if (h.codebook_id != static_cast<uint16_t>(b))
        return Status::Error(w + " says it is codebook " + std::to_string(h.codebook_id));
      if (h.vec_dim != q.vec_dim || h.entries != static_cast<uint32_t>(q.entries))
        return Status::Error(w + ": " + std::to_string(h.entries) + " entries of dimension " +
                             std::to_string(h.vec_dim) + ", the manifest says " +
                             std::to_string(q.entries) + " of " + std::to_string(q.vec_dim));
      const uint8_t* src = reinterpret_cast<const uint8_t*>(raw->data()) + b * one + sizeof h;
      for (size_t i = 0; i < per; ++i) {
        uint16_t v;
        std::memcpy(&v, src + 2 * i, 2);
        const float f = format::F16ToF32(v);
        if (!std::isfinite(f)) return Status::Error(w + ": entry value is not finite");
        codebooks_[b * per + i] = f;
      }
    }

    // Banks: exactly experts * record_bytes each.
    bank_fds_.assign(cfg.n_layers, -1);
    for (const ExpertBank& b : m.banks) {
      if (b.codebook_base + 3 * q.stages > n_codebooks_)
        return Status::Error("manifest.json: layers." + std::to_string(b.layer) +
                             ".codebook_base " + std::to_string(b.codebook_base) + " + " +
                             std::to_string(3 * q.stages) + " codebooks is past the " +
                             std::to_string(n_codebooks_) + " in codebooks.bin");
      auto bank = OpenRegular(dir_ + "/" + b.file, b.file);
      if (!bank.ok()) return bank.status();
      const int fd = *bank;
      bank_fds_[b.layer] = fd;
      auto size = FileSize(fd, b.file);
      if (!size.ok()) return size.status();
      if (*size != b.bytes)
        return Status::Error(b.file + ": " + std::to_string(*size) + " bytes, the manifest says " +
                             std::to_string(b.bytes) + " (" + std::to_string(b.experts) +
                             " records of " + std::to_string(record_bytes()) + ")");
      total_bytes_ += *size;
    }
  }

  // Optional files: checked when present.
  for (const char* name : {"tokenizer.model", "specials.json", "chat.json"}) {
    auto present = OptionalFile(dir_, name);
    if (!present.ok()) return present.status();
    if (!*present) continue;
    const std::string path = dir_ + "/" + name;
    if (name == std::string_view("tokenizer.model"))
      has_tokenizer_ = true;
    else if (name == std::string_view("specials.json"))
      WASTE_RETURN_IF_ERROR(LoadSpecials(path, cfg.vocab, &specials_));
    else
      WASTE_RETURN_IF_ERROR(LoadChat(path, &chat_));
  }
  return Status::Ok();
}

Container::Container(Container&& o) noexcept {
  *this = std::move(o);
}

Container& Container::operator=(Container&& o) noexcept {
  if (this != &o) {
    Close();
    dir_ = std::move(o.dir_);
    manifest_ = std::move(o.manifest_);
    trunk_fd_ = std::exchange(o.trunk_fd_, -1);
    bank_fds_ = std::move(o.bank_fds_);
    o.bank_fds_.clear();
    codebooks_ = std::move(o.codebooks_);
    n_codebooks_ = o.n_codebooks_;
    has_tokenizer_ = o.has_tokenizer_;
    specials_ = std::move(o.specials_);
    chat_ = std::move(o.chat_);
    total_bytes_ = o.total_bytes_;
  }
  return *this;
}

Container::~Container() {
  Close();
}

void Container::Close() {
  if (trunk_fd_ >= 0) close(trunk_fd_);
  trunk_fd_ = -1;
  for (int fd : bank_fds_) {
    if (fd >= 0) close(fd);
  }
  bank_fds_.clear();
}

std::span<const float> Container::Codebook(int id) const {
  const size_t per = static_cast<size_t>(manifest_.quant.entries) * manifest_.quant.vec_dim;
  if (id < 0 || id >= n_codebooks_) return {};
  return {codebooks_.data() + per * static_cast<size_t>(id), per};
}

int Container::bank_fd(int layer) const {
  return layer >= 0 && layer < static_cast<int>(bank_fds_.size()) ? bank_fds_[layer] : -1;
}

Status Container::CheckRecord(int layer, int expert, std::span<const uint8_t> rec,
                              bool verify_crc) const {
  const ExpertBank* bank = manifest_.Bank(layer);
  if (!bank) return Status::Error("layer " + std::to_string(layer) + " has no expert bank");
  const std::string w = bank->file + ": record " + std::to_string(expert);
  if (expert < 0 || expert >= bank->experts)
    return Status::Error(bank->file + ": expert " + std::to_string(expert) + " is out of range");
  const RecordLayout& lay = manifest_.record;
  if (rec.size() < lay.record_bytes) return Status::Error(w + ": short read");
  format::ExpertHeader h;
  std::memcpy(&h, rec.data(), sizeof h);
  if (h.magic != format::kMagicExpert) return Status::Error(w + ": bad magic");
  if (h.layer != layer) return Status::Error(w + " says layer " + std::to_string(h.layer));
  if (h.expert_id != expert)
    return Status::Error(w + " says expert " + std::to_string(h.expert_id));
  if (uint64_t{h.record_blocks} * format::kAlign != lay.record_bytes)
    return Status::Error(w + " says it is " + std::to_string(h.record_blocks) +
                         " blocks of 4 KiB, the manifest implies " +
                         std::to_string(lay.record_bytes / format::kAlign));
  const Fmt want = manifest_.quant.fmt;
  const bool fmt_ok =
      h.fmt == static_cast<uint8_t>(want) ||
      // WARP's converter writes VQ3R's code for every 8-bit stage count
      (manifest_.quant.index_bits == 8 &&
       (h.fmt == static_cast<uint8_t>(Fmt::kVQ3R) || h.fmt == static_cast<uint8_t>(Fmt::kVQ2R)));
  if (!fmt_ok)
    return Status::Error(w + " has fmt " + std::to_string(h.fmt) + ", the manifest says " +
                         std::string(format::FmtName(want)));
  if (h.lowrank_id != 0) return Status::Error(w + " has a low-rank id (not part of v0)");
  // Bits 1 and 2 (a substitute exists, a converter's hot hint) change nothing
  // here; bf16 scales are not implemented and other bits are not defined.
  if (h.flags & ~(format::kFlagHasSub | format::kFlagHotHint))
    return Status::Error(w + " has flags 0x" + ToHex(h.flags) +
                         " (bf16 scales and undefined bits are not supported)");
  if (h.reserved0 != 0 || h.reserved1[0] != 0 || h.reserved1[1] != 0)
    return Status::Error(w + " has nonzero reserved fields");
  if (h.codebook_id != bank->codebook_base)
    return Status::Error(w + " names codebook " + std::to_string(h.codebook_id) +
                         ", the layer's base is " + std::to_string(bank->codebook_base));
  const uint32_t offs[4] = {h.gate_off, h.up_off, h.down_off, h.scales_off};
  const uint32_t want_offs[4] = {lay.matrix_off[0], lay.matrix_off[1], lay.matrix_off[2],
                                 lay.scales_off};
  static const char* kNames[4] = {"gate_off", "up_off", "down_off", "scales_off"};
  for (int i = 0; i < 4; ++i) {
    if (offs[i] != want_offs[i])
      return Status::Error(w + ": " + kNames[i] + " " + std::to_string(offs[i]) + ", expected " +
                           std::to_string(want_offs[i]));
  }
  if (verify_crc) {
    const uint32_t crc =
        format::Crc32(rec.subspan(sizeof h, lay.payload_end - sizeof(format::ExpertHeader)));
    if (crc != h.crc32) return Status::Error(w + ": checksum mismatch");
  }
  return Status::Ok();
}

Status Container::ReadRecord(int layer, int expert, uint8_t* dst, bool verify_crc) const {
  const ExpertBank* bank = manifest_.Bank(layer);
  if (!bank) return Status::Error("layer " + std::to_string(layer) + " has no expert bank");
  if (expert < 0 || expert >= bank->experts)
    return Status::Error(bank->file + ": expert " + std::to_string(expert) + " is out of range");
  WASTE_RETURN_IF_ERROR(PreadAll(bank_fd(layer), dst, record_bytes(),
                                 uint64_t{record_bytes()} * static_cast<uint64_t>(expert),
                                 bank->file));
  return CheckRecord(layer, expert, {dst, record_bytes()}, verify_crc);
}

Status Container::ReadTensor(const TrunkTensor& t, std::vector<uint8_t>* payload,
                             std::vector<uint8_t>* scales) const {
  payload->resize(t.payload_bytes);
  scales->resize(t.scale_bytes);
  return ReadTensorInto(t, *payload, *scales);
}

Status Container::ReadTensorInto(const TrunkTensor& t, std::span<uint8_t> payload,
                                 std::span<uint8_t> scales) const {
  if (payload.size() != t.payload_bytes || scales.size() != t.scale_bytes)
    return Status::Error("trunk.bin: " + t.name + ": buffers of " + std::to_string(payload.size()) +
                         " + " + std::to_string(scales.size()) + " bytes for a tensor of " +
                         std::to_string(t.payload_bytes) + " + " + std::to_string(t.scale_bytes));
  WASTE_RETURN_IF_ERROR(
      PreadAll(trunk_fd_, payload.data(), t.payload_bytes, t.offset, "trunk.bin"));
  if (t.scale_bytes)
    WASTE_RETURN_IF_ERROR(
        PreadAll(trunk_fd_, scales.data(), t.scale_bytes, t.scale_offset, "trunk.bin"));
  return Status::Ok();
}

}  // namespace waste
