// Shared-memory segments: a sealed segment cannot be written by anyone, a
// read-only mapping in another process sees what the owner wrote. The slot
// table's state machine, the daemon's side: every change bumps the
// generation, the index follows, failures carry their reason, and a pinned
// slot is not retired.
#include "shm/segment.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "shm/table.h"

namespace waste::shm {
namespace {

// Kilobytes of shared memory that /proc/self/smaps shows mapped by 2 MiB
// entries in the mapping that starts at `addr`, or -1 if there is no such
// mapping.
long PmdMappedKb(const void* addr) {
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", static_cast<unsigned long>(reinterpret_cast<uintptr_t>(addr)));
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool in = false;
  while (std::getline(f, line)) {
    if (line.rfind(start, 0) == 0) {
      in = true;
    } else if (in && line.rfind("ShmemPmdMapped:", 0) == 0) {
      return std::stol(line.substr(15));
    }
  }
  return -1;
}

TEST(Segment, SealedSegmentRefusesWritableMappings) {
  auto seg = Segment::Create("waste-test", 10000, /*want_huge=*/false);
  ASSERT_TRUE(seg.ok()) << seg.status().message();
  EXPECT_EQ(seg->size(), 12288u);  // rounded up to whole pages
  {
    auto rw = Mapping::Map(seg->fd(), seg->size(), true, false);
    ASSERT_TRUE(rw.ok());
    std::memcpy(rw->data(), "trunk", 6);
    // A writable mapping still exists: sealing must fail rather than lie.
    EXPECT_FALSE(seg->Seal().ok());
  }
  const Status sealed = seg->Seal();
  ASSERT_TRUE(sealed.ok()) << sealed.message();
  EXPECT_FALSE(Mapping::Map(seg->fd(), seg->size(), true, false).ok());
  EXPECT_EQ(write(seg->fd(), "x", 1), -1);
  EXPECT_NE(ftruncate(seg->fd(), 4096), 0);
  auto ro = Mapping::Map(seg->fd(), seg->size(), false, true);
  ASSERT_TRUE(ro.ok());
  EXPECT_STREQ(reinterpret_cast<const char*>(ro->data()), "trunk");
}

TEST(Segment, AnotherProcessReadsThroughTheDescriptor) {
  auto seg = Segment::Create("waste-test", 4096, false);
  ASSERT_TRUE(seg.ok());
  {
    auto rw = Mapping::Map(seg->fd(), seg->size(), true, false);
    ASSERT_TRUE(rw.ok());
    std::memcpy(rw->data(), "shared", 7);
  }
  ASSERT_TRUE(seg->Seal().ok());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the child inherits the descriptor, as a client receives it
    auto ro = Mapping::Map(seg->fd(), 4096, false, true);
    _exit(ro.ok() && std::strcmp(reinterpret_cast<const char*>(ro->data()), "shared") == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(Segment, HugePagesOrAClearFallback) {
  auto seg = Segment::Create("waste-test-huge", 3 << 20, /*want_huge=*/true);
  ASSERT_TRUE(seg.ok()) << seg.status().message();
  // Whole hugetlb pages from a pool; otherwise whole small pages at least
  // (a collapsed segment keeps its tail small) and never a huge page more
  // than asked; SizeFor predicts no less than it got.
  const size_t page = seg->page_kind() == PageKind::kHugetlb ? (2u << 20) : 4096;
  EXPECT_EQ(seg->size() % page, 0u);
  EXPECT_LT(seg->size(), (3u << 20) + (2u << 20));
  EXPECT_GE(Segment::SizeFor(3 << 20, true), seg->size());
  std::printf("huge-page request got: %s\n", PageKindName(seg->page_kind()));
  auto m = Mapping::Map(seg->fd(), seg->size(), true, true);
  ASSERT_TRUE(m.ok()) << m.status().message();
  m->data()[seg->size() - 1] = 1;
}

// Where huge pages are had, a client's read-only mapping is made of whole
// 2 MiB entries (all but a collapsed segment's small tail) and sees the
// owner's bytes; on this VM (shmem_enabled never, no pool) that takes the
// MADV_COLLAPSE path.
TEST(Segment, HugePagesAreMappedWholeByAReader) {
  constexpr size_t kBytes = (size_t{6} << 20) + 3 * 4096;
  auto seg = Segment::Create("waste-test-collapse", kBytes, /*want_huge=*/true);
  ASSERT_TRUE(seg.ok()) << seg.status().message();
  if (seg->page_kind() == PageKind::kSmall) {
    EXPECT_FALSE(seg->why_small_pages().empty());
    GTEST_SKIP() << "SKIP: this system gave no huge pages: " << seg->why_small_pages();
  }
  EXPECT_TRUE(seg->why_small_pages().empty());
  ASSERT_GE(seg->size(), kBytes);
  {
    auto rw = Mapping::Map(seg->fd(), seg->size(), true, true);
    ASSERT_TRUE(rw.ok()) << rw.status().message();
    for (size_t i = 0; i < kBytes; i += 4096) rw->data()[i] = static_cast<uint8_t>(i >> 12);
  }
  auto ro_fd = seg->ReadOnlyFd();
  ASSERT_TRUE(ro_fd.ok());
  auto ro = Mapping::Map(*ro_fd, seg->size(), false, true);
  close(*ro_fd);
  ASSERT_TRUE(ro.ok()) << ro.status().message();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ro->data()) % (2u << 20), 0u);
  for (size_t i = 0; i < kBytes; i += 4096) {
    ASSERT_EQ(ro->data()[i], static_cast<uint8_t>(i >> 12)) << "at " << i;
  }
  if (seg->page_kind() == PageKind::kTransparentHuge) {  // hugetlb shows elsewhere in smaps
    EXPECT_EQ(PmdMappedKb(ro->data()), static_cast<long>(seg->size() / (2u << 20) * 2048));
  }
}

TEST(Segment, EmptyIsRefused) {
  EXPECT_FALSE(Segment::Create("x", 0, false).ok());
}

// A table of 3 layers x 8 experts and 4 slots in ordinary memory.
struct Table {
  Table() : mem(SlotTable::BytesFor(3, 8, 4) / 8) {
    auto t = SlotTable::Init(reinterpret_cast<uint8_t*>(mem.data()), mem.size() * 8, 3, 8, 4, 4096,
                             4096);
    EXPECT_TRUE(t.ok());
    table = *t;
    for (auto& w : page.pins) w.store(0);
  }
  uint32_t word(uint32_t s) const { return table.slot(s).word.load(); }
  uint32_t epoch() const { return table.header().epoch.load(); }
  std::vector<uint64_t> mem;
  SlotTable table;
  PinPage page;
};

TEST(SlotTable, ASlotLoadsIsPublishedAndIsRetired) {
  Table t;
  EXPECT_EQ(PeekRecord(t.table, 1, 5).slot, kNoSlot);
  EXPECT_EQ(PeekRecord(t.table, 1, 5).state, SlotState::kEmpty);
  EXPECT_EQ(Peek(t.table, 2).key, kNoKey);
  const uint32_t e0 = t.epoch();

  MarkLoading(t.table, 2, ExpertKey(1, 5));
  EXPECT_EQ(t.word(2), MakeWord(SlotState::kLoading, 1));
  EXPECT_EQ(t.epoch(), e0) << "marking loading does not announce";
  const SlotPeek p = PeekRecord(t.table, 1, 5);
  EXPECT_EQ(p.slot, 2u);
  EXPECT_EQ(p.state, SlotState::kLoading);
  EXPECT_EQ(p.key, ExpertKey(1, 5));

  Publish(t.table, 2);
  EXPECT_EQ(t.word(2), MakeWord(SlotState::kReady, 2));
  EXPECT_EQ(t.epoch(), e0 + 1);
  PinSet pins(&t.page);
  EXPECT_EQ(TryPin(t.table, pins, 1, 5).kind, PinAttempt::kPinned);
  pins.Remove(2);

  const PinPage* pages[] = {&t.page};
  EXPECT_TRUE(Retire(t.table, 2, pages));
  EXPECT_EQ(t.word(2), MakeWord(SlotState::kEmpty, 3));
  EXPECT_EQ(Peek(t.table, 2).key, kNoKey);
  EXPECT_EQ(PeekRecord(t.table, 1, 5).slot, kNoSlot);
  EXPECT_EQ(t.epoch(), e0 + 1) << "retiring does not announce";
  EXPECT_EQ(TryPin(t.table, pins, 1, 5).kind, PinAttempt::kAbsent);
}

TEST(SlotTable, AFailureCarriesItsReasonUntilTheSlotIsReused) {
  Table t;
  MarkLoading(t.table, 0, ExpertKey(2, 7));
  const uint32_t e0 = t.epoch();
  Fail(t.table, 0, ReadError::kIo, 5);
  EXPECT_EQ(t.word(0), MakeWord(SlotState::kFailed, 2));
  EXPECT_EQ(t.epoch(), e0 + 1);
  PinSet pins(&t.page);
  const PinAttempt a = TryPin(t.table, pins, 2, 7);
  EXPECT_EQ(a.kind, PinAttempt::kFailed);
  EXPECT_EQ(a.error, ReadError::kIo);
  EXPECT_EQ(a.detail, 5u);
  EXPECT_EQ(pins.held(), 0u);
  const PinPage* pages[] = {&t.page};
  ASSERT_TRUE(Retire(t.table, 0, pages));
  MarkLoading(t.table, 0, ExpertKey(1, 1));  // reused: the old reason is gone
  EXPECT_EQ(t.table.slot(0).error.load(), 0u);
  EXPECT_EQ(t.table.slot(0).detail.load(), 0u);
  EXPECT_EQ(t.word(0), MakeWord(SlotState::kLoading, 4));
}

TEST(SlotTable, APinnedSlotIsNotRetired) {
  Table t;
  MarkLoading(t.table, 3, ExpertKey(0, 2));
  Publish(t.table, 3);
  PinSet pins(&t.page);
  ASSERT_EQ(TryPin(t.table, pins, 0, 2).kind, PinAttempt::kPinned);
  const uint32_t w = t.word(3);
  const PinPage* pages[] = {&t.page};
  EXPECT_FALSE(Retire(t.table, 3, pages));
  EXPECT_EQ(t.word(3), w) << "put back as it was, generation included";
  EXPECT_EQ(PeekRecord(t.table, 0, 2).slot, 3u);
  EXPECT_EQ(Peek(t.table, 3).key, ExpertKey(0, 2));
  pins.Remove(3);
  EXPECT_TRUE(Retire(t.table, 3, pages));
}

TEST(SlotTable, StopServingTellsClients) {
  Table t;
  EXPECT_EQ(t.table.header().serving.load(), 1u);
  const uint32_t e0 = t.epoch();
  StopServing(t.table);
  EXPECT_EQ(t.table.header().serving.load(), 0u);
  EXPECT_EQ(t.epoch(), e0 + 1);
}

}  // namespace
}  // namespace waste::shm
