// A client of wasted: connect to the daemon's socket, attach (the model's
// description and the four shared-memory segments as file descriptors), send
// hints and progress without waiting, read the status, stop the daemon. It
// speaks protocol/wasted.capnp over Cap'n Proto RPC with file descriptors
// passed alongside messages, and links no engine.
//
// Threads: a DaemonClient runs its KJ event loop on a thread of its own (the
// link thread), started by Connect and joined by the destructor, and every
// public method may be called from any thread at once. SendHint and
// SendProgress queue their message for the link thread and return without
// blocking; Attach, GetStatus, Stop, Warm, Drop, Reload and the prompt
// states' calls block their caller
// until the answer is in. The link thread notices a lost connection by itself
// and records it for any thread to read (Poll, connected). Several clients may
// live in one process, each with its own thread. Nothing here throws; every
// failure is a Status whose message says what went wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/hints.h"
#include "base/status.h"
#include "protocol/answers.h"
#include "protocol/socket_path.h"
#include "protocol/status.h"
#include "wasted.capnp.h"

namespace waste {

// One shared-memory segment: a file descriptor (close-on-exec) to mmap, and
// its size as the daemon declared it. The Attachment holding it owns the fd.
struct SegmentFd {
  int fd = -1;
  uint64_t bytes = 0;
};

// The answer to an attach. Owns its four fds and closes them on destruction;
// move-only. A moved-from Attachment holds fds of -1. The fds stay valid after
// the connection ends (mappings made from them too), but the daemon releases
// the client's pins and pin page when it sees the connection end.
struct Attachment {
  DaemonModel model;
  SegmentFd trunk;  // the packed trunk, sealed, read-only
  SegmentFd cache;  // slots of one record each, read-only
  SegmentFd table;  // the slot table (shm/table.h), read-only
  SegmentFd pins;   // this client's pin page, writable

  Attachment() = default;
  Attachment(Attachment&& other) noexcept;
  Attachment& operator=(Attachment&& other) noexcept;
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  ~Attachment();

  // Closes the four fds now (what the destructor does).
  void Close();
};


// Why Connect failed, for callers that act on it (wastectl's exit codes).
enum class ConnectFailure {
  kNone,              // connected
  kNotListening,      // nothing listens at the path (ENOENT, ECONNREFUSED)
  kPermissionDenied,  // the kernel refused us the socket (EACCES, EPERM)
  kOther,             // anything else; the message names it
};

// The answer to FindState: how many of the tokens the state found has seen
// (0: none found) and its bytes, in a file the daemon opened read-only or
// (the daemon's memory tier) a sealed memfd: either way unchangeable.
// Owns the descriptor; move-only.
struct FoundState {
  uint32_t matched = 0;
  int fd = -1;
  uint64_t offset = 0, bytes = 0;  // the state's bytes within the file

  FoundState() = default;
  FoundState(FoundState&& other) noexcept;
  FoundState& operator=(FoundState&& other) noexcept;
  FoundState(const FoundState&) = delete;
  FoundState& operator=(const FoundState&) = delete;
  ~FoundState();

  // The state's bytes, read whole (an error when the file is shorter than
  // the daemon said). Untrusted: the caller checks their own format.
  Result<std::vector<uint8_t>> Read() const;
};

// The prompt states a daemon keeps, as the caller may see them.
struct StatesList {
  std::vector<PromptStateInfo> states;  // most recently used first
  uint64_t budget = 0;                  // of the disk tier
  uint64_t memory_budget = 0;           // of the memory tier; both 0: the daemon keeps none
};

class DaemonClient {
 public:
  // Connects to wasted's socket at `path`. The message of a failure names the
  // path and the reason, e.g. "cannot connect to PATH: Permission denied (the
  // socket is 0600; are you the daemon's user?)". When `failure` is given it
  // is set to the kind of failure (kNone on success).
  static Result<std::unique_ptr<DaemonClient>> Connect(const std::string& path,
                                                       ConnectFailure* failure = nullptr);
  // Sends what is still queued, closes the connection (the daemon then ends
  // the session) and joins the link thread. No other call may be under way.
  ~DaemonClient();
  DaemonClient(const DaemonClient&) = delete;
  DaemonClient& operator=(const DaemonClient&) = delete;

  // Attaches as a compute client whose command line is `command_line`. On
  // success the session lives as long as this DaemonClient (a second Attach
  // replaces it). A refusal (e.g. a version mismatch) is the daemon's message.
  // `version` is for tests of the refusal; clients leave it alone.
  Result<Attachment> Attach(const std::string& command_line,
                            uint32_t version = proto::PROTOCOL_VERSION);

  // Queues a hint for the link thread and returns without waiting for its
  // answer (nor for the link thread); hints are sent in the order they were
  // queued. The daemon refuses out-of-range ids with a message and keeps the
  // rest of the hint; such a refusal is kept in last_refusal() and does not
  // fail the client. Negative ids are refused here the same way, and so is a
  // hint before Attach. After the connection is lost hints are dropped
  // quietly (Poll reports the loss).
  void SendHint(int layer, std::span<const int> experts, HintKind kind);

  // Tells the daemon the running total of tokens this client has run; queued
  // like a hint. Nothing before Attach or after a loss.
  void SendProgress(uint64_t tokens);

  // The connection's state, read without blocking: Ok while it lives; once
  // the link thread has seen it end, "wasted went away: <reason>", and the
  // same ever after.
  Status Poll() const;

  // The daemon's state. Fails with the daemon's message or the loss.
  Result<DaemonStatus> GetStatus();

  // Asks the daemon to stop as SIGTERM would. The connection closing before
  // the answer arrives counts as success: the daemon is going away as asked.
  Status Stop();

  // Queues warm-up reads of the most used records into free slots; how many.
  Result<uint32_t> Warm();
  // Empties the unpinned slots of `layer`, or of every layer with -1; how many.
  Result<uint32_t> Drop(int layer);

  // Re-reads the daemon's settings as SIGHUP does; what it applied and what
  // needs a restart. A settings file that does not parse is the daemon's
  // refusal message (its running settings are kept).
  Result<ReloadOutcome> Reload();

  // Prompt states (protocol/wasted.capnp, daemon/prompt_states.h). Publishes
  // the first `bytes` bytes of `fd` (a memfd the caller keeps open until
  // this returns) as the state after `tokens`, under the caller's
  // `fingerprint` of the model's shape; the daemon's refusal (no states
  // kept, too large for their budget, a full disk) is the error.
  Status PublishState(std::span<const int32_t> tokens, uint64_t fingerprint, int fd,
                      uint64_t bytes);
  // The longest state of this uid and `fingerprint` whose tokens begin `tokens`.
  Result<FoundState> FindState(std::span<const int32_t> tokens, uint64_t fingerprint);
  // The states this uid may see, and their budget.
  Result<StatesList> ListStates();
  // Removes the states this uid may see; how many.
  Result<uint32_t> DropStates();

  // False once the link thread has seen the connection end.
  bool connected() const;

  // The message of the latest refused hint; empty when none was refused.
  std::string last_refusal() const;

 private:
  struct Impl;
  explicit DaemonClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace waste
