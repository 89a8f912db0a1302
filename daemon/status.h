// wasted's status, gathered on the event loop thread: Daemon::Snapshot and
// Daemon::MetricsPage (declared in daemon.h) are defined in status.cc, from
// the daemon's own facts and, through FillCacheStatus, the cache's.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/slot_cache.h"
#include "protocol/status.h"

namespace waste::daemon {

// The most used experts a layer's row lists.
constexpr size_t kHottestExperts = 8;

// Fills the cache's share of `s`: slots by state, demand hints, reads, read
// errors, reads queued and in flight by priority, lookahead and warm-up
// counts, and a row per layer with experts (`has_bank`, by layer) with its
// kHottestExperts most used experts, most used first (the lower id among
// equals). `experts` is the experts per layer.
void FillCacheStatus(const SlotCache& cache, const std::vector<bool>& has_bank, uint32_t experts,
                     DaemonStatus& s);

}  // namespace waste::daemon
