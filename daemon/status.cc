#include "daemon/status.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "daemon/daemon.h"
#include "protocol/metrics.h"
#include "waste/version.h"

namespace waste::daemon {

void FillCacheStatus(const SlotCache& cache, const std::vector<bool>& has_bank, uint32_t experts,
                     DaemonStatus& s) {
  const CacheCounters c = cache.counters();
  s.slots_ready = c.ready;
  s.slots_loading = c.loading;
  s.slots_pinned = c.pinned;
  s.slots_failed = c.failed;
#define WASTE_COPY_COUNTER(member, ...) s.member = c.member;
  WASTE_STATUS_COUNTERS(WASTE_COPY_COUNTER)
#undef WASTE_COPY_COUNTER
  s.queued.assign(std::begin(c.queued), std::end(c.queued));
  s.in_flight.assign(std::begin(c.in_flight), std::end(c.in_flight));

  const std::vector<LayerCounters> layers = cache.layer_counters();
  const std::vector<uint32_t>& uses = cache.uses();
  for (uint32_t L = 0; L < has_bank.size(); ++L) {
    if (!has_bank[L]) continue;
    const LayerCounters& lc = layers[L];
    LayerStatusInfo x;
    x.layer = L;
    x.slots_ready = lc.ready;
    x.slots_loading = lc.loading;
#define WASTE_COPY_COUNTER(member, ...) x.member = lc.member;
    WASTE_LAYER_COUNTERS(WASTE_COPY_COUNTER)
#undef WASTE_COPY_COUNTER
    x.resident = lc.resident;
    auto use = [&](uint32_t e) { return uses[size_t(L) * experts + e]; };
    std::vector<uint32_t> order;
    for (uint32_t e = 0; e < experts; ++e)
      if (use(e) > 0) order.push_back(e);
    const size_t n = std::min(kHottestExperts, order.size());
    std::partial_sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(n), order.end(),
                      [&](uint32_t a, uint32_t b) { return use(a) != use(b) ? use(a) > use(b) : a < b; });
    for (size_t i = 0; i < n; ++i) {
      const uint32_t e = order[i];
      x.hottest.push_back({e, use(e), x.is_resident(e)});
    }
    s.layers.push_back(std::move(x));
  }
}

DaemonStatus Daemon::Snapshot() const {
  DaemonStatus s;
  s.version = WASTE_VERSION;
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
  s.policy = opt_.policy == EvictionPolicy::kLru ? "lru" : "lfru";
  s.experts = served_.experts;
  s.record_bytes = served_.record_bytes;
  FillCacheStatus(*cache_, served_.has_bank, served_.experts, s);
  s.read_busy_seconds = busy_seconds_ + (cache_->in_flight() > 0 ? MsSince(busy_since_) / 1000 : 0);
  for (const auto& [id, lc] : clients_) {
    const ClientCounters cc = cache_->client_counters(id);
    ClientStatusInfo x;
    x.id = id;
    x.pid = static_cast<uint32_t>(lc.record.pid);
    x.uid = static_cast<uint32_t>(lc.record.uid);
    x.command = lc.record.command;
    x.command_from_proc = lc.record.command_from_proc;
    x.attached_seconds = MsSince(lc.since) / 1000;
#define WASTE_COPY_COUNTER(member, ...) x.member = cc.member;
    WASTE_CLIENT_COUNTERS(WASTE_COPY_COUNTER)
#undef WASTE_COPY_COUNTER
    x.pins = cc.pins;
    x.tokens = lc.tokens;
    s.clients.push_back(std::move(x));
  }
  return s;
}

std::string Daemon::MetricsPage() const {
  // The status `wastectl metrics` reads through the protocol, read here directly:
  // the conversions lose nothing (tests/status_test.cc).
  return PrometheusText(StatusMetrics(Snapshot()));
}

}  // namespace waste::daemon
