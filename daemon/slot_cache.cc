#include "daemon/slot_cache.h"

#include <algorithm>

namespace waste::daemon {

using shm::SlotState;

SlotCache::SlotCache(shm::SlotTable table, std::vector<bool> has_bank, uint64_t record_bytes,
                     EvictionPolicy policy, uint32_t max_queued_per_client)
    : t_(table),
      has_bank_(std::move(has_bank)),
      record_bytes_(record_bytes),
      max_queued_(std::max<uint32_t>(max_queued_per_client, 1)),
      experts_(table.header().experts),
      meta_(table.slots()),
      eviction_(table.slots(), table.header().layers * table.header().experts, policy),
      uses_(static_cast<size_t>(table.header().layers) * table.header().experts, 0),
      hits_(uses_.size(), 0),
      layers_(table.header().layers) {}

void SlotCache::AddClient(uint32_t id, const shm::PinPage* page) {
  clients_[id] = Client{page, 0, {}, {}, 0};
}

void SlotCache::RemoveClient(uint32_t id) {
  // Its pins go with its page: the next victim search no longer sees them.
  // Its queued reads stay; a demand read is still worth having.
  clients_.erase(id);
}

std::vector<const shm::PinPage*> SlotCache::Pages() const {
  std::vector<const shm::PinPage*> pages;
  pages.reserve(clients_.size());
  for (const auto& [id, c] : clients_) pages.push_back(c.page);
  return pages;
}

void SlotCache::Touch(uint32_t slot, uint32_t client, uint64_t stamp) {
  eviction_.Touch(slot);
  SlotMeta& m = meta_[slot];
  m.awaited_by = client + 1;
  m.awaited_stamp = stamp;
}

uint32_t SlotCache::Hint(uint32_t client, int layer, std::span<const uint32_t> experts,
                         HintKind kind) {
  auto cit = clients_.find(client);
  if (cit == clients_.end()) return 0;  // detached while the hint was in the mailbox
  uint32_t capped = 0;
  Client& cl = cit->second;
  uint64_t stamp;
  const uint64_t pass = cl.progress >> 16, now_layer = cl.progress & 0xffff;
  if (kind == HintKind::kDemand) {
    const uint64_t before = cl.progress;
    if (static_cast<uint64_t>(layer) < now_layer) cl.progress = (pass + 1) << 16;
    cl.progress = (cl.progress & ~uint64_t{0xffff}) | static_cast<uint64_t>(layer);
    if (cl.progress != before) cl.counted.clear();
    stamp = cl.progress;
  } else {
    // A lookahead is for a layer still ahead: later in this pass or, when it
    // is not beyond the current layer, in the next one.
    stamp = (static_cast<uint64_t>(layer) > now_layer ? pass : pass + 1) << 16 |
            static_cast<uint64_t>(layer);
  }
  for (uint32_t e : experts) {
    const uint32_t key = ExpertKey(layer, static_cast<int>(e));
    const shm::SlotPeek found = shm::PeekRecord(t_, layer, static_cast<int>(e));
    const uint32_t s = found.slot;
    const SlotState st = found.state;
    const bool held = st == SlotState::kReady || st == SlotState::kLoading;
    bool repeat = false;
    if (kind == HintKind::kDemand) {
      repeat = std::find(cl.counted.begin(), cl.counted.end(), key) != cl.counted.end();
      if (!repeat) cl.counted.push_back(key);
    }
    if (kind == HintKind::kDemand && !repeat) {
      // Before the touch below: a fading does not halve this use. A miss
      // counts now; its record's use comes with its slot (Assign).
      eviction_.CountUse();
      const size_t at = static_cast<size_t>(layer) * experts_ + e;
      ++uses_[at];
      const auto q = queued_.find(key);
      if (st == SlotState::kReady) {
        ++hits_[at];
        ++layers_[static_cast<size_t>(layer)].hits;
        ++c_.hits;
        ++cl.counters.hits;
      } else if (st == SlotState::kLoading || q != queued_.end()) {
        // Asked for in time to be read, not in time to be ready.
        ++layers_[static_cast<size_t>(layer)].late;
        ++c_.late;
        ++cl.counters.late;
      } else {
        ++layers_[static_cast<size_t>(layer)].misses;
        ++c_.misses;
        ++cl.counters.misses;
      }
      if (held) {
        SlotMeta& m = meta_[s];
        if (m.lookahead_hinted) ++c_.demand_hinted;
        if (m.lookahead_read) ++c_.lookahead_used;
        m.lookahead_hinted = m.lookahead_read = false;
      } else if (q != queued_.end() && q->second == HintKind::kLookahead) {
        ++c_.demand_hinted;  // asked for by lookahead, not read yet
      }
    }
    if (held) {
      if (kind == HintKind::kDemand && !repeat) {
        Touch(s, client, stamp);
      } else if (kind == HintKind::kLookahead) {
        // Keep it until its layer has come and gone for this client.
        SlotMeta& m = meta_[s];
        m.lookahead_hinted = true;
        if (!Awaited(m) || m.awaited_stamp < stamp) {
          m.awaited_by = client + 1;
          m.awaited_stamp = stamp;
        }
      }
      continue;
    }
    if (st == SlotState::kFailed) {
      if (kind != HintKind::kDemand) continue;  // only a demand retries a failed read
      shm::Retire(t_, s, Pages());
      t_.Announce();
    }
    if (cl.counters.queued >= max_queued_ && !queued_.count(key)) {
      ++capped;
      ++cl.counters.capped;
      ++c_.capped;
      continue;
    }
    Enqueue({key, client, stamp}, kind);
  }
  return capped;
}

uint32_t SlotCache::RecordOf(uint32_t key) const {
  return static_cast<uint32_t>(KeyLayer(key)) * experts_ + static_cast<uint32_t>(KeyExpert(key));
}

void SlotCache::Dequeued(const Pending& p) {
  if (auto it = clients_.find(p.client); it != clients_.end() && it->second.counters.queued > 0)
    --it->second.counters.queued;
}

size_t SlotCache::Fairest(const std::deque<Pending>& q) const {
  size_t best = 0;
  uint64_t best_served = UINT64_MAX;
  uint32_t best_client = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    if (i > 0 && q[i].client == best_client) continue;  // its oldest is already the candidate
    auto it = clients_.find(q[i].client);
    const uint64_t served = it == clients_.end() ? 0 : it->second.served;
    if (served < best_served) {
      best = i;
      best_served = served;
      best_client = q[i].client;
      if (served == 0) break;  // never served (or gone): nobody comes before it
    }
  }
  return best;
}

void SlotCache::Enqueue(const Pending& p, HintKind kind) {
  if (auto it = queued_.find(p.key); it != queued_.end()) {
    if (static_cast<int>(kind) >= static_cast<int>(it->second)) return;  // merged
    auto& q = queue_[static_cast<int>(it->second)];
    for (auto x = q.begin(); x != q.end();) {
      if (x->key == p.key) {
        Dequeued(*x);
        x = q.erase(x);
      } else {
        ++x;
      }
    }
  }
  queued_[p.key] = kind;
  queue_[static_cast<int>(kind)].push_back(p);
  if (auto it = clients_.find(p.client); it != clients_.end()) ++it->second.counters.queued;
}

bool SlotCache::Stale(const Pending& p) const {
  auto it = clients_.find(p.client);
  return it == clients_.end() || it->second.progress > p.stamp;
}

bool SlotCache::Awaited(const SlotMeta& m) const {
  if (m.awaited_by == 0) return false;
  auto it = clients_.find(m.awaited_by - 1);
  return it != clients_.end() && it->second.progress <= m.awaited_stamp;
}

void SlotCache::Forget(uint32_t slot) {
  if (meta_[slot].lookahead_read) c_.lookahead_unused_bytes += record_bytes_;
  meta_[slot] = SlotMeta{};
  eviction_.Forget(slot);
}

uint32_t SlotCache::TakeVictim(bool empty_only) {
  const std::vector<const shm::PinPage*> pages = Pages();
  std::vector<uint16_t> pinned;
  shm::CollectPins(pages, t_.pins_per_client(), t_.slots(), &pinned);
  for (int attempt = 0; attempt < 8; ++attempt) {
    const uint32_t best = eviction_.Victim([&](uint32_t s) {
      const SlotState st = shm::Peek(t_, s).state;
      if (st == SlotState::kLoading || pinned[s]) return SlotStanding{SlotStanding::kKept};
      if (st == SlotState::kEmpty) return SlotStanding{SlotStanding::kEmpty};
      if (empty_only) return SlotStanding{SlotStanding::kKept};
      return SlotStanding{st == SlotState::kFailed ? SlotStanding::kFailed : SlotStanding::kHeld,
                          Awaited(meta_[s])};
    });
    if (best == Eviction::kNone) return shm::kNoSlot;
    if (shm::Peek(t_, best).state == SlotState::kEmpty) return best;
    if (shm::Retire(t_, best, pages)) {
      Forget(best);
      return best;
    }
    pinned[best] = 1;  // a pin raced in: take the next one
  }
  return shm::kNoSlot;
}

void SlotCache::Assign(uint32_t slot, uint32_t key, HintKind kind, uint32_t client,
                       uint64_t stamp) {
  shm::MarkLoading(t_, slot, key);
  Forget(slot);
  SlotMeta& m = meta_[slot];
  // The demand that brought it in counts; a warmed record counts as used
  // once, so that it does not go before anything used since the start.
  eviction_.Admit(slot, RecordOf(key), kind == HintKind::kLookahead ? 0 : 1);
  m.lookahead_read = m.lookahead_hinted = kind == HintKind::kLookahead;
  if (kind != HintKind::kWarm) {  // asked for by a client that will come for it
    m.awaited_by = client + 1;
    m.awaited_stamp = stamp;
  }
}

std::vector<ReadJob> SlotCache::Dispatch(uint32_t max, uint32_t max_demand) {
  std::vector<ReadJob> jobs;
  for (int k = 0; k < 3; ++k) {
    auto& q = queue_[k];
    const uint32_t limit = k == static_cast<int>(HintKind::kDemand) ? max_demand : max;
    while (!q.empty() && jobs.size() < limit) {
      const size_t at = Fairest(q);
      const Pending p = q[at];
      const auto take = [&] {
        q.erase(q.begin() + static_cast<std::ptrdiff_t>(at));
        queued_.erase(p.key);
        Dequeued(p);
      };
      if (k == static_cast<int>(HintKind::kLookahead) && Stale(p)) {
        take();
        ++c_.lookahead_dropped;
        continue;
      }
      const bool warm = k == static_cast<int>(HintKind::kWarm);
      const uint32_t victim = TakeVictim(/*empty_only=*/warm);
      if (victim == shm::kNoSlot && warm) {  // no free slot: warming never evicts
        take();
        continue;
      }
      if (victim == shm::kNoSlot) break;  // everything pinned or loading: wait
      take();
      if (auto it = clients_.find(p.client); it != clients_.end())
        it->second.served = ++dispatch_clock_;
      Assign(victim, p.key, static_cast<HintKind>(k), p.client, p.stamp);
      ++in_flight_[k];
      if (k == static_cast<int>(HintKind::kLookahead)) ++c_.lookahead_reads;
      if (warm) ++c_.warm_reads;
      jobs.push_back({victim, p.key, static_cast<HintKind>(k)});
    }
    if (!q.empty()) break;  // no slot free, or its limit reached: lower priorities wait
  }
  if (!jobs.empty()) t_.Announce();
  return jobs;
}

void SlotCache::Complete(const ReadJob& job, ReadError error, uint32_t detail) {
  --in_flight_[static_cast<int>(job.kind)];
  if (error == ReadError::kNone) {
    ++c_.reads;
    c_.bytes_read += record_bytes_;
    shm::Publish(t_, job.slot);
  } else {
    ++c_.read_errors;
    shm::Fail(t_, job.slot, error, detail);
  }
}

void SlotCache::Shutdown() {
  shm::StopServing(t_);
}

void SlotCache::SeedUses(std::span<const uint32_t> uses) {
  for (size_t i = 0; i < std::min(uses.size(), uses_.size()); ++i) uses_[i] += uses[i];
}

std::vector<uint32_t> SlotCache::Hottest(uint32_t max) const {
  std::vector<uint32_t> order;
  for (size_t i = 0; i < uses_.size(); ++i)
    if (uses_[i] > 0) order.push_back(static_cast<uint32_t>(i));
  const size_t n = std::min<size_t>(max, order.size());
  std::partial_sort(order.begin(), order.begin() + n, order.end(),
                    [&](uint32_t a, uint32_t b) { return uses_[a] > uses_[b]; });
  order.resize(n);
  for (uint32_t& i : order) i = ExpertKey(static_cast<int>(i / experts_), static_cast<int>(i % experts_));
  return order;
}

uint32_t SlotCache::Warm(std::span<const uint32_t> keys) {
  uint32_t free = 0;
  for (uint32_t s = 0; s < t_.slots(); ++s)
    if (shm::Peek(t_, s).state == SlotState::kEmpty) ++free;
  uint32_t queued = 0;
  for (uint32_t key : keys) {
    if (queued >= free) break;
    const int layer = KeyLayer(key), expert = KeyExpert(key);
    if (layer >= static_cast<int>(has_bank_.size()) || !has_bank_[layer] ||
        expert >= static_cast<int>(experts_))
      continue;
    if (shm::PeekRecord(t_, layer, expert).slot != shm::kNoSlot || queued_.count(key))
      continue;
    Enqueue({key, 0, 0}, HintKind::kWarm);
    ++queued;
  }
  return queued;
}

uint32_t SlotCache::Drop(int layer) {
  const std::vector<const shm::PinPage*> pages = Pages();
  uint32_t dropped = 0;
  for (uint32_t s = 0; s < t_.slots(); ++s) {
    const shm::SlotPeek p = shm::Peek(t_, s);
    if (p.state != SlotState::kReady && p.state != SlotState::kFailed) continue;
    if (layer >= 0 && KeyLayer(p.key) != layer) continue;
    if (shm::Retire(t_, s, pages)) {
      Forget(s);
      ++dropped;
    }
  }
  if (dropped) t_.Announce();
  return dropped;
}

CacheCounters SlotCache::counters() const {
  CacheCounters c = c_;
  for (int k = 0; k < 3; ++k) {
    c.queued[k] = static_cast<uint32_t>(queue_[k].size());
    c.in_flight[k] = in_flight_[k];
  }
  std::vector<uint16_t> pinned;
  shm::CollectPins(Pages(), t_.pins_per_client(), t_.slots(), &pinned);
  for (uint32_t s = 0; s < t_.slots(); ++s) {
    switch (shm::Peek(t_, s).state) {
      case SlotState::kReady:
        ++c.ready;
        break;
      case SlotState::kLoading:
        ++c.loading;
        break;
      case SlotState::kFailed:
        ++c.failed;
        break;
      case SlotState::kEmpty:
        break;
    }
    if (pinned[s]) ++c.pinned;
  }
  return c;
}

std::vector<LayerCounters> SlotCache::layer_counters() const {
  std::vector<LayerCounters> out = layers_;
  for (LayerCounters& l : out) l.resident.assign((experts_ + 7) / 8, 0);
  for (uint32_t s = 0; s < t_.slots(); ++s) {
    const shm::SlotPeek p = shm::Peek(t_, s);
    if (p.state != SlotState::kReady && p.state != SlotState::kLoading) continue;
    const auto L = static_cast<size_t>(KeyLayer(p.key));
    const auto x = static_cast<uint32_t>(KeyExpert(p.key));
    if (L >= out.size() || x >= experts_) continue;
    if (p.state == SlotState::kLoading) {
      ++out[L].loading;
      continue;
    }
    ++out[L].ready;
    out[L].resident[x / 8] |= static_cast<uint8_t>(1u << (x % 8));
  }
  return out;
}

ClientCounters SlotCache::client_counters(uint32_t id) const {
  auto it = clients_.find(id);
  if (it == clients_.end()) return {};
  ClientCounters c = it->second.counters;
  c.pins = 0;
  for (uint32_t i = 0; i < t_.pins_per_client(); ++i)
    if (it->second.page->pins[i].load(std::memory_order_relaxed) != 0) ++c.pins;
  return c;
}

}  // namespace waste::daemon
