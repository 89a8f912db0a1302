// wasted: the expert I/O daemon. Parses its settings (flags, or a file of
// the same names; flags win), sets up logging, optionally detaches, then
// hands over to Daemon (daemon/daemon.h).
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "daemon/daemon.h"
#include "engine/plan/plan.h"
#include "protocol/client.h"  // DefaultDaemonSocket
#include "waste/version.h"

namespace {

std::string DefaultStateDir() {
  if (geteuid() == 0) return "/var/lib/wasted";
  if (const char* s = std::getenv("XDG_STATE_HOME"); s && *s) return std::string(s) + "/wasted";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/state/wasted";
  return "";
}

void SetupLogging(bool foreground, const std::string& file, const std::string& level) {
  std::shared_ptr<spdlog::logger> log;
  if (!file.empty())
    log = spdlog::basic_logger_mt("wasted", file);
  else if (foreground)
    log = spdlog::stderr_color_mt("wasted");
  else
    log = spdlog::syslog_logger_mt("wasted", "wasted", LOG_PID, LOG_DAEMON);
  spdlog::set_default_logger(log);
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_pattern(foreground && file.empty() ? "%Y-%m-%d %H:%M:%S.%e wasted %l: %v"
                                                 : "%Y-%m-%d %H:%M:%S.%e [%P] %l: %v");
  spdlog::flush_on(spdlog::level::info);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wasted: owns a model's weights and shares an expert cache with its clients"};
  app.set_version_flag("--version", "wasted " WASTE_VERSION);
  app.set_config("--config", "", "Settings file: `key = value` lines named as the long flags");
  waste::daemon::DaemonOptions o;
  o.socket = waste::DefaultDaemonSocket();
  o.state_dir = DefaultStateDir();
  std::string budget_text, level = "info", log_file, group;
  std::vector<uint32_t> uids;
  bool check = false, foreground = false, no_huge = false, no_wire = false;
  app.add_option("CONTAINER", o.container, "Container directory")->required();
  app.add_option("--socket", o.socket, "Unix socket to listen on")->capture_default_str();
  app.add_option("--budget", budget_text,
                 "Memory for trunk + cache + daemon, e.g. 4G (default: from this machine)");
  app.add_option("--io-depth", o.io_depth, "Expert reads in flight")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_flag("--verify-crc", o.verify_crc, "Check every record's crc32 as it is read");
  app.add_option("--allow-uid", uids, "A uid that may attach besides root and the daemon's own");
  app.add_option("--allow-group", group, "A group whose members may attach (socket becomes 0660)");
  app.add_option("--idle-exit", o.idle_exit_seconds,
                 "Exit after this many seconds without clients (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--state-dir", o.state_dir,
                 "Where use counts are saved (at stop and periodically) and read at start")
      ->capture_default_str();
  app.add_option("--save-interval", o.save_interval_seconds,
                 "Seconds between saves of the use counts (0: only at stop)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bool cold = false;
  app.add_flag("--cold", cold, "Do not warm the cache from the saved use counts at start");
  std::string policy = "lfru";
  app.add_option("--policy", policy, "Eviction: lfru (fewest recent uses) or lru")
      ->check(CLI::IsMember({"lfru", "lru"}))
      ->capture_default_str();
  app.add_flag("--no-huge-pages", no_huge, "Use 4 KiB pages for the segments");
  app.add_flag("--no-wire", no_wire, "Do not mlock the trunk");
  app.add_flag("--foreground", foreground, "Stay attached to the terminal and log to stderr");
  app.add_option("--log-file", log_file, "Log to this file (default: stderr in the foreground, "
                                         "else syslog, i.e. the journal)");
  app.add_option("--log-level", level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_flag("--check", check, "Validate the container and the budget, then exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (uint32_t u : uids) o.access.uids.push_back(static_cast<uid_t>(u));
  if (!group.empty()) {
    if (group.find_first_not_of("0123456789") == std::string::npos) {
      o.access.group = static_cast<gid_t>(std::stoul(group));
    } else if (const ::group* g = getgrnam(group.c_str())) {
      o.access.group = g->gr_gid;
    } else {
      std::fprintf(stderr, "wasted: --allow-group: no group named %s\n", group.c_str());
      return 2;
    }
  }
  o.huge_pages = !no_huge;
  o.warm_start = !cold;
  o.policy = policy == "lru" ? waste::daemon::Policy::kLru : waste::daemon::Policy::kLfru;
  o.wire_trunk = !no_wire;
  if (!budget_text.empty()) {
    auto b = waste::ParseSize(budget_text);
    if (!b.ok()) {
      std::fprintf(stderr, "wasted: --budget: %s\n", b.status().message().c_str());
      return 2;
    }
    o.budget = *b;
  }
  SetupLogging(foreground || check, log_file, level);

  if (check) {
    auto ct = waste::Container::Open(o.container);
    if (!ct.ok()) {
      spdlog::error("{}: {}", o.container, ct.status().message());
      return 1;
    }
    const waste::daemon::DaemonBudget plan = waste::daemon::PlanDaemon(*ct);
    auto b = waste::daemon::ChooseBudget(plan, o.budget, waste::ProcessMemoryLimit());
    if (!b.ok()) {
      spdlog::error("{}", b.status().message());
      return 1;
    }
    spdlog::info("check passed: budget {} (floor {}); would listen on {}", waste::FormatSize(*b),
                 waste::FormatSize(plan.floor()), o.socket);
    return 0;
  }

  // Detaching: the parent returns only once the child listens (exit 0) or
  // has failed (exit 1), so `wasted C && waste run C` works.
  int ready_pipe[2] = {-1, -1};
  if (!foreground) {
    if (pipe(ready_pipe) != 0) {
      std::perror("wasted: pipe");
      return 1;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("wasted: fork");
      return 1;
    }
    if (pid > 0) {
      close(ready_pipe[1]);
      std::string said;  // "\1" when ready, else why not
      char buf[4096];
      for (ssize_t n; (n = read(ready_pipe[0], buf, sizeof buf)) > 0;) said.append(buf, n);
      if (said == "\1") return 0;
      std::fprintf(stderr, "wasted: %s\n", said.empty() ? "failed to start" : said.c_str());
      return 1;
    }
    close(ready_pipe[0]);
    setsid();
  }

  auto d = waste::daemon::Daemon::Start(o);
  if (!d.ok()) {
    spdlog::error("{}", d.status().message());
    if (!foreground && write(ready_pipe[1], d.status().message().data(),
                             d.status().message().size()) < 0)
      return 1;
    return 1;
  }
  if (!foreground) {
    const char ok = 1;
    if (write(ready_pipe[1], &ok, 1) != 1) return 1;
    close(ready_pipe[1]);
    if (FILE* n = std::freopen("/dev/null", "r", stdin)) (void)n;
    if (FILE* n = std::freopen("/dev/null", "w", stdout)) (void)n;
    if (FILE* n = std::freopen("/dev/null", "w", stderr)) (void)n;
  }
  return (*d)->Run();
}
