// SlotCache: the daemon's cache policy. It owns the slot table's contents
// (clients only read them), decides which record goes in which slot, which
// slot to evict and which read to start next. It does no I/O itself: it hands
// out ReadJobs and is told when they complete. Only the thread that runs the
// event loop calls it, so it needs no locks.
//
// Priorities: demand reads start before lookahead reads, which start before
// warm-up reads; a queued read asked for again is merged (and raised to the
// higher priority), and a read already under way is never started twice. A
// lookahead read whose layer the asking client has already passed is dropped
// before it is issued.
//
// Fairness: within a priority, the next read goes to the client served least
// recently (each client's own reads keep their order), and a client may have
// at most `max_queued_per_client` reads queued; hints beyond that are dropped
// (a waiting client repeats its demand, so nothing is lost but the flood).
// With the cap on pins per client (shm/table.h, pins_per_client), a client
// that asks for everything at once cannot starve the others.
//
// Eviction (base/eviction.h, LFRU or LRU): an empty slot first, then a
// failed one, then the ready slot whose record has the fewest recent uses,
// the least recently used among equals (with the LRU policy, only the least
// recently used). Uses are the demand hints a record received (a client's
// repeat within one layer is not a use), kept while the record is out of
// the cache too and halved every 4 x max(slots, records / 16) uses so old
// popularity fades. A slot any live client has pinned is never evicted; a
// record a client asked for, by demand or lookahead, and has not finished
// with (its layer has not come and gone for that client) is evicted only
// when nothing else can be. Warm-up reads take only empty slots: warming
// never evicts anything.
//
// Every change to the table goes through shm/table.h's slot functions
// (MarkLoading, Publish, Fail, Retire, StopServing); this class decides,
// they write.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/eviction.h"
#include "base/hints.h"
#include "protocol/counters.h"
#include "shm/table.h"

namespace waste::daemon {

struct ReadJob {
  uint32_t slot = 0;
  uint32_t key = 0;  // ExpertKey
  HintKind kind = HintKind::kDemand;
};

struct CacheCounters {
  // hits, late, misses, reads (completed successfully), bytes_read, ...:
  // every counter of protocol/counters.h, which says what each counts.
  WASTE_STATUS_COUNTERS(WASTE_COUNTER_FIELD)
  uint64_t capped = 0;  // hinted records dropped because their client had its cap queued
  uint32_t queued[3] = {0, 0, 0};     // by HintKind
  uint32_t in_flight[3] = {0, 0, 0};  // by HintKind
  uint32_t ready = 0, loading = 0, failed = 0, pinned = 0;
};

// One layer's share of the cache and of the demand hints.
struct LayerCounters {
  WASTE_LAYER_COUNTERS(WASTE_COUNTER_FIELD)  // demand hints, as CacheCounters counts them
  uint32_t ready = 0, loading = 0;  // slots holding this layer's records
  std::vector<uint8_t> resident;    // bit e (byte e / 8, bit e % 8): expert e is ready
};

struct ClientCounters {
  WASTE_CLIENT_COUNTERS(WASTE_COUNTER_FIELD)  // its demand hints, as CacheCounters counts them
  uint64_t capped = 0;  // hinted records dropped for the cap on queued reads
  uint32_t pins = 0;
  uint32_t queued = 0;  // reads queued for it right now
};

// Reads a client may have queued: a forward pass has a window of demands and
// one lookahead (at most 64 records each) out at a time, far below this.
constexpr uint32_t kMaxQueuedPerClient = 256;

class SlotCache {
 public:
  // `table` was laid out by SlotTable::Init; `has_bank[L]` says whether layer
  // L has experts. `record_bytes` is what one read brings in.
  SlotCache(shm::SlotTable table, std::vector<bool> has_bank, uint64_t record_bytes,
            EvictionPolicy policy = EvictionPolicy::kLfru,
            uint32_t max_queued_per_client = kMaxQueuedPerClient);

  // A client's pin page, readable for as long as the client is registered.
  void AddClient(uint32_t id, const shm::PinPage* page);
  void RemoveClient(uint32_t id);

  // Records a hint. Callers have checked the ids (layer has a bank, expert
  // below the table's expert count). Returns how many of the experts were
  // dropped because the client already has its cap of reads queued.
  uint32_t Hint(uint32_t client, int layer, std::span<const uint32_t> experts, HintKind kind);

  // Up to `max` reads to start now, highest priority first, each with its
  // slot assigned and marked loading; demand reads up to `max_demand`
  // instead (Daemon::Pump lets demands start while other reads hold every
  // reader). Fewer when every slot is pinned or loading; the rest stay
  // queued, and while a demand does, nothing else starts.
  std::vector<ReadJob> Dispatch(uint32_t max, uint32_t max_demand);
  std::vector<ReadJob> Dispatch(uint32_t max) { return Dispatch(max, max); }

  // A read finished: publishes the slot (ready) or marks it failed.
  void Complete(const ReadJob& job, ReadError error, uint32_t detail);

  // Marks the table as stopping and wakes every waiting client.
  void Shutdown();

  // Adds saved use counts ([layers][experts], as uses() returns them).
  void SeedUses(std::span<const uint32_t> uses);
  // Up to `max` keys with uses, most used first.
  std::vector<uint32_t> Hottest(uint32_t max) const;
  // Queues warm-up reads of `keys` not already held or queued, at most as
  // many as there are empty slots; returns how many were queued.
  uint32_t Warm(std::span<const uint32_t> keys);
  // Empties every ready or failed slot that no client pins, in `layer` or in
  // all layers (layer < 0); returns how many.
  uint32_t Drop(int layer);

  CacheCounters counters() const;
  ClientCounters client_counters(uint32_t id) const;
  // By layer, [layers]; a layer without experts stays all zero.
  std::vector<LayerCounters> layer_counters() const;
  // Demand hints per (layer, expert), and of those the ones that found the
  // record ready; row-major [layers][experts].
  const std::vector<uint32_t>& uses() const { return uses_; }
  const std::vector<uint32_t>& hits() const { return hits_; }
  uint32_t in_flight() const { return in_flight_[0] + in_flight_[1] + in_flight_[2]; }
  uint32_t in_flight(HintKind kind) const { return in_flight_[static_cast<int>(kind)]; }
  bool has_queued() const { return !queue_[0].empty() || !queue_[1].empty() || !queue_[2].empty(); }

 private:
  // What the cache knows of a slot besides its uses and recency (eviction_).
  struct SlotMeta {
    uint32_t awaited_by = 0;     // client id + 1 that asked for it; 0 for none
    uint64_t awaited_stamp = 0;  // that client's progress when it asked
    bool lookahead_read = false;    // read for a lookahead hint, not demanded since
    bool lookahead_hinted = false;  // a lookahead hint named it, no demand since
  };
  struct Pending {
    uint32_t key;
    uint32_t client;
    uint64_t stamp;  // the client's progress (pass << 16 | layer) the read is for
  };
  struct Client {
    const shm::PinPage* page;
    uint64_t progress = 0;  // pass << 16 | layer of its latest demand hint
    ClientCounters counters;
    // Keys already counted as uses at `progress`: a client waiting for a
    // record repeats its demand hint, and a repeat is not another use.
    std::vector<uint32_t> counted;
    uint64_t served = 0;  // dispatch_clock_ when a read of its last started
  };

  void Enqueue(const Pending& p, HintKind kind);
  // The entry of `q` to start next: the oldest of the client served least
  // recently.
  size_t Fairest(const std::deque<Pending>& q) const;
  void Dequeued(const Pending& p);  // a read left the queue (started or dropped)
  bool Stale(const Pending& p) const;
  bool Awaited(const SlotMeta& m) const;
  // A slot to load into, retired and ready for reuse; kNoSlot when none.
  uint32_t TakeVictim(bool empty_only);
  void Forget(uint32_t slot);  // bookkeeping for a slot about to be reused
  uint32_t RecordOf(uint32_t key) const;  // its row-major index, as uses() has it
  void Assign(uint32_t slot, uint32_t key, HintKind kind, uint32_t client, uint64_t stamp);
  void Touch(uint32_t slot, uint32_t client, uint64_t stamp);
  std::vector<const shm::PinPage*> Pages() const;

  shm::SlotTable t_;
  std::vector<bool> has_bank_;
  uint64_t record_bytes_;
  uint32_t max_queued_;
  uint32_t experts_;
  std::vector<SlotMeta> meta_;
  Eviction eviction_;  // the records' uses, the slots' recency
  std::map<uint32_t, Client> clients_;
  std::deque<Pending> queue_[3];                   // by HintKind
  std::unordered_map<uint32_t, HintKind> queued_;  // key -> the queue holding it
  uint32_t in_flight_[3] = {0, 0, 0};
  std::vector<uint32_t> uses_, hits_;  // [layers][experts]
  // [layers]: the demand counters only (layer_counters adds the slots).
  std::vector<LayerCounters> layers_;
  uint64_t dispatch_clock_ = 0;
  CacheCounters c_;
};

}  // namespace waste::daemon
