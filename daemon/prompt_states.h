// PromptStates: the prompt states wasted keeps for its clients, found again
// by any client of the publisher's uid (of any uid when `shared`), in two
// tiers: a memory tier of sealed memfds (F_SEAL_WRITE, _SHRINK, _GROW, _SEAL:
// no client can change what another maps) under `memory` bytes, and a disk
// tier under the state directory, one file a state, under `budget` bytes,
// kept across restarts. A state is published into memory when it fits
// there; the least recently used in memory go to disk (written then) or,
// when the disk cannot take them, are dropped; SpillToDisk writes the whole
// memory tier to disk at stop. A state lives in one tier at a time.
//
// A state is opaque bytes to the daemon (a client's serialized session; the
// daemon links no engine) filed under the tokens it has seen and the
// client's fingerprint of the model's shape. The daemon checks what it can:
// the file's header (magic, version, the container it belongs to) and its
// size against the header when the directory is scanned at start (headers
// only: a restart over gigabytes of states stays quick), and a crc32 over
// the whole file before Find first hands it out, remembered until the file
// changes (its inode, size, mtime or ctime). A file that fails is removed
// and logged, and Find tries the next longest; the client checks the
// state's own format when it loads it. Files are written to a temporary
// name and renamed, so a publish cut short (a kill, a full disk) leaves no
// half state; temporaries left by a killed daemon are removed at start.
//
// Files: `<dir>/<hash of uid, fingerprint and tokens>.state`, laid out as
// daemon/state_file.h says. The file's mtime is its last use, so
// least-recently-used eviction under the byte budget carries across
// restarts.
//
// Threads: the RPC thread calls Publish, Find, List and Drop; a worker of
// the class's own does a publish's copy and write, and the memory tier's
// writes to disk, so Publish answers as soon as the state is queued. A Find
// that a state still queued or being written would serve better than those
// kept waits for it (on the calling thread: a copy at memory or disk speed,
// where the client would prefill instead). One mutex guards the index and
// the queue; the worker holds it only to change them, never while it
// copies.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "daemon/state_file.h"
#include "protocol/answers.h"

namespace waste::daemon {

struct PromptStatesOptions {
  std::string dir;    // this container's states: state_dir/states/<container fingerprint>
  std::string model;  // the container's fingerprint (16 hex digits), in every header
  uint64_t budget = 0;  // bytes of state files kept; the least recently used go past it
  bool shared = false;  // any uid finds any state, not only its own
  uint64_t memory = 0;  // bytes of states in memory; the least recently used go to disk past it
};

class PromptStates {
 public:
  // Creates the directory (0700) if need be and scans it: every state file's
  // header and size checked (not its checksum: Find's), a damaged or foreign
  // one removed and logged, then the least recently used removed until the
  // rest fit the budget.
  static Result<std::unique_ptr<PromptStates>> Open(const PromptStatesOptions& o);
  ~PromptStates();  // the memory tier goes with it (SpillToDisk first to keep it)

  // Queues the first `bytes` bytes of `fd` (duplicated: the caller may close
  // it) to be filed as the state after `tokens` for `uid` and `fingerprint`,
  // in memory when it fits the memory tier's budget, else on disk, evicting
  // the least recently used states to fit. The same tokens, uid and
  // fingerprint published again replace the state. Refused at once: bad
  // sizes, a descriptor shorter than announced, kMaxQueued publishes waiting;
  // a failure while writing (a descriptor the client shrinks meanwhile, a
  // full disk) is logged, and the state is not kept.
  Status Publish(uid_t uid, uint64_t fingerprint, std::span<const int32_t> tokens, int fd,
                 uint64_t bytes);
  // Waits until every queued publish is written (or failed).
  void Drain();
  static constexpr size_t kMaxQueued = 8;

  struct Found {
    uint32_t matched = 0;  // 0: none found (fd is -1)
    int fd = -1;  // the state's file (read-only) or sealed memfd; the caller closes it
    uint64_t offset = 0, bytes = 0;  // the payload within it
    bool in_memory = false;
  };
  // The longest state `uid` may see, of `fingerprint`, whose tokens begin
  // `tokens` (of two as long, the one in memory); it becomes the most
  // recently used. A file whose checksum was
  // not checked since it last changed is checked first; one that fails, or
  // has gone or changed size under the daemon, is removed, and the next
  // longest is tried.
  Found Find(uid_t uid, uint64_t fingerprint, std::span<const int32_t> tokens);

  // The states `uid` may see (all of them for root and the daemon's uid),
  // most recently used first.
  std::vector<PromptStateInfo> List(uid_t uid) const;
  // Removes the states `uid` may see (as List), in both tiers; how many.
  uint32_t Drop(uid_t uid);
  // Drains the queue and writes every state in memory to disk, the least
  // recently used first (so the disk's budget keeps the most recent); those
  // it cannot take are dropped. At stop: memory does not outlive the daemon.
  void SpillToDisk();

  uint64_t bytes() const;  // of every file kept
  uint64_t budget() const { return o_.budget; }
  uint64_t memory_bytes() const;  // of every state in memory
  uint64_t memory_budget() const { return o_.memory; }
  size_t size() const;
  uint64_t checksums() const;  // whole files read to check their crc

 private:
  struct Entry {
    uid_t uid = 0;
    uint64_t fingerprint = 0;
    std::vector<int32_t> tokens;
    uint64_t file_bytes = 0, payload_offset = 0, payload_bytes = 0;
    double created = 0;   // unix seconds, from the header
    double last_use = 0;  // unix seconds, the file's mtime
    int memfd = -1;       // in the memory tier: its sealed memfd; -1: on disk
    uint64_t serial = 0;  // which publish: a spill finds its entry replaced or gone
    // The file as its checksum was last found good (all 0: never checked).
    struct stat checked {};
  };
  // A publish the worker has yet to write.
  struct Job {
    uid_t uid = 0;
    uint64_t fingerprint = 0;
    std::vector<int32_t> tokens;
    int fd = -1;  // the caller's, duplicated; the worker closes it
    uint64_t bytes = 0;
  };
  explicit PromptStates(const PromptStatesOptions& o) : o_(o) {}
  PromptStates(const PromptStates&) = delete;
  PromptStates& operator=(const PromptStates&) = delete;
  std::string PathOf(const std::string& name) const { return o_.dir + "/" + name; }
  bool Sees(uid_t who, uid_t owner) const;  // the uid rule (`shared`)
  // Whether a state of `uid`, `fingerprint` and tokens `have` may serve
  // `who`'s `query` of `want`: seen by it, and a prefix of it.
  bool Serves(uid_t uid, uint64_t fingerprint, const std::vector<int32_t>& have, uid_t who,
              uint64_t want, std::span<const int32_t> query) const;
  void Remove(std::string name, const std::string& why);  // a copy: callers pass index keys
  // Removes the least recently used files until `incoming` more bytes fit.
  void Evict(uint64_t incoming);
  // The worker: Keep writes one job, then files it under the lock.
  void Work();
  void Keep(const Job& job);
  // Writes the least recently used in memory to disk (or drops them when the
  // disk cannot take them) until at most `limit` bytes are in memory; unlocks
  // `lock` while it copies. The worker's, or the only thread left.
  void SpillPast(uint64_t limit, std::unique_lock<std::mutex>& lock);
  // Writes a temporary file by `fill` (given a descriptor open for writing),
  // its mtime `mtime`; its path. No lock needed.
  Result<std::string> WriteTemporary(double mtime, const std::function<Status(int)>& fill);
  // Renames temporary `tmp` to the state `name`, the index's bytes counted;
  // how it is then. Under the lock.
  Result<struct stat> Install(const std::string& tmp, const std::string& name);
  const PromptStatesOptions o_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> index_;  // by file name
  uint64_t bytes_ = 0;         // of the files in index_
  uint64_t memory_bytes_ = 0;  // of the memfds in index_
  uint64_t checksums_ = 0;
  uint64_t serial_ = 0;
  std::deque<Job> queue_;  // its head is the one being written
  bool stop_ = false;
  std::condition_variable work_;  // a job was queued, or stop_
  std::condition_variable done_;  // a job was written (or failed), or the worker stopped
  std::atomic<uint64_t> next_tmp_{0};
  std::thread worker_;  // last: started once the rest is built
};

}  // namespace waste::daemon
