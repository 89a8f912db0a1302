// ExpertCache: the in-process expert source. A fixed set of slots, each one
// record long and page aligned, filled by reader threads with O_DIRECT reads
// straight from the banks, demand before lookahead before warm-up. Eviction
// is base/eviction.h's LFRU, each acquisition one use of its record: the
// unpinned slot whose record has the fewest recent uses goes first (a
// record keeps its uses while out of the cache; they are halved every
// 4 x max(slots, records / 16) acquisitions, so old popularity fades), the
// least recently used among equals. A pinned or loading slot is never evicted, and a record read for a
// hint is evicted only when nothing else can be: otherwise, having no uses
// yet, it would be the first to go.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/eviction.h"
#include "engine/experts/expert_source.h"
#include "engine/format/container.h"
#include "engine/format/record_reader.h"
#include "engine/memory/region.h"

namespace waste {

struct CacheOptions {
  uint64_t slots = 0;       // records held; at least 1
  int readers = 4;          // reader threads, i.e. reads in flight
  bool verify_crc = false;  // check each record's crc32 as it arrives
  bool direct_io = true;    // bypass the page cache where the filesystem allows
};

class ExpertCache : public ExpertSource {
 public:
  static Result<std::unique_ptr<ExpertCache>> Create(const Container& ct, const CacheOptions& opt);
  ~ExpertCache() override;

  void Hint(int layer, std::span<const int> experts, HintKind kind) override;
  Result<const uint8_t*> Acquire(int layer, int expert) override;
  Result<const uint8_t*> TryAcquire(int layer, int expert) override;
  void Release(int layer, int expert) override;
  bool Ready(int layer, int expert) override;
  ExpertStats stats() const override;

  uint64_t slots() const { return slots_.size(); }
  uint64_t PinLimit() const override { return slots_.size(); }  // Acquire fails only when all are pinned

 private:
  enum class State { kEmpty, kLoading, kReady, kFailed };
  struct Slot {
    State state = State::kEmpty;
    uint32_t key = 0;  // layer << 16 | expert
    int pins = 0;
    bool awaited = false;  // brought in for a hint and not yet acquired
    std::string error;
  };
  struct Request {
    uint32_t key;
    int slot;
    HintKind kind;
  };

  ExpertCache(const Container& ct, const CacheOptions& opt);
  // With mu_ held: the slot holding `key` or a fresh one loading it; -1 when
  // every slot is pinned or loading.
  int SlotFor(uint32_t key, HintKind kind, bool* hit);
  // An acquire of slot `i`: its popularity and recency. With mu_ held.
  void CountUse(int i);
  // Ok when the layer has a bank holding `expert`, else an error naming both.
  Status CheckIds(int layer, int expert) const;
  int Victim() const;
  static int MaxExperts(const Container& ct);
  static uint32_t Records(const Container& ct);
  void ReaderLoop();
  Status ReadInto(uint32_t key, uint8_t* dst);

  const Container& ct_;
  const CacheOptions opt_;
  size_t record_bytes_;
  int record_stride_;  // records per layer in eviction_'s numbering
  Region memory_;  // slots * record_bytes, page aligned, populated
  std::optional<RecordReader> banks_;  // set by Create

  mutable std::mutex mu_;
  std::condition_variable ready_cv_;    // a slot finished loading
  std::condition_variable request_cv_;  // a read was queued, or stop
  std::vector<Slot> slots_;
  Eviction eviction_;  // uses of the records, recency of slots_
  std::unordered_map<uint32_t, int> index_;
  std::deque<Request> queue_[3];  // by HintKind: demand, lookahead, warm
  ExpertStats stats_;
  int reading_ = 0;  // reads in flight
  int current_layer_ = -1;  // of the latest Acquire
  std::chrono::steady_clock::time_point busy_since_;
  bool stop_ = false;
  std::vector<std::thread> readers_;
};

}  // namespace waste
