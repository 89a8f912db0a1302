// The use counts: saved as JSON under --state-dir, one file per container
// fingerprint, and read at start to warm the cache.
#include "daemon/uses.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/daemon.h"
#include "engine/format/container.h"  // JsonString

namespace waste::daemon {

std::string Daemon::UsesPath() const {
  return opt_.state_dir + "/" + fingerprint_ + ".uses.json";
}

Result<std::vector<uint32_t>> ParseUses(std::string_view text, const std::string& path,
                                        const std::string& fingerprint, size_t records) {
  auto doc = ParseJson(text, path);
  if (!doc.ok()) return Status::Error(path + ": not valid JSON");
  const nlohmann::json& j = *doc;
  if (!j.is_object()) return Status::Error(path + ": not a JSON object");
  std::string saved;
  WASTE_RETURN_IF_ERROR(JsonString(j, path + ": ", "fingerprint", &saved));
  const auto list = j.find("uses");
  if (list != j.end() && !list->is_array()) return Status::Error(path + ": uses is not a list");
  if (saved != fingerprint || list == j.end() || list->size() != records)
    return Status::Error(path + ": not the use counts of this container");
  std::vector<uint32_t> uses(records);
  for (size_t i = 0; i < records; ++i) {
    const auto& v = (*list)[i];
    if (!v.is_number_unsigned())
      return Status::Error(path + ": use count " + std::to_string(i) + " is not a count");
    uses[i] = static_cast<uint32_t>(std::min<uint64_t>(v.get<uint64_t>(), UINT32_MAX));
  }
  return uses;
}

void Daemon::LoadUses() {
  if (opt_.state_dir.empty()) return;
  const std::string path = UsesPath();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    spdlog::info("no saved use counts at {}: the cache starts cold", path);
    return;
  }
  // Untrusted like any file: a bad one is reported and ignored (the cache
  // starts cold), never a reason not to serve.
  auto text = ReadSmallFile(path, kMaxUsesFileBytes);
  if (!text.ok()) {
    spdlog::warn("{}; ignored", text.status().message());
    return;
  }
  const size_t n = size_t(ct_->config().n_layers) * size_t(ct_->config().n_experts);
  auto uses = ParseUses(*text, path, fingerprint_, n);
  if (!uses.ok()) {
    spdlog::warn("{}; ignored", uses.status().message());
    return;
  }
  cache_->SeedUses(*uses);
  if (!opt_.warm_start) return;
  const uint32_t queued = cache_->Warm(cache_->Hottest(served_.slots));
  spdlog::info("warm start from {}: {} reads queued, hottest first, at the lowest priority", path,
               queued);
}

void Daemon::SaveUses() const {
  if (opt_.state_dir.empty()) return;
  // The state is the daemon's alone (which experts its clients used says
  // something about what they asked): a directory it creates is 0700, its
  // files 0600.
  std::error_code ec;
  if (!std::filesystem::exists(opt_.state_dir, ec)) {
    std::filesystem::create_directories(opt_.state_dir, ec);
    std::filesystem::permissions(opt_.state_dir, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace, ec);
  }
  const std::string path = UsesPath();
  nlohmann::json j;
  j["container"] = ct_->dir();
  j["fingerprint"] = fingerprint_;
  j["layers"] = ct_->config().n_layers;
  j["experts"] = ct_->config().n_experts;
  j["uses"] = cache_->uses();  // [layers * experts], row-major
  j["hits"] = cache_->hits();
  const std::string tmp = path + ".tmp";
  {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const std::string text = j.dump() + "\n";
    bool ok = fd >= 0 && fchmod(fd, 0600) == 0;  // an old file keeps its mode otherwise
    for (size_t done = 0; ok && done < text.size();) {
      const ssize_t n = write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      ok = n > 0;
      if (ok) done += static_cast<size_t>(n);
    }
    if (fd >= 0 && close(fd) != 0) ok = false;
    if (!ok) {
      spdlog::warn("could not save use counts to {}: {}", path, std::strerror(errno));
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    spdlog::warn("could not save use counts to {}: {}", path, std::strerror(errno));
    return;
  }
  spdlog::info("use counts saved to {}", path);
}

}  // namespace waste::daemon
