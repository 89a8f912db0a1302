// wasted: the expert I/O daemon. Parses its settings (flags, or a file of
// the same names; flags win), sets up logging, optionally detaches, then
// hands over to Daemon (daemon/daemon.h). SIGHUP and `wastectl reload` parse
// the same command line again, re-reading the file it names.
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "daemon/daemon.h"
#include "engine/plan/plan.h"
#include "link/daemon_client.h"  // DefaultDaemonSocket
#include "waste/version.h"

namespace {

std::string DefaultStateDir() {
  if (geteuid() == 0) return "/var/lib/wasted";
  if (const char* s = std::getenv("XDG_STATE_HOME"); s && *s) return std::string(s) + "/wasted";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/state/wasted";
  return "";
}

// Everything the command line (and the file it names) sets.
struct Settings {
  waste::daemon::DaemonOptions daemon;
  bool check = false;
  bool foreground = false;
};

// Parses argv into `s`. Returns -1 when the daemon should go on, else the
// exit code (after --help or --version, 0; after a bad setting, 2, with the
// message printed unless `quiet`, in which case it is in `*error`).
int ParseSettings(int argc, char** argv, Settings* s, bool quiet, std::string* error) {
  CLI::App app{"wasted: owns a model's weights and shares an expert cache with its clients"};
  app.set_version_flag("--version", "wasted " WASTE_VERSION);
  CLI::Option* config = app.set_config("--config", "",
                 "Settings file: `name = value` lines named as the long flags (see "
                 "wasted.conf.example); flags given here win");
  // A misspelt setting in the file is an error, not silently ignored.
  app.allow_config_extras(CLI::config_extras_mode::error);
  waste::daemon::DaemonOptions& o = s->daemon;
  o.socket = waste::DefaultDaemonSocket();
  o.state_dir = DefaultStateDir();
  std::string budget_text, group;
  std::vector<uint32_t> uids;
  bool no_huge = false, no_wire = false, cold = false;
  std::string policy = "lfru";
  // Positional, and also `container = DIR` in the settings file.
  app.add_option("CONTAINER,--container", o.container,
                 "Container directory (the argument, or `container = DIR` in the settings file)")
      ->required();
  // The defaults of --socket and --state-dir depend on who runs it: said as
  // rules, not as this process's values (the man page is made from --help).
  app.add_option("--socket", o.socket,
                 "Unix socket to listen on (default: $XDG_RUNTIME_DIR/wasted.sock, else "
                 "/run/wasted/wasted.sock)");
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
                 "Where use counts are saved (at stop and periodically) and read at start "
                 "(default: /var/lib/wasted as root, else $XDG_STATE_HOME/wasted or "
                 "~/.local/state/wasted)");
  app.add_option("--save-interval", o.save_interval_seconds,
                 "Seconds between saves of the use counts (0: only at stop)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--cold", cold, "Do not warm the cache from the saved use counts at start");
  app.add_option("--policy", policy, "Eviction: lfru (fewest recent uses) or lru")
      ->check(CLI::IsMember({"lfru", "lru"}))
      ->capture_default_str();
  app.add_option("--metrics-listen", o.metrics_listen,
                 "Serve GET /metrics (Prometheus text) on this loopback HOST:PORT, e.g. "
                 "127.0.0.1:9464 (default: off)");
  app.add_flag("--no-huge-pages", no_huge, "Use 4 KiB pages for the segments");
  app.add_flag("--no-wire", no_wire, "Do not mlock the trunk");
  app.add_flag("--foreground", s->foreground,
               "Stay attached to the terminal and log to stderr (what systemd runs)");
  app.add_option("--log-file", o.log_file, "Log to this file (default: stderr in the foreground, "
                                           "else syslog, i.e. the journal)");
  app.add_option("--log-level", o.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_flag("--check", s->check, "Validate the container and the budget, then exit");
  auto fail = [&](const std::string& why) {
    if (quiet) {
      *error = why;
    } else {
      std::fprintf(stderr, "wasted: %s\n", why.c_str());
    }
    return 2;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    // CLI11 says "INI was not able to parse NAME" of a name it does not know.
    const std::string what = e.what(), unknown = "INI was not able to parse ";
    const std::string file = config->results().empty() ? "" : " " + config->results().back();
    if (what.rfind(unknown, 0) == 0)
      return fail("--config" + file + ": unknown setting \"" + what.substr(unknown.size()) +
                  "\" (settings are named as the long flags, see wasted --help)");
    return fail("--config" + file + ": " + what);
  } catch (const CLI::ParseError& e) {
    if (quiet) return fail(e.what());
    return app.exit(e);
  }
  for (uint32_t u : uids) o.access.uids.push_back(static_cast<uid_t>(u));
  if (!group.empty()) {
    if (group.find_first_not_of("0123456789") == std::string::npos) {
      o.access.group = static_cast<gid_t>(std::stoul(group));
    } else if (const ::group* g = getgrnam(group.c_str())) {
      o.access.group = g->gr_gid;
    } else {
      return fail("--allow-group: no group named " + group);
    }
  }
  o.huge_pages = !no_huge;
  o.warm_start = !cold;
  o.policy = policy == "lru" ? waste::daemon::Policy::kLru : waste::daemon::Policy::kLfru;
  o.wire_trunk = !no_wire;
  if (!budget_text.empty()) {
    auto b = waste::ParseSize(budget_text);
    if (!b.ok()) return fail("--budget: " + b.status().message());
    o.budget = *b;
  }
  return -1;
}

// Under systemd, stderr is a stream into the journal ($JOURNAL_STREAM names
// its device and inode): lines then start with their syslog priority
// ("<6>"), which the journal takes as the level, and carry no timestamp of
// their own (the journal adds one).
bool StderrIsJournal() {
  const char* js = std::getenv("JOURNAL_STREAM");
  struct stat st {};
  if (!js || fstat(STDERR_FILENO, &st) != 0) return false;
  unsigned long long dev = 0, ino = 0;
  return std::sscanf(js, "%llu:%llu", &dev, &ino) == 2 && dev == st.st_dev && ino == st.st_ino;
}

class SyslogPriorityFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& m, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    // trace, debug, info, warn, err, critical, off
    static constexpr const char* kPriority[] = {"<7>", "<7>", "<6>", "<4>", "<3>", "<2>", ""};
    const char* p = kPriority[m.level];
    dest.append(p, p + std::strlen(p));
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SyslogPriorityFlag>();
  }
};

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
  if (foreground && file.empty() && StderrIsJournal()) {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<SyslogPriorityFlag>('*').set_pattern("%*%l: %v");
    spdlog::set_formatter(std::move(f));
  } else {
    spdlog::set_pattern(foreground && file.empty() ? "%Y-%m-%d %H:%M:%S.%e wasted %l: %v"
                                                   : "%Y-%m-%d %H:%M:%S.%e [%P] %l: %v");
  }
  spdlog::flush_on(spdlog::level::info);
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  if (const int code = ParseSettings(argc, argv, &settings, false, nullptr); code >= 0) return code;
  waste::daemon::DaemonOptions& o = settings.daemon;
  const bool foreground = settings.foreground;
  SetupLogging(foreground || settings.check, o.log_file, o.log_level);

  if (settings.check) {
    auto ct = waste::Container::Open(o.container);
    if (!ct.ok()) {
      spdlog::error("{}: {}", o.container, ct.status().message());
      return 1;
    }
    const waste::daemon::DaemonBudget plan = waste::daemon::PlanDaemon(*ct, o.huge_pages);
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
  // SIGHUP and `wastectl reload` read the same command line again.
  (*d)->set_settings_source([argc, argv]() -> waste::Result<waste::daemon::DaemonOptions> {
    Settings again;
    std::string error;
    const int code = ParseSettings(argc, argv, &again, true, &error);
    if (code >= 0) return waste::Status::Error(error.empty() ? "the settings did not parse" : error);
    return again.daemon;
  });
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
