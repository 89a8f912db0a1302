// wastectl: inspect and steer a running wasted over its socket. It speaks the
// protocol only (protocol/client.h) and links no engine. Commands: status
// (human or --json), stop, warm, drop and reload; clients arrives with issue 7.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/size_text.h"
#include "protocol/client.h"
#include "waste/version.h"

namespace {

using nlohmann::json;

// Exit codes, documented in the --help footer and clients/wastectl/README.md.
enum Exit : int {
  kOk = 0,
  kDaemonError = 1,   // the daemon answered with an error, or went away mid-call
  kUsage = 2,         // a bad command line
  kNotListening = 3,  // no daemon could be reached at the socket
  kPermission = 4,    // refused: the socket's permissions, or the daemon's uid check
};

constexpr const char* kFooter = R"(Exit codes:
  0  success
  1  the daemon answered with an error (or went away during the call)
  2  a bad command line
  3  no daemon is listening at the socket
  4  refused for permissions: the socket's mode, or the daemon's check of our uid

The socket defaults to $XDG_RUNTIME_DIR/wasted.sock when a socket is there, else
/run/wasted/wasted.sock (the system service's) when one is there, else the first.)";

// wasted refuses a peer whose uid it does not allow with an error answer
// "uid N may not use this wasted (...)" (daemon/rpc_server.cc); that is a
// permission failure too, not a daemon error.
bool IsUidRefusal(const std::string& message) {
  return message.rfind("uid ", 0) == 0 &&
         message.find(" may not use this wasted") != std::string::npos;
}

int Fail(const waste::Status& status) {
  std::fprintf(stderr, "wastectl: %s\n", status.message().c_str());
  return IsUidRefusal(status.message()) ? kPermission : kDaemonError;
}

// Connects, or says why not and gives the exit code for it.
std::unique_ptr<waste::DaemonClient> Connect(const std::string& socket, int* exit_code) {
  waste::ConnectFailure why;
  auto client = waste::DaemonClient::Connect(socket, &why);
  if (client.ok()) return std::move(*client);
  std::fprintf(stderr, "wastectl: %s\n", client.status().message().c_str());
  *exit_code = why == waste::ConnectFailure::kPermissionDenied ? kPermission : kNotListening;
  return nullptr;
}


std::string Duration(double seconds) {
  char buf[48];
  const auto s = static_cast<uint64_t>(seconds);
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%llum %02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(buf, sizeof buf, "%lluh %02llum", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s / 60 % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%llud %02lluh", static_cast<unsigned long long>(s / 86400),
                  static_cast<unsigned long long>(s / 3600 % 24));
  }
  return buf;
}

// Read queues are listed by priority in this order (proto Status.queued).
std::string PriorityName(size_t i) {
  static const char* kNames[] = {"demand", "lookahead", "warm"};
  return i < 3 ? kNames[i] : "priority" + std::to_string(i);
}

json ByPriority(const std::vector<uint32_t>& counts) {
  json j = json::object();
  for (size_t i = 0; i < counts.size(); ++i) j[PriorityName(i)] = counts[i];
  return j;
}

std::string ByPriorityText(const std::vector<uint32_t>& counts) {
  if (counts.empty()) return "none reported";
  std::string out;
  for (size_t i = 0; i < counts.size(); ++i) {
    out += (i ? ", " : "") + PriorityName(i) + " " + std::to_string(counts[i]);
  }
  return out;
}

// Hits over lookups, or nothing when there were none.
std::optional<double> HitRate(uint64_t hits, uint64_t misses) {
  if (hits + misses == 0) return std::nullopt;
  return static_cast<double>(hits) / static_cast<double>(hits + misses);
}

json StatusJson(const waste::DaemonStatus& s, const std::string& socket) {
  json clients = json::array();
  for (const waste::ClientStatusInfo& c : s.clients) {
    clients.push_back({{"id", c.id},
                       {"pid", c.pid},
                       {"uid", c.uid},
                       {"attached_seconds", c.attached_seconds},
                       {"hits", c.hits},
                       {"misses", c.misses},
                       {"pins", c.pins},
                       {"command", c.command}});
  }
  const auto rate = HitRate(s.hits, s.misses);
  return {{"socket", socket},
          {"version", s.version},
          {"pid", s.pid},
          {"uptime_seconds", s.uptime_seconds},
          {"container", s.container},
          {"arch", s.arch},
          {"budget",
           {{"total", s.budget},
            {"trunk", s.trunk_bytes},
            {"cache", s.cache_bytes},
            {"overhead", s.overhead_bytes}}},
          {"trunk_wired", s.trunk_wired},
          {"page_kind", s.page_kind},
          {"slots",
           {{"total", s.slots},
            {"used", s.slots_used()},
            {"ready", s.slots_ready},
            {"loading", s.slots_loading},
            {"pinned", s.slots_pinned},
            {"failed", s.slots_failed},
            {"free", s.slots_free()}}},
          {"hits", s.hits},
          {"misses", s.misses},
          {"hit_rate", rate ? json(*rate) : json(nullptr)},
          {"reads", s.reads},
          {"bytes_read", s.bytes_read},
          {"read_errors", s.read_errors},
          {"queued", ByPriority(s.queued)},
          {"in_flight", ByPriority(s.in_flight)},
          {"io_depth", s.io_depth},
          {"policy", s.policy},
          {"lookahead",
           {{"reads", s.lookahead_reads},
            {"used", s.lookahead_used},
            {"unused_bytes", s.lookahead_unused_bytes},
            {"dropped", s.lookahead_dropped},
            {"precision", s.lookahead_reads ? json(double(s.lookahead_used) / s.lookahead_reads)
                                            : json(nullptr)},
            {"recall", s.hits + s.misses ? json(double(s.demand_hinted) / (s.hits + s.misses))
                                         : json(nullptr)}}},
          {"warm_reads", s.warm_reads},
          {"read_busy_seconds", s.read_busy_seconds},
          {"clients", clients}};
}

void PrintStatus(const waste::DaemonStatus& s, const std::string& socket) {
  std::printf("wasted %s, pid %u, up %s, at %s\n", s.version.c_str(), s.pid,
              Duration(s.uptime_seconds).c_str(), socket.c_str());
  std::printf("model      %s  %s\n", s.arch.c_str(), s.container.c_str());
  // The budget is a ceiling; the parts may add up to less (a small container).
  std::printf("budget     %s; trunk %s + cache %s + overhead %s = %s\n", waste::FormatSize(s.budget).c_str(),
              waste::FormatSize(s.trunk_bytes).c_str(), waste::FormatSize(s.cache_bytes).c_str(),
              waste::FormatSize(s.overhead_bytes).c_str(),
              waste::FormatSize(s.trunk_bytes + s.cache_bytes + s.overhead_bytes).c_str());
  std::printf("trunk      %s; pages: %s\n",
              s.trunk_wired ? "wired (mlock)" : "not wired (mlock failed; it may be paged out)",
              s.page_kind.c_str());
  std::printf("slots      %u: %u used (%u ready, %u loading, %u failed), %u pinned, %u free\n",
              s.slots, s.slots_used(), s.slots_ready, s.slots_loading, s.slots_failed,
              s.slots_pinned, s.slots_free());
  const auto rate = HitRate(s.hits, s.misses);
  std::string rate_text = "no demand hints yet";
  if (rate) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%% hit rate", 100 * *rate);
    rate_text = buf;
  }
  std::printf("demand     %llu hits, %llu misses, %s\n", static_cast<unsigned long long>(s.hits),
              static_cast<unsigned long long>(s.misses), rate_text.c_str());
  std::printf("reads      %llu records, %.2f GB read (%.2f GB/s while reading), %llu read errors\n",
              static_cast<unsigned long long>(s.reads), static_cast<double>(s.bytes_read) / 1e9,
              s.read_busy_seconds > 0 ? s.bytes_read / s.read_busy_seconds / 1e9 : 0.0,
              static_cast<unsigned long long>(s.read_errors));
  std::printf("queued     %s\n", ByPriorityText(s.queued).c_str());
  std::printf("in flight  %s (io depth %u)\n", ByPriorityText(s.in_flight).c_str(), s.io_depth);
  std::printf("eviction   %s; %llu warm-up reads\n", s.policy.c_str(),
              static_cast<unsigned long long>(s.warm_reads));
  if (s.lookahead_reads + s.demand_hinted + s.lookahead_dropped > 0) {
    const double total = static_cast<double>(s.hits + s.misses);
    std::printf(
        "lookahead  %llu reads, %llu used (precision %.0f%%), recall %.0f%%, %.2f GB read unused, "
        "%llu dropped as late\n",
        static_cast<unsigned long long>(s.lookahead_reads),
        static_cast<unsigned long long>(s.lookahead_used),
        s.lookahead_reads ? 100.0 * s.lookahead_used / s.lookahead_reads : 0.0,
        total > 0 ? 100.0 * s.demand_hinted / total : 0.0, s.lookahead_unused_bytes / 1e9,
        static_cast<unsigned long long>(s.lookahead_dropped));
  }
  if (s.clients.empty()) {
    std::printf("clients    none\n");
    return;
  }
  std::printf("clients    %zu\n", s.clients.size());
  // Columns sized to their widest cell; the command goes last, uncut.
  std::vector<std::vector<std::string>> rows = {
      {"id", "pid", "uid", "attached", "hits", "misses", "pins", "command"}};
  for (const waste::ClientStatusInfo& c : s.clients) {
    rows.push_back({std::to_string(c.id), std::to_string(c.pid), std::to_string(c.uid),
                    Duration(c.attached_seconds), std::to_string(c.hits), std::to_string(c.misses),
                    std::to_string(c.pins), c.command});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i + 1 < row.size(); ++i) {
      line += "  " + std::string(width[i] - row[i].size(), ' ') + row[i];
    }
    line += "  " + row.back();
    std::printf("%s\n", line.c_str());
  }
}

int RunStatus(const std::string& socket, bool as_json) {
  int code = kOk;
  auto client = Connect(socket, &code);
  if (!client) return code;
  auto status = client->GetStatus();
  if (!status.ok()) return Fail(status.status());
  if (as_json) {
    std::printf("%s\n", StatusJson(*status, socket).dump(2).c_str());
  } else {
    PrintStatus(*status, socket);
  }
  return kOk;
}

int RunStop(const std::string& socket) {
  int code = kOk;
  auto client = Connect(socket, &code);
  if (!client) return code;
  if (waste::Status st = client->Stop(); !st.ok()) return Fail(st);
  std::printf("wasted at %s is stopping\n", socket.c_str());
  return kOk;
}

int RunWarm(const std::string& socket) {
  int code = kOk;
  auto client = Connect(socket, &code);
  if (!client) return code;
  auto n = client->Warm();
  if (!n.ok()) return Fail(n.status());
  std::printf("%u warm-up reads queued (the most used records, into free slots)\n", *n);
  return kOk;
}

int RunDrop(const std::string& socket, int layer) {
  int code = kOk;
  auto client = Connect(socket, &code);
  if (!client) return code;
  auto n = client->Drop(layer);
  if (!n.ok()) return Fail(n.status());
  std::printf("%u slots emptied%s\n", *n,
              layer < 0 ? "" : (" in layer " + std::to_string(layer)).c_str());
  return kOk;
}

int RunReload(const std::string& socket, bool as_json) {
  int code = kOk;
  auto client = Connect(socket, &code);
  if (!client) return code;
  auto r = client->Reload();
  if (!r.ok()) return Fail(r.status());
  if (as_json) {
    std::printf("%s\n", json{{"applied", r->applied}, {"need_restart", r->need_restart}}.dump(2).c_str());
    return kOk;
  }
  if (r->applied.empty() && r->need_restart.empty())
    std::printf("settings reloaded: nothing changed\n");
  for (const std::string& a : r->applied) std::printf("applied   %s\n", a.c_str());
  for (const std::string& n : r->need_restart)
    std::printf("changed, takes effect at restart   %s\n", n.c_str());
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"wastectl: inspect and control a running wasted"};
  app.set_version_flag("--version", "wastectl " WASTE_VERSION " (protocol " +
                                        std::to_string(waste::proto::PROTOCOL_VERSION) + ")");
  app.footer(kFooter);
  app.require_subcommand(0, 1);

  std::string socket = waste::ClientDaemonSocket();
  bool as_json = false;
  CLI::App* status = app.add_subcommand(
      "status", "Show the model, the memory budget, the cache, the reads and the clients");
  status->add_option("--socket", socket, "wasted's Unix socket")->capture_default_str();
  status->add_flag("--json", as_json, "Print one JSON object instead");
  CLI::App* stop = app.add_subcommand(
      "stop", "Stop the daemon as SIGTERM would: its clients are told, its state is saved");
  stop->add_option("--socket", socket, "wasted's Unix socket")->capture_default_str();
  CLI::App* warm = app.add_subcommand(
      "warm", "Read the most used records (by the saved and current use counts) into free slots");
  warm->add_option("--socket", socket, "wasted's Unix socket")->capture_default_str();
  int layer = -1;
  CLI::App* drop =
      app.add_subcommand("drop", "Empty every slot no client has pinned (in one layer with --layer)");
  drop->add_option("--socket", socket, "wasted's Unix socket")->capture_default_str();
  drop->add_option("--layer", layer, "Only this layer")->check(CLI::NonNegativeNumber);

  CLI::App* reload = app.add_subcommand(
      "reload", "Re-read the daemon's settings file and apply what can change while it runs");
  reload->add_option("--socket", socket, "wasted's Unix socket")->capture_default_str();
  reload->add_flag("--json", as_json, "Print one JSON object instead");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, the version or the error
    return code == 0 ? kOk : kUsage;
  }
  if (status->parsed()) return RunStatus(socket, as_json);
  if (stop->parsed()) return RunStop(socket);
  if (warm->parsed()) return RunWarm(socket);
  if (drop->parsed()) return RunDrop(socket, layer);
  if (reload->parsed()) return RunReload(socket, as_json);
  std::fprintf(stderr, "wastectl: no command given (see --help)\n");
  return kUsage;
}
