#include "daemon/settings.h"

#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string_view>
#include <system_error>

#include <CLI/CLI.hpp>

#include "base/size_text.h"    // FormatSize
#include "engine/plan/plan.h"  // ParseSize, kPlannedClients
#include "http/page_server.h"  // kMaxConnections
#include "protocol/socket_path.h"
#include "waste/version.h"

namespace waste::daemon {
namespace {

std::string DefaultStateDir() {
  if (geteuid() == 0) return "/var/lib/wasted";
  if (const char* s = std::getenv("XDG_STATE_HOME"); s && *s) return std::string(s) + "/wasted";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/state/wasted";
  return "";
}

std::string GroupText(gid_t g) {
  if (g == static_cast<gid_t>(-1)) return "none";
  const ::group* gr = getgrgid(g);
  return gr ? std::string(gr->gr_name) + " (" + std::to_string(g) + ")" : std::to_string(g);
}

std::string YesNo(bool b) { return b ? "yes" : "no"; }
std::string OrNone(const std::string& s) { return s.empty() ? "none" : s; }

// What the flags parse into before it becomes DaemonOptions: the values
// that are text on the command line and something else in the daemon.
struct Parsed {
  explicit Parsed(Settings* settings) : s(settings) {}
  Settings* s;
  std::string budget, group, policy = "lfru", states_budget, states_memory;
  std::vector<uint32_t> uids;
  bool no_huge = false, no_wire = false, cold = false, states_shared = false;
};

struct Setting {
  std::string_view name;  // the long flag without its dashes, and the name in the file
  // The example file's value when the flag has no default of its own to
  // show (a flag, or a default that depends on who runs it); else empty and
  // the flag's default is shown.
  std::string_view shown;
  // A reload copies it from the new settings into the running ones; null: a
  // change waits for a restart.
  void (*take)(const DaemonOptions& next, DaemonOptions* live);
  std::string_view help;   // wasted --help
  std::string_view about;  // the example file's comment
  std::function<CLI::Option*(CLI::App&, Parsed&, const std::string& flag, const std::string& help)>
      add;
  // Its value as the log and the reload comparison show it; null: not a
  // setting of the daemon (main() acts on it).
  std::string (*describe)(const DaemonOptions& o);
};

// The help below says these numbers.
static_assert(kPlannedClients == 1024, "max-clients' help says 1-1024");
static_assert(http::PageServer::kMaxConnections == 64, "metrics-timeout's help says 64");

// In the order of wasted --help.
const std::vector<Setting>& Table() {
  static const std::vector<Setting> table = {
      {"container", "/srv/waste/kimi-linear-48b", nullptr,
       "Container directory (the argument, or `container = DIR` in the settings file)",
       "The container directory to serve (required; also the first argument).",
       [](CLI::App& app, Parsed& p, const std::string&, const std::string& help) {
         // Positional, and also `container = DIR` in the settings file.
         return app.add_option("CONTAINER,--container", p.s->daemon.container, help)->required();
       },
       [](const DaemonOptions& o) {
         std::error_code ec;
         const auto abs = std::filesystem::weakly_canonical(o.container, ec);
         return ec ? o.container : abs.string();
       }},
      // The defaults of --socket and --state-dir depend on who runs it: said
      // as rules, not as this process's values (the man page is made from
      // --help).
      {"socket", "/run/wasted/wasted.sock", nullptr,
       "Unix socket to listen on (default: $XDG_RUNTIME_DIR/wasted.sock, else "
       "/run/wasted/wasted.sock)",
       "Unix socket to listen on. Default: $XDG_RUNTIME_DIR/wasted.sock, else\n"
       "/run/wasted/wasted.sock (root, and the system service).",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.s->daemon.socket, help);
       },
       [](const DaemonOptions& o) { return o.socket; }},
      {"budget", "\"\"", nullptr,
       "Memory for trunk + cache + daemon, e.g. 4G (default: from this machine)",
       "Memory for trunk + expert cache + daemon, e.g. 4G, 512M. Default (empty):\n"
       "chosen from this machine's memory or the cgroup's limit. Refused below the\n"
       "model's floor, with the floor's parts. Set it when several instances share\n"
       "a machine.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.budget, help);
       },
       [](const DaemonOptions& o) { return o.budget ? FormatSize(o.budget) : "auto"; }},
      {"io-depth", "", nullptr, "Expert reads in flight", "Expert reads in flight (1-256).",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.s->daemon.io_depth, help)
             ->check(CLI::Range(1, 256))
             ->capture_default_str();
       },
       [](const DaemonOptions& o) { return std::to_string(o.io_depth); }},
      {"verify-crc", "false", nullptr, "Check every record's crc32 as it is read",
       "Check every record's crc32 as it is read (costs CPU on every read).",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_flag(flag, p.s->daemon.verify_crc, help);
       },
       [](const DaemonOptions& o) { return YesNo(o.verify_crc); }},
      {"allow-uid", "1000",
       [](const DaemonOptions& next, DaemonOptions* live) { live->access.uids = next.access.uids; },
       "A uid that may attach besides root and the daemon's own",
       "A uid allowed to attach besides root and the daemon's own; repeat the line\n"
       "for more. Default: none.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.uids, help);
       },
       [](const DaemonOptions& o) {
         std::string uids;
         for (uid_t u : o.access.uids) uids += (uids.empty() ? "" : ",") + std::to_string(u);
         return uids.empty() ? std::string("none") : uids;
       }},
      {"allow-group", "\"\"",
       [](const DaemonOptions& next, DaemonOptions* live) {
         live->access.group = next.access.group;
       },
       "A group whose members may attach (socket becomes 0660)",
       "A group whose members may attach; the socket becomes 0660 and is given\n"
       "this group. Default (empty): none, the socket is 0600. For the system\n"
       "service, `allow-group = wasted` and add users to the group wasted.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.group, help);
       },
       [](const DaemonOptions& o) { return GroupText(o.access.group); }},
      {"max-clients", "", nullptr, "Clients attached at once (1-1024); more are refused",
       "Clients attached at once (1-1024): each has a pin page, planned in the\n"
       "daemon's overhead. An attach beyond them is refused with a message and the\n"
       "attached clients go on as before.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.s->daemon.max_clients, help)
             ->check(CLI::Range(uint32_t{1}, static_cast<uint32_t>(kPlannedClients)))
             ->capture_default_str();
       },
       [](const DaemonOptions& o) { return std::to_string(o.max_clients); }},
      {"idle-exit", "",
       [](const DaemonOptions& next, DaemonOptions* live) {
         live->idle_exit_seconds = next.idle_exit_seconds;
       },
       "Exit after this many seconds without clients (0: never)",
       "Exit after this many seconds without clients (0: never).",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.s->daemon.idle_exit_seconds, help)
             ->check(CLI::NonNegativeNumber)
             ->capture_default_str();
       },
       [](const DaemonOptions& o) { return SecondsText(o.idle_exit_seconds); }},
      {"state-dir", "/var/lib/wasted", nullptr,
       "Where use counts are saved (at stop and periodically) and read at start "
       "(default: /var/lib/wasted as root, else $XDG_STATE_HOME/wasted or "
       "~/.local/state/wasted)",
       "Where the use counts are saved (at stop and every save-interval) and read\n"
       "at start to warm the cache. Default: /var/lib/wasted as root, else\n"
       "$XDG_STATE_HOME/wasted or ~/.local/state/wasted.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.s->daemon.state_dir, help);
       },
       [](const DaemonOptions& o) { return OrNone(o.state_dir); }},
      {"save-interval", "",
       [](const DaemonOptions& next, DaemonOptions* live) {
         live->save_interval_seconds = next.save_interval_seconds;
       },
       "Seconds between saves of the use counts (0: only at stop)",
       "Seconds between saves of the use counts (0: only at stop).",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.s->daemon.save_interval_seconds, help)
             ->check(CLI::NonNegativeNumber)
             ->capture_default_str();
       },
       [](const DaemonOptions& o) { return SecondsText(o.save_interval_seconds); }},
      {"cold", "false", nullptr, "Do not warm the cache from the saved use counts at start",
       "Do not warm the cache from the saved use counts at start.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_flag(flag, p.cold, help);
       },
       [](const DaemonOptions& o) { return YesNo(!o.warm_start); }},
      {"states-budget", "4G", nullptr,
       "Disk for prompt states under state-dir/states, e.g. 4G (0: none kept)",
       "Disk for the prompt states clients publish (state-dir/states), e.g. 4G, 512M;\n"
       "past it the least recently used go. 0: no states are kept. Default: 4G.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.states_budget, help);
       },
       [](const DaemonOptions& o) { return FormatSize(o.states_budget); }},
      {"states-memory", "1G", nullptr,
       "Memory for prompt states in shared memory, e.g. 1G (0: disk only)",
       "Memory for the prompt states clients publish, kept in shared memory and\n"
       "handed out sealed; past it the least recently used are written to the\n"
       "disk's states (states-budget) or dropped. Outside budget: its own ceiling.\n"
       "0: states go straight to disk. Default: 1G.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.states_memory, help);
       },
       [](const DaemonOptions& o) { return FormatSize(o.states_memory); }},
      {"states-shared", "false", nullptr,
       "Any uid allowed to attach finds the prompt states of the others",
       "Any uid allowed to attach finds the prompt states the others published. By\n"
       "default a client finds only its own uid's: a state decides the answers of\n"
       "whoever continues from it.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_flag(flag, p.states_shared, help);
       },
       [](const DaemonOptions& o) { return YesNo(o.states_shared); }},
      {"policy", "", nullptr, "Eviction: lfru (the record with the fewest recent uses) or lru",
       "Eviction policy: lfru (the record with the fewest recent uses goes; a record keeps its "
       "uses while out of the cache) or lru (the least recently used goes).",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.policy, help)
             ->check(CLI::IsMember({"lfru", "lru"}))
             ->capture_default_str();
       },
       [](const DaemonOptions& o) {
         return std::string(o.policy == EvictionPolicy::kLru ? "lru" : "lfru");
       }},
      {"metrics-listen", "\"\"", nullptr,
       "Serve GET /metrics (Prometheus text) on this loopback HOST:PORT, e.g. "
       "127.0.0.1:9464 (default: off)",
       "Serve the status as Prometheus metrics (GET /metrics) over HTTP on this\n"
       "loopback HOST:PORT, e.g. 127.0.0.1:9464; the same text as `wastectl metrics`.\n"
       "Default (empty): off. Loopback addresses only; answered to the uids allowed\n"
       "to attach (see metrics-timeout).",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.s->daemon.metrics_listen, help);
       },
       [](const DaemonOptions& o) { return OrNone(o.metrics_listen); }},
      {"metrics-timeout", "", nullptr,
       "Seconds a metrics connection may stay open (a peer that sends nothing is closed then)",
       "Seconds a metrics connection may stay open: one that has not been answered\n"
       "and closed by then (it sent nothing, or a header that never ends, or does\n"
       "not read the answer) is closed. At most 64 are open at once (a new one\n"
       "closes the oldest), and only the uids allowed to attach are answered: the\n"
       "peer's uid is the owner of its loopback socket in /proc/net/tcp.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.s->daemon.metrics_timeout_seconds, help)
             ->check(CLI::Range(0.001, 3600.0))
             ->capture_default_str();
       },
       [](const DaemonOptions& o) { return SecondsText(o.metrics_timeout_seconds); }},
      {"no-huge-pages", "false", nullptr, "Use 4 KiB pages for the segments",
       "Use 4 KiB pages for the shared segments instead of asking for huge pages.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_flag(flag, p.no_huge, help);
       },
       [](const DaemonOptions& o) { return YesNo(!o.huge_pages); }},
      {"no-wire", "false", nullptr, "Do not mlock the trunk",
       "Do not mlock the trunk (it may then be paged out under memory pressure).",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_flag(flag, p.no_wire, help);
       },
       [](const DaemonOptions& o) { return YesNo(!o.wire_trunk); }},
      {"foreground", "false", nullptr,
       "Stay attached to the terminal and log to stderr (what systemd runs)",
       "Stay attached to the terminal and log to stderr (the system service passes\n"
       "it as a flag; systemd then takes stderr into the journal with levels).",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_flag(flag, p.s->foreground, help);
       },
       nullptr},
      {"log-file", "\"\"", nullptr,
       "Log to this file (default: stderr in the foreground, else syslog, i.e. the journal)",
       "Log to this file. Default (empty): stderr in the foreground, else syslog\n"
       "(the journal). The service may write under /var/log/wasted.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.s->daemon.log_file, help);
       },
       [](const DaemonOptions& o) { return OrNone(o.log_file); }},
      {"log-level", "",
       [](const DaemonOptions& next, DaemonOptions* live) { live->log_level = next.log_level; },
       "trace, debug, info, warn, error", "Log level: trace, debug, info, warn or error.",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_option(flag, p.s->daemon.log_level, help)
             ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
             ->capture_default_str();
       },
       [](const DaemonOptions& o) { return o.log_level; }},
      {"check", "false", nullptr, "Validate the container and the budget, then exit",
       "Validate the container and the budget, then exit (a command-line check).",
       [](CLI::App& app, Parsed& p, const std::string& flag, const std::string& help) {
         return app.add_flag(flag, p.s->check, help);
       },
       nullptr},
  };
  return table;
}

const Setting* Find(const std::string& name) {
  for (const Setting& s : Table())
    if (s.name == name) return &s;
  return nullptr;
}

// The reloadable names as a sentence: "a, b and c".
std::string ReloadableList() {
  std::vector<std::string_view> names;
  for (const Setting& s : Table())
    if (s.take) names.push_back(s.name);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + std::string(names[i]);
  return out;
}

// `text` as comment lines of at most 80 characters.
std::string CommentWrapped(const std::string& text) {
  std::string out, line = "#";
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    if (line.size() + 1 + word.size() > 80) {
      out += line + "\n";
      line = "#";
    }
    line += " " + word;
    at = end + 1;
  }
  return out + line + "\n";
}

// CLI11's reader of the settings file, noting the names the file sets, so
// that an error about a value can name the file it came from.
class NotingConfig : public CLI::ConfigBase {
 public:
  explicit NotingConfig(std::set<std::string>* names) : names_(names) {}
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::vector<CLI::ConfigItem> read = CLI::ConfigBase::from_config(input);
    for (const CLI::ConfigItem& item : read) names_->insert(item.name);
    return read;
  }

 private:
  std::set<std::string>* names_;
};

// Whether `name` is given on the command line (there it wins over the file).
bool OnCommandLine(const std::string& name, int argc, char** argv) {
  const std::string flag = "--" + name;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

// The setting of the file that CLI11's message `what` is about: one it names
// as --NAME that the file sets and the command line does not; else empty.
std::string FileSettingNamed(const std::string& what, const std::set<std::string>& in_file,
                             int argc, char** argv) {
  for (const std::string& name : in_file) {
    const std::string flag = "--" + name;
    for (size_t at = what.find(flag); at != std::string::npos; at = what.find(flag, at + 1)) {
      const size_t end = at + flag.size();
      const bool whole = end == what.size() || !(std::isalnum(static_cast<unsigned char>(what[end])) ||
                                                 what[end] == '-');
      if (whole && !OnCommandLine(name, argc, argv)) return name;
    }
  }
  return "";
}

// A settings file is untrusted like any: CLI11 reads it whole, so one that
// is not a regular file (/dev/zero) or is larger than any settings file
// could be is refused before it is read. Empty when the file named by
// --config (if any) may be read; a missing file is CLI11's to report.
constexpr uint64_t kMaxSettingsFile = 1 << 20;
std::string UnreadableConfig(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    std::string path;
    if (a == "--config" && i + 1 < argc) path = argv[i + 1];
    else if (a.rfind("--config=", 0) == 0) path = std::string(a.substr(9));
    else continue;
    struct stat st;
    if (stat(path.c_str(), &st) != 0) continue;
    if (!S_ISREG(st.st_mode)) return "--config " + path + ": not a regular file";
    if (static_cast<uint64_t>(st.st_size) > kMaxSettingsFile)
      return "--config " + path + ": " + std::to_string(st.st_size) + " bytes, more than the " +
             std::to_string(kMaxSettingsFile) + " a settings file may have";
  }
  return "";
}

}  // namespace

std::string SecondsText(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

int ParseSettings(int argc, char** argv, Settings* s, bool quiet, std::string* error) {
  // Alone, and not a setting or a flag of --help (whose every flag the
  // example names): how the example is made from this table.
  if (argc == 2 && std::string_view(argv[1]) == "--print-config") {
    s->print_config = true;
    return -1;
  }
  CLI::App app{"wasted: owns a model's weights and shares an expert cache with its clients"};
  app.set_version_flag("--version", "wasted " WASTE_VERSION);
  CLI::Option* config = app.set_config("--config", "",
                 "Settings file: `name = value` lines named as the long flags (see "
                 "wasted.conf.example); flags given here win");
  // A misspelt setting in the file is an error, not silently ignored.
  app.allow_config_extras(CLI::config_extras_mode::error);
  std::set<std::string> in_file;
  app.config_formatter(std::make_shared<NotingConfig>(&in_file));
  s->daemon.socket = DefaultDaemonSocket();
  s->daemon.state_dir = DefaultStateDir();
  Parsed p(s);
  for (const Setting& row : Table())
    row.add(app, p, "--" + std::string(row.name), std::string(row.help));
  auto fail = [&](const std::string& why) {
    if (quiet) {
      *error = why;
    } else {
      std::fprintf(stderr, "wasted: %s\n", why.c_str());
    }
    return 2;
  };
  const auto file = [&] {
    return config->results().empty() ? std::string() : " " + config->results().back();
  };
  // A bad value names the file when the file gave it.
  const auto fail_setting = [&](const std::string& name, const std::string& why) {
    const bool from_file = in_file.count(name) && !OnCommandLine(name, argc, argv);
    return fail(from_file ? "--config" + file() + ": " + why : why);
  };
  if (const std::string bad = UnreadableConfig(argc, argv); !bad.empty()) return fail(bad);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ConfigError& e) {
    // CLI11 says "INI was not able to parse NAME" of a name it does not know.
    const std::string what = e.what(), unknown = "INI was not able to parse ";
    if (what.rfind(unknown, 0) == 0)
      return fail("--config" + file() + ": unknown setting \"" + what.substr(unknown.size()) +
                  "\" (settings are named as the long flags, see wasted --help)");
    return fail("--config" + file() + ": " + what);
  } catch (const CLI::ParseError& e) {
    if (const std::string name = FileSettingNamed(e.what(), in_file, argc, argv); !name.empty())
      return fail_setting(name, e.what());
    if (quiet) return fail(e.what());
    return app.exit(e);
  }
  DaemonOptions& o = s->daemon;
  for (uint32_t u : p.uids) o.access.uids.push_back(static_cast<uid_t>(u));
  if (!p.group.empty()) {
    if (p.group.find_first_not_of("0123456789") == std::string::npos) {
      // A number: a gid below (gid_t)-1, which means no group.
      uint64_t gid = 0;
      const char* end = p.group.data() + p.group.size();
      if (std::from_chars(p.group.data(), end, gid).ec != std::errc() ||
          gid >= static_cast<gid_t>(-1))
        return fail_setting("allow-group", "--allow-group: " + p.group + " is not a group id");
      o.access.group = static_cast<gid_t>(gid);
    } else if (const ::group* g = getgrnam(p.group.c_str())) {
      o.access.group = g->gr_gid;
    } else {
      return fail_setting("allow-group", "--allow-group: no group named " + p.group);
    }
  }
  o.huge_pages = !p.no_huge;
  o.warm_start = !p.cold;
  o.policy = p.policy == "lru" ? EvictionPolicy::kLru : EvictionPolicy::kLfru;
  o.wire_trunk = !p.no_wire;
  o.states_shared = p.states_shared;
  if (!p.states_budget.empty()) {
    auto b = ParseSize(p.states_budget);
    if (!b.ok()) return fail_setting("states-budget", "--states-budget: " + b.status().message());
    o.states_budget = *b;
  }
  if (!p.states_memory.empty()) {
    auto b = ParseSize(p.states_memory);
    if (!b.ok()) return fail_setting("states-memory", "--states-memory: " + b.status().message());
    o.states_memory = *b;
  }
  if (!p.budget.empty()) {
    auto b = ParseSize(p.budget);
    if (!b.ok()) return fail_setting("budget", "--budget: " + b.status().message());
    o.budget = *b;
  }
  return -1;
}

std::vector<std::pair<std::string, std::string>> DescribeSettings(const DaemonOptions& o) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Setting& s : Table())
    if (s.describe) out.emplace_back(std::string(s.name), s.describe(o));
  return out;
}

bool ReloadableSetting(const std::string& name) {
  const Setting* s = Find(name);
  return s && s->take;
}

bool TakeReloaded(const std::string& name, const DaemonOptions& next, DaemonOptions* live) {
  const Setting* s = Find(name);
  if (!s || !s->take) return false;
  s->take(next, live);
  return true;
}

std::string ExampleSettingsFile() {
  // The flags' own defaults, as --help shows them.
  Settings defaults;
  CLI::App app;
  Parsed p(&defaults);
  std::string out =
      "# wasted settings: one `name = value` per line, named as wasted's long flags\n"
      "# (`wasted --help`). A flag given on the command line wins over the file.\n"
      "# Each setting below is commented out at its default (where a default has\n"
      "# no value to show, an example value is given and the default is said).\n"
      "# An unknown name is an error, so a misspelt setting is not silently ignored.\n"
      "# This file is written by `wasted --print-config` from wasted's table of\n"
      "# settings (daemon/settings.cc).\n"
      "#\n"
      "# The system service reads /etc/wasted/wasted.conf (wasted.service) or\n"
      "# /etc/wasted/NAME.conf (wasted@NAME.service); its unit sets `socket` and\n"
      "# `state-dir` as flags, so those two lines are ignored there.\n"
      "#\n" +
      CommentWrapped("`wastectl reload` or SIGHUP (systemctl reload wasted) re-reads this file "
                     "and applies " + ReloadableList() + " at once; any other setting that "
                     "changed is logged and takes effect at restart.");
  for (const Setting& row : Table()) {
    const CLI::Option* opt = row.add(app, p, "--" + std::string(row.name), std::string(row.help));
    const std::string value = row.shown.empty() ? opt->get_default_str() : std::string(row.shown);
    out += "\n";
    std::string_view about = row.about;
    while (!about.empty()) {
      const size_t nl = about.find('\n');
      out += "# " + std::string(about.substr(0, nl)) + "\n";
      about = nl == std::string_view::npos ? std::string_view() : about.substr(nl + 1);
    }
    out += "#" + std::string(row.name) + " = " + value + "\n";
  }
  return out;
}

}  // namespace waste::daemon
