#include "daemon/daemon.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/notify.h"
#include "engine/format/fingerprint.h"
#include "engine/model/trunk.h"
#include "waste/version.h"

namespace waste::daemon {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

uint64_t SlotStride(const Container& ct) {
  return (uint64_t{ct.record_bytes()} + 4095) / 4096 * 4096;
}

uint64_t AllRecords(const Container& ct) {
  return uint64_t(ct.config().n_experts) * ct.config().n_moe_layers();
}

constexpr uint64_t kMaxClients = 1024;  // pin pages the overhead is planned for

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string GroupText(gid_t g) {
  if (g == static_cast<gid_t>(-1)) return "none";
  const ::group* gr = getgrgid(g);
  return gr ? std::string(gr->gr_name) + " (" + std::to_string(g) + ")" : std::to_string(g);
}

}  // namespace

std::vector<std::pair<std::string, std::string>> DescribeSettings(const DaemonOptions& o) {
  std::string uids;
  for (uid_t u : o.access.uids) uids += (uids.empty() ? "" : ",") + std::to_string(u);
  std::error_code ec;
  const auto abs = std::filesystem::weakly_canonical(o.container, ec);
  return {
      {"container", ec ? o.container : abs.string()},
      {"socket", o.socket},
      {"budget", o.budget ? FormatSize(o.budget) : "auto"},
      {"io-depth", std::to_string(o.io_depth)},
      {"verify-crc", o.verify_crc ? "yes" : "no"},
      {"allow-uid", uids.empty() ? "none" : uids},
      {"allow-group", GroupText(o.access.group)},
      {"idle-exit", Seconds(o.idle_exit_seconds)},
      {"state-dir", o.state_dir.empty() ? "none" : o.state_dir},
      {"save-interval", Seconds(o.save_interval_seconds)},
      {"cold", o.warm_start ? "no" : "yes"},
      {"policy", o.policy == Policy::kLru ? "lru" : "lfru"},
      {"no-huge-pages", o.huge_pages ? "no" : "yes"},
      {"no-wire", o.wire_trunk ? "no" : "yes"},
      {"metrics-listen", o.metrics_listen.empty() ? "none" : o.metrics_listen},
      {"log-file", o.log_file.empty() ? "none" : o.log_file},
      {"log-level", o.log_level},
  };
}

bool ReloadableSetting(const std::string& name) {
  return name == "log-level" || name == "allow-uid" || name == "allow-group" ||
         name == "idle-exit" || name == "save-interval";
}

DaemonBudget PlanDaemon(const Container& ct, bool huge_pages) {
  DaemonBudget b;
  const ModelConfig& c = ct.config();
  b.trunk = shm::Segment::SizeFor(Trunk::PackedBytes(ct.manifest()), huge_pages);
  const uint64_t stride = SlotStride(ct);
  const uint64_t table = shm::SlotTable::BytesFor(
      static_cast<uint32_t>(c.n_layers), static_cast<uint32_t>(std::max(c.n_experts, 1)),
      static_cast<uint32_t>(std::max<uint64_t>(AllRecords(ct), 1)));
  // Thread stacks, the heap, Cap'n Proto buffers: 16 MiB; then the table and
  // a pin page for every client the daemon may have.
  b.overhead = (16ull << 20) + table + kMaxClients * sizeof(shm::PinPage);
  // A forward pass pins one record at a time, but each client has a layer's
  // experts on their way: room for top-k records of two clients at least.
  b.min_cache = stride * std::max<uint64_t>(2 * std::max(c.top_k, 1), 4);
  if (AllRecords(ct) > 0) b.min_cache = std::min(b.min_cache, stride * AllRecords(ct));
  b.min_cache = shm::Segment::SizeFor(b.min_cache, huge_pages);
  b.working_set = stride * uint64_t(c.top_k) * c.n_moe_layers();
  return b;
}

Result<uint64_t> ChooseBudget(const DaemonBudget& plan, uint64_t requested,
                              const MemoryLimit& limit) {
  const std::string parts = "trunk " + FormatSize(plan.trunk) + " + smallest expert cache " +
                            FormatSize(plan.min_cache) + " + daemon overhead " +
                            FormatSize(plan.overhead);
  if (requested) {
    if (requested < plan.floor())
      return Status::Error("--budget " + FormatSize(requested) + " is below the floor of " +
                           FormatSize(plan.floor()) + " (" + parts + ")");
    return requested;
  }
  const uint64_t cap = limit.bytes / 4 * 3;
  for (int sets = 3; sets >= 1; --sets) {
    const uint64_t want = plan.floor() + static_cast<uint64_t>(sets) * plan.working_set;
    if (want <= cap) return want;
  }
  if (plan.floor() <= cap) return cap;
  return Status::Error("the model needs at least " + FormatSize(plan.floor()) + " (" + parts +
                       "), but 3/4 of the " + FormatSize(limit.bytes) +
                       " this process may use (" + limit.source + ") is " + FormatSize(cap));
}

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

  const DaemonBudget plan = PlanDaemon(*ct_, opt_.huge_pages);
  const MemoryLimit limit = ProcessMemoryLimit();
  auto budget = ChooseBudget(plan, opt_.budget, limit);
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

namespace {
// "transparent huge pages", or "4 KiB pages (why no huge ones)".
std::string PagesOf(const shm::Segment& seg) {
  std::string s = shm::PageKindName(seg.page_kind());
  if (!seg.why_small_pages().empty()) s += " (" + seg.why_small_pages() + ")";
  return s;
}
}  // namespace

Status Daemon::BuildTrunk() {
  auto t = Clock::now();
  const uint64_t bytes = Trunk::PackedBytes(ct_->manifest());
  auto seg = shm::Segment::Create("wasted-trunk", bytes, opt_.huge_pages);
  if (!seg.ok()) return seg.status().Prefixed("trunk segment");
  trunk_seg_ = std::move(*seg);
  {
    auto rw = shm::Mapping::Map(trunk_seg_.fd(), trunk_seg_.size(), true, true);
    if (!rw.ok()) return rw.status().Prefixed("trunk segment");
    WASTE_RETURN_IF_ERROR(Trunk::Pack(*ct_, rw->data(), rw->size()));
  }  // the writable mapping goes before the seal
  const double load_ms = MsSince(t);
  if (trunk_seg_.page_kind() != shm::PageKind::kHugetlb) {
    WASTE_RETURN_IF_ERROR(trunk_seg_.Seal());
  }
  auto ro = shm::Mapping::Map(trunk_seg_.fd(), trunk_seg_.size(), false, true);
  if (!ro.ok()) return ro.status().Prefixed("trunk segment");
  trunk_map_ = std::move(*ro);
  if (opt_.wire_trunk) {
    if (mlock(trunk_map_.data(), trunk_map_.size()) == 0) {
      trunk_wired_ = true;
    } else {
      const int err = errno;
      rlimit lim{};
      getrlimit(RLIMIT_MEMLOCK, &lim);
      spdlog::warn(
          "trunk NOT wired: mlock of {} failed ({}); the memlock limit is {}. Raise it "
          "(`ulimit -l unlimited`, or LimitMEMLOCK=infinity in the systemd unit) or run "
          "with --no-wire; unwired, the kernel may page the trunk out under pressure",
          FormatSize(trunk_map_.size()), std::strerror(err),
          lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : FormatSize(lim.rlim_cur));
    }
  }
  spdlog::info("trunk: {} packed into a memfd in {:.0f} ms ({:.2f} GB/s), {}, {}, {}",
               FormatSize(bytes), load_ms, bytes / load_ms / 1e6,
               PagesOf(trunk_seg_), trunk_seg_.page_kind() == shm::PageKind::kHugetlb ? "not sealable (hugetlb)"
                                                                 : "sealed",
               trunk_wired_ ? "wired" : "not wired");
  return Status::Ok();
}

Status Daemon::BuildCache() {
  auto t = Clock::now();
  const ModelConfig& c = ct_->config();
  const uint64_t stride = SlotStride(*ct_);
  if (budget_ < trunk_seg_.size() + overhead_ + stride)
    return Status::Error("the budget " + FormatSize(budget_) + " leaves no room for the cache");
  const uint64_t room = budget_ - trunk_seg_.size() - overhead_;
  // The segment may be rounded up to whole huge pages: keep that inside the room too.
  uint64_t slots = std::min<uint64_t>(AllRecords(*ct_), room / stride);
  while (slots > 0 && shm::Segment::SizeFor(slots * stride, opt_.huge_pages) > room) --slots;
  if (slots == 0 || slots > 0xfffffff0u)
    return Status::Error("the budget leaves room for " + std::to_string(slots) + " cache slots");
  auto seg = shm::Segment::Create("wasted-cache", slots * stride, opt_.huge_pages);
  if (!seg.ok()) return seg.status().Prefixed("cache segment");
  cache_seg_ = std::move(*seg);
  // Populated now: a fresh page costs a slow first touch on this kind of
  // machine, better paid at start than in the middle of a read.
  auto rw = shm::Mapping::Map(cache_seg_.fd(), cache_seg_.size(), true, true);
  if (!rw.ok()) return rw.status().Prefixed("cache segment");
  cache_map_ = std::move(*rw);

  const uint32_t layers = static_cast<uint32_t>(c.n_layers);
  const uint32_t experts = static_cast<uint32_t>(c.n_experts);
  const uint64_t table_bytes = shm::SlotTable::BytesFor(layers, experts, static_cast<uint32_t>(slots));
  auto tseg = shm::Segment::Create("wasted-table", table_bytes, false);
  if (!tseg.ok()) return tseg.status().Prefixed("slot table");
  table_seg_ = std::move(*tseg);
  auto tmap = shm::Mapping::Map(table_seg_.fd(), table_seg_.size(), true, true);
  if (!tmap.ok()) return tmap.status().Prefixed("slot table");
  table_map_ = std::move(*tmap);
  auto table = shm::SlotTable::Init(table_map_.data(), table_map_.size(), layers, experts,
                                    static_cast<uint32_t>(slots), ct_->record_bytes(), stride);
  if (!table.ok()) return table.status();
  // Written before any client can attach; clients read it from the header.
  const uint32_t pins_cap =
      opt_.max_pins_per_client
          ? opt_.max_pins_per_client
          : std::max<uint32_t>(static_cast<uint32_t>(c.top_k), static_cast<uint32_t>(slots / 4));
  table->header().pins_per_client = std::clamp<uint32_t>(pins_cap, 1, shm::kPinsPerClient);
  std::vector<bool> has_bank(layers);
  for (uint32_t L = 0; L < layers; ++L) has_bank[L] = ct_->manifest().Bank(static_cast<int>(L));
  cache_ = std::make_unique<SlotCache>(*table, has_bank, ct_->record_bytes(), opt_.policy,
                                       opt_.max_queued_per_client);

  // Clients get descriptors that cannot be mapped writable.
  for (auto [seg_ptr, out] : {std::pair{&trunk_seg_, &trunk_ro_}, std::pair{&cache_seg_, &cache_ro_},
                              std::pair{&table_seg_, &table_ro_}}) {
    auto fd = seg_ptr->ReadOnlyFd();
    if (!fd.ok()) return fd.status();
    *out = *fd;
  }
  served_.container = ct_->dir();
  served_.fingerprint = fingerprint_;
  served_.arch = c.architecture;
  served_.layers = layers;
  served_.experts = experts;
  served_.top_k = static_cast<uint32_t>(c.top_k);
  served_.slots = static_cast<uint32_t>(slots);
  served_.record_bytes = ct_->record_bytes();
  served_.slot_stride = stride;
  served_.has_bank = has_bank;
  served_.trunk_fd = trunk_ro_;
  served_.cache_fd = cache_ro_;
  served_.table_fd = table_ro_;
  served_.trunk_bytes = trunk_seg_.size();
  served_.cache_bytes = cache_seg_.size();
  served_.table_bytes = table_seg_.size();
  spdlog::info("cache: {} slots of {} ({} of {} records, {:.0f}%), {}, populated in {:.0f} ms; "
               "per client at most {} pins and {} reads queued",
               slots, FormatSize(stride), slots, AllRecords(*ct_), 100.0 * slots / AllRecords(*ct_),
               PagesOf(cache_seg_), MsSince(t), table->pins_per_client(),
               opt_.max_queued_per_client);
  if (opt_.huge_pages && cache_seg_.page_kind() == shm::PageKind::kSmall)
    spdlog::info(
        "no huge pages for the cache: every client maps it 4 KiB at a time, which costs attach "
        "time and decode speed (docs/MEASUREMENTS.md); ops/README.md says how to allow them");
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

void Daemon::Post(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mail_mu_);
  if (mail_closed_) return;
  mail_.push_back(std::move(fn));
  uv_async_send(&mail_async_);  // coalesced: one wake-up may carry many
}

void Daemon::DrainMailbox() {
  std::vector<std::function<void()>> batch;
  {
    std::lock_guard<std::mutex> lock(mail_mu_);
    batch.swap(mail_);
  }
  for (auto& fn : batch) fn();
  Pump();
}

void Daemon::Pump() {
  if (stopping_) return;
  const uint32_t depth = static_cast<uint32_t>(readers_->threads());
  const uint32_t busy = cache_->in_flight();
  if (busy >= depth || !cache_->has_queued()) return;
  const std::vector<ReadJob> jobs = cache_->Dispatch(depth - busy);
  if (busy == 0 && !jobs.empty()) busy_since_ = Clock::now();
  for (const ReadJob& job : jobs) readers_->Submit(job);
}

void Daemon::AddClient(ClientRecord client) {
  Post([this, c = std::move(client)]() mutable {
    const uint32_t id = c.id;
    cache_->AddClient(id, reinterpret_cast<const shm::PinPage*>(c.pins->mapping.data()));
    clients_[id] = LiveClient{std::move(c), Clock::now()};
    NotifyManager(ManagerStatus());
  });
}

void Daemon::RemoveClient(uint32_t id) {
  Post([this, id] {
    auto it = clients_.find(id);
    if (it == clients_.end()) return;
    const ClientCounters cc = cache_->client_counters(id);
    spdlog::info("client {} detached (pid {} uid {}, attached {:.1f} s): {} hits, {} late, {} misses, {} "
                 "pins released",
                 id, it->second.record.pid, it->second.record.uid, MsSince(it->second.since) / 1000,
                 cc.hits, cc.late, cc.misses, cc.pins);
    cache_->RemoveClient(id);  // before the page's mapping can go
    clients_.erase(it);
    last_client_ = Clock::now();
    NotifyManager(ManagerStatus());
  });
}

void Daemon::Hint(uint32_t id, int layer, std::vector<uint32_t> experts, HintKind kind) {
  Post([this, id, layer, e = std::move(experts), kind] {
    if (cache_->Hint(id, layer, e, kind) == 0) return;
    auto it = clients_.find(id);
    if (it == clients_.end() || it->second.cap_logged) return;
    it->second.cap_logged = true;  // once per client, not once per hint
    spdlog::warn("client {} (pid {}): {} reads queued, its cap; hints beyond it are dropped "
                 "until its reads start",
                 id, it->second.record.pid, opt_.max_queued_per_client);
  });
}

void Daemon::Progress(uint32_t id, uint64_t tokens) {
  Post([this, id, tokens] {
    auto it = clients_.find(id);
    if (it != clients_.end()) it->second.tokens = std::max(it->second.tokens, tokens);
  });
}

void Daemon::GetStatus(std::function<void(DaemonStatus)> reply) {
  Post([this, reply = std::move(reply)] { reply(Snapshot()); });
}

void Daemon::Warm(std::function<void(uint32_t)> reply) {
  Post([this, reply = std::move(reply)] {
    const uint32_t n = cache_->Warm(cache_->Hottest(served_.slots));
    spdlog::info("warm-up asked for: {} reads queued", n);
    reply(n);
  });
}

void Daemon::Drop(int layer, std::function<void(uint32_t)> reply) {
  Post([this, layer, reply = std::move(reply)] {
    const uint32_t n = cache_->Drop(layer);
    spdlog::info("dropped {} slots ({})", n, layer < 0 ? "all layers" : "layer " + std::to_string(layer));
    reply(n);
  });
}

void Daemon::Reload(std::string who, std::function<void(Result<ReloadOutcome>)> reply) {
  Post([this, who = std::move(who), reply = std::move(reply)] { reply(ReloadSettings(who)); });
}

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
    if (name == "allow-group") {
      if (Status st = ApplySocketAccess(next->access); !st.ok()) {
        spdlog::error("reload ({}): allow-group not changed: {}", who, st.message());
        out.need_restart.push_back(change + " (not applied: " + st.message() + ")");
        continue;
      }
      opt_.access.group = next->access.group;
    } else if (name == "allow-uid") {
      opt_.access.uids = next->access.uids;
    } else if (name == "log-level") {
      opt_.log_level = next->log_level;
      spdlog::set_level(spdlog::level::from_str(opt_.log_level));
    } else if (name == "idle-exit") {
      opt_.idle_exit_seconds = next->idle_exit_seconds;
      last_client_ = Clock::now();  // the idle time counts from now
    } else if (name == "save-interval") {
      opt_.save_interval_seconds = next->save_interval_seconds;
    }
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

void Daemon::StartTimers() {
  uv_timer_stop(&idle_timer_);
  if (opt_.idle_exit_seconds > 0) {
    uv_timer_start(
        &idle_timer_,
        [](uv_timer_t* t) {
          auto* d = static_cast<Daemon*>(t->loop->data);
          if (d->clients_.empty() && MsSince(d->last_client_) / 1000 >= d->opt_.idle_exit_seconds)
            d->Stop("no clients for " + Seconds(d->opt_.idle_exit_seconds) + " s");
        },
        1000, 1000);
  }
  uv_timer_stop(&save_timer_);
  if (opt_.save_interval_seconds > 0 && !opt_.state_dir.empty()) {
    const auto every = static_cast<uint64_t>(opt_.save_interval_seconds * 1000);
    uv_timer_start(
        &save_timer_, [](uv_timer_t* t) { static_cast<Daemon*>(t->loop->data)->SaveUses(); },
        every, every);
  }
}

void Daemon::NotifyManager(const std::string& state) const {
  if (Status st = NotifyServiceManager(state); !st.ok()) spdlog::warn("{}", st.message());
}

std::string Daemon::ManagerStatus() const {
  return "STATUS=serving " + ct_->dir() + " on " + opt_.socket + ", " +
         std::to_string(clients_.size()) + (clients_.size() == 1 ? " client" : " clients");
}

void Daemon::RequestStop(std::string why) {
  Post([this, why = std::move(why)] { Stop(why); });
}

std::string Daemon::UsesPath() const {
  return opt_.state_dir + "/" + fingerprint_ + ".uses.json";
}

void Daemon::LoadUses() {
  if (opt_.state_dir.empty()) return;
  const std::string path = UsesPath();
  std::ifstream f(path);
  if (!f) {
    spdlog::info("no saved use counts at {}: the cache starts cold", path);
    return;
  }
  // Untrusted like any file: a bad one is reported and ignored.
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  const size_t n = size_t(ct_->config().n_layers) * size_t(ct_->config().n_experts);
  if (!j.is_object() || j.value("fingerprint", "") != fingerprint_ || !j["uses"].is_array() ||
      j["uses"].size() != n) {
    spdlog::warn("{}: not the use counts of this container; ignored", path);
    return;
  }
  std::vector<uint32_t> uses(n);
  for (size_t i = 0; i < n; ++i) {
    const auto& v = j["uses"][i];
    if (!v.is_number_unsigned()) {
      spdlog::warn("{}: use count {} is not a count; ignored", path, i);
      return;
    }
    uses[i] = static_cast<uint32_t>(std::min<uint64_t>(v.get<uint64_t>(), UINT32_MAX));
  }
  cache_->SeedUses(uses);
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

void Daemon::Stop(const std::string& why) {
  if (stopping_) return;
  stopping_ = true;
  spdlog::info("stopping: {}", why);
  NotifyManager("STOPPING=1\nSTATUS=stopping: " + why);
  // From here a second SIGTERM or SIGINT ends the process at once.
  uv_signal_stop(&sigterm_);
  uv_signal_stop(&sigint_);
  uv_signal_stop(&sighup_);
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  cache_->Shutdown();  // clients waiting on a slot wake and see it
  rpc_.reset();        // connections close: clients see the daemon go
  if (metrics_) metrics_->Close();
  readers_.reset();    // reads under way finish; their results are dropped
  SaveUses();
  {
    std::lock_guard<std::mutex> lock(mail_mu_);
    mail_closed_ = true;
    mail_.clear();
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&mail_async_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&sigterm_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&sigint_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&sighup_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&idle_timer_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&save_timer_), nullptr);
}

int Daemon::Run() {
  uv_loop_init(&loop_);
  loop_.data = this;
  uv_async_init(&loop_, &mail_async_, [](uv_async_t* a) {
    static_cast<Daemon*>(a->loop->data)->DrainMailbox();
  });
  auto on_signal = [](uv_signal_t* h, int signum) {
    static_cast<Daemon*>(h->loop->data)->Stop(std::string("signal ") + strsignal(signum));
  };
  uv_signal_init(&loop_, &sigterm_);
  uv_signal_start(&sigterm_, on_signal, SIGTERM);
  uv_signal_init(&loop_, &sigint_);
  uv_signal_start(&sigint_, on_signal, SIGINT);
  uv_signal_init(&loop_, &sighup_);
  uv_signal_start(
      &sighup_,
      [](uv_signal_t* h, int) {
        auto* d = static_cast<Daemon*>(h->loop->data);
        if (!d->stopping_) (void)d->ReloadSettings("SIGHUP");  // it logs what it did
      },
      SIGHUP);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error, not a death

  readers_ = std::make_unique<Readers>(
      *ct_, opt_.io_depth, opt_.verify_crc,
      [this](uint32_t slot) { return cache_map_.data() + served_.slot_stride * slot; },
      [this](ReadResult r) {
        Post([this, r = std::move(r)] {
          if (r.error != shm::ReadError::kNone) spdlog::error("read failed: {}", r.message);
          cache_->Complete(r.job, r.error, r.detail);
          if (cache_->in_flight() == 0) busy_seconds_ += MsSince(busy_since_) / 1000;
        });
      });
  if (Status st = readers_->Open(); !st.ok()) {
    spdlog::error("{}", st.message());
    return 1;
  }
  auto rpc = RpcServer::Start(listen_fd_, served_, opt_.access, this);
  if (!rpc.ok()) {
    spdlog::error("{}", rpc.status().message());
    return 1;
  }
  rpc_ = std::move(*rpc);
  if (metrics_) {
    if (Status st = metrics_->Start(&loop_, [this] { return MetricsPage(); }); !st.ok()) {
      spdlog::error("{}", st.message());
      return 1;
    }
  }

  last_client_ = Clock::now();
  uv_timer_init(&loop_, &idle_timer_);
  uv_timer_init(&loop_, &save_timer_);
  StartTimers();
  LoadUses();
  Pump();
  spdlog::info("serving {} on {} ({} reads in flight, {} eviction), ready in {:.0f} ms",
               ct_->dir(), opt_.socket, opt_.io_depth,
               opt_.policy == Policy::kLru ? "LRU" : "LFRU", MsSince(started_));
  NotifyManager("READY=1\n" + ManagerStatus());
  uv_run(&loop_, UV_RUN_DEFAULT);
  uv_loop_close(&loop_);
  spdlog::info("stopped");
  return 0;
}

}  // namespace waste::daemon
