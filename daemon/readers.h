// Readers: the threads that do the daemon's disk reads. Each takes a job,
// reads one whole record with O_DIRECT (where the filesystem allows it)
// straight into its slot, checks it, and hands the result back through a
// completion callback that must be safe to call from any thread (the daemon
// posts it to its event loop). The number of threads is the queue depth:
// the event loop never hands out more jobs than there are idle readers, so
// everything not yet started stays in the cache's priority queues, where a
// demand read can still overtake it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "daemon/slot_cache.h"
#include "engine/format/container.h"
#include "engine/format/record_reader.h"

namespace waste::daemon {

struct ReadResult {
  ReadJob job;
  ReadError error = ReadError::kNone;
  uint32_t detail = 0;   // errno for kIo
  std::string message;   // for the log
};

class Readers {
 public:
  // `slot_memory(slot)` is where a slot's bytes go (record_bytes long, 4 KiB
  // aligned). `ct` must outlive the readers.
  Readers(const Container& ct, int threads, bool verify_crc,
          std::function<uint8_t*(uint32_t slot)> slot_memory,
          std::function<void(ReadResult)> done);
  ~Readers();  // finishes the reads under way, drops the rest

  Status Open();  // opens the banks; call once before Submit
  void Submit(const ReadJob& job);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  ReadResult Read(const ReadJob& job);
  void Loop();

  const Container& ct_;
  const bool verify_crc_;
  std::function<uint8_t*(uint32_t)> slot_memory_;
  std::function<void(ReadResult)> done_;
  std::optional<RecordReader> banks_;  // set by Open

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ReadJob> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
  int n_threads_;
};

}  // namespace waste::daemon
