// SharedExpertSource: the client side of wasted's expert cache. Records are
// found through the shared slot table and read straight from the shared
// cache segment; a hit costs no round trip. A miss sends the daemon a demand
// hint and sleeps on a futex until the record is there (shm/table.h has the
// table, pin page and futex contract). Every method may be called from any
// thread at once (expert_source.h); a waiting Acquire holds no lock.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "base/status.h"
#include "engine/experts/expert_source.h"
#include "shm/table.h"

namespace waste {

// How the shared source talks to the daemon; implemented over Cap'n Proto
// by attach.cc (DaemonClient). Every method may be called from any thread at
// once and none blocks on the daemon.
class HintSink {
 public:
  virtual ~HintSink() = default;
  // Fire and forget.
  virtual void SendHint(int layer, std::span<const int> experts, HintKind kind) = 0;
  // Ok while the daemon can be reached; once it cannot, an error naming why.
  // A look at what the connection already knows: runs nothing.
  virtual Status Health() const = 0;
  // Fire and forget: the tokens this client has run so far. A sink that
  // reports nothing (a test's) may ignore it.
  virtual void SendProgress(uint64_t tokens) { (void)tokens; }
};

// What attaching gave the client, already mapped: the table and the cache
// read-only, the pin page writable.
struct SharedCacheView {
  shm::SlotTable table;
  const uint8_t* cache = nullptr;
  uint64_t cache_bytes = 0;
  shm::PinPage* pins = nullptr;
};

class SharedExpertSource : public ExpertSource {
 public:
  // `has_experts[L]`: whether layer L has an expert bank (its size is the
  // model's layer count); `experts`: experts per bank. Acquire and Hint
  // refuse ids outside these before touching the index. `sink` outlives the
  // source. Takes over the pin page (clears it). `give_up_seconds`: how long
  // an Acquire waits on a daemon that answers polls but never brings the
  // record in before failing instead of hanging the forward pass.
  SharedExpertSource(SharedCacheView view, std::vector<bool> has_experts, int experts,
                     HintSink* sink, double give_up_seconds = 30);
  // Drops any pins still held.
  ~SharedExpertSource() override;

  SharedExpertSource(const SharedExpertSource&) = delete;
  SharedExpertSource& operator=(const SharedExpertSource&) = delete;

  // Forwards the in-range experts to the sink. A lost connection is left for
  // Acquire to report; a hint has no one to tell.
  void Hint(int layer, std::span<const int> experts, HintKind kind) override;

  // Pins the record and returns its bytes in the shared cache, sleeping on a
  // futex of the slot table while it is missing or loading. A sleep lasts at
  // most 50 ms, so that a daemon that is gone (the sink's Health), stopping
  // or silent past give_up_seconds is noticed, and a demand is repeated when
  // the record is still absent. Fails, naming the layer and expert, for an id
  // out of range, a record the daemon could not read (after one retry), a
  // full pin page, or any of those three. Never returns bytes of a slot it
  // has not pinned and found ready.
  Result<const uint8_t*> Acquire(int layer, int expert) override;
  // Pins the record if it is ready now; sends nothing to the daemon.
  Result<const uint8_t*> TryAcquire(int layer, int expert) override;
  // Drops one pin taken by Acquire(layer, expert); ignores one never taken.
  void Release(int layer, int expert) override;
  // A look at the slot table: the record is published in a ready slot.
  bool Ready(int layer, int expert) override;

  // hits: pinned on the first look; misses: had to wait (or failed);
  // wait_seconds: time those Acquires took. reads and bytes_read stay 0:
  // the daemon does the reading.
  // The pin page's room, and no more than the cache's slots.
  uint64_t PinLimit() const override;
  ExpertStats stats() const override;

  // Adds to the running total of tokens and sends it to the daemon.
  void TokensDone(int tokens) override;

  // Pins held right now (for tests and diagnostics).
  uint32_t held() const;

 private:
  struct Held {
    uint32_t key;
    uint32_t slot;
  };
  Status CheckIds(int layer, int expert) const;
  // The pinned record in `slot`, its pages mapped; under `lock` (released
  // while mapping).
  Result<const uint8_t*> Pinned(int layer, int expert, uint32_t slot,
                                std::unique_lock<std::mutex>& lock);
  Result<const uint8_t*> AcquireLocked(int layer, int expert, std::unique_lock<std::mutex>& lock,
                                       bool* waited);

  const SharedCacheView view_;
  const std::vector<bool> has_experts_;
  const int layers_;   // the model's, bounded by the table's
  const int experts_;  // likewise
  HintSink* const sink_;
  const double give_up_seconds_;
  uint64_t tokens_ = 0;  // run so far, guarded by mu_

  // Guards what follows: the pool's threads acquire and release at once.
  // Never held while sleeping on a futex nor while mapping a slot.
  mutable std::mutex mu_;
  shm::PinSet pinset_;
  std::vector<Held> held_;  // one entry per Acquire not yet released
  // [slots]: whether this process has mapped the slot's pages. The first
  // pin of a slot maps all of it in one call (MADV_POPULATE_READ) instead of
  // a fault per 64 KiB while the kernels read it.
  std::vector<bool> slot_mapped_;
  ExpertStats stats_;
};

}  // namespace waste
