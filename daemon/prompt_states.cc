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
  s->worker_ = std::thread([p = s.get()] { p->Work(); });
  return s;
}

bool PromptStates::Sees(uid_t who, uid_t owner) const {
  return o_.shared || who == owner;
}

bool PromptStates::Serves(uid_t uid, uint64_t fingerprint, const std::vector<int32_t>& have,
                          uid_t who, uint64_t want, std::span<const int32_t> query) const {
  return Sees(who, uid) && fingerprint == want && have.size() <= query.size() &&
         std::equal(have.begin(), have.end(), query.begin());
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  if (worker_.joinable()) worker_.join();
  for (Job& job : queue_) close(job.fd);
  for (auto& [name, e] : index_)
    if (e.memfd >= 0) close(e.memfd);
}

uint64_t PromptStates::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

uint64_t PromptStates::memory_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return memory_bytes_;
}

size_t PromptStates::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

uint64_t PromptStates::checksums() const {
  std::lock_guard<std::mutex> lock(mu_);
  return checksums_;
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

Result<std::string> PromptStates::WriteTemporary(double mtime,
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
  if (!st.ok()) {
    std::remove(tmp.c_str());
    return st.Prefixed(tmp);
  }
  return tmp;
}

Result<struct stat> PromptStates::Install(const std::string& tmp, const std::string& name) {
  struct stat written {};
  Status st = Status::Ok();
  if (std::rename(tmp.c_str(), PathOf(name).c_str()) != 0)
    st = Status::Error(std::string("renaming: ") + std::strerror(errno));
  else if (stat(PathOf(name).c_str(), &written) != 0)
    st = Status::Error(std::string("cannot stat: ") + std::strerror(errno));
  if (!st.ok()) {
    std::remove(tmp.c_str());
    std::remove(PathOf(name).c_str());
    return st.Prefixed(tmp);
  }
  bytes_ += static_cast<uint64_t>(written.st_size);
  return written;
}

void PromptStates::SpillPast(uint64_t limit, std::unique_lock<std::mutex>& lock) {
  while (memory_bytes_ > limit) {
    auto lru = LeastRecentlyUsed(index_, true);
    const std::string name = lru->first;
    const Entry& e = lru->second;
    if (e.file_bytes > o_.budget) {
      Remove(name, "the least recently used in memory, and larger than the disk's budget");
      continue;
    }
    // A descriptor of its own: a Drop meanwhile closes the entry's.
    const int from = fcntl(e.memfd, F_DUPFD_CLOEXEC, 0);
    const uint64_t serial = e.serial, n = e.file_bytes;
    const double last_use = e.last_use;
    lock.unlock();
    auto copy = [&](int out) { return CopyState(from, out, n); };
    auto tmp = from < 0 ? Result<std::string>(Status::Error(std::strerror(errno)))
                        : WriteTemporary(last_use, copy);
    if (from >= 0) close(from);
    lock.lock();
    auto it = index_.find(name);
    if (it == index_.end() || it->second.serial != serial) {  // dropped or replaced meanwhile
      if (tmp.ok()) std::remove(tmp->c_str());
      continue;
    }
    if (tmp.ok()) {
      Evict(n);
      auto written = Install(*tmp, name);
      if (written.ok()) {
        close(it->second.memfd);
        it->second.memfd = -1;
        it->second.checked = *written;  // copied from the sealed memfd, checked at publish
        memory_bytes_ -= n;
        continue;
      }
      tmp = written.status();
    }
    spdlog::warn("prompt state {} could not be written to disk: {}", name,
                 tmp.status().message());
    Remove(name, "the least recently used in memory, and not written to disk");
  }
}

void PromptStates::SpillToDisk() {
  Drain();
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t was = memory_bytes_;
  SpillPast(0, lock);
  if (was > 0)
    spdlog::info("prompt states: {} in memory written to disk ({} kept there)", FormatSize(was),
                 FormatSize(bytes_));
}

Status PromptStates::Publish(uid_t uid, uint64_t fingerprint, std::span<const int32_t> tokens,
                             int fd, uint64_t bytes) {
  if (tokens.empty() || tokens.size() > kMaxStateTokens)
    return Status::Error("a prompt state is filed under 1 to " + std::to_string(kMaxStateTokens) +
                         " tokens, not " + std::to_string(tokens.size()));
  if (bytes == 0) return Status::Error("a prompt state of no bytes");
  const uint64_t file_bytes = sizeof(StateHeader) + tokens.size_bytes() + bytes;
  if (file_bytes > o_.memory && file_bytes > o_.budget)
    return Status::Error("a prompt state of " + FormatSize(file_bytes) +
                         " is larger than the states' budgets: " + FormatSize(o_.memory) +
                         " in memory (states-memory), " + FormatSize(o_.budget) +
                         " on disk (states-budget)");
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes)
    return Status::Error("the state's descriptor holds fewer than the " + std::to_string(bytes) +
                         " bytes announced");
  Job job{uid, fingerprint, {tokens.begin(), tokens.end()}, -1, bytes};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= kMaxQueued)
      return Status::Error("wasted is still writing " + std::to_string(queue_.size()) +
                           " prompt states; this one is not kept");
    job.fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (job.fd < 0)
      return Status::Error(std::string("the state's descriptor: ") + std::strerror(errno));
    queue_.push_back(std::move(job));
  }
  work_.notify_one();
  return Status::Ok();
}

void PromptStates::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return queue_.empty() || stop_; });
}

void PromptStates::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) break;
    // Left at the queue's head while it is written, for Find to see; a
    // deque's push_back keeps references to it valid.
    const Job& job = queue_.front();
    lock.unlock();
    Keep(job);
    lock.lock();
    close(job.fd);
    queue_.pop_front();
    done_.notify_all();
  }
  done_.notify_all();
}

void PromptStates::Keep(const Job& job) {
  const uint64_t file_bytes = sizeof(StateHeader) + job.tokens.size() * 4 + job.bytes;
  const bool to_memory = file_bytes <= o_.memory;
  const std::string name = StateNameOf(job.uid, job.fingerprint, job.tokens);
  const double now = UnixNow();
  const StateHeader h =
      NewStateHeader(o_.model, job.uid, job.fingerprint, job.tokens.size(), job.bytes, now);
  Entry e{job.uid,   job.fingerprint, job.tokens, file_bytes, file_bytes - job.bytes,
          job.bytes, now,             now};
  // The copy, unlocked: Find and the rest go on meanwhile.
  Status written = Status::Ok();
  Result<std::string> tmp = std::string();
  if (to_memory) {
    e.memfd = memfd_create("waste-prompt-state", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (e.memfd < 0) {
      written = Status::Error(std::string("memfd_create: ") + std::strerror(errno));
    } else {
      written = WriteState(e.memfd, h, job.tokens, job.fd, job.bytes);
      // Sealed before anyone sees it: what one client maps, no other can change.
      if (written.ok() && fcntl(e.memfd, F_ADD_SEALS,
                                F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
        written = Status::Error(std::string("sealing: ") + std::strerror(errno));
      if (!written.ok()) close(e.memfd);
    }
  } else {
    tmp = WriteTemporary(
        now, [&](int out) { return WriteState(out, h, job.tokens, job.fd, job.bytes); });
    written = tmp.status();
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (written.ok()) {
    Remove(name, "published again");
    if (!to_memory) {
      Evict(file_bytes);
      auto file = Install(*tmp, name);
      if (file.ok()) e.checked = *file;  // its checksum was computed from the bytes written
      written = file.status();
    }
  }
  if (!written.ok()) {
    spdlog::warn("a prompt state of uid {} ({} tokens) was not kept: {}", job.uid,
                 job.tokens.size(), written.message());
    return;
  }
  if (to_memory) memory_bytes_ += file_bytes;
  e.serial = ++serial_;
  index_[name] = std::move(e);
  SpillPast(o_.memory, lock);
}

PromptStates::Found PromptStates::Find(uid_t uid, uint64_t fingerprint,
                                       std::span<const int32_t> tokens) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto best = index_.end();
    for (auto it = index_.begin(); it != index_.end(); ++it) {
      const Entry& e = it->second;
      if (!Serves(e.uid, e.fingerprint, e.tokens, uid, fingerprint, tokens)) continue;
      if (best == index_.end() || e.tokens.size() > best->second.tokens.size() ||
          (e.tokens.size() == best->second.tokens.size() && e.memfd >= 0))
        best = it;
    }
    // A longer one still being written is waited for: its copy takes far
    // less than the prefill the client would run instead.
    const size_t have = best == index_.end() ? 0 : best->second.tokens.size();
    bool pending = false;
    for (const Job& j : queue_)
      pending = pending || (j.tokens.size() > have &&
                            Serves(j.uid, j.fingerprint, j.tokens, uid, fingerprint, tokens));
    if (pending && !stop_) {
      done_.wait(lock);
      continue;
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
  std::lock_guard<std::mutex> lock(mu_);
  const bool all = uid == 0 || uid == geteuid();
  std::vector<std::pair<double, PromptStateInfo>> rows;
  const double now = UnixNow();
  for (const auto& [name, e] : index_)
    if (all || Sees(uid, e.uid))
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
  std::lock_guard<std::mutex> lock(mu_);
  const bool all = uid == 0 || uid == geteuid();
  std::vector<std::string> names;
  for (const auto& [name, e] : index_)
    if (all || Sees(uid, e.uid)) names.push_back(name);
  for (const std::string& name : names) Remove(name, "dropped by uid " + std::to_string(uid));
  return static_cast<uint32_t>(names.size());
}

}  // namespace waste::daemon
