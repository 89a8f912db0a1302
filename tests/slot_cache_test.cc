// The daemon's cache policy (daemon/slot_cache.h), driven directly: which
// read starts first, which slot is evicted, what happens to pins, stale
// lookahead and failed reads. The table lives in ordinary memory here; the
// shared-memory side is tested in shared_source_test and daemon_test.
#include "daemon/slot_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace waste::daemon {
namespace {

constexpr uint32_t kLayers = 4, kExperts = 16;

struct Fixture {
  explicit Fixture(uint32_t slots, EvictionPolicy policy = EvictionPolicy::kLfru,
                   uint32_t max_queued = kMaxQueuedPerClient) {
    mem.resize(shm::SlotTable::BytesFor(kLayers, kExperts, slots) / 8 + 1);
    auto t = shm::SlotTable::Init(reinterpret_cast<uint8_t*>(mem.data()), mem.size() * 8, kLayers,
                                  kExperts, slots, 4096, 4096);
    EXPECT_TRUE(t.ok());
    table = *t;
    cache = std::make_unique<SlotCache>(table, std::vector<bool>{false, true, true, true}, 4096,
                                        policy, max_queued);
    for (auto& p : pages) {
      p = std::make_unique<shm::PinPage>();
      for (auto& w : p->pins) w.store(0);
    }
  }
  shm::SlotState State(int layer, int expert) const {
    const uint32_t s = table.index(layer, expert).load();
    return s == shm::kNoSlot ? shm::SlotState::kEmpty : shm::StateOf(table.slot(s).word.load());
  }
  void Hint(uint32_t client, int layer, std::vector<uint32_t> experts, HintKind kind) {
    cache->Hint(client, layer, experts, kind);
  }
  // Another use of a record, on a later pass of the client's forward pass
  // (a demand repeated within one layer of one pass is not another use).
  void Use(uint32_t client, int layer, int expert) {
    Hint(client, 3, {}, HintKind::kDemand);  // the rest of this pass
    Hint(client, layer, {static_cast<uint32_t>(expert)}, HintKind::kDemand);
  }
  // Starts and finishes every read the cache hands out, successfully.
  std::vector<ReadJob> RunReads(uint32_t max = 100) {
    auto jobs = cache->Dispatch(max);
    for (const ReadJob& j : jobs) cache->Complete(j, ReadError::kNone, 0);
    return jobs;
  }

  std::vector<uint64_t> mem;
  shm::SlotTable table;
  std::unique_ptr<SlotCache> cache;
  std::unique_ptr<shm::PinPage> pages[2];
};

TEST(SlotCache, DemandBeforeLookaheadBeforeWarm) {
  Fixture f(8);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 1, {1}, HintKind::kWarm);
  f.Hint(0, 2, {2}, HintKind::kLookahead);
  f.Hint(0, 1, {3}, HintKind::kDemand);
  const auto jobs = f.cache->Dispatch(3);
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].key, ExpertKey(1, 3));
  EXPECT_EQ(jobs[1].key, ExpertKey(2, 2));
  EXPECT_EQ(jobs[2].key, ExpertKey(1, 1));
  EXPECT_EQ(f.State(1, 3), shm::SlotState::kLoading);
}

TEST(SlotCache, OnlyAsManyReadsAsAskedAndTheRestWaitInOrder) {
  Fixture f(8);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 1, {1, 2, 3, 4}, HintKind::kWarm);
  EXPECT_EQ(f.cache->Dispatch(2).size(), 2u);
  EXPECT_EQ(f.cache->in_flight(), 2u);
  // A demand arriving now overtakes the warm-up reads still queued.
  f.Hint(0, 1, {9}, HintKind::kDemand);
  const auto next = f.cache->Dispatch(1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].key, ExpertKey(1, 9));
}

// Daemon::Pump lets demands start while other reads hold every reader: a
// separate limit for them, and while one is still queued nothing else starts.
TEST(SlotCache, DemandsHaveTheirOwnLimitAndHoldBackTheRest) {
  Fixture f(8);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 2, {1, 2}, HintKind::kLookahead);
  ASSERT_EQ(f.cache->Dispatch(2).size(), 2u);  // every reader busy
  f.Hint(0, 1, {7, 8, 9}, HintKind::kDemand);
  f.Hint(0, 2, {3}, HintKind::kLookahead);
  const auto demands = f.cache->Dispatch(0, 2);
  ASSERT_EQ(demands.size(), 2u);
  EXPECT_EQ(demands[0].key, ExpertKey(1, 7));
  EXPECT_EQ(demands[1].key, ExpertKey(1, 8));
  EXPECT_EQ(f.cache->in_flight(HintKind::kDemand), 2u);
  EXPECT_EQ(f.cache->in_flight(HintKind::kLookahead), 2u);
  // A demand still queued (its limit reached) holds the lookahead back.
  EXPECT_TRUE(f.cache->Dispatch(3, 0).empty());
  // Its turn: the demand, then the lookahead within the overall limit.
  const auto next = f.cache->Dispatch(3, 1);
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].key, ExpertKey(1, 9));
  EXPECT_EQ(next[1].key, ExpertKey(2, 3));
}

TEST(SlotCache, IdenticalRequestsAreMergedAndRaised) {
  Fixture f(8);
  f.cache->AddClient(0, f.pages[0].get());
  f.cache->AddClient(1, f.pages[1].get());
  f.Hint(0, 1, {5}, HintKind::kWarm);
  f.Hint(1, 1, {5}, HintKind::kDemand);  // the same record, from another client
  f.Hint(0, 1, {5}, HintKind::kDemand);
  const auto jobs = f.cache->Dispatch(10);
  ASSERT_EQ(jobs.size(), 1u);  // one read for all three requests
  EXPECT_EQ(jobs[0].kind, HintKind::kDemand);
  // While it loads, asking again starts nothing.
  f.Hint(1, 1, {5}, HintKind::kDemand);
  EXPECT_TRUE(f.cache->Dispatch(10).empty());
  f.cache->Complete(jobs[0], ReadError::kNone, 0);
  EXPECT_EQ(f.State(1, 5), shm::SlotState::kReady);
  EXPECT_EQ(f.cache->counters().reads, 1u);
}

TEST(SlotCache, LookaheadForAPassedLayerIsDroppedBeforeItIsRead) {
  Fixture f(8);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 1, {0}, HintKind::kDemand);
  f.RunReads();
  f.Hint(0, 2, {7}, HintKind::kLookahead);  // for the next layer
  f.Hint(0, 3, {1}, HintKind::kDemand);     // the client has moved past layer 2
  const auto jobs = f.RunReads();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].key, ExpertKey(3, 1));
  EXPECT_EQ(f.cache->counters().lookahead_dropped, 1u);
  EXPECT_EQ(f.State(2, 7), shm::SlotState::kEmpty);
}

TEST(SlotCache, APinnedSlotIsNeverEvicted) {
  Fixture f(2);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 1, {0, 1}, HintKind::kDemand);
  f.RunReads();
  // The client pins both records, as TryPin would.
  shm::PinSet pins(f.pages[0].get());
  ASSERT_EQ(shm::TryPin(f.table, pins, 1, 0).kind, shm::PinAttempt::kPinned);
  ASSERT_EQ(shm::TryPin(f.table, pins, 1, 1).kind, shm::PinAttempt::kPinned);
  f.Hint(0, 2, {3}, HintKind::kDemand);
  EXPECT_TRUE(f.cache->Dispatch(4).empty());  // nowhere to put it: it waits
  EXPECT_EQ(f.State(1, 0), shm::SlotState::kReady);
  EXPECT_EQ(f.State(1, 1), shm::SlotState::kReady);
  EXPECT_EQ(f.cache->counters().pinned, 2u);
  pins.Remove(f.table.index(1, 1).load());
  const auto jobs = f.RunReads();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(f.State(1, 1), shm::SlotState::kEmpty);  // the unpinned one went
  EXPECT_EQ(f.State(1, 0), shm::SlotState::kReady);
  EXPECT_EQ(f.State(2, 3), shm::SlotState::kReady);
}

TEST(SlotCache, APinPageFullOfGarbageIsHarmless) {
  Fixture f(2);
  f.cache->AddClient(0, f.pages[0].get());
  for (auto& w : f.pages[0]->pins) w.store(0xdeadbeef);  // out of range everywhere
  f.Hint(0, 1, {0, 1, 2}, HintKind::kDemand);
  EXPECT_EQ(f.RunReads().size(), 2u);
  EXPECT_EQ(f.RunReads().size(), 1u);  // evicting works: garbage pins nothing
}

// A client that asks for everything at once gets its cap of reads queued,
// no more; the next read goes to the client served least recently, so a
// second client's demand starts next, not after the flood.
TEST(SlotCache, AGreedyClientCannotStarveAnother) {
  Fixture f(64, EvictionPolicy::kLfru, /*max_queued=*/8);
  f.cache->AddClient(0, f.pages[0].get());
  f.cache->AddClient(1, f.pages[1].get());
  std::vector<uint32_t> all(kExperts);
  for (uint32_t e = 0; e < kExperts; ++e) all[e] = e;
  uint32_t capped = 0;
  for (int L = 1; L < 4; ++L) capped += f.cache->Hint(0, L, all, HintKind::kDemand);
  EXPECT_EQ(capped, 3 * kExperts - 8);
  EXPECT_EQ(f.cache->client_counters(0).queued, 8u);
  EXPECT_EQ(f.cache->client_counters(0).capped, 3 * kExperts - 8);
  EXPECT_EQ(f.cache->counters().queued[0], 8u);

  auto first = f.cache->Dispatch(1);  // the greedy client was first in line
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].key, ExpertKey(1, 0));
  f.Hint(1, 3, {15}, HintKind::kDemand);  // queued behind seven of the greedy one's
  auto next = f.cache->Dispatch(1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].key, ExpertKey(3, 15)) << "the second client waited for the flood";
  // Then turns alternate while both have reads queued; each keeps its order.
  f.Hint(1, 2, {15}, HintKind::kDemand);
  f.Hint(1, 3, {14}, HintKind::kDemand);
  auto more = f.cache->Dispatch(4);
  ASSERT_EQ(more.size(), 4u);
  EXPECT_EQ(more[0].key, ExpertKey(1, 1));
  EXPECT_EQ(more[1].key, ExpertKey(2, 15));
  EXPECT_EQ(more[2].key, ExpertKey(1, 2));
  EXPECT_EQ(more[3].key, ExpertKey(3, 14));
  // Reads started make room under the cap again.
  EXPECT_EQ(f.cache->client_counters(0).queued, 5u);
  const std::vector<uint32_t> four = {0, 1, 2, 3};
  EXPECT_EQ(f.cache->Hint(0, 3, four, HintKind::kDemand), 1u);
}

// The cap on pins: the daemon honours the first pins_per_client entries of a
// page, and a client's PinSet uses no more, so a page filled to the brim
// protects only that many slots.
TEST(SlotCache, PinsBeyondTheCapProtectNothing) {
  Fixture f(4);
  f.table.header().pins_per_client = 2;
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 1, {0, 1, 2, 3}, HintKind::kDemand);
  f.RunReads();
  shm::PinSet pins(f.pages[0].get(), f.table.pins_per_client());
  ASSERT_EQ(shm::TryPin(f.table, pins, 1, 0).kind, shm::PinAttempt::kPinned);
  ASSERT_EQ(shm::TryPin(f.table, pins, 1, 1).kind, shm::PinAttempt::kPinned);
  EXPECT_EQ(shm::TryPin(f.table, pins, 1, 2).kind, shm::PinAttempt::kNoRoom);
  // A hostile client writes pins past its cap by hand: they count for nothing.
  f.pages[0]->pins[2].store(f.table.index(1, 2).load() + 1);
  f.pages[0]->pins[1021].store(f.table.index(1, 3).load() + 1);
  EXPECT_EQ(f.cache->counters().pinned, 2u);
  EXPECT_EQ(f.cache->client_counters(0).pins, 2u);
  f.Hint(0, 2, {0, 1}, HintKind::kDemand);
  EXPECT_EQ(f.RunReads().size(), 2u);  // evicted the two "pinned" past the cap
  EXPECT_EQ(f.State(1, 0), shm::SlotState::kReady);
  EXPECT_EQ(f.State(1, 1), shm::SlotState::kReady);
  EXPECT_EQ(f.State(1, 2), shm::SlotState::kEmpty);
  EXPECT_EQ(f.State(1, 3), shm::SlotState::kEmpty);
}

TEST(SlotCache, AClientGoneReleasesItsPins) {
  Fixture f(1);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 1, {0}, HintKind::kDemand);
  f.RunReads();
  shm::PinSet pins(f.pages[0].get());
  ASSERT_EQ(shm::TryPin(f.table, pins, 1, 0).kind, shm::PinAttempt::kPinned);
  f.cache->AddClient(1, f.pages[1].get());
  f.Hint(1, 1, {1}, HintKind::kDemand);
  EXPECT_TRUE(f.cache->Dispatch(1).empty());
  f.cache->RemoveClient(0);  // its connection ended: its page no longer counts
  EXPECT_EQ(f.RunReads().size(), 1u);
  EXPECT_EQ(f.State(1, 1), shm::SlotState::kReady);
}

TEST(SlotCache, EvictsTheLeastUsedThenTheLeastRecent) {
  Fixture f(3);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 1, {0, 1, 2}, HintKind::kDemand);
  f.RunReads();
  // Uses: expert 0 three more times, expert 2 once more; expert 1 is the
  // least used. Then move on so nothing is still awaited.
  for (int i = 0; i < 3; ++i) f.Use(0, 1, 0);
  f.Use(0, 1, 2);
  f.Hint(0, 2, {4}, HintKind::kDemand);
  f.RunReads();
  EXPECT_EQ(f.State(1, 1), shm::SlotState::kEmpty);
  EXPECT_EQ(f.State(1, 0), shm::SlotState::kReady);
  EXPECT_EQ(f.State(1, 2), shm::SlotState::kReady);
  EXPECT_EQ(f.cache->uses()[1 * kExperts + 0], 4u);
  EXPECT_EQ(f.cache->hits()[1 * kExperts + 0], 3u);  // the first demand missed
  EXPECT_EQ(f.cache->hits()[1 * kExperts + 1], 0u);
}

// A record's uses are its own, not its slot's: read again after it left the
// cache, it comes back with them and outranks a record used less.
TEST(SlotCache, ARecordReadAgainComesBackWithItsUses) {
  Fixture f(2);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 1, {0}, HintKind::kDemand);
  f.RunReads();
  for (int i = 0; i < 4; ++i) f.Use(0, 1, 0);  // (1, 0): 5 uses
  ASSERT_EQ(f.cache->Drop(1), 1u);             // out of the cache
  f.Hint(0, 2, {1}, HintKind::kDemand);
  f.RunReads();
  for (int i = 0; i < 2; ++i) f.Use(0, 2, 1);  // (2, 1): 3 uses
  f.Hint(0, 1, {0}, HintKind::kDemand);        // (1, 0) read again: 6
  f.RunReads();
  f.Hint(0, 3, {2}, HintKind::kDemand);  // a third record: one of the two goes
  f.RunReads();
  EXPECT_EQ(f.State(1, 0), shm::SlotState::kReady);
  EXPECT_EQ(f.State(2, 1), shm::SlotState::kEmpty);
}

TEST(SlotCache, ARecordAskedForIsKeptUntilItsLayerIsDone) {
  Fixture f(2);
  f.cache->AddClient(0, f.pages[0].get());
  f.cache->AddClient(1, f.pages[1].get());
  f.Hint(0, 1, {0}, HintKind::kDemand);  // client 0 wants it, has not used it yet
  f.Hint(1, 3, {5}, HintKind::kDemand);
  f.RunReads();
  for (int i = 0; i < 5; ++i) f.Use(1, 3, 5);  // popular elsewhere
  f.Hint(1, 2, {6}, HintKind::kDemand);  // client 1 moves on: its record is no longer awaited
  f.RunReads();
  EXPECT_EQ(f.State(1, 0), shm::SlotState::kReady);  // still awaited by client 0
  EXPECT_EQ(f.State(3, 5), shm::SlotState::kEmpty);
}

TEST(SlotCache, AFailedReadIsNotPublishedAndADemandRetriesIt) {
  Fixture f(4);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 2, {3}, HintKind::kDemand);
  auto jobs = f.cache->Dispatch(1);
  ASSERT_EQ(jobs.size(), 1u);
  f.cache->Complete(jobs[0], ReadError::kBadRecord, 0);
  EXPECT_EQ(f.State(2, 3), shm::SlotState::kFailed);
  EXPECT_EQ(f.cache->counters().read_errors, 1u);
  shm::PinSet pins(f.pages[0].get());
  const auto a = shm::TryPin(f.table, pins, 2, 3);
  EXPECT_EQ(a.kind, shm::PinAttempt::kFailed);
  EXPECT_EQ(a.error, ReadError::kBadRecord);
  EXPECT_EQ(pins.held(), 0u);
  // Lookahead does not retry a failure; demand does.
  f.Hint(0, 2, {3}, HintKind::kLookahead);
  EXPECT_TRUE(f.cache->Dispatch(4).empty());
  f.Hint(0, 2, {3}, HintKind::kDemand);
  EXPECT_EQ(f.RunReads().size(), 1u);
  EXPECT_EQ(f.State(2, 3), shm::SlotState::kReady);
}

TEST(SlotCache, ShutdownTellsClientsThroughTheTable) {
  Fixture f(2);
  EXPECT_EQ(f.table.header().serving.load(), 1u);
  const uint32_t epoch = f.table.header().epoch.load();
  f.cache->Shutdown();
  EXPECT_EQ(f.table.header().serving.load(), 0u);
  EXPECT_NE(f.table.header().epoch.load(), epoch);
}

TEST(SlotCache, ARepeatedDemandIsNotAnotherUse) {
  Fixture f(4);
  f.cache->AddClient(0, f.pages[0].get());
  f.cache->AddClient(1, f.pages[1].get());
  f.Hint(0, 1, {0}, HintKind::kDemand);
  f.Hint(0, 1, {0}, HintKind::kDemand);  // waiting, it asks again
  f.Hint(0, 1, {0, 1}, HintKind::kDemand);
  EXPECT_EQ(f.cache->uses()[1 * kExperts + 0], 1u);
  EXPECT_EQ(f.cache->counters().misses, 2u);
  f.RunReads();
  f.Hint(1, 1, {0}, HintKind::kDemand);  // another client: another use
  f.Use(0, 1, 0);                        // the next pass: another use
  EXPECT_EQ(f.cache->uses()[1 * kExperts + 0], 3u);
  EXPECT_EQ(f.cache->hits()[1 * kExperts + 0], 2u);
}

TEST(SlotCache, LruIgnoresUses) {
  for (const EvictionPolicy policy : {EvictionPolicy::kLfru, EvictionPolicy::kLru}) {
    Fixture f(2, policy);
    f.cache->AddClient(0, f.pages[0].get());
    f.Hint(0, 1, {0}, HintKind::kDemand);
    f.RunReads();
    for (int i = 0; i < 5; ++i) f.Use(0, 1, 0);  // popular, then old
    f.Hint(0, 2, {1}, HintKind::kDemand);                             // recent, used once
    f.RunReads();
    f.Hint(0, 3, {2}, HintKind::kDemand);
    f.RunReads();
    // LFRU keeps the popular one; LRU keeps the recent one.
    EXPECT_EQ(f.State(1, 0), policy == EvictionPolicy::kLfru ? shm::SlotState::kReady
                                                      : shm::SlotState::kEmpty);
    EXPECT_EQ(f.State(2, 1), policy == EvictionPolicy::kLfru ? shm::SlotState::kEmpty
                                                      : shm::SlotState::kReady);
  }
}

TEST(SlotCache, WarmUpTakesOnlyFreeSlotsMostUsedFirst) {
  Fixture f(3);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 1, {0}, HintKind::kDemand);
  f.RunReads();
  std::vector<uint32_t> saved(kLayers * kExperts, 0);
  saved[2 * kExperts + 5] = 9;
  saved[3 * kExperts + 1] = 7;
  saved[1 * kExperts + 0] = 3;  // already held: not read again
  saved[3 * kExperts + 9] = 1;
  f.cache->SeedUses(saved);
  const auto hot = f.cache->Hottest(10);
  ASSERT_EQ(hot.size(), 4u);
  EXPECT_EQ(hot[0], ExpertKey(2, 5));
  EXPECT_EQ(hot[1], ExpertKey(3, 1));
  EXPECT_EQ(f.cache->Warm(hot), 2u);  // two free slots
  const auto jobs = f.RunReads();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].kind, HintKind::kWarm);
  EXPECT_EQ(f.State(2, 5), shm::SlotState::kReady);
  EXPECT_EQ(f.State(3, 1), shm::SlotState::kReady);
  EXPECT_EQ(f.State(1, 0), shm::SlotState::kReady);  // warming evicted nothing
  EXPECT_EQ(f.cache->Warm(f.cache->Hottest(10)), 0u);
  EXPECT_EQ(f.cache->counters().warm_reads, 2u);
}

TEST(SlotCache, DropEmptiesAllButPinnedSlots) {
  Fixture f(4);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 1, {0, 1}, HintKind::kDemand);
  f.Hint(0, 2, {0, 1}, HintKind::kDemand);
  f.RunReads();
  shm::PinSet pins(f.pages[0].get());
  ASSERT_EQ(shm::TryPin(f.table, pins, 1, 1).kind, shm::PinAttempt::kPinned);
  EXPECT_EQ(f.cache->Drop(2), 2u);
  EXPECT_EQ(f.State(2, 0), shm::SlotState::kEmpty);
  EXPECT_EQ(f.State(1, 0), shm::SlotState::kReady);
  EXPECT_EQ(f.cache->Drop(-1), 1u);  // layer 1 expert 1 is pinned
  EXPECT_EQ(f.State(1, 1), shm::SlotState::kReady);
  EXPECT_EQ(f.State(1, 0), shm::SlotState::kEmpty);
}

TEST(SlotCache, LookaheadIsCountedAndKeptUntilItsLayerPasses) {
  Fixture f(3);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 1, {0}, HintKind::kDemand);
  f.Hint(0, 2, {4, 5}, HintKind::kLookahead);  // predicted for the next layer
  f.RunReads();
  EXPECT_EQ(f.cache->counters().lookahead_reads, 2u);
  f.Hint(0, 2, {4}, HintKind::kDemand);  // right about 4, wrong about 5
  auto c = f.cache->counters();
  EXPECT_EQ(c.lookahead_used, 1u);
  EXPECT_EQ(c.demand_hinted, 1u);
  EXPECT_EQ(c.hits, 1u);
  // While the client is in layer 2, the lookahead record 5 is still awaited:
  // a new record takes layer 1's slot, which is done with.
  f.Hint(0, 2, {6}, HintKind::kDemand);
  f.RunReads();
  EXPECT_EQ(f.State(1, 0), shm::SlotState::kEmpty);
  EXPECT_EQ(f.State(2, 5), shm::SlotState::kReady);
  // Once layer 2 has come and gone, the unused lookahead record goes first
  // (it has no uses) and its bytes count as read for nothing.
  f.Hint(0, 3, {7}, HintKind::kDemand);
  f.RunReads();
  EXPECT_EQ(f.State(2, 5), shm::SlotState::kEmpty);
  c = f.cache->counters();
  EXPECT_EQ(c.lookahead_unused_bytes, 4096u);
  EXPECT_EQ(c.lookahead_used, 1u);
}

// A demand for a record a lookahead asked for is late, not a miss and not a
// hit, whether its read is still queued or already under way; a repeat of a
// demand counts nothing; a demand nobody anticipated is a miss; a record
// already read is a hit. Per client and per layer too.
TEST(SlotCache, ADemandForARecordStillBeingReadIsLate) {
  Fixture f(8);
  f.cache->AddClient(0, f.pages[0].get());
  f.cache->AddClient(1, f.pages[1].get());
  f.Hint(0, 1, {0}, HintKind::kDemand);
  f.Hint(0, 2, {1, 2, 3}, HintKind::kLookahead);  // guesses for layer 2
  const std::vector<ReadJob> first = f.cache->Dispatch(2);  // layer 1's 0, layer 2's 1
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(f.State(2, 1), shm::SlotState::kLoading);
  // Client 0 reaches layer 2: 1 is in flight, 2 and 3 still queued, 4 new.
  f.Hint(0, 2, {1, 2, 4}, HintKind::kDemand);
  f.Hint(0, 2, {1}, HintKind::kDemand);  // waiting, it asks again: no count
  CacheCounters c = f.cache->counters();
  EXPECT_EQ(c.hits, 0u);
  EXPECT_EQ(c.late, 2u);    // 1 (in flight) and 2 (queued)
  EXPECT_EQ(c.misses, 2u);  // layer 1's 0 and layer 2's 4
  EXPECT_EQ(c.demand_hinted, 2u);
  for (const ReadJob& j : first) f.cache->Complete(j, ReadError::kNone, 0);
  f.RunReads();
  // The other client demands records that are ready (hits) and one being
  // read for nobody's lookahead but client 0's demand (late: already asked for).
  f.Hint(0, 3, {7}, HintKind::kDemand);
  ASSERT_EQ(f.cache->Dispatch(1).size(), 1u);
  f.Hint(1, 2, {1, 4}, HintKind::kDemand);
  f.Hint(1, 3, {7, 8}, HintKind::kDemand);
  c = f.cache->counters();
  EXPECT_EQ(c.hits, 2u);
  EXPECT_EQ(c.late, 3u);
  EXPECT_EQ(c.misses, 4u);  // and 3 for client 0, 8 for client 1
  const ClientCounters c0 = f.cache->client_counters(0), c1 = f.cache->client_counters(1);
  EXPECT_EQ(c0.hits, 0u);
  EXPECT_EQ(c0.late, 2u);
  EXPECT_EQ(c0.misses, 3u);
  EXPECT_EQ(c1.hits, 2u);
  EXPECT_EQ(c1.late, 1u);
  EXPECT_EQ(c1.misses, 1u);
  const std::vector<LayerCounters> layers = f.cache->layer_counters();
  EXPECT_EQ(layers[1].misses, 1u);
  EXPECT_EQ(layers[2].hits, 2u);
  EXPECT_EQ(layers[2].late, 2u);
  EXPECT_EQ(layers[2].misses, 1u);
  EXPECT_EQ(layers[3].late, 1u);
  EXPECT_EQ(layers[3].misses, 2u);
}

// Per layer: demand hits and misses as the totals count them, ready and
// loading slots, and the bitmap of ready experts.
TEST(SlotCache, LayerCountersSplitTheTotals) {
  Fixture f(8);
  f.cache->AddClient(0, f.pages[0].get());
  f.Hint(0, 1, {3, 9}, HintKind::kDemand);  // two misses in layer 1
  f.RunReads();
  f.Hint(0, 2, {5}, HintKind::kDemand);  // a miss in layer 2, left loading
  ASSERT_EQ(f.cache->Dispatch(1).size(), 1u);
  f.Use(0, 1, 9);  // a hit in layer 1 (on the next pass)
  const std::vector<LayerCounters> layers = f.cache->layer_counters();
  ASSERT_EQ(layers.size(), kLayers);
  EXPECT_EQ(layers[1].hits, 1u);
  EXPECT_EQ(layers[1].misses, 2u);
  EXPECT_EQ(layers[1].ready, 2u);
  EXPECT_EQ(layers[1].loading, 0u);
  ASSERT_EQ(layers[1].resident.size(), kExperts / 8);
  EXPECT_EQ(layers[1].resident[0], 1u << 3);
  EXPECT_EQ(layers[1].resident[1], 1u << 1);
  EXPECT_EQ(layers[2].misses, 1u);
  EXPECT_EQ(layers[2].ready, 0u);
  EXPECT_EQ(layers[2].loading, 1u);
  EXPECT_EQ(layers[2].resident, std::vector<uint8_t>(kExperts / 8, 0));
  EXPECT_EQ(layers[0].hits + layers[0].misses + layers[3].hits + layers[3].misses, 0u);
  const CacheCounters c = f.cache->counters();
  EXPECT_EQ(c.hits, 1u);
  EXPECT_EQ(c.late, 0u);
  EXPECT_EQ(c.misses, 3u);
}

}  // namespace
}  // namespace waste::daemon
