// Shared-memory segments: a sealed segment cannot be written by anyone, a
// read-only mapping in another process sees what the owner wrote.
#include "shm/segment.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace waste::shm {
namespace {

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
  // Whole huge pages when it got them, whole small pages (not 2 MiB of
  // padding) when it fell back; SizeFor predicts no less than it got.
  const size_t page = seg->page_kind() == PageKind::kSmall ? 4096 : (2u << 20);
  EXPECT_EQ(seg->size() % page, 0u);
  EXPECT_LT(seg->size(), (3u << 20) + page);
  EXPECT_GE(Segment::SizeFor(3 << 20, true), seg->size());
  std::printf("huge-page request got: %s\n", PageKindName(seg->page_kind()));
  auto m = Mapping::Map(seg->fd(), seg->size(), true, true);
  ASSERT_TRUE(m.ok()) << m.status().message();
  m->data()[seg->size() - 1] = 1;
}

TEST(Segment, EmptyIsRefused) {
  EXPECT_FALSE(Segment::Create("x", 0, false).ok());
}

}  // namespace
}  // namespace waste::shm
