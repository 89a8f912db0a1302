// Where expert records come from. The forward pass hints the experts a layer
// will want, acquires the records it needs now (blocking only on what is not
// there yet), computes straight from them, and releases them. Two
// implementations: ExpertCache (in this process, reading the container) and,
// with the daemon, a client of wasted's shared cache. Both hand out the same
// bytes, so results do not depend on which one is used.
#pragma once

#include <cstdint>
#include <span>

#include "base/hints.h"
#include "base/status.h"

namespace waste {

struct ExpertStats {
  uint64_t hits = 0;    // acquired while already in memory
  uint64_t misses = 0;  // acquired while missing or still loading
  uint64_t reads = 0;   // records read from disk
  uint64_t bytes_read = 0;
  double wait_seconds = 0;  // time Acquire spent blocked
  // Time with at least one read in flight (bytes_read / this is the read
  // path's throughput while it works, comparable with the disk's limit).
  double read_busy_seconds = 0;
};

class ExpertSource {
 public:
  virtual ~ExpertSource() = default;

  // Threads: every method may be called from any thread, concurrently with
  // the others; the forward pass's pool threads hint, acquire and release at
  // once. An Acquire that waits holds nothing that keeps the other threads
  // from their own calls.

  // Asks for records to be brought in; never blocks, may be ignored.
  virtual void Hint(int layer, std::span<const int> experts, HintKind kind) = 0;

  // The record of (layer, expert), checked, pinned until Release. Fails with
  // a message naming the layer and expert when the record cannot be had.
  virtual Result<const uint8_t*> Acquire(int layer, int expert) = 0;
  // Acquire if the record is in memory and can be pinned now, without
  // waiting or asking anything of anyone; else nullptr (pinned nothing).
  // Fails only on ids that do not exist.
  virtual Result<const uint8_t*> TryAcquire(int layer, int expert) = 0;
  virtual void Release(int layer, int expert) = 0;

  // Whether Acquire(layer, expert) would return without waiting: the record
  // is in memory and checked. Pins nothing, asks for nothing, never blocks;
  // the answer may be stale as soon as it is given, and false when the
  // source cannot tell cheaply. The forward pass uses it only to take the
  // records already here before those still being read.
  virtual bool Ready(int layer, int expert) {
    (void)layer;
    (void)expert;
    return false;
  }

  // How many records one process may hold pinned at once: while it holds
  // fewer, Acquire never fails for want of room (it waits instead). At
  // least 1. The forward pass acquires on at most this many threads, each
  // holding one record at a time.
  virtual uint64_t PinLimit() const { return 1; }

  virtual ExpertStats stats() const = 0;

  // Told after the forward pass has run `tokens` more tokens. The in-process
  // cache has no use for it; a daemon's client passes the running total on
  // for `wastectl clients`.
  virtual void TokensDone(int tokens) { (void)tokens; }
};

}  // namespace waste
