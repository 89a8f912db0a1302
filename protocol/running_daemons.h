// The wasted processes running on this machine, as /proc shows them to
// anyone: a new wasted sizes its default budget against what the others
// already hold (WARP's issue #31: two engines that each took three quarters
// of a machine swapped it into a power cycle), and `wastectl daemons` lists
// them. Only the world-readable files are read (comm, cmdline, status), so
// it works across users and inside the systemd unit's sandbox; a /proc
// mounted with hidepid hides other users' daemons, and a daemon that is
// still populating its segments holds less than it will.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace waste {

struct RunningDaemon {
  pid_t pid = 0;
  uint32_t uid = 0;             // real uid
  uint64_t resident_bytes = 0;  // VmRSS + HugetlbPages: its trunk, cache and heap as they are now
  std::vector<std::string> args;  // its command line after the program name
  std::string socket;             // --socket's value when the command line has one, else ""
};

// Every process whose comm is "wasted", but this process and its parent (a
// detaching wasted's parent waits for its child), in pid order. `proc` is
// where procfs is mounted.
std::vector<RunningDaemon> RunningDaemons(const std::string& proc = "/proc");

// The pieces, for tests: the resident bytes and real uid from the text of
// /proc/PID/status (nullopt if either is missing or malformed), and a
// daemon's arguments and --socket from the bytes of /proc/PID/cmdline.
struct ProcStatus {
  uint32_t uid = 0;
  uint64_t resident_bytes = 0;
};
std::optional<ProcStatus> ParseProcStatus(std::string_view text);
void ParseCmdline(std::string_view bytes, RunningDaemon* d);

// "pid 812 (uid 0, 41.20 GiB resident): wasted /models/k2 --budget 40G", for
// log lines and refusals; the command line is cut at 160 bytes.
std::string Describe(const RunningDaemon& d);

}  // namespace waste
