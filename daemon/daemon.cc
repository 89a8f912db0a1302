#include "daemon/daemon.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <capnp/message.h>
#include <spdlog/spdlog.h>

#include "daemon/budget.h"
#include "engine/format/fingerprint.h"
#include "protocol/metrics.h"
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
  const MemoryLimit limit = ProcessMemoryLimit();
  auto budget = DaemonBudget(plan, opt_.budget, limit);
  if (!budget.ok()) return budget.status();
  budget_ = *budget;
  overhead_ = plan.overhead;
  spdlog::info("budget {} ({}; floor {}; {} may be used: {})", FormatSize(budget_),
               opt_.budget ? "--budget" : "chosen for this machine", FormatSize(plan.floor()),
               FormatSize(limit.bytes), limit.source);

  WASTE_RETURN_IF_ERROR(BuildTrunk());
  WASTE_RETURN_IF_ERROR(BuildCache());
  WASTE_RETURN_IF_ERROR(Listen());
  if (!opt_.metrics_listen.empty()) {
    auto m = MetricsHttp::Bind(opt_.metrics_listen);
    if (!m.ok()) return m.status();
    metrics_ = std::move(*m);
  }
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

StatusSnapshot Daemon::Snapshot() const {
  StatusSnapshot s;
  s.pid = static_cast<uint32_t>(getpid());
  s.uptime_seconds = MsSince(started_) / 1000;
  s.container = ct_->dir();
  s.arch = ct_->config().architecture;
  s.page_kind = shm::PageKindName(cache_seg_.page_kind());
  s.budget = budget_;
  s.trunk_bytes = trunk_seg_.size();
  s.cache_bytes = cache_seg_.size();
  s.overhead_bytes = overhead_;
  s.trunk_wired = trunk_wired_;
  s.slots = served_.slots;
  s.io_depth = static_cast<uint32_t>(readers_->threads());
  const CacheCounters c = cache_->counters();
  s.ready = c.ready;
  s.loading = c.loading;
  s.pinned = c.pinned;
  s.failed = c.failed;
  s.hits = c.hits;
  s.late = c.late;
  s.misses = c.misses;
  s.reads = c.reads;
  s.bytes_read = c.bytes_read;
  s.read_errors = c.read_errors;
  for (int k = 0; k < 3; ++k) {
    s.queued[k] = c.queued[k];
    s.in_flight[k] = c.in_flight[k];
  }
  s.policy = opt_.policy == EvictionPolicy::kLru ? "lru" : "lfru";
  s.lookahead_reads = c.lookahead_reads;
  s.lookahead_used = c.lookahead_used;
  s.lookahead_unused_bytes = c.lookahead_unused_bytes;
  s.lookahead_dropped = c.dropped;
  s.demand_hinted = c.demand_hinted;
  s.warm_reads = c.warm_reads;
  s.read_busy_seconds = busy_seconds_ + (c.in_flight[0] + c.in_flight[1] + c.in_flight[2] > 0
                                             ? MsSince(busy_since_) / 1000
                                             : 0);
  for (const auto& [id, lc] : clients_) {
    const ClientCounters cc = cache_->client_counters(id);
    ClientSnapshot x;
    x.id = id;
    x.pid = static_cast<uint32_t>(lc.record.pid);
    x.uid = static_cast<uint32_t>(lc.record.uid);
    x.command = lc.record.command;
    x.command_from_proc = lc.record.command_from_proc;
    x.attached_seconds = MsSince(lc.since) / 1000;
    x.hits = cc.hits;
    x.late = cc.late;
    x.misses = cc.misses;
    x.pins = cc.pins;
    x.tokens = lc.tokens;
    s.clients.push_back(std::move(x));
  }
  s.experts = served_.experts;
  s.record_bytes = served_.record_bytes;
  const std::vector<LayerCounters> layers = cache_->layer_counters();
  const std::vector<uint32_t>& uses = cache_->uses();
  constexpr size_t kHottest = 8;
  for (uint32_t L = 0; L < served_.layers; ++L) {
    if (!served_.has_bank[L]) continue;
    const LayerCounters& lc = layers[L];
    LayerSnapshot x;
    x.layer = L;
    x.ready = lc.ready;
    x.loading = lc.loading;
    x.hits = lc.hits;
    x.late = lc.late;
    x.misses = lc.misses;
    x.resident = lc.resident;
    std::vector<uint32_t> order;
    for (uint32_t e = 0; e < served_.experts; ++e)
      if (uses[size_t(L) * served_.experts + e] > 0) order.push_back(e);
    const size_t n = std::min(kHottest, order.size());
    auto use = [&](uint32_t e) { return uses[size_t(L) * served_.experts + e]; };
    std::partial_sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(n), order.end(),
                      [&](uint32_t a, uint32_t b) { return use(a) != use(b) ? use(a) > use(b) : a < b; });
    for (size_t i = 0; i < n; ++i) {
      const uint32_t e = order[i];
      x.hottest.push_back({e, use(e), (lc.resident[e / 8] >> (e % 8) & 1) != 0});
    }
    s.layers.push_back(std::move(x));
  }
  return s;
}

std::string Daemon::MetricsPage() const {
  // Through the protocol's own Status, so the page and `wastectl metrics`
  // cannot drift apart.
  capnp::MallocMessageBuilder message;
  auto status = message.initRoot<proto::Status>();
  FillStatus(Snapshot(), WASTE_VERSION, status);
  return PrometheusText(StatusMetrics(StatusFromProto(status.asReader())));
}

}  // namespace waste::daemon
