// The in-process expert cache: records are the container's bytes, pinned
// slots are never evicted, a damaged record fails with its name, and hits
// and reads are counted.
#include "engine/experts/cache.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "engine/synth/synth.h"
#include "tests/test_util.h"

namespace waste {
namespace {

class Cache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = waste::testing::ScratchDir();
    ASSERT_TRUE(WriteSynthetic(*SynthPreset("tiny-kimi"), dir_, true, 1, nullptr).ok());
    auto ct = Container::Open(dir_);
    ASSERT_TRUE(ct.ok());
    ct_ = std::make_unique<Container>(std::move(*ct));
  }
  std::unique_ptr<ExpertCache> Make(uint64_t slots, int readers = 2) {
    CacheOptions o;
    o.slots = slots;
    o.readers = readers;
    o.verify_crc = true;
    auto c = ExpertCache::Create(*ct_, o);
    EXPECT_TRUE(c.ok()) << c.status().message();
    return std::move(*c);
  }
  std::vector<uint8_t> Direct(int layer, int expert) {
    std::vector<uint8_t> rec(ct_->record_bytes());
    EXPECT_TRUE(ct_->ReadRecord(layer, expert, rec.data(), true).ok());
    return rec;
  }
  std::string dir_;
  std::unique_ptr<Container> ct_;
};

TEST_F(Cache, HandsOutTheContainersBytes) {
  auto c = Make(4);
  for (int L : {1, 3})
    for (int e : {0, 5, 15}) {
      auto rec = c->Acquire(L, e);
      ASSERT_TRUE(rec.ok()) << rec.status().message();
      EXPECT_EQ(0, std::memcmp(*rec, Direct(L, e).data(), ct_->record_bytes()));
      c->Release(L, e);
    }
}

TEST_F(Cache, CountsHitsAndReads) {
  auto c = Make(8);
  ASSERT_TRUE(c->Acquire(1, 2).ok());
  c->Release(1, 2);
  ASSERT_TRUE(c->Acquire(1, 2).ok());
  c->Release(1, 2);
  const ExpertStats s = c->stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.reads, 1u);
  EXPECT_EQ(s.bytes_read, ct_->record_bytes());
  // The one read took some time, and no more than the wait for it.
  EXPECT_GT(s.read_busy_seconds, 0.0);
  EXPECT_LE(s.read_busy_seconds, s.wait_seconds + 1e-3);
}

// TryAcquire pins a record that is in memory and starts no read for one
// that is not.
TEST_F(Cache, TryAcquirePinsOnlyWhatIsInMemory) {
  auto c = Make(4);
  auto absent = c->TryAcquire(1, 2);
  ASSERT_TRUE(absent.ok()) << absent.status().message();
  EXPECT_EQ(*absent, nullptr);
  EXPECT_EQ(c->stats().reads, 0u);
  ASSERT_TRUE(c->Acquire(1, 2).ok());
  c->Release(1, 2);
  auto rec = c->TryAcquire(1, 2);
  ASSERT_TRUE(rec.ok()) << rec.status().message();
  ASSERT_NE(*rec, nullptr);
  EXPECT_EQ(0, std::memcmp(*rec, Direct(1, 2).data(), ct_->record_bytes()));
  EXPECT_EQ(c->stats().hits, 1u);
  // Pinned: with every other slot pinned too, nothing can evict it.
  for (int e : {3, 4, 5}) ASSERT_TRUE(c->Acquire(1, e).ok());
  EXPECT_FALSE(c->Acquire(1, 6).ok()) << "all four slots are pinned";
  c->Release(1, 2);
  EXPECT_TRUE(c->Acquire(1, 6).ok()) << "its slot is free again";
  EXPECT_FALSE(c->TryAcquire(1, 99).ok()) << "no such expert";
}

TEST_F(Cache, AnAcquireWaitsWhenEverySlotIsLoading) {
  auto c = Make(2);
  const int hinted[2] = {3, 4};
  c->Hint(2, hinted, HintKind::kLookahead);  // both slots taken by reads
  auto rec = c->Acquire(1, 0);  // waits for one of them, then evicts it
  ASSERT_TRUE(rec.ok()) << rec.status().message();
  const std::vector<uint8_t> want = Direct(1, 0);
  EXPECT_EQ(0, std::memcmp(*rec, want.data(), want.size()));
  c->Release(1, 0);
}

TEST_F(Cache, AWrongGuessIsNotKeptOnceItsLayerHasPassed) {
  auto c = Make(2);
  const int guessed[1] = {7};
  c->Hint(1, guessed, HintKind::kLookahead);  // a guess for layer 1, never used
  for (int i = 0; i < 500 && c->stats().reads < 1; ++i)  // let its read finish first
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(c->stats().reads, 1u);
  for (int e : {0, 1}) {  // layer 1 runs with other experts, then layer 2
    ASSERT_TRUE(c->Acquire(1, e).ok());
    c->Release(1, e);
  }
  for (int i = 0; i < 3; ++i) {  // layer 2 now: layer 1's used record is popular
    ASSERT_TRUE(c->Acquire(1, 1).ok());
    c->Release(1, 1);
  }
  ASSERT_TRUE(c->Acquire(2, 0).ok());
  c->Release(2, 0);
  // The guess (no uses, no longer awaited) went, not the record used 4 times.
  const uint64_t reads = c->stats().reads;
  ASSERT_TRUE(c->Acquire(1, 1).ok());
  c->Release(1, 1);
  EXPECT_EQ(c->stats().reads, reads);
}

TEST_F(Cache, PinnedSlotsAreNeverEvicted) {
  auto c = Make(2);
  auto a = c->Acquire(1, 0);
  auto b = c->Acquire(1, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<uint8_t> want_a = Direct(1, 0);
  // Both slots pinned: a third record cannot be had, and says so.
  auto third = c->Acquire(1, 2);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find("all 2 slots are pinned"), std::string::npos);
  EXPECT_EQ(0, std::memcmp(*a, want_a.data(), want_a.size()));
  c->Release(1, 1);
  auto again = c->Acquire(1, 2);  // evicts (1, 1), never the pinned (1, 0)
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(0, std::memcmp(*a, want_a.data(), want_a.size()));
  EXPECT_EQ(0, std::memcmp(*again, Direct(1, 2).data(), want_a.size()));
}

TEST_F(Cache, FrequentlyUsedRecordsStay) {
  auto c = Make(3);
  auto use = [&](int e) {
    ASSERT_TRUE(c->Acquire(2, e).ok());
    c->Release(2, e);
  };
  for (int i = 0; i < 3; ++i) use(7);  // popular
  use(8);
  use(9);
  use(10);  // evicts 8 or 9, not 7
  const uint64_t reads = c->stats().reads;
  use(7);
  EXPECT_EQ(c->stats().reads, reads) << "the popular record was evicted";
}

// A record's uses are its own, not its slot's: evicted while everything
// else was pinned and read again, it comes back with them.
TEST_F(Cache, ARecordReadAgainComesBackWithItsUses) {
  auto c = Make(2);
  auto use = [&](int e) {
    ASSERT_TRUE(c->Acquire(2, e).ok());
    c->Release(2, e);
  };
  for (int i = 0; i < 3; ++i) use(7);  // 7: 3 uses
  ASSERT_TRUE(c->Acquire(2, 8).ok());  // held: 7 is the only slot to take
  use(9);                              // evicts 7
  c->Release(2, 8);
  use(8);  // 8: 2 uses
  use(7);  // evicts 9 (1 use); 7 is back with 4
  use(10);  // evicts 8, not 7
  const uint64_t reads = c->stats().reads;
  use(7);
  EXPECT_EQ(c->stats().reads, reads) << "the record read again lost its uses";
}

TEST_F(Cache, HintsBringRecordsInAhead) {
  auto c = Make(16, 4);
  const int want[] = {3, 4, 5, 6};
  c->Hint(4, want, HintKind::kLookahead);
  for (int i = 0; i < 200 && c->stats().reads < 4; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(c->stats().reads, 4u);
  for (int e : want) {
    ASSERT_TRUE(c->Acquire(4, e).ok());
    c->Release(4, e);
  }
  EXPECT_EQ(c->stats().hits, 4u);
  EXPECT_EQ(c->stats().misses, 0u);
}

TEST_F(Cache, ADamagedRecordFailsWithItsName) {
  {
    std::fstream f(dir_ + "/experts-L2.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(ct_->record_bytes()) * 5 + 100);
    f.put('\x5a');
  }
  auto c = Make(4);
  auto bad = c->Acquire(2, 5);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expert 5 of layer 2"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("checksum mismatch"), std::string::npos)
      << bad.status().message();
  EXPECT_TRUE(c->Acquire(2, 4).ok());   // the neighbours are fine
  EXPECT_FALSE(c->Acquire(7, 0).ok());  // a layer that does not exist
}

TEST_F(Cache, ManyThreadsAtOnce) {
  auto c = Make(5, 3);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const int L = 1 + (i + t) % 5, e = (i * 7 + t) % 16;
        auto r = c->Acquire(L, e);
        if (!r.ok()) {  // five slots, four users holding one each: never all pinned
          ++bad;
          continue;
        }
        if (std::memcmp(*r, Direct(L, e).data(), 48) != 0) ++bad;
        c->Release(L, e);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace waste
