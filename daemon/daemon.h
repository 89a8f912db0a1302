// Daemon: wasted's start-up, event loop and shut-down.
//
// Start() does everything that can fail, in order, logging what each step did
// and how long it took: open and validate the container, choose the budget,
// pack the trunk into a memfd, seal and wire it, create the cache and slot
// table segments, bind the socket. Run() then turns the libuv event loop on
// this thread, which owns the cache (SlotCache) and alone touches it: hints
// and status requests arrive from the RPC thread through a mailbox, read
// completions from the reader threads the same way. SIGTERM or SIGINT stops
// it cleanly (clients are told through the slot table and their connections
// close, the use counts are saved); a second signal ends it at once. SIGHUP
// or the reload call re-reads the settings (set_settings_source) and applies
// those that can change while it runs. Under systemd (Type=notify) it tells
// the service manager when it is ready, reloading and stopping
// (daemon/notify.h).
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/prompt_states.h"
#include "daemon/readers.h"
#include "daemon/rpc_server.h"
#include "daemon/settings.h"
#include "daemon/slot_cache.h"
#include "engine/format/container.h"
#include "http/page_server.h"
#include "shm/segment.h"
#include "shm/table.h"

namespace waste::daemon {

using Clock = std::chrono::steady_clock;
// Milliseconds since `t`, for the logs and the counters.
inline double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Re-reads the settings from where they came from (main(): the command line
// again, and the file it names).
using SettingsSource = std::function<Result<DaemonOptions>()>;

class Daemon final : public LoopApi {
 public:
  static Result<std::unique_ptr<Daemon>> Start(const DaemonOptions& opt);
  ~Daemon() override;

  // Serves until stopped; the process's exit code.
  int Run();

  // LoopApi: called from the RPC thread.
  void AddClient(ClientRecord client) override;
  void RemoveClient(uint32_t id) override;
  void Hint(uint32_t id, int layer, std::vector<uint32_t> experts, HintKind kind) override;
  void Progress(uint32_t id, uint64_t tokens) override;
  void GetStatus(std::function<void(DaemonStatus)> reply) override;
  void RequestStop(std::string why) override;
  void Warm(std::function<void(uint32_t)> reply) override;
  void Drop(int layer, std::function<void(uint32_t)> reply) override;
  void Reload(std::string who, std::function<void(Result<ReloadOutcome>)> reply) override;

  // Where SIGHUP and the reload call get the settings from; without one a
  // reload is refused.
  void set_settings_source(SettingsSource source) { settings_source_ = std::move(source); }

 private:
  struct LiveClient {
    ClientRecord record;
    std::chrono::steady_clock::time_point since;
    bool cap_logged = false;  // its hints went over the cap on queued reads
    uint64_t tokens = 0;  // as the client last reported
  };

  explicit Daemon(const DaemonOptions& opt) : opt_(opt) {}
  // daemon.cc: start-up and the socket.
  Status Setup();
  Status Listen();
  // segments.cc: the trunk, cache and slot table segments.
  Status BuildTrunk();
  Status BuildCache();

  // loop.cc: the mailbox, reads, timers and stop.
  // Runs `fn` on the loop thread soon; dropped once the loop has stopped.
  void Post(std::function<void()> fn);
  void DrainMailbox();
  void Pump();  // starts as many reads as there are idle readers
  void Stop(const std::string& why);
  void StartTimers();  // idle exit and periodic saves, from opt_
  // uses.cc: the saved use counts.
  std::string UsesPath() const;
  // The prompt states under state_dir/states/<fingerprint>, when kept.
  Status OpenStates();
  void SaveUses() const;
  void LoadUses();  // adds saved use counts and queues the warm-up
  // The status, gathered on the loop thread (daemon/status.cc).
  DaemonStatus Snapshot() const;
  // reload.cc: reads the settings again and applies what can change now; logs one line.
  Result<ReloadOutcome> ReloadSettings(const std::string& who);
  Status ApplySocketAccess(const AccessPolicy& access);
  // notify.cc: what the service manager is told.
  void NotifyManager(const std::string& state) const;
  std::string ManagerStatus() const;  // the STATUS= line systemd shows
  std::string MetricsPage() const;  // what `wastectl metrics` prints, from Snapshot() (status.cc)

  DaemonOptions opt_;
  std::chrono::steady_clock::time_point started_;
  std::unique_ptr<Container> ct_;
  uint64_t budget_ = 0, overhead_ = 0;
  std::string fingerprint_;

  shm::Segment trunk_seg_, cache_seg_, table_seg_;
  shm::Mapping trunk_map_, cache_map_, table_map_;
  bool trunk_wired_ = false;
  int trunk_ro_ = -1, cache_ro_ = -1, table_ro_ = -1;
  ServedModel served_;
  std::unique_ptr<SlotCache> cache_;
  std::unique_ptr<PromptStates> states_;  // null: none kept; the RPC thread's once it runs
  int listen_fd_ = -1;
  bool socket_bound_ = false;

  uv_loop_t loop_{};
  uv_async_t mail_async_{};
  uv_signal_t sigterm_{}, sigint_{}, sighup_{};
  uv_timer_t idle_timer_{}, save_timer_{};
  std::mutex mail_mu_;
  std::vector<std::function<void()>> mail_;
  bool mail_closed_ = false;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point last_client_;
  // Time with at least one read in flight: bytes read / this is the read
  // path's throughput, comparable with the disk's own limit.
  std::chrono::steady_clock::time_point busy_since_;
  double busy_seconds_ = 0;

  std::map<uint32_t, LiveClient> clients_;
  std::unique_ptr<Readers> readers_;
  std::unique_ptr<RpcServer> rpc_;
  SettingsSource settings_source_;
  std::unique_ptr<http::PageServer> metrics_;
};

}  // namespace waste::daemon
