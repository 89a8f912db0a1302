// The daemon's store of prompt states (daemon/prompt_states.h), driven
// directly: publish and find by longest prefix, the uid rule, a reopen (what
// a restart of wasted does), damaged and foreign files removed at the scan
// (headers) or before Find hands them out (checksums), the budget's
// least-recently-used eviction, and the memory tier: sealed memfds, spilled
// to disk past their budget and at stop, dropped when the disk fails.
#include "daemon/prompt_states.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace waste::daemon {
namespace {

namespace fs = std::filesystem;

constexpr char kModel[] = "0123456789abcdef";
constexpr uint64_t kShape = 0x5eed;  // the client's fingerprint

// A memfd holding `bytes`, as a client publishes it; closed with the object.
struct Blob {
  explicit Blob(const std::vector<uint8_t>& bytes) {
    fd = memfd_create("state", MFD_CLOEXEC);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }
  ~Blob() { close(fd); }
  int fd = -1;
};

// Inverts the byte at `at` of the file at `path`, its size unchanged.
void FlipByte(const std::string& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  const char was = static_cast<char>(f.get());
  f.seekp(at);
  f.put(static_cast<char>(~was));
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

// The payload of a found state, read from its descriptor (which is closed).
std::vector<uint8_t> ReadFound(const PromptStates::Found& f) {
  std::vector<uint8_t> out(f.bytes);
  EXPECT_EQ(pread(f.fd, out.data(), out.size(), static_cast<off_t>(f.offset)),
            static_cast<ssize_t>(out.size()));
  close(f.fd);
  return out;
}

class PromptStatesTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = waste::testing::ScratchDir() + "/states"; }

  std::unique_ptr<PromptStates> Open(uint64_t budget = 1 << 20, bool shared = false,
                                     const std::string& model = kModel, uint64_t memory = 0) {
    auto s = PromptStates::Open({dir_, model, budget, shared, memory});
    EXPECT_TRUE(s.ok()) << s.status().message();
    return s.ok() ? std::move(*s) : nullptr;
  }
  void Publish(PromptStates& s, const std::vector<int32_t>& tokens,
               const std::vector<uint8_t>& bytes, uid_t uid = 1000) {
    Blob b(bytes);
    const Status st = s.Publish(uid, kShape, tokens, b.fd, bytes.size());
    EXPECT_TRUE(st.ok()) << st.message();
    s.Drain();  // written by the worker
  }
  std::vector<std::string> Files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().string());
    return out;
  }
  std::string dir_;
};

TEST_F(PromptStatesTest, TheLongestPublishedPrefixIsFoundWithItsBytes) {
  auto s = Open();
  const auto short_state = Pattern(1000, 1), long_state = Pattern(3000, 2);
  Publish(*s, {1, 2, 3}, short_state);
  Publish(*s, {1, 2, 3, 4, 5}, long_state);
  EXPECT_EQ(s->size(), 2u);

  PromptStates::Found f = s->Find(1000, kShape, std::vector<int32_t>{1, 2, 3, 4, 5, 6});
  ASSERT_EQ(f.matched, 5u);
  EXPECT_EQ(ReadFound(f), long_state);
  f = s->Find(1000, kShape, std::vector<int32_t>{1, 2, 3, 9});
  ASSERT_EQ(f.matched, 3u);
  EXPECT_EQ(ReadFound(f), short_state);
  // A whole prompt matches itself; a prompt shorter than every state, another
  // start or another model's fingerprint finds nothing.
  f = s->Find(1000, kShape, std::vector<int32_t>{1, 2, 3, 4, 5});
  EXPECT_EQ(f.matched, 5u);
  close(f.fd);
  EXPECT_EQ(s->Find(1000, kShape, std::vector<int32_t>{1, 2}).matched, 0u);
  EXPECT_EQ(s->Find(1000, kShape, std::vector<int32_t>{2, 2, 3, 4}).matched, 0u);
  EXPECT_EQ(s->Find(1000, kShape + 1, std::vector<int32_t>{1, 2, 3, 4}).matched, 0u);
  EXPECT_EQ(s->Find(1000, kShape, std::vector<int32_t>{2}).fd, -1);
}

TEST_F(PromptStatesTest, AnotherUidFindsNothingUnlessStatesAreShared) {
  {
    auto s = Open();
    Publish(*s, {7, 8, 9}, Pattern(100, 3), 1000);
    EXPECT_EQ(s->Find(1001, kShape, std::vector<int32_t>{7, 8, 9, 10}).matched, 0u);
    EXPECT_TRUE(s->List(1001).empty());
    EXPECT_EQ(s->Drop(1001), 0u);  // and cannot remove it
    ASSERT_EQ(s->List(1000).size(), 1u);
    EXPECT_EQ(s->List(1000)[0].uid, 1000u);
    EXPECT_EQ(s->List(geteuid()).size(), 1u);  // the daemon's own uid sees every state
  }
  auto shared = Open(1 << 20, /*shared=*/true);
  PromptStates::Found f = shared->Find(1001, kShape, std::vector<int32_t>{7, 8, 9, 10});
  EXPECT_EQ(f.matched, 3u);
  close(f.fd);
}

TEST_F(PromptStatesTest, AStateSurvivesAReopenBitForBit) {
  const auto bytes = Pattern(5000, 4);
  {
    auto s = Open();
    Publish(*s, {11, 12, 13, 14}, bytes);
  }
  auto s = Open();
  ASSERT_EQ(s->size(), 1u);
  EXPECT_EQ(s->bytes(), 64u + 4 * 4 + bytes.size());
  PromptStates::Found f = s->Find(1000, kShape, std::vector<int32_t>{11, 12, 13, 14, 15});
  ASSERT_EQ(f.matched, 4u);
  EXPECT_EQ(ReadFound(f), bytes);
  const std::vector<PromptStateInfo> list = s->List(1000);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].tokens, 4u);
  EXPECT_EQ(list[0].fingerprint, kShape);
  EXPECT_GE(list[0].age_seconds, 0);
  EXPECT_LT(list[0].age_seconds, 60);
}

TEST_F(PromptStatesTest, DamagedForeignAndUnfinishedFilesAreRemovedAtOpen) {
  {
    auto s = Open();
    Publish(*s, {1}, Pattern(400, 5));
    Publish(*s, {2}, Pattern(400, 6));
    Publish(*s, {3}, Pattern(400, 7));
    Publish(*s, {4}, Pattern(400, 8));
  }
  std::vector<std::string> files = Files();
  ASSERT_EQ(files.size(), 4u);
  std::sort(files.begin(), files.end());
  // One truncated, one with a byte of its header's model changed, one renamed.
  fs::resize_file(files[0], fs::file_size(files[0]) - 1);
  FlipByte(files[1], 20);
  fs::rename(files[2], dir_ + "/00000000000000aa.state");
  waste::testing::WriteText(dir_ + "/.tmp-1-0", "a publish cut short");
  waste::testing::WriteText(dir_ + "/notes.txt", "not ours");
  auto s = Open();
  EXPECT_EQ(s->size(), 1u);  // the untouched one
  ASSERT_EQ(Files().size(), 1u);
  EXPECT_EQ(Files()[0], files[3]);
  // Opened for another container, the last one is foreign: removed too.
  s.reset();
  auto other = Open(1 << 20, false, "fedcba9876543210");
  EXPECT_EQ(other->size(), 0u);
  EXPECT_TRUE(Files().empty());
}

TEST_F(PromptStatesTest, AStartReadsHeadersOnlyAndFindChecksEachFileOnce) {
  constexpr int kStates = 40;
  {
    auto s = Open(4 << 20);
    for (int i = 0; i < kStates; ++i)
      Publish(*s, {i, i + 1}, Pattern(20000, static_cast<uint8_t>(i)));
    EXPECT_EQ(s->checksums(), 0u);  // a publish computes its crc from the bytes it writes
  }
  auto s = Open(4 << 20);
  EXPECT_EQ(s->size(), static_cast<size_t>(kStates));
  EXPECT_EQ(s->checksums(), 0u);  // no file read whole at start
  for (int round = 0; round < 2; ++round) {
    PromptStates::Found f = s->Find(1000, kShape, std::vector<int32_t>{7, 8, 9});
    ASSERT_EQ(f.matched, 2u);
    EXPECT_EQ(ReadFound(f), Pattern(20000, 7));
    EXPECT_EQ(s->checksums(), 1u) << "round " << round;  // checked once, then remembered
  }
}

TEST_F(PromptStatesTest, AFileDamagedAfterStartIsNeverHandedOut) {
  const auto short_state = Pattern(3000, 1), long_state = Pattern(3000, 2);
  {
    auto s = Open();
    Publish(*s, {1, 2}, short_state);
    Publish(*s, {1, 2, 3, 4}, long_state);
  }
  auto s = Open();
  ASSERT_EQ(s->size(), 2u);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  PromptStates::Found f = s->Find(1000, kShape, prompt);
  ASSERT_EQ(f.matched, 4u);
  close(f.fd);
  // Damaged once it was checked and used: its mtime and ctime change, so it
  // is checked again, refused and removed, and the shorter one is found.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the clock's tick
  std::vector<std::string> files = Files();
  ASSERT_EQ(files.size(), 2u);
  for (const std::string& path : files)
    if (fs::file_size(path) == 64 + 4 * 4 + long_state.size()) FlipByte(path, 2000);
  f = s->Find(1000, kShape, prompt);
  ASSERT_EQ(f.matched, 2u);
  EXPECT_EQ(ReadFound(f), short_state);
  EXPECT_EQ(s->size(), 1u);
  EXPECT_EQ(Files().size(), 1u);

  // Damaged after a start, before its first use: the same.
  Publish(*s, {1, 2, 3, 4}, long_state);
  s.reset();
  s = Open();
  ASSERT_EQ(s->size(), 2u);
  for (const std::string& path : Files())
    if (fs::file_size(path) == 64 + 4 * 4 + long_state.size()) FlipByte(path, 100);
  f = s->Find(1000, kShape, prompt);
  ASSERT_EQ(f.matched, 2u);
  EXPECT_EQ(ReadFound(f), short_state);
  EXPECT_EQ(s->size(), 1u);
  EXPECT_EQ(Files().size(), 1u);
}

TEST_F(PromptStatesTest, TheBudgetEvictsTheLeastRecentlyUsed) {
  const uint64_t one = 64 + 4 + 1000;  // a state's file: header, a token, its bytes
  auto s = Open(2 * one);
  Publish(*s, {1}, Pattern(1000, 1));
  Publish(*s, {2}, Pattern(1000, 2));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  PromptStates::Found f = s->Find(1000, kShape, std::vector<int32_t>{1, 5});  // 1 is used again
  ASSERT_EQ(f.matched, 1u);
  close(f.fd);
  Publish(*s, {3}, Pattern(1000, 3));
  EXPECT_EQ(s->size(), 2u);
  EXPECT_EQ(s->bytes(), 2 * one);
  EXPECT_EQ(s->Find(1000, kShape, std::vector<int32_t>{2}).matched, 0u);
  for (int32_t t : {1, 3}) {
    f = s->Find(1000, kShape, std::vector<int32_t>{t});
    EXPECT_EQ(f.matched, 1u) << t;
    close(f.fd);
  }
  // Larger than the whole budget: refused at once, and nothing else is
  // evicted for it.
  Blob big(Pattern(3000, 9));
  const Status st = s->Publish(1000, kShape, std::vector<int32_t>{4}, big.fd, 3000);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("states-budget"), std::string::npos) << st.message();
  EXPECT_EQ(s->size(), 2u);
  // The order of use survives a reopen with a smaller budget: 3 was used last.
  s.reset();
  s = Open(one);
  EXPECT_EQ(s->size(), 1u);
  f = s->Find(1000, kShape, std::vector<int32_t>{3});
  EXPECT_EQ(f.matched, 1u);
  close(f.fd);
}

TEST_F(PromptStatesTest, TheMemoryTierIsSealedPreferredAndSpillsItsLeastRecentlyUsedToDisk) {
  const uint64_t one = 64 + 4 + 1000;
  auto s = Open(1 << 20, false, kModel, /*memory=*/2 * one);
  Publish(*s, {1}, Pattern(1000, 1));
  Publish(*s, {2}, Pattern(1000, 2));
  EXPECT_EQ(s->memory_bytes(), 2 * one);
  EXPECT_EQ(s->bytes(), 0u);
  EXPECT_TRUE(Files().empty());  // nothing written yet
  for (const PromptStateInfo& i : s->List(1000)) EXPECT_TRUE(i.in_memory);

  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  PromptStates::Found f = s->Find(1000, kShape, std::vector<int32_t>{1, 7});  // 2 is now the LRU
  ASSERT_EQ(f.matched, 1u);
  EXPECT_TRUE(f.in_memory);
  // The client's descriptor cannot change what it maps, nor what others map.
  EXPECT_EQ(pwrite(f.fd, "x", 1, static_cast<off_t>(f.offset)), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(ftruncate(f.fd, 10), 0);
  EXPECT_EQ(mmap(nullptr, f.offset + f.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0),
            MAP_FAILED);
  void* ro = mmap(nullptr, f.offset + f.bytes, PROT_READ, MAP_SHARED, f.fd, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_EQ(std::vector<uint8_t>(static_cast<uint8_t*>(ro) + f.offset,
                                 static_cast<uint8_t*>(ro) + f.offset + f.bytes),
            Pattern(1000, 1));
  munmap(ro, f.offset + f.bytes);
  EXPECT_EQ(ReadFound(f), Pattern(1000, 1));

  Publish(*s, {3}, Pattern(1000, 3));  // 2 goes to disk
  EXPECT_EQ(s->memory_bytes(), 2 * one);
  EXPECT_EQ(s->bytes(), one);
  ASSERT_EQ(Files().size(), 1u);
  const std::vector<PromptStateInfo> list = s->List(1000);
  EXPECT_EQ(std::count_if(list.begin(), list.end(), [](const auto& i) { return i.in_memory; }), 2);
  f = s->Find(1000, kShape, std::vector<int32_t>{2});
  ASSERT_EQ(f.matched, 1u);
  EXPECT_FALSE(f.in_memory);
  EXPECT_EQ(ReadFound(f), Pattern(1000, 2));
  EXPECT_EQ(s->checksums(), 0u);  // written from memory, whose bytes were checked at publish

  // Larger than the memory's budget: straight to disk.
  Publish(*s, {4}, Pattern(5000, 4));
  EXPECT_EQ(s->bytes(), one + 64 + 4 + 5000);
  EXPECT_EQ(s->memory_bytes(), 2 * one);
  // Drop empties both tiers.
  EXPECT_EQ(s->Drop(1000), 4u);
  EXPECT_EQ(s->memory_bytes() + s->bytes(), 0u);
  EXPECT_TRUE(Files().empty());
}

TEST_F(PromptStatesTest, TheMemoryTierIsWrittenToDiskAtStopAndFoundAfterARestart) {
  const uint64_t one = 64 + 2 * 4 + 1000;
  {
    auto s = Open(2 * one, false, kModel, /*memory=*/4 * one);
    for (int32_t t = 1; t <= 3; ++t) {
      Publish(*s, {t, t}, Pattern(1000, static_cast<uint8_t>(t)));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    s->SpillToDisk();  // the disk takes two: the oldest goes
    EXPECT_EQ(s->memory_bytes(), 0u);
    EXPECT_EQ(s->size(), 2u);
  }
  auto s = Open(2 * one, false, kModel, 4 * one);
  EXPECT_EQ(s->size(), 2u);
  EXPECT_EQ(s->Find(1000, kShape, std::vector<int32_t>{1, 1}).matched, 0u);
  for (int32_t t : {2, 3}) {
    PromptStates::Found f = s->Find(1000, kShape, std::vector<int32_t>{t, t, 9});
    ASSERT_EQ(f.matched, 2u) << t;
    EXPECT_FALSE(f.in_memory);
    EXPECT_EQ(ReadFound(f), Pattern(1000, static_cast<uint8_t>(t)));
  }
}

TEST_F(PromptStatesTest, AFailedWriteDropsTheStateAndLeavesNoFile) {
  // A file size limit makes every write past it fail, as a full disk does.
  const uint64_t one = 64 + 4 + 1000;
  auto s = Open(1 << 20, false, kModel, /*memory=*/one);
  Publish(*s, {1}, Pattern(1000, 1));
  Blob b(Pattern(100, 2)), big(Pattern(3000, 3));
  rlimit was{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &was), 0);
  signal(SIGXFSZ, SIG_IGN);
  rlimit small = was;
  small.rlim_cur = 512;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  // 2 goes to memory, 1 to disk: fails. 3 goes to disk: fails. Both are
  // answered at once (the worker writes them), so both are accepted.
  EXPECT_TRUE(s->Publish(1000, kShape, std::vector<int32_t>{2}, b.fd, 100).ok());
  EXPECT_TRUE(s->Publish(1000, kShape, std::vector<int32_t>{3}, big.fd, 3000).ok());
  s->Drain();
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &was), 0);
  signal(SIGXFSZ, SIG_DFL);
  EXPECT_EQ(s->size(), 1u);  // 2, in memory
  EXPECT_EQ(s->Find(1000, kShape, std::vector<int32_t>{3}).matched, 0u);
  EXPECT_EQ(s->Find(1000, kShape, std::vector<int32_t>{1}).matched, 0u);  // dropped, logged
  EXPECT_TRUE(Files().empty());  // no temporary left
  PromptStates::Found f = s->Find(1000, kShape, std::vector<int32_t>{2});
  ASSERT_EQ(f.matched, 1u);
  EXPECT_EQ(ReadFound(f), Pattern(100, 2));
}

// Publishes (queued for the worker, some spilling the memory tier to disk)
// while another thread finds and drops: a state is found whole or not at
// all, and the budgets hold. Its point is the lock: ThreadSanitizer runs it.
TEST_F(PromptStatesTest, FindAndDropWhilePublishesAreWrittenSeeWholeStatesOnly) {
  constexpr int kStates = 60;
  const uint64_t one = 64 + 4 + 2000;
  auto s = Open(/*budget=*/8 * one, false, kModel, /*memory=*/4 * one);
  std::atomic<bool> done{false};
  std::atomic<int> found{0};
  std::thread finder([&] {
    for (int round = 0; !done; ++round) {
      const int32_t t = round % kStates;
      PromptStates::Found f = s->Find(1000, kShape, std::vector<int32_t>{t, 99});
      if (f.matched == 0) continue;
      ++found;
      EXPECT_EQ(ReadFound(f), Pattern(2000, static_cast<uint8_t>(t))) << t;
      if (round % 97 == 0) s->Drop(1000);
    }
  });
  for (int32_t t = 0; t < kStates; ++t) {
    Blob b(Pattern(2000, static_cast<uint8_t>(t)));
    while (!s->Publish(1000, kShape, std::vector<int32_t>{t}, b.fd, 2000).ok())
      std::this_thread::yield();  // the queue is full: the worker catches up
  }
  s->Drain();
  done = true;
  finder.join();
  EXPECT_GT(found.load(), 0);
  EXPECT_LE(s->memory_bytes(), 4 * one);
  EXPECT_LE(s->bytes(), 8 * one);
  EXPECT_EQ(s->size() * one, s->memory_bytes() + s->bytes());
  EXPECT_EQ(Files().size() * one, s->bytes());  // no temporary left behind
}

TEST_F(PromptStatesTest, AFindWaitsForALongerStateStillBeingWritten) {
  constexpr size_t kBig = 4 << 20;
  auto s = Open(64 << 20, false, kModel, /*memory=*/64 << 20);
  Publish(*s, {1}, Pattern(1000, 1));
  Blob b(Pattern(kBig, 2));
  ASSERT_TRUE(s->Publish(1000, kShape, std::vector<int32_t>{1, 2, 3}, b.fd, kBig).ok());
  // No Drain: queued or being copied, it is still the one found.
  PromptStates::Found f = s->Find(1000, kShape, std::vector<int32_t>{1, 2, 3, 4});
  ASSERT_EQ(f.matched, 3u);
  EXPECT_TRUE(f.in_memory);
  EXPECT_EQ(ReadFound(f), Pattern(kBig, 2));
}

TEST_F(PromptStatesTest, ADescriptorShorterThanAnnouncedIsRefusedAndLeavesNoFile) {
  auto s = Open();
  Blob b(Pattern(100, 1));
  const Status st = s->Publish(1000, kShape, std::vector<int32_t>{1}, b.fd, 200);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("fewer than"), std::string::npos) << st.message();
  EXPECT_EQ(s->size(), 0u);
  EXPECT_TRUE(Files().empty());
  EXPECT_FALSE(s->Publish(1000, kShape, std::vector<int32_t>{}, b.fd, 100).ok());
}

}  // namespace
}  // namespace waste::daemon
