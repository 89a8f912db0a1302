// wasted's settings: what they are (DaemonOptions), and the one table of
// them (settings.cc) that says for each its name, its default, whether a
// reload applies it and its help. From that table come the flags, the
// settings file's names (CLI11's config file: `name = value`, flags win,
// unknown names refused), the settings as the log shows them, the reloadable
// set and the example settings file (ops/wasted.conf.example, which
// `wasted --print-config` writes and tests/settings_test.cc compares).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "daemon/rpc_server.h"   // AccessPolicy
#include "daemon/slot_cache.h"   // EvictionPolicy, kMaxQueuedPerClient
#include "engine/plan/plan.h"    // kPlannedClients

namespace waste::daemon {

struct DaemonOptions {
  std::string container;
  std::string socket;
  uint64_t budget = 0;  // 0: chosen from this machine (DaemonBudget, engine/plan)
  // Reads in flight. 2 measured best for decode on the 2-core development
  // machine (docs/log/2026-11-30-issues-3-to-5.md, "queue depth"): one more read lets the disk
  // overlap, and each read still finishes soon enough for the expert the
  // forward pass waits on; 8 and 32 share the bandwidth among reads that
  // are not needed yet and take CPU from the arithmetic.
  int io_depth = 2;
  bool verify_crc = false;
  bool huge_pages = true;  // ask for huge pages for the segments
  bool wire_trunk = true;  // mlock the trunk
  AccessPolicy access;
  // Clients attached at once; the planned overhead has a pin page for each
  // of kPlannedClients, so that is also the most it may be.
  uint32_t max_clients = static_cast<uint32_t>(kPlannedClients);
  double idle_exit_seconds = 0;  // stop after this long without clients; 0: never
  std::string state_dir;         // where use counts are saved; empty: not saved
  double save_interval_seconds = 300;  // use counts are also saved this often
  bool warm_start = true;              // warm the cache from saved use counts at start
  // Prompt states (daemon/prompt_states.h): the bytes of their files under
  // state_dir/states and of those in shared memory (both 0: none kept), and
  // whether a client finds states published by other uids (by default only
  // its own: one user must not be able to feed another's answers).
  uint64_t states_budget = 4ull << 30;
  uint64_t states_memory = 1ull << 30;
  bool states_shared = false;
  EvictionPolicy policy = EvictionPolicy::kLfru;
  // Logging is set up by main(); the daemon changes the level on reload and
  // reports a changed file as needing a restart.
  std::string log_level = "info";
  std::string log_file;  // empty: stderr in the foreground, else syslog
  // Per-client caps, so that one client asking for everything cannot starve
  // the others: pins held at once (0: the larger of top-k and a quarter of
  // the slots) and reads queued (hints beyond it are dropped). Not in the
  // table: no flag sets them.
  uint32_t max_pins_per_client = 0;
  uint32_t max_queued_per_client = kMaxQueuedPerClient;
  // HOST:PORT on loopback for an HTTP page of metrics (GET /metrics); empty: none.
  std::string metrics_listen;
  // A metrics connection still open this long after it was accepted is
  // closed. A scrape on loopback takes milliseconds (the request comes with
  // the connection, the page is made in microseconds); 5 s is a thousand
  // times that on a loaded machine, and is how long a peer that connects
  // and says nothing holds one of the page's 64 places.
  double metrics_timeout_seconds = 5;
};

// Everything the command line (and the file it names) sets: the daemon's
// settings and what main() does with them.
struct Settings {
  DaemonOptions daemon;
  bool check = false;
  bool foreground = false;
  // `wasted --print-config`, alone: write the example settings file and exit.
  bool print_config = false;
};

// Parses argv into `s`. Returns -1 when the program should go on, else the
// exit code (after --help or --version, 0; after a bad setting, 2, with the
// message printed unless `quiet`, in which case it is in `*error`).
int ParseSettings(int argc, char** argv, Settings* s, bool quiet, std::string* error);

// The daemon's settings as `name value` pairs, named and ordered as the
// flags of wasted --help: the start-up log line and the reload comparison.
std::vector<std::pair<std::string, std::string>> DescribeSettings(const DaemonOptions& o);

// Whether a reload applies setting `name` while the daemon runs; every
// other one takes effect at the next start.
bool ReloadableSetting(const std::string& name);
// Copies reloadable setting `name` from `next` into `live`; false, and
// nothing copied, for a setting a reload does not apply.
bool TakeReloaded(const std::string& name, const DaemonOptions& next, DaemonOptions* live);

// ops/wasted.conf.example: every setting commented out at its default, with
// what it does (wasted --print-config).
std::string ExampleSettingsFile();

// Seconds as the settings show them: "300", "0.5".
std::string SecondsText(double s);

}  // namespace waste::daemon
