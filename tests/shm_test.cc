// Shared-memory segments: a sealed segment cannot be written by anyone, a
// read-only mapping in another process sees what the owner wrote.
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

}  // namespace
}  // namespace waste::shm
