#include "daemon/prompt_states.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "base/size_text.h"
#include "daemon/state_file.h"

namespace waste::daemon {
namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double MtimeOf(const struct stat& st) {
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
}

bool Same(const timespec& a, const timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

// Whether the file is the one whose checksum was found good: a write
// changes its mtime and ctime (and a touch that sets the mtime back still
// changes the ctime), a replacement its inode.
bool Unchanged(const struct stat& now, const struct stat& checked) {
  return now.st_ino == checked.st_ino && now.st_size == checked.st_size &&
         Same(now.st_mtim, checked.st_mtim) && Same(now.st_ctim, checked.st_ctim);
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

Result<std::unique_ptr<PromptStates>> PromptStates::Open(const PromptStatesOptions& o) {
  if (o.model.size() != kStateModelChars)
    return Status::Error("prompt states: a container fingerprint has " +
                         std::to_string(kStateModelChars) + " characters, not \"" + o.model +
                         "\"");
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
    } else {
      const Fd f{open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)};
      struct stat st {};
      auto info = f.fd < 0 ? Result<StateFileInfo>(Status::Error(std::string("cannot open: ") +
                                                                 std::strerror(errno)))
                           : ReadStateHeader(f.fd, o.model);
      if (!info.ok()) {
        why = info.status().message();
      } else if (StateNameOf(info->uid, info->fingerprint, info->tokens) != name) {
        why = "its name is not its contents'";
      } else if (fstat(f.fd, &st) != 0) {
        why = std::string("cannot stat: ") + std::strerror(errno);
      } else {
        Entry e{info->uid,        info->fingerprint,   std::move(info->tokens),
                static_cast<uint64_t>(st.st_size), info->payload_offset, info->payload_bytes,
                info->created,   MtimeOf(st)};
        s->bytes_ += e.file_bytes;
        s->index_[name] = std::move(e);
        continue;
      }
    }
    spdlog::warn("prompt state {} removed: {}", path, why);
    std::remove(path.c_str());
    ++removed;
  }
  s->Evict(0);
  spdlog::info("prompt states in {}: {} ({} of a budget of {}; {} in memory), {} removed, "
               "headers read in {:.1f} ms",
               o.dir, s->index_.size(), FormatSize(s->bytes_), FormatSize(o.budget),
               FormatSize(o.memory), removed,
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
  const Entry& e = it->second;
  spdlog::info("prompt state {} ({} tokens, {} in {}) removed: {}", name, e.tokens.size(),
               FormatSize(e.file_bytes), e.memfd >= 0 ? "memory" : "a file", why);
  if (e.memfd >= 0) {
    close(e.memfd);
    memory_bytes_ -= e.file_bytes;
  } else {
    bytes_ -= e.file_bytes;
    std::remove(PathOf(name).c_str());
  }
  index_.erase(it);
}

PromptStates::~PromptStates() {
  for (auto& [name, e] : index_)
    if (e.memfd >= 0) close(e.memfd);
}

namespace {

// The least recently used entry of `index` in memory (or on disk); end() if none.
template <typename Index>
auto LeastRecentlyUsed(Index& index, bool in_memory) {
  auto lru = index.end();
  for (auto it = index.begin(); it != index.end(); ++it)
    if ((it->second.memfd >= 0) == in_memory &&
        (lru == index.end() || it->second.last_use < lru->second.last_use))
      lru = it;
  return lru;
}

}  // namespace

void PromptStates::Evict(uint64_t incoming) {
  while (bytes_ > 0 && bytes_ + incoming > o_.budget) {
    auto lru = LeastRecentlyUsed(index_, false);
    Remove(lru->first, "the least recently used on disk, past the states' budget (states-budget)");
  }
}

void PromptStates::EvictMemory(uint64_t incoming) {
  while (memory_bytes_ > 0 && memory_bytes_ + incoming > o_.memory)
    Spill(LeastRecentlyUsed(index_, true)->first);
}

Result<struct stat> PromptStates::WriteFile(const std::string& name, double mtime,
                                            const std::function<Status(int)>& fill) {
  const std::string tmp =
      PathOf(".tmp-" + std::to_string(getpid()) + "-" + std::to_string(next_tmp_++));
  const int out = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out < 0) return Status::Error("cannot create " + tmp + ": " + std::strerror(errno));
  Status st = fill(out);
  const double whole = std::floor(mtime);
  const timespec times[2] = {
      {0, UTIME_OMIT}, {static_cast<time_t>(whole), static_cast<long>((mtime - whole) * 1e9)}};
  if (st.ok() && futimens(out, times) != 0)
    st = Status::Error(std::string("setting its time: ") + std::strerror(errno));
  if (close(out) != 0 && st.ok())
    st = Status::Error(std::string("writing: ") + std::strerror(errno));
  struct stat written {};
  if (st.ok() && std::rename(tmp.c_str(), PathOf(name).c_str()) != 0)
    st = Status::Error(std::string("renaming: ") + std::strerror(errno));
  if (st.ok() && stat(PathOf(name).c_str(), &written) != 0)
    st = Status::Error(std::string("cannot stat: ") + std::strerror(errno));
  if (!st.ok()) {
    std::remove(tmp.c_str());
    return st.Prefixed(tmp);
  }
  return written;
}

void PromptStates::Spill(const std::string& name) {
  Entry& e = index_.at(name);
  if (e.file_bytes > o_.budget) {
    Remove(name, "the least recently used in memory, and larger than the disk's budget");
    return;
  }
  Evict(e.file_bytes);
  const int memfd = e.memfd;
  const uint64_t n = e.file_bytes;
  auto written = WriteFile(name, e.last_use, [&](int out) { return CopyState(memfd, out, n); });
  if (!written.ok()) {
    spdlog::warn("prompt state {} could not be written to disk: {}", name,
                 written.status().message());
    Remove(name, "the least recently used in memory, and not written to disk");
    return;
  }
  close(e.memfd);
  e.memfd = -1;
  e.checked = *written;  // copied from the sealed memfd, whose crc was computed at publish
  memory_bytes_ -= n;
  bytes_ += n;
}

void PromptStates::SpillToDisk() {
  uint32_t spilled = 0;
  for (auto lru = LeastRecentlyUsed(index_, true); lru != index_.end();
       lru = LeastRecentlyUsed(index_, true), ++spilled)
    Spill(lru->first);
  if (spilled > 0)
    spdlog::info("prompt states: {} written from memory to disk ({} kept there)", spilled,
                 index_.size());
}

Status PromptStates::Publish(uid_t uid, uint64_t fingerprint, std::span<const int32_t> tokens,
                             int fd, uint64_t bytes) {
  if (tokens.empty() || tokens.size() > kMaxStateTokens)
    return Status::Error("a prompt state is filed under 1 to " + std::to_string(kMaxStateTokens) +
                         " tokens, not " + std::to_string(tokens.size()));
  if (bytes == 0) return Status::Error("a prompt state of no bytes");
  const uint64_t file_bytes = sizeof(StateHeader) + tokens.size_bytes() + bytes;
  const bool to_memory = file_bytes <= o_.memory;
  if (!to_memory && file_bytes > o_.budget)
    return Status::Error("a prompt state of " + FormatSize(file_bytes) +
                         " is larger than the states' budgets: " + FormatSize(o_.memory) +
                         " in memory (states-memory), " + FormatSize(o_.budget) +
                         " on disk (states-budget)");
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes)
    return Status::Error("the state's descriptor holds fewer than the " + std::to_string(bytes) +
                         " bytes announced");
  const std::string name = StateNameOf(uid, fingerprint, tokens);
  Remove(name, "published again");
  const double now = UnixNow();
  const StateHeader h = NewStateHeader(o_.model, uid, fingerprint, tokens.size(), bytes, now);
  Entry e{uid, fingerprint, {tokens.begin(), tokens.end()}, file_bytes, file_bytes - bytes, bytes,
          now, now};
  Status written = Status::Ok();
  if (to_memory) {
    EvictMemory(file_bytes);
    e.memfd = memfd_create("waste-prompt-state", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (e.memfd < 0) {
      written = Status::Error(std::string("memfd_create: ") + std::strerror(errno));
    } else {
      written = WriteState(e.memfd, h, tokens, fd, bytes);
      // Sealed before anyone sees it: what one client maps, no other can change.
      if (written.ok() && fcntl(e.memfd, F_ADD_SEALS,
                                F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
        written = Status::Error(std::string("sealing: ") + std::strerror(errno));
      if (!written.ok()) close(e.memfd);
    }
  } else {
    Evict(file_bytes);
    auto file =
        WriteFile(name, now, [&](int out) { return WriteState(out, h, tokens, fd, bytes); });
    if (file.ok()) e.checked = *file;  // its checksum was computed from the bytes written
    written = file.status();
  }
  if (!written.ok()) {
    spdlog::warn("a prompt state of uid {} ({} tokens) was not kept: {}", uid, tokens.size(),
                 written.message());
    return written;
  }
  (to_memory ? memory_bytes_ : bytes_) += file_bytes;
  index_[name] = std::move(e);
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
      if (best == index_.end() || e.tokens.size() > best->second.tokens.size() ||
          (e.tokens.size() == best->second.tokens.size() && e.memfd >= 0))
        best = it;
    }
    if (best == index_.end()) return {};
    Entry& e = best->second;
    if (e.memfd >= 0) {
      const int fd = fcntl(e.memfd, F_DUPFD_CLOEXEC, 0);
      if (fd < 0) {
        spdlog::warn("prompt state {} not handed out: {}", best->first, std::strerror(errno));
        return {};
      }
      e.last_use = UnixNow();
      return {static_cast<uint32_t>(e.tokens.size()), fd, e.payload_offset, e.payload_bytes, true};
    }
    Fd f{open(PathOf(best->first).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW)};
    struct stat st {};
    if (f.fd < 0 || fstat(f.fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != e.file_bytes) {
      Remove(best->first, "its file went or changed size under wasted");
      continue;
    }
    if (!Unchanged(st, e.checked)) {
      ++checksums_;
      if (Status c = CheckStateChecksum(f.fd); !c.ok()) {
        Remove(best->first, c.message());
        continue;
      }
    }
    futimens(f.fd, nullptr);  // the last use, kept across restarts
    e.last_use = UnixNow();
    if (fstat(f.fd, &e.checked) != 0) e.checked = {};  // as checked, touched by this use
    const int fd = f.fd;
    f.fd = -1;
    return {static_cast<uint32_t>(e.tokens.size()), fd, e.payload_offset, e.payload_bytes, false};
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
                       e.fingerprint, e.memfd >= 0}});
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
