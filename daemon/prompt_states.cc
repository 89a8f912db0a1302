#include "daemon/prompt_states.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "base/size_text.h"
#include "engine/format/encoding.h"  // Crc32

namespace waste::daemon {
namespace {

constexpr char kMagic[8] = {'W', 'A', 'S', 'T', 'E', 'P', 'S', 'T'};
constexpr uint32_t kVersion = 1;
constexpr size_t kModelChars = 16;  // ManifestFingerprint: 16 hex digits

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t uid;
  char model[kModelChars];  // the container's fingerprint
  uint64_t fingerprint;     // the publisher's
  uint32_t token_count;
  uint32_t crc;  // of the whole file, read with this field 0
  uint64_t payload_bytes;
  int64_t created_ms;  // unix milliseconds
};
static_assert(sizeof(FileHeader) == 64, "the file's header is 64 bytes");

constexpr size_t kCopyBytes = 4 << 20;  // a publish and a check read this much at a time

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double MtimeOf(const struct stat& st) {
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
}

// The file name of a state: FNV-1a of its uid, fingerprint and tokens.
std::string NameOf(uid_t uid, uint64_t fingerprint, std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  };
  const uint32_t u = uid;
  mix(&u, sizeof u);
  mix(&fingerprint, sizeof fingerprint);
  mix(tokens.data(), tokens.size_bytes());
  char name[32];
  std::snprintf(name, sizeof name, "%016llx.state", static_cast<unsigned long long>(h));
  return name;
}

bool ReadAll(int fd, void* to, size_t n, uint64_t at) {
  auto* p = static_cast<uint8_t*>(to);
  while (n > 0) {
    const ssize_t got = pread(fd, p, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got, at += static_cast<uint64_t>(got), n -= static_cast<size_t>(got);
  }
  return true;
}

bool WriteAll(int fd, const void* from, size_t n) {
  const auto* p = static_cast<const uint8_t*>(from);
  while (n > 0) {
    const ssize_t put = write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put, n -= static_cast<size_t>(put);
  }
  return true;
}

std::span<const uint8_t> Bytes(const void* p, size_t n) {
  return {static_cast<const uint8_t*>(p), n};
}

}  // namespace

Result<StateFileInfo> CheckStateFile(const std::string& path, const std::string& model) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Status::Error(std::string("cannot open: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return Status::Error("not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  FileHeader h{};
  if (size < sizeof h || !ReadAll(fd, &h, sizeof h, 0))
    return Status::Error("truncated: " + std::to_string(size) + " bytes, less than a header");
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return Status::Error("not a prompt state");
  if (h.version != kVersion)
    return Status::Error("version " + std::to_string(h.version) + ", this wasted reads " +
                         std::to_string(kVersion));
  if (std::string(h.model, kModelChars) != model)
    return Status::Error("a state of another container (" + std::string(h.model, kModelChars) +
                         ", this one is " + model + ")");
  if (h.token_count == 0 || h.token_count > kMaxStateTokens)
    return Status::Error(std::to_string(h.token_count) + " tokens, out of range");
  const uint64_t offset = sizeof h + uint64_t{h.token_count} * 4;
  if (h.payload_bytes == 0 || h.payload_bytes > size || size - h.payload_bytes != offset)
    return Status::Error(std::to_string(size) + " bytes, where its header says " +
                         std::to_string(offset) + " + " + std::to_string(h.payload_bytes) +
                         " (truncated or grown)");
  StateFileInfo info;
  info.tokens.resize(h.token_count);
  if (!ReadAll(fd, info.tokens.data(), info.tokens.size() * 4, sizeof h))
    return Status::Error("cannot read its tokens");
  FileHeader zeroed = h;
  zeroed.crc = 0;
  uint32_t crc = format::Crc32(Bytes(&zeroed, sizeof zeroed));
  crc = format::Crc32(Bytes(info.tokens.data(), info.tokens.size() * 4), crc);
  std::vector<uint8_t> buf(std::min<uint64_t>(kCopyBytes, h.payload_bytes));
  for (uint64_t at = offset; at < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - at));
    if (!ReadAll(fd, buf.data(), n, at)) return Status::Error("cannot read its payload");
    crc = format::Crc32(Bytes(buf.data(), n), crc);
    at += n;
  }
  if (crc != h.crc) return Status::Error("its checksum does not match its bytes (damaged)");
  info.uid = h.uid;
  info.fingerprint = h.fingerprint;
  info.payload_offset = offset;
  info.payload_bytes = h.payload_bytes;
  info.created = static_cast<double>(h.created_ms) / 1000;
  return info;
}

Result<std::unique_ptr<PromptStates>> PromptStates::Open(const PromptStatesOptions& o) {
  if (o.model.size() != kModelChars)
    return Status::Error("prompt states: a container fingerprint has " +
                         std::to_string(kModelChars) + " characters, not \"" + o.model + "\"");
  namespace fs = std::filesystem;
  std::error_code ec;
  // Prompts are what users asked: the daemon's alone. Every directory it
  // creates on the way (the state directory too, when it is new) is 0700,
  // as daemon/uses.cc makes it.
  std::vector<fs::path> missing;
  for (fs::path d = o.dir; !d.empty() && !fs::exists(d, ec); d = d.parent_path()) {
    missing.push_back(d);
    if (d == d.parent_path()) break;
  }
  fs::create_directories(o.dir, ec);
  if (ec) return Status::Error("prompt states: cannot create " + o.dir + ": " + ec.message());
  for (const fs::path& d : missing)
    fs::permissions(d, fs::perms::owner_all, fs::perm_options::replace, ec);
  std::unique_ptr<PromptStates> s(new PromptStates(o));
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t removed = 0;
  std::vector<std::string> names;
  for (const auto& de : fs::directory_iterator(o.dir, ec)) names.push_back(de.path().filename());
  if (ec) return Status::Error("prompt states: cannot read " + o.dir + ": " + ec.message());
  for (const std::string& name : names) {
    const std::string path = s->PathOf(name);
    std::string why;
    if (name.rfind(".tmp-", 0) == 0) {
      why = "a publish that did not finish";
    } else if (name.size() < 6 || name.substr(name.size() - 6) != ".state") {
      why = "not a prompt state's name";
    } else if (auto info = CheckStateFile(path, o.model); !info.ok()) {
      why = info.status().message();
    } else if (NameOf(info->uid, info->fingerprint, info->tokens) != name) {
      why = "its name is not its contents'";
    } else {
      struct stat st {};
      if (stat(path.c_str(), &st) != 0) continue;  // gone meanwhile
      Entry e{info->uid,        info->fingerprint,   std::move(info->tokens),
              static_cast<uint64_t>(st.st_size), info->payload_offset, info->payload_bytes,
              info->created,   MtimeOf(st)};
      s->bytes_ += e.file_bytes;
      s->index_[name] = std::move(e);
      continue;
    }
    spdlog::warn("prompt state {} removed: {}", path, why);
    std::remove(path.c_str());
    ++removed;
  }
  s->Evict(0);
  spdlog::info("prompt states in {}: {} ({} of a budget of {}), {} removed, checked in {:.1f} ms",
               o.dir, s->index_.size(), FormatSize(s->bytes_), FormatSize(o.budget), removed,
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                   .count());
  return s;
}

bool PromptStates::Sees(uid_t who, const Entry& e) const {
  return o_.shared || who == e.uid;
}

void PromptStates::Remove(std::string name, const std::string& why) {
  auto it = index_.find(name);
  if (it == index_.end()) return;
  spdlog::info("prompt state {} ({} tokens, {}) removed: {}", name, it->second.tokens.size(),
               FormatSize(it->second.file_bytes), why);
  bytes_ -= it->second.file_bytes;
  index_.erase(it);
  std::remove(PathOf(name).c_str());
}

void PromptStates::Evict(uint64_t incoming) {
  while (!index_.empty() && bytes_ + incoming > o_.budget) {
    auto lru = std::min_element(index_.begin(), index_.end(), [](const auto& a, const auto& b) {
      return a.second.last_use < b.second.last_use;
    });
    Remove(lru->first, "the least recently used, past the states' budget");
  }
}

Status PromptStates::Publish(uid_t uid, uint64_t fingerprint, std::span<const int32_t> tokens,
                             int fd, uint64_t bytes) {
  if (tokens.empty() || tokens.size() > kMaxStateTokens)
    return Status::Error("a prompt state is filed under 1 to " + std::to_string(kMaxStateTokens) +
                         " tokens, not " + std::to_string(tokens.size()));
  if (bytes == 0) return Status::Error("a prompt state of no bytes");
  const uint64_t file_bytes = sizeof(FileHeader) + tokens.size_bytes() + bytes;
  if (file_bytes > o_.budget)
    return Status::Error("a prompt state of " + FormatSize(file_bytes) +
                         " is larger than the states' budget, " + FormatSize(o_.budget) +
                         " (states-budget)");
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes)
    return Status::Error("the state's descriptor holds fewer than the " + std::to_string(bytes) +
                         " bytes announced");
  const std::string name = NameOf(uid, fingerprint, tokens);
  Remove(name, "published again");
  Evict(file_bytes);

  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.uid = uid;
  std::memcpy(h.model, o_.model.data(), kModelChars);
  h.fingerprint = fingerprint;
  h.token_count = static_cast<uint32_t>(tokens.size());
  h.payload_bytes = bytes;
  const double now = UnixNow();
  h.created_ms = static_cast<int64_t>(now * 1000);
  const std::string tmp =
      PathOf(".tmp-" + std::to_string(getpid()) + "-" + std::to_string(next_tmp_++));
  const int out = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) return Status::Error("cannot create " + tmp + ": " + std::strerror(errno));
  std::string failed;
  uint32_t crc = format::Crc32(Bytes(&h, sizeof h));
  crc = format::Crc32(Bytes(tokens.data(), tokens.size_bytes()), crc);
  if (!WriteAll(out, &h, sizeof h) || !WriteAll(out, tokens.data(), tokens.size_bytes()))
    failed = std::string("writing ") + tmp + ": " + std::strerror(errno);
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(kCopyBytes, bytes)));
  for (uint64_t at = 0; failed.empty() && at < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - at));
    if (!ReadAll(fd, buf.data(), n, at)) {
      failed = "the state's descriptor gave fewer than the " + std::to_string(bytes) +
               " bytes announced";
    } else if (!WriteAll(out, buf.data(), n)) {
      failed = std::string("writing ") + tmp + ": " + std::strerror(errno);
    }
    crc = format::Crc32(Bytes(buf.data(), n), crc);
    at += n;
  }
  h.crc = crc;
  if (failed.empty() && pwrite(out, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h))
    failed = std::string("writing ") + tmp + ": " + std::strerror(errno);
  if (close(out) != 0 && failed.empty())
    failed = std::string("writing ") + tmp + ": " + std::strerror(errno);
  if (failed.empty() && std::rename(tmp.c_str(), PathOf(name).c_str()) != 0)
    failed = "renaming " + tmp + ": " + std::strerror(errno);
  if (!failed.empty()) {
    std::remove(tmp.c_str());
    spdlog::warn("a prompt state of uid {} ({} tokens) was not kept: {}", uid, tokens.size(),
                 failed);
    return Status::Error(failed);
  }
  index_[name] = Entry{uid,  fingerprint, {tokens.begin(), tokens.end()}, file_bytes,
                       file_bytes - bytes, bytes, now, now};
  bytes_ += file_bytes;
  return Status::Ok();
}

PromptStates::Found PromptStates::Find(uid_t uid, uint64_t fingerprint,
                                       std::span<const int32_t> tokens) {
  for (;;) {
    auto best = index_.end();
    for (auto it = index_.begin(); it != index_.end(); ++it) {
      const Entry& e = it->second;
      if (!Sees(uid, e) || e.fingerprint != fingerprint || e.tokens.size() > tokens.size() ||
          !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin()))
        continue;
      if (best == index_.end() || e.tokens.size() > best->second.tokens.size()) best = it;
    }
    if (best == index_.end()) return {};
    Entry& e = best->second;
    const int fd = open(PathOf(best->first).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != e.file_bytes) {
      if (fd >= 0) close(fd);
      Remove(best->first, "its file went or changed under wasted");
      continue;
    }
    futimens(fd, nullptr);  // the last use, kept across restarts
    e.last_use = UnixNow();
    return {static_cast<uint32_t>(e.tokens.size()), fd, e.payload_offset, e.payload_bytes};
  }
}

std::vector<PromptStateInfo> PromptStates::List(uid_t uid) const {
  const bool all = uid == 0 || uid == geteuid();
  std::vector<std::pair<double, PromptStateInfo>> rows;
  const double now = UnixNow();
  for (const auto& [name, e] : index_)
    if (all || Sees(uid, e))
      rows.push_back({e.last_use,
                      {static_cast<uint32_t>(e.tokens.size()), e.file_bytes, e.uid,
                       std::max(0.0, now - e.created), std::max(0.0, now - e.last_use),
                       e.fingerprint}});
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<PromptStateInfo> out;
  for (auto& r : rows) out.push_back(r.second);
  return out;
}

uint32_t PromptStates::Drop(uid_t uid) {
  const bool all = uid == 0 || uid == geteuid();
  std::vector<std::string> names;
  for (const auto& [name, e] : index_)
    if (all || Sees(uid, e)) names.push_back(name);
  for (const std::string& name : names) Remove(name, "dropped by uid " + std::to_string(uid));
  return static_cast<uint32_t>(names.size());
}

}  // namespace waste::daemon
