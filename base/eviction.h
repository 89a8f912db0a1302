// Eviction: the one rule by which both expert caches, the daemon's SlotCache
// and the in-process ExpertCache, choose the slot to reuse, and the counts
// it goes by. A cache keeps its slots' states and contents itself; this
// class keeps, per record, how popular it is, and per slot, which record it
// holds and how recently that was used.
//
// The rule: an empty slot first (the lowest numbered), then a failed read,
// then a record; among records, one nobody awaits before one a client asked
// for and has not used yet; then, with LFRU, the record with the fewest
// recent uses; then the least recently used; then the lowest slot number.
// LRU is the same rule without the uses.
//
// Uses belong to the record, not to its slot: an evicted record keeps them,
// and a record read again comes back with them. So a record that is used
// often outranks one read once even when the cache is smaller than one
// token's working set, where every record is evicted before its next use:
// the popular core stays and the rest cycles through the other slots (a
// newcomer less used than every record held is itself the next to go). With
// uses kept only while a record had a slot, such a cache read everything: on
// the real Kimi trace 0% hits at 3% of the records against 31% now, and no
// worse at 6-48% (docs/MEASUREMENTS.md; tools/replay/policy_sim.py).
//
// Uses fade: every 4 x max(slots, records / 16) uses counted, every record's
// uses are halved, so that old popularity gives way to the current working
// set. Four times the slots is what a cache of 6-48% wants (halving every
// 64 x slots lost 7-14 points to LRU there); the floor of a sixteenth of the
// records keeps a small cache's counts long enough to tell the core from the
// rest (every 4 x slots, 8% hits at 1.5% instead of 20%).
//
// A use is two facts: the record gets one use more and its slot becomes the
// most recent (Touch, when the record has a slot), and the use counts
// towards the fading (CountUse, once per use, slot or not). Each cache calls
// them in its own order; which uses count, and what a new record brings in
// with it (Admit, Forget), are the cache's admission rule.
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
  static constexpr uint64_t kFadeEvery = 4;   // x fade_slots() uses counted
  static constexpr uint32_t kFadeFloor = 16;  // fade_slots() is at least records / this

  // `slots` and `records` at least 1; records are numbered [0, records), as
  // each cache numbers them (layer x experts per layer + expert).
  Eviction(uint32_t slots, uint32_t records, EvictionPolicy policy = EvictionPolicy::kLfru);

  // The record in `slot` is used: one use more, and its slot the most recent.
  void Touch(uint32_t slot);
  // Counts one use towards the fading; every kFadeEvery x fade_slots() of
  // them, halves every record's uses (this one's among them if already
  // touched).
  void CountUse();
  // `slot` takes `record` (below records), the most recent, and the record
  // `uses` uses more than it had.
  void Admit(uint32_t slot, uint32_t record, uint64_t uses);
  // `slot` holds nothing: no uses, and older than every use. Its record, if
  // any, keeps its uses.
  void Forget(uint32_t slot);

  // The slot to evict by the rule, among those `standing(s)` does not keep;
  // kNone when it keeps them all. `standing` (SlotStanding(uint32_t)) is
  // called in slot order, once per slot, and no more after an empty one.
  template <class StandingOf>
  uint32_t Victim(StandingOf standing) const;

  uint32_t slots() const { return static_cast<uint32_t>(meta_.size()); }
  // The slots the fading goes by: max(slots, records / kFadeFloor).
  uint64_t fade_slots() const;
  // The uses of the record in `slot`; 0 when it holds none.
  uint64_t uses(uint32_t slot) const;
  uint64_t record_uses(uint32_t record) const { return uses_[record]; }
  uint64_t last_use(uint32_t slot) const { return meta_[slot].last_use; }

 private:
  static constexpr uint32_t kNoRecord = 0xffffffffu;
  struct Meta {
    uint32_t record = kNoRecord;
    uint64_t last_use = 0;  // clock_ at the latest Touch or Admit; 0 for never
  };
  // Smaller goes first: failed before held, not awaited, uses, last use.
  using Rank = std::tuple<bool, bool, uint64_t, uint64_t>;
  Rank RankOf(uint32_t slot, SlotStanding st) const {
    return {st.kind == SlotStanding::kHeld, st.awaited,
            policy_ == EvictionPolicy::kLfru ? uses(slot) : 0, meta_[slot].last_use};
  }

  EvictionPolicy policy_;
  std::vector<Meta> meta_;      // by slot
  std::vector<uint64_t> uses_;  // by record, faded
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
