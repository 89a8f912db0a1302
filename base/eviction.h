// Eviction: the one rule by which both expert caches, the daemon's SlotCache
// and the in-process ExpertCache, choose the slot to reuse, and the counts
// it goes by. A cache keeps its slots' states and contents itself; this
// class keeps, per slot, how popular and how recent the slot's record is.
//
// The rule: an empty slot first (the lowest numbered), then a failed read,
// then a record; among records, one nobody awaits before one a client asked
// for and has not used yet; then, with LFRU, the fewest recent uses; then
// the least recently used; then the lowest slot number. LRU is the same rule
// without the uses.
//
// Uses fade: every 4 x slots uses counted, every slot's uses are halved, so
// that old popularity gives way to the current working set. On the real Kimi
// trace this beats LRU by 1-1.5 points at 6-24% caches, where halving every
// 64 x slots lost to it by 7-14 (docs/MEASUREMENTS.md, "The policy fixed").
//
// A use is two facts: the record's slot gets one use more and becomes the
// most recent (Touch, when the record has a slot), and the use counts
// towards the fading (CountUse, once per use, slot or not). Each cache calls
// them in its own order; which uses count, and what a new record starts
// with (Admit, Forget), are the cache's admission rule.
//
// Not thread safe: each cache serializes its calls (the daemon's loop
// thread, the in-process cache's mutex).
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

namespace waste {

enum class EvictionPolicy { kLfru, kLru };

// How a slot stands when a victim is sought; the cache says, per slot.
struct SlotStanding {
  enum Kind : uint8_t {
    kKept,    // may not be evicted (pinned, or a read is under way into it)
    kEmpty,   // holds nothing
    kFailed,  // holds a failed read
    kHeld,    // holds a record
  } kind = kKept;
  bool awaited = false;  // kFailed, kHeld: asked for by a client that has not used it yet
};

class Eviction {
 public:
  static constexpr uint32_t kNone = 0xffffffffu;  // no victim
  static constexpr uint64_t kFadeEvery = 4;       // x slots uses counted

  // `slots` at least 1.
  explicit Eviction(uint32_t slots, EvictionPolicy policy = EvictionPolicy::kLfru);

  // The record in `slot` is used: one use more, and the most recent.
  void Touch(uint32_t slot);
  // Counts one use towards the fading; every kFadeEvery x slots of them,
  // halves every slot's uses (this one's among them if already touched).
  void CountUse();
  // `slot` takes a new record, counted as `uses` uses and the most recent.
  void Admit(uint32_t slot, uint64_t uses);
  // `slot` holds nothing used: no uses, and older than every use.
  void Forget(uint32_t slot);

  // The slot to evict by the rule, among those `standing(s)` does not keep;
  // kNone when it keeps them all. `standing` (SlotStanding(uint32_t)) is
  // called in slot order, once per slot, and no more after an empty one.
  template <class StandingOf>
  uint32_t Victim(StandingOf standing) const;

  uint32_t slots() const { return static_cast<uint32_t>(meta_.size()); }
  uint64_t uses(uint32_t slot) const { return meta_[slot].uses; }
  uint64_t last_use(uint32_t slot) const { return meta_[slot].last_use; }

 private:
  struct Meta {
    uint64_t uses = 0;
    uint64_t last_use = 0;  // clock_ at the latest Touch or Admit; 0 for never
  };
  // Smaller goes first: failed before held, not awaited, uses, last use.
  using Rank = std::tuple<bool, bool, uint64_t, uint64_t>;
  Rank RankOf(uint32_t slot, SlotStanding st) const {
    const Meta& m = meta_[slot];
    return {st.kind == SlotStanding::kHeld, st.awaited,
            policy_ == EvictionPolicy::kLfru ? m.uses : 0, m.last_use};
  }

  EvictionPolicy policy_;
  std::vector<Meta> meta_;
  uint64_t clock_ = 0;    // recency: bumped at every Touch and Admit
  uint64_t counted_ = 0;  // CountUse calls, for the fading
};

template <class StandingOf>
uint32_t Eviction::Victim(StandingOf standing) const {
  uint32_t best = kNone;
  Rank best_rank{};
  for (uint32_t s = 0; s < slots(); ++s) {
    const SlotStanding st = standing(s);
    if (st.kind == SlotStanding::kKept) continue;
    if (st.kind == SlotStanding::kEmpty) return s;
    const Rank rank = RankOf(s, st);
    if (best == kNone || rank < best_rank) {
      best = s;
      best_rank = rank;
    }
  }
  return best;
}

}  // namespace waste
