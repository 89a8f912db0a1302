// Readers: the threads that do the daemon's disk reads. A record is read as
// pieces of at most kPieceBytes with O_DIRECT (where the filesystem allows
// it) straight into its slot; the threads take a demand read's pieces before
// any other's, so a demand that arrives while lookahead reads hold every
// thread waits for one piece, not a whole record, and then has every thread
// on it. When its last piece is in, the record is checked and the result
// handed back through a completion callback that must be safe to call from
// any thread (the daemon posts it to its event loop). The number of threads
// is the queue depth; the event loop hands out records as threads are free
// (demands also while other reads hold them all: Daemon::Pump), so whatever
// has not started stays in the cache's priority queues, where a demand read
// can still overtake it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "daemon/slot_cache.h"
#include "engine/format/container.h"
#include "engine/format/record_reader.h"

namespace waste::daemon {

struct ReadResult {
  ReadJob job;
  ReadError error = ReadError::kNone;
  uint32_t detail = 0;  // errno for kIo
  std::string message;  // for the log
};

class Readers {
 public:
  // `slot_memory(slot)` is where a slot's bytes go (record_bytes long, 4 KiB
  // aligned). `ct` must outlive the readers. `piece_bytes`: a multiple of
  // 4096 (tests cut small records into several pieces).
  Readers(const Container& ct, int threads, bool verify_crc,
          std::function<uint8_t*(uint32_t slot)> slot_memory, std::function<void(ReadResult)> done,
          uint64_t piece_bytes = kPieceBytes);
  ~Readers();  // finishes the pieces under way; a record not wholly read gets no result

  Status Open();  // opens the banks; call once before Submit
  // Queues the record's pieces; at most one read per slot at a time.
  void Submit(const ReadJob& job);
  int threads() const { return static_cast<int>(threads_.size()); }

  // Pieces of a record: a 2.7 MB VQ3R record (kimi-linear-48b) in two, so
  // that a demand waits for at most about a millisecond's piece. Smaller
  // pieces read slower on the disk here (1 MiB: 1.2-1.4 GB/s one at a time
  // against 1.6-1.8 for whole records), and with 1 MiB a 4G prefill lost a
  // fifth of its speed. A multiple of 4096 (O_DIRECT).
  static constexpr uint64_t kPieceBytes = uint64_t{3} << 19;  // 1.5 MiB

 private:
  struct Piece {
    uint32_t slot;
    uint64_t begin, end;  // byte range of the record
  };
  struct InFlight {
    ReadJob job;
    int left = 0;                   // pieces not yet read
    RecordReader::Outcome outcome;  // the first piece's failure, if any
  };
  void Loop();
  // Reads one piece; returns the record when it was its last.
  std::optional<InFlight> ReadPiece(const Piece& piece);

  const Container& ct_;
  const bool verify_crc_;
  const uint64_t piece_bytes_;
  std::function<uint8_t*(uint32_t)> slot_memory_;
  std::function<void(ReadResult)> done_;
  std::optional<RecordReader> banks_;  // set by Open

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Piece> demand_, other_;                  // pieces not started, by priority
  std::unordered_map<uint32_t, InFlight> in_flight_;  // by slot
  bool stop_ = false;
  std::vector<std::thread> threads_;
  int n_threads_;
};

}  // namespace waste::daemon
