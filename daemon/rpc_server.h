// RpcServer: the daemon's Cap'n Proto side, on a thread of its own with a KJ
// event loop (Cap'n Proto passes file descriptors only through its own async
// I/O, so its loop cannot be libuv's). It accepts connections on the
// listening socket (at most max_clients + kSpareConnections at once), checks
// each peer's uid (SO_PEERCRED), answers attach (at most max_clients sessions),
// hint, status, stop, warm, drop and reload, and forwards everything that touches the cache to
// the event loop thread through LoopApi. It never reads or writes the cache
// itself. The prompt states (publish, find, list, drop) are its own: it
// calls PromptStates, whose worker writes what is published.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/hints.h"
#include "base/status.h"
#include "daemon/prompt_states.h"
#include "protocol/answers.h"
#include "protocol/status.h"
#include "shm/segment.h"
#include "wasted.capnp.h"

namespace waste::daemon {

// One attached client, as the event loop sees it.
struct ClientRecord {
  uint32_t id = 0;
  pid_t pid = 0;
  uid_t uid = 0;
  std::string command;
  bool command_from_proc = false;  // read from /proc, not taken from the client
  // Owns the pin page's memfd and the daemon's read-only mapping of it.
  struct PinPage {
    shm::Segment segment;
    shm::Mapping mapping;
  };
  std::shared_ptr<PinPage> pins;
};

// The command line of process `pid` from /proc/PID/cmdline, arguments joined
// by spaces and cut at 4096 bytes, made printable; empty when it cannot be
// read (the process is gone, or /proc hides it).
std::string ProcessCommandLine(pid_t pid);
// `text` with control characters (escapes, newlines) replaced by '?'.
std::string PrintableCommand(std::string text);

// What the RPC thread may ask of the event loop. Every method is safe to call
// from the RPC thread and returns at once; the work happens on the loop.
class LoopApi {
 public:
  virtual ~LoopApi() = default;
  virtual void AddClient(ClientRecord client) = 0;
  virtual void RemoveClient(uint32_t id) = 0;
  virtual void Hint(uint32_t id, int layer, std::vector<uint32_t> experts, HintKind kind) = 0;
  // The client's running total of tokens run (Session.progress).
  virtual void Progress(uint32_t id, uint64_t tokens) = 0;
  // `reply` runs on the event loop thread.
  virtual void GetStatus(std::function<void(DaemonStatus)> reply) = 0;
  virtual void RequestStop(std::string why) = 0;
  // `reply` runs on the event loop thread with how many reads were queued /
  // slots were emptied.
  virtual void Warm(std::function<void(uint32_t)> reply) = 0;
  virtual void Drop(int layer, std::function<void(uint32_t)> reply) = 0;
  // Re-reads the settings and applies what can change while running; `who`
  // asked (for the log). `reply` runs on the event loop thread.
  virtual void Reload(std::string who, std::function<void(Result<ReloadOutcome>)> reply) = 0;
};

// What attach hands out, fixed once the daemon has started: the model's
// description, and what only the daemon needs (which layers have experts,
// to check hints; the shared segments).
struct ServedModel : DaemonModel {
  std::vector<bool> has_bank;  // by layer
  // Read-only descriptors of the shared segments, owned by the daemon.
  int trunk_fd = -1, cache_fd = -1, table_fd = -1;
  uint64_t trunk_bytes = 0, cache_bytes = 0, table_bytes = 0;
};

struct AccessPolicy {
  std::vector<uid_t> uids;  // besides the daemon's own uid and root
  gid_t group = static_cast<gid_t>(-1);  // members may attach too; -1 for none
  bool Allows(uid_t uid) const;
};

// Connections open at once beyond max_clients: room for wastectl and for
// clients between connecting and attaching. A connection past that is
// closed as soon as it is accepted, so a peer opening connections in a loop
// cannot use up the daemon's descriptors.
constexpr uint32_t kSpareConnections = 64;

// Raises this process's soft limit on open descriptors towards what
// `max_clients` need (each client a connection and a pin page's memfd, the
// spare connections, 256 for the rest: the container's files, readers,
// libuv), at most to the hard limit; the soft default of 1024 would run out
// at about 480 clients. Logs a warning saying how many clients fit when
// the hard limit is lower.
void RaiseDescriptorLimit(uint32_t max_clients);

class RpcServer {
 public:
  // Serves `listen_fd` (a bound, listening Unix socket; owned by the caller)
  // on a new thread until Stop(). At most `max_clients` sessions at once:
  // each costs a pin page (a memfd and a mapping) and a place in the
  // daemon's planned overhead; an attach beyond them is refused with a
  // message, and the attached clients are served as before. `states` (null:
  // none kept) is used on the server's thread alone while it runs.
  static Result<std::unique_ptr<RpcServer>> Start(int listen_fd, const ServedModel& model,
                                                  const AccessPolicy& access, uint32_t max_clients,
                                                  LoopApi* loop, PromptStates* states = nullptr);
  ~RpcServer();  // calls Stop()

  // Closes every connection and joins the thread. Clients see their
  // connection end.
  void Stop();

  // Replaces who may call (a reload); attached clients keep their sessions,
  // and the new policy decides every call from now on. Any thread.
  void SetAccess(const AccessPolicy& access);

  struct Impl;  // the state the server objects share (rpc_server.cc)

 private:
  RpcServer() = default;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

}  // namespace waste::daemon
