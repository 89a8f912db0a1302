// The eviction rule both caches share (base/eviction.h), by itself: small
// cases whose answers follow from the rule by hand, and a cache driven by it
// below its working set.
#include "base/eviction.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace waste {
namespace {

// A cache's view of its slots, as the callable Victim asks for.
struct Slots {
  std::vector<SlotStanding> standing;
  uint32_t Victim(const Eviction& e) const {
    return e.Victim([&](uint32_t s) { return standing[s]; });
  }
};

constexpr SlotStanding kHeld{SlotStanding::kHeld};
constexpr SlotStanding kKept{SlotStanding::kKept};
constexpr SlotStanding kEmpty{SlotStanding::kEmpty};
constexpr SlotStanding kFailed{SlotStanding::kFailed};
constexpr SlotStanding kAwaited{SlotStanding::kHeld, true};

// Slot s holds record s, none used yet; the clock stands at `slots`.
Eviction Holding(uint32_t slots, EvictionPolicy policy = EvictionPolicy::kLfru) {
  Eviction e(slots, slots, policy);
  for (uint32_t s = 0; s < slots; ++s) e.Admit(s, s, 0);
  return e;
}

TEST(Eviction, TheFirstEmptySlotGoesFirstAndNothingAfterItIsAsked) {
  Eviction e(4, 4);
  std::vector<uint32_t> asked;
  const std::vector<SlotStanding> st = {kHeld, kEmpty, kEmpty, kHeld};
  const uint32_t v = e.Victim([&](uint32_t s) {
    asked.push_back(s);
    return st[s];
  });
  EXPECT_EQ(v, 1u);
  EXPECT_EQ(asked, (std::vector<uint32_t>{0, 1}));
}

TEST(Eviction, KeptSlotsAreNeverChosen) {
  Eviction e = Holding(3);
  EXPECT_EQ((Slots{{kKept, kKept, kKept}}.Victim(e)), Eviction::kNone);
  EXPECT_EQ((Slots{{kKept, kHeld, kKept}}.Victim(e)), 1u);
  // A kept slot's counts do not matter, however low.
  e.Touch(0);
  e.Touch(2);
  EXPECT_EQ((Slots{{kKept, kHeld, kHeld}}.Victim(e)), 1u);
}

TEST(Eviction, FailedBeforeHeldNotAwaitedBeforeAwaited) {
  Eviction e = Holding(3);
  for (int i = 0; i < 5; ++i) e.Touch(1);  // the failed slot is popular: it goes anyway
  EXPECT_EQ((Slots{{kHeld, kFailed, kHeld}}.Victim(e)), 1u);
  // Slot 0 awaited with no uses; slot 2 not awaited with one: 2 goes.
  e.Touch(2);
  EXPECT_EQ((Slots{{kAwaited, kHeld, kHeld}}.Victim(e)), 2u);
  EXPECT_EQ((Slots{{kAwaited, kKept, kAwaited}}.Victim(e)), 0u);  // fewer uses among awaited
}

TEST(Eviction, LfruTakesTheFewestUsesThenTheOldestThenTheLowestSlot) {
  Eviction e(3, 3);
  const Slots all{{kHeld, kHeld, kHeld}};
  EXPECT_EQ(all.Victim(e), 0u);  // all equal (nothing held, never used): the lowest slot
  for (uint32_t s = 0; s < 3; ++s) e.Admit(s, s, 0);  // clock 3
  e.Touch(0);  // uses 1 2 0 ... slot 2 never used
  e.Touch(1);
  e.Touch(1);
  EXPECT_EQ(all.Victim(e), 2u);
  e.Touch(2);  // uses 1 2 1; slot 0 used at clock 4, slot 2 at 7
  EXPECT_EQ(all.Victim(e), 0u);
  e.Touch(0);  // uses 2 2 1
  EXPECT_EQ(all.Victim(e), 2u);
  e.Touch(2);  // uses 2 2 2; last uses 8, 6, 9: slot 1 is the oldest
  EXPECT_EQ(all.Victim(e), 1u);
}

TEST(Eviction, LruTakesTheOldestWhateverItsUses) {
  Eviction e = Holding(2, EvictionPolicy::kLru);
  for (int i = 0; i < 5; ++i) e.Touch(0);
  e.Touch(1);
  EXPECT_EQ((Slots{{kHeld, kHeld}}.Victim(e)), 0u);  // popular but older
  Eviction f = Holding(2, EvictionPolicy::kLfru);
  for (int i = 0; i < 5; ++i) f.Touch(0);
  f.Touch(1);
  EXPECT_EQ((Slots{{kHeld, kHeld}}.Victim(f)), 1u);  // LFRU keeps the popular one
}

TEST(Eviction, UsesAreHalvedEveryFourTimesSlotsCountedUses) {
  Eviction e = Holding(2);  // halved at the 8th, 16th, ... counted use
  for (int i = 0; i < 7; ++i) e.Touch(0);
  e.Touch(1);
  e.Touch(1);
  for (int i = 0; i < 7; ++i) e.CountUse();
  EXPECT_EQ(e.uses(0), 7u);
  EXPECT_EQ(e.uses(1), 2u);
  e.CountUse();  // the 8th
  EXPECT_EQ(e.uses(0), 3u);
  EXPECT_EQ(e.uses(1), 1u);
  for (int i = 0; i < 7; ++i) e.CountUse();
  EXPECT_EQ(e.uses(0), 3u);
  e.CountUse();  // the 16th
  EXPECT_EQ(e.uses(0), 1u);
  EXPECT_EQ(e.uses(1), 0u);
  // Recency is untouched by the halving: slot 0 was last used at clock 9.
  EXPECT_EQ(e.last_use(0), 9u);
  EXPECT_EQ(e.last_use(1), 11u);
}

// A small cache fades as though it had a sixteenth of the records: its
// counts must outlast the records' turns through it.
TEST(Eviction, ASmallCacheFadesNoFasterThanASixteenthOfTheRecords) {
  Eviction e(2, 64);  // fades as 4 slots would: every 16 uses, not every 8
  EXPECT_EQ(e.fade_slots(), 4u);
  e.Admit(0, 9, 0);
  for (int i = 0; i < 6; ++i) e.Touch(0);
  for (int i = 0; i < 15; ++i) e.CountUse();
  EXPECT_EQ(e.record_uses(9), 6u);
  e.CountUse();
  EXPECT_EQ(e.record_uses(9), 3u);
  EXPECT_EQ(Eviction(8, 64).fade_slots(), 8u);  // a larger cache goes by its slots
}

// The in-process cache touches before it counts, the daemon counts before
// it touches (each as before the rule was shared); they differ only in the
// use that lands on a fading.
TEST(Eviction, TheOrderOfTouchAndCountDecidesWhetherTheFadingHalvesThisUse) {
  for (const uint64_t before : {2u, 3u}) {
    Eviction touched_first = Holding(1), counted_first = Holding(1);  // halved at every 4th count
    for (Eviction* e : {&touched_first, &counted_first}) {
      for (uint64_t i = 0; i < before; ++i) e->Touch(0);
      for (int i = 0; i < 3; ++i) e->CountUse();
    }
    touched_first.Touch(0);  // before + 1, then halved
    touched_first.CountUse();
    counted_first.CountUse();  // before halved, then + 1
    counted_first.Touch(0);
    EXPECT_EQ(touched_first.uses(0), (before + 1) / 2);  // 2: 1, 3: 2
    EXPECT_EQ(counted_first.uses(0), before / 2 + 1);    // 2: 2, 3: 2
  }
}

TEST(Eviction, AdmitAndForget) {
  Eviction e(3, 8);
  e.Admit(0, 5, 0);  // clock 1
  e.Touch(0);        // clock 2
  e.Admit(1, 6, 1);  // clock 3, one use
  e.Admit(2, 7, 0);  // clock 4, no use: a lookahead read
  EXPECT_EQ(e.uses(1), 1u);
  EXPECT_EQ(e.record_uses(6), 1u);
  EXPECT_EQ(e.last_use(2), 4u);
  const Slots all{{kHeld, kHeld, kHeld}};
  EXPECT_EQ(all.Victim(e), 2u);  // no uses, however recent
  e.Touch(2);  // uses 1 1 1; last uses 2, 3, 5
  EXPECT_EQ(all.Victim(e), 0u);
  e.Forget(1);  // the slot: no uses and older than any use
  EXPECT_EQ(e.uses(1), 0u);
  EXPECT_EQ(e.last_use(1), 0u);
  EXPECT_EQ(e.record_uses(6), 1u);  // its record keeps its use
  EXPECT_EQ(all.Victim(e), 1u);
  e.Admit(1, 3, 1);  // clock 6: now the newest
  EXPECT_EQ(all.Victim(e), 0u);
}

TEST(Eviction, ARecordReadAgainComesBackWithItsUses) {
  Eviction e(2, 4);
  e.Admit(0, 3, 1);
  for (int i = 0; i < 4; ++i) e.Touch(0);  // record 3: 5 uses
  e.Forget(0);                             // evicted
  e.Admit(0, 1, 1);                        // record 1, used once, in its slot
  e.Admit(1, 3, 1);                        // record 3 again: 6 uses
  EXPECT_EQ(e.uses(1), 6u);
  EXPECT_EQ((Slots{{kHeld, kHeld}}.Victim(e)), 0u);  // the newer record goes, not the popular one
}

// A cache driven by the rule as both caches drive it: each use counted, a
// hit touches its slot, a miss evicts the victim and admits its record
// with that use. Returns whether `record` was held.
struct Driven {
  Eviction e;
  std::vector<std::optional<uint32_t>> held;  // by slot
  Driven(uint32_t slots, uint32_t records, EvictionPolicy policy)
      : e(slots, records, policy), held(slots) {}
  bool Use(uint32_t record) {
    e.CountUse();
    for (uint32_t s = 0; s < held.size(); ++s)
      if (held[s] == record) {
        e.Touch(s);
        return true;
      }
    const uint32_t v =
        e.Victim([&](uint32_t s) { return held[s] ? kHeld : kEmpty; });
    e.Forget(v);
    e.Admit(v, record, 1);
    held[v] = record;
    return false;
  }
};

// Each "token" uses three hot records and a run of eight cold ones, more
// than the four slots hold, from a pool that comes round only every fifth
// token: every record is out of an LRU cache before its next use. LFRU
// keeps the hot three: their uses outrank the cold records', which cycle
// through the fourth slot.
TEST(Eviction, ACacheSmallerThanATokensRecordsKeepsItsHotCore) {
  for (const EvictionPolicy policy : {EvictionPolicy::kLfru, EvictionPolicy::kLru}) {
    Driven c(4, 256, policy);  // fades every 4 x 16 uses: about six tokens
    int hot_hits = 0, cold_hits = 0;
    for (int token = 0; token < 100; ++token) {
      for (uint32_t r = 0; r < 3; ++r) hot_hits += c.Use(r) && token >= 5;
      for (uint32_t i = 0; i < 8; ++i) cold_hits += c.Use(3 + (token % 5) * 8 + i);
    }
    if (policy == EvictionPolicy::kLfru) {
      EXPECT_EQ(hot_hits, 95 * 3);  // every hot use after the first tokens
    } else {
      EXPECT_EQ(hot_hits, 0);
    }
    EXPECT_EQ(cold_hits, 0);
  }
}

// The working set changes: four records used for a long time give way to
// four others once the old uses have faded, and the new ones then stay.
TEST(Eviction, AChangeOfWorkingSetIsFollowed) {
  Driven c(4, 64, EvictionPolicy::kLfru);  // fades every 4 x 4 uses
  for (int round = 0; round < 200; ++round)
    for (uint32_t r = 0; r < 4; ++r) c.Use(r);
  int first_all_hits = -1;
  for (int round = 0; round < 100; ++round) {
    bool all = true;
    for (uint32_t r = 10; r < 14; ++r) all = c.Use(r) && all;
    if (all && first_all_hits < 0) first_all_hits = round;
    if (first_all_hits >= 0) {
      EXPECT_TRUE(all) << "round " << round;
    }
  }
  ASSERT_GE(first_all_hits, 1);
  EXPECT_LE(first_all_hits, 20);  // a few fadings
  for (uint32_t s = 0; s < 4; ++s) EXPECT_GE(*c.held[s], 10u);
}

}  // namespace
}  // namespace waste
