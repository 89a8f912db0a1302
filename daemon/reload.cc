// Reload: the settings read again and what of them applies while wasted runs.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/daemon.h"

namespace waste::daemon {

Result<ReloadOutcome> Daemon::ReloadSettings(const std::string& who) {
  if (stopping_) return Status::Error("wasted is stopping");
  if (!settings_source_) return Status::Error("this wasted has no settings to read again");
  NotifyManager("RELOADING=1\nMONOTONIC_USEC=" +
                std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(
                                   Clock::now().time_since_epoch())
                                   .count()));
  Result<DaemonOptions> next = settings_source_();
  if (!next.ok()) {
    spdlog::error("reload ({}) refused, the running settings are kept: {}", who,
                  next.status().message());
    NotifyManager("READY=1\n" + ManagerStatus());
    return next.status().Prefixed("reload refused, the running settings are kept");
  }
  const auto before = DescribeSettings(opt_);
  const auto after = DescribeSettings(*next);
  ReloadOutcome out;
  for (size_t i = 0; i < before.size(); ++i) {
    const auto& [name, old_value] = before[i];
    const std::string& new_value = after[i].second;
    if (old_value == new_value) continue;
    const std::string change = name + ": " + old_value + " -> " + new_value;
    if (!ReloadableSetting(name)) {
      out.need_restart.push_back(change);
      continue;
    }
    // The socket's group and mode first: that can fail, and then the old
    // group stays.
    if (name == "allow-group") {
      if (Status st = ApplySocketAccess(next->access); !st.ok()) {
        spdlog::error("reload ({}): allow-group not changed: {}", who, st.message());
        out.need_restart.push_back(change + " (not applied: " + st.message() + ")");
        continue;
      }
    }
    TakeReloaded(name, *next, &opt_);
    if (name == "log-level") spdlog::set_level(spdlog::level::from_str(opt_.log_level));
    if (name == "idle-exit") last_client_ = Clock::now();  // the idle time counts from now
    out.applied.push_back(change);
  }
  rpc_->SetAccess(opt_.access);
  StartTimers();
  std::string applied, later;
  for (const auto& a : out.applied) applied += (applied.empty() ? "" : "; ") + a;
  for (const auto& r : out.need_restart) later += (later.empty() ? "" : "; ") + r;
  if (out.applied.empty() && out.need_restart.empty())
    spdlog::info("reloaded settings ({}): nothing changed", who);
  else if (!out.applied.empty())
    spdlog::info("reloaded settings ({}): applied {}", who, applied);
  if (!out.need_restart.empty())
    spdlog::warn("reloaded settings ({}): changed but NOT applied until wasted restarts: {}", who,
                 later);
  NotifyManager("READY=1\n" + ManagerStatus());
  return out;
}

Status Daemon::ApplySocketAccess(const AccessPolicy& access) {
  const std::string& path = opt_.socket;
  const bool group = access.group != static_cast<gid_t>(-1);
  // Widen in the safe order: the group first, then the mode; narrow at once.
  if (group && chown(path.c_str(), static_cast<uid_t>(-1), access.group) != 0)
    return Status::Error("chown " + path + " to group " + std::to_string(access.group) + ": " +
                         std::strerror(errno));
  if (chmod(path.c_str(), group ? 0660 : 0600) != 0)
    return Status::Error("chmod " + path + ": " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace waste::daemon
