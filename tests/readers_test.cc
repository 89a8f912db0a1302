// wasted's reader threads (daemon/readers.h) on a real container: records
// read in many pieces at once come out as one whole read gives them, and a
// damaged record is reported, whichever piece it is in.
#include "daemon/readers.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/format/container.h"
#include "engine/synth/synth.h"

namespace waste::daemon {
namespace {

namespace fs = std::filesystem;

class ReadersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("waste_readers_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    auto spec = SynthPreset("tiny-kimi");
    ASSERT_TRUE(spec.ok()) << spec.status().message();
    auto report = WriteSynthetic(*spec, dir_.string(), /*overwrite=*/true, /*jobs=*/1, nullptr);
    ASSERT_TRUE(report.ok()) << report.status().message();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Reads every (layer 1, expert e) record into its own slot through
  // Readers cut into `piece` bytes, half of them as demands; returns the
  // results by slot.
  std::map<uint32_t, ReadResult> ReadAll(const Container& ct, uint64_t piece, int threads) {
    const int experts = ct.manifest().Bank(1)->experts;
    const size_t n = ct.record_bytes();
    slots_.clear();
    for (int e = 0; e < experts; ++e)
      slots_.emplace_back(static_cast<uint8_t*>(std::aligned_alloc(4096, n)), &std::free);
    std::mutex mu;
    std::condition_variable cv;
    std::map<uint32_t, ReadResult> results;
    {
      Readers readers(
          ct, threads, /*verify_crc=*/true, [&](uint32_t slot) { return slots_[slot].get(); },
          [&](ReadResult r) {
            std::lock_guard<std::mutex> lock(mu);
            results[r.job.slot] = std::move(r);
            cv.notify_all();
          },
          piece);
      EXPECT_TRUE(readers.Open().ok());
      for (int e = 0; e < experts; ++e)
        readers.Submit({static_cast<uint32_t>(e), ExpertKey(1, e),
                        e % 2 ? HintKind::kDemand : HintKind::kLookahead});
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return results.size() == static_cast<size_t>(experts); });
    }
    return results;
  }

  fs::path dir_;
  std::vector<std::unique_ptr<uint8_t, decltype(&std::free)>> slots_;
};

TEST_F(ReadersTest, PiecesMakeTheWholeRecord) {
  auto ct = Container::Open(dir_.string());
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  const size_t n = ct->record_bytes();
  ASSERT_GT(n, 4 * 4096u) << "records too small to cut into pieces";
  std::vector<uint8_t> want(n);
  for (uint64_t piece : {uint64_t{4096}, uint64_t{3 * 4096}, uint64_t{Readers::kPieceBytes}}) {
    const auto results = ReadAll(*ct, piece, 3);
    for (const auto& [slot, r] : results) {
      ASSERT_EQ(r.error, ReadError::kNone) << r.message;
      ASSERT_TRUE(ct->ReadRecord(1, static_cast<int>(slot), want.data(), true).ok());
      ASSERT_EQ(std::memcmp(slots_[slot].get(), want.data(), n), 0)
          << "piece " << piece << " expert " << slot;
    }
  }
}

TEST_F(ReadersTest, ADamagedPieceFailsItsRecordOnly) {
  std::size_t n;
  {
    auto ct = Container::Open(dir_.string());
    ASSERT_TRUE(ct.ok()) << ct.status().message();
    n = ct->record_bytes();
  }
  // One byte in the middle of expert 5's record, in neither its first nor
  // its last 4 KiB piece.
  {
    std::fstream f(dir_ / "experts-L1.bin", std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = static_cast<std::streamoff>(5 * n + n / 2);
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(at);
    f.write(&c, 1);
  }
  auto ct = Container::Open(dir_.string());
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  const auto results = ReadAll(*ct, 4096, 2);
  for (const auto& [slot, r] : results) {
    if (slot == 5) {
      EXPECT_EQ(r.error, ReadError::kBadRecord);
      EXPECT_NE(r.message.find("layer 1 expert 5"), std::string::npos) << r.message;
    } else {
      EXPECT_EQ(r.error, ReadError::kNone) << "expert " << slot << ": " << r.message;
    }
  }
}

}  // namespace
}  // namespace waste::daemon
