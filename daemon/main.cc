// wasted: the expert I/O daemon. Parses its settings (daemon/settings.h:
// flags, or a file of the same names; flags win), sets up logging, checks
// (--check) or optionally detaches, then hands over to Daemon
// (daemon/daemon.h). SIGHUP and `wastectl reload` parse the same command line
// again, re-reading the file it names.
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

#include "daemon/budget.h"
#include "daemon/daemon.h"

namespace {

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
  using waste::daemon::Settings;
  Settings settings;
  if (const int code = waste::daemon::ParseSettings(argc, argv, &settings, false, nullptr);
      code >= 0)
    return code;
  if (settings.print_config) {
    std::fputs(waste::daemon::ExampleSettingsFile().c_str(), stdout);
    return 0;
  }
  waste::daemon::DaemonOptions& o = settings.daemon;
  const bool foreground = settings.foreground;
  SetupLogging(foreground || settings.check, o.log_file, o.log_level);

  if (settings.check) {
    auto ct = waste::Container::Open(o.container);
    if (!ct.ok()) {
      spdlog::error("{}: {}", o.container, ct.status().message());
      return 1;
    }
    const waste::DaemonPlan plan = waste::daemon::PlanFor(ct->manifest(), o.huge_pages);
    waste::MemoryLimit limit;
    auto b = waste::daemon::BudgetOnThisMachine(plan, o.budget, &limit);
    if (!b.ok()) {
      spdlog::error("{}", b.status().message());
      return 1;
    }
    // In bytes too, as `waste plan --json` gives them ("wasted").
    spdlog::info("check passed: budget {} ({} bytes), floor {} ({} bytes); would listen on {}",
                 waste::FormatSize(*b), *b, waste::FormatSize(plan.floor()), plan.floor(),
                 o.socket);
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
    const int code = waste::daemon::ParseSettings(argc, argv, &again, true, &error);
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
