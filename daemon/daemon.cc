#include "daemon/daemon.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "daemon/budget.h"
#include "engine/format/fingerprint.h"
#include "waste/version.h"

namespace waste::daemon {

Result<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& opt) {
  std::unique_ptr<Daemon> d(new Daemon(opt));
  WASTE_RETURN_IF_ERROR(d->Setup());
  return d;
}

Status Daemon::Setup() {
  started_ = Clock::now();
  std::string settings;
  for (const auto& [name, value] : DescribeSettings(opt_))
    settings += (settings.empty() ? "" : ", ") + name + " " + value;
  spdlog::info("wasted {} starting, pid {}, uid {}: {}", WASTE_VERSION, getpid(), geteuid(),
               settings);
  auto t = Clock::now();
  std::error_code ec;
  const auto abs = std::filesystem::canonical(opt_.container, ec);
  if (!ec) opt_.container = abs.string();  // clients are told where it is
  auto ct = Container::Open(opt_.container);
  if (!ct.ok()) return ct.status().Prefixed(opt_.container);
  ct_ = std::make_unique<Container>(std::move(*ct));
  const ModelConfig& c = ct_->config();
  fingerprint_ = ManifestFingerprint(ct_->manifest());
  spdlog::info("container {}: {} ({} layers, {} experts top-{}), {} on disk, validated in {:.1f} ms",
               ct_->dir(), c.architecture, c.n_layers, c.n_experts, c.top_k,
               FormatSize(ct_->total_bytes()), MsSince(t));
  if (c.n_moe_layers() == 0 || c.n_experts == 0)
    return Status::Error(opt_.container + ": the model has no routed experts; run it in process");

  const DaemonPlan plan = PlanFor(ct_->manifest(), opt_.huge_pages);
  MemoryLimit limit;
  auto budget = BudgetOnThisMachine(plan, opt_.budget, &limit);
  if (!budget.ok()) return budget.status();
  budget_ = *budget;
  overhead_ = plan.overhead;
  spdlog::info("budget {} ({}; floor {}; {} may be used: {})", FormatSize(budget_),
               opt_.budget ? "--budget" : "chosen for this machine", FormatSize(plan.floor()),
               FormatSize(limit.bytes), limit.source);

  WASTE_RETURN_IF_ERROR(BuildTrunk());
  WASTE_RETURN_IF_ERROR(BuildCache());
  WASTE_RETURN_IF_ERROR(OpenStates());
  // The metrics port before the socket: whoever finds the socket connectable
  // (a client, a test) finds the metrics page listening too.
  if (!opt_.metrics_listen.empty()) {
    auto m = http::PageServer::Bind(
        opt_.metrics_listen, {"metrics", "/metrics", "text/plain; version=0.0.4; charset=utf-8"});
    if (!m.ok()) return m.status().Prefixed("--metrics-listen " + opt_.metrics_listen);
    metrics_ = std::move(*m);
  }
  return Listen();
}

Status Daemon::OpenStates() {
  if (opt_.state_dir.empty() || (opt_.states_budget == 0 && opt_.states_memory == 0)) {
    spdlog::info("no prompt states are kept ({})",
                 opt_.state_dir.empty() ? "no state-dir" : "states-budget and states-memory 0");
    return Status::Ok();
  }
  // One directory a container: daemons of other models may share state-dir.
  auto states = PromptStates::Open({opt_.state_dir + "/states/" + fingerprint_, fingerprint_,
                                    opt_.states_budget, opt_.states_shared, opt_.states_memory});
  if (!states.ok()) return states.status();
  states_ = std::move(*states);
  return Status::Ok();
}

Status Daemon::Listen() {
  const std::string& path = opt_.socket;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return Status::Error("socket path \"" + path + "\" is empty or longer than " +
                         std::to_string(sizeof addr.sun_path - 1) + " bytes");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return Status::Error(std::string("socket: ") + std::strerror(errno));
  // A socket file left by a daemon that died is replaced; a live one is not.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return Status::Error(path + " exists and is not a socket; not replacing it");
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool live = connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(probe);
    if (live) return Status::Error("another wasted is already listening on " + path);
    unlink(path.c_str());
  }
  const bool group = opt_.access.group != static_cast<gid_t>(-1);
  const mode_t old = umask(group ? 0117 : 0177);  // born 0600 (0660): no window of wider access
  const int rc = bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  umask(old);
  if (rc != 0) return Status::Error("bind " + path + ": " + std::strerror(bind_errno));
  socket_bound_ = true;
  if (group && chown(path.c_str(), static_cast<uid_t>(-1), opt_.access.group) != 0)
    return Status::Error("chown " + path + " to group " + std::to_string(opt_.access.group) +
                         ": " + std::strerror(errno));
  if (listen(listen_fd_, 128) != 0) return Status::Error(std::string("listen: ") + std::strerror(errno));
  return Status::Ok();
}

Daemon::~Daemon() {
  rpc_.reset();
  readers_.reset();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (socket_bound_) unlink(opt_.socket.c_str());
  for (int fd : {trunk_ro_, cache_ro_, table_ro_})
    if (fd >= 0) close(fd);
}

}  // namespace waste::daemon
