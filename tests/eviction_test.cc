// The eviction rule both caches share (base/eviction.h), by itself: small
// cases whose answers follow from the rule by hand.
#include "base/eviction.h"

#include <gtest/gtest.h>

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

TEST(Eviction, TheFirstEmptySlotGoesFirstAndNothingAfterItIsAsked) {
  Eviction e(4);
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
  Eviction e(3);
  EXPECT_EQ((Slots{{kKept, kKept, kKept}}.Victim(e)), Eviction::kNone);
  EXPECT_EQ((Slots{{kKept, kHeld, kKept}}.Victim(e)), 1u);
  // A kept slot's counts do not matter, however low.
  e.Touch(0);
  e.Touch(2);
  EXPECT_EQ((Slots{{kKept, kHeld, kHeld}}.Victim(e)), 1u);
}

TEST(Eviction, FailedBeforeHeldNotAwaitedBeforeAwaited) {
  Eviction e(3);
  for (int i = 0; i < 5; ++i) e.Touch(1);  // the failed slot is popular: it goes anyway
  EXPECT_EQ((Slots{{kHeld, kFailed, kHeld}}.Victim(e)), 1u);
  // Slot 0 awaited with no uses; slot 2 not awaited with one: 2 goes.
  e.Touch(2);
  EXPECT_EQ((Slots{{kAwaited, kHeld, kHeld}}.Victim(e)), 2u);
  EXPECT_EQ((Slots{{kAwaited, kKept, kAwaited}}.Victim(e)), 0u);  // fewer uses among awaited
}

TEST(Eviction, LfruTakesTheFewestUsesThenTheOldestThenTheLowestSlot) {
  Eviction e(3);
  const Slots all{{kHeld, kHeld, kHeld}};
  EXPECT_EQ(all.Victim(e), 0u);  // all equal (never used): the lowest slot
  e.Touch(0);  // uses 1 2 0 ... slot 2 never used
  e.Touch(1);
  e.Touch(1);
  EXPECT_EQ(all.Victim(e), 2u);
  e.Touch(2);  // uses 1 2 1; slot 0 used at clock 1, slot 2 at 4
  EXPECT_EQ(all.Victim(e), 0u);
  e.Touch(0);  // uses 2 2 1
  EXPECT_EQ(all.Victim(e), 2u);
  e.Touch(2);  // uses 2 2 2; last uses 5, 3, 6: slot 1 is the oldest
  EXPECT_EQ(all.Victim(e), 1u);
}

TEST(Eviction, LruTakesTheOldestWhateverItsUses) {
  Eviction e(2, EvictionPolicy::kLru);
  for (int i = 0; i < 5; ++i) e.Touch(0);
  e.Touch(1);
  EXPECT_EQ((Slots{{kHeld, kHeld}}.Victim(e)), 0u);  // popular but older
  Eviction f(2, EvictionPolicy::kLfru);
  for (int i = 0; i < 5; ++i) f.Touch(0);
  f.Touch(1);
  EXPECT_EQ((Slots{{kHeld, kHeld}}.Victim(f)), 1u);  // LFRU keeps the popular one
}

TEST(Eviction, UsesAreHalvedEveryFourTimesSlotsCountedUses) {
  Eviction e(2);  // halved at the 8th, 16th, ... counted use
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
  // Recency is untouched by the halving: slot 0 was last used at clock 7.
  EXPECT_EQ(e.last_use(0), 7u);
  EXPECT_EQ(e.last_use(1), 9u);
}

// The in-process cache touches before it counts, the daemon counts before
// it touches (each as before the rule was shared); they differ only in the
// use that lands on a fading.
TEST(Eviction, TheOrderOfTouchAndCountDecidesWhetherTheFadingHalvesThisUse) {
  for (const uint64_t before : {2u, 3u}) {
    Eviction touched_first(1), counted_first(1);  // one slot: halved at every 4th count
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
  Eviction e(3);
  e.Touch(0);      // clock 1
  e.Admit(1, 1);   // clock 2, one use
  e.Admit(2, 0);   // clock 3, no use: a lookahead read
  EXPECT_EQ(e.uses(1), 1u);
  EXPECT_EQ(e.last_use(2), 3u);
  const Slots all{{kHeld, kHeld, kHeld}};
  EXPECT_EQ(all.Victim(e), 2u);  // no uses, however recent
  e.Touch(2);  // uses 1 1 1; last uses 1, 2, 4
  EXPECT_EQ(all.Victim(e), 0u);
  e.Forget(1);  // no uses and older than any use
  EXPECT_EQ(e.uses(1), 0u);
  EXPECT_EQ(e.last_use(1), 0u);
  EXPECT_EQ(all.Victim(e), 1u);
  e.Admit(1, 1);  // clock 5: now the newest
  EXPECT_EQ(all.Victim(e), 0u);
}

}  // namespace
}  // namespace waste
