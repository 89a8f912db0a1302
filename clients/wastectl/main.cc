// wastectl: inspect and steer a running wasted over its socket. It speaks the
// protocol only (link/daemon_client.h) and links no engine. Commands: status
// (once, or live with --watch), clients, metrics, warm, drop, stop, reload,
// states (the prompt states kept), and daemons (every wasted on the machine, from /proc); each prints text
// for people or, with --json, JSON.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "clients/wastectl/status_view.h"
#include "clients/wastectl/watch.h"
#include "base/size_text.h"
#include "link/daemon_client.h"
#include "protocol/metrics.h"
#include "protocol/running_daemons.h"
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

// Connects and reads the status; on failure says why and sets the exit code.
std::optional<waste::DaemonStatus> FetchStatus(const std::string& socket, int* exit_code,
                                               std::unique_ptr<waste::DaemonClient>* keep = nullptr) {
  auto client = Connect(socket, exit_code);
  if (!client) return std::nullopt;
  auto status = client->GetStatus();
  if (!status.ok()) {
    *exit_code = Fail(status.status());
    return std::nullopt;
  }
  if (keep) *keep = std::move(client);
  return std::move(*status);
}

void PrintJson(const json& j) {
  // Command lines are whatever bytes a process had: invalid UTF-8 is replaced.
  std::printf("%s\n", j.dump(2, ' ', false, json::error_handler_t::replace).c_str());
}

int RunStatus(const std::string& socket, bool as_json) {
  int code = kOk;
  const auto status = FetchStatus(socket, &code);
  if (!status) return code;
  if (as_json) {
    PrintJson(waste::ctl::StatusJson(*status, socket));
  } else {
    std::fputs(waste::ctl::StatusText(*status, socket).c_str(), stdout);
  }
  return kOk;
}

int RunWatch(const std::string& socket, double interval) {
  int code = kOk;
  std::unique_ptr<waste::DaemonClient> client;
  // The first status is read before the screen is taken over, so that a
  // refusal is reported like any other command's.
  if (!FetchStatus(socket, &code, &client)) return code;
  return waste::ctl::RunWatch(*client, socket, interval);
}

int RunClients(const std::string& socket, bool as_json) {
  int code = kOk;
  const auto status = FetchStatus(socket, &code);
  if (!status) return code;
  if (as_json) {
    PrintJson(waste::ctl::ClientsJson(*status));
  } else if (status->clients.empty()) {
    std::printf("no clients attached\n");
  } else {
    // The command line goes last and uncut: this is the place to read it whole.
    for (const std::string& line :
         waste::ctl::Table(waste::ctl::ClientRows(*status, false), std::string::npos))
      std::printf("%s\n", line.c_str());
  }
  return kOk;
}

int RunMetrics(const std::string& socket, bool as_json) {
  int code = kOk;
  const auto status = FetchStatus(socket, &code);
  if (!status) return code;
  const std::vector<waste::MetricFamily> families = waste::StatusMetrics(*status);
  if (!as_json) {
    std::fputs(waste::PrometheusText(families).c_str(), stdout);
    return kOk;
  }
  json out = json::array();
  for (const waste::MetricFamily& f : families) {
    json samples = json::array();
    for (const waste::MetricSample& m : f.samples) {
      json labels = json::object();
      for (const auto& [k, v] : m.labels) labels[k] = v;
      samples.push_back({{"labels", labels}, {"value", m.value}});
    }
    out.push_back({{"name", f.name}, {"type", f.type}, {"help", f.help}, {"samples", samples}});
  }
  PrintJson(out);
  return kOk;
}

int RunStop(const std::string& socket, bool as_json) {
  int code = kOk;
  auto client = Connect(socket, &code);
  if (!client) return code;
  if (waste::Status st = client->Stop(); !st.ok()) return Fail(st);
  if (as_json) {
    PrintJson({{"socket", socket}, {"stopping", true}});
  } else {
    std::printf("wasted at %s is stopping\n", socket.c_str());
  }
  return kOk;
}

int RunWarm(const std::string& socket, bool as_json) {
  int code = kOk;
  auto client = Connect(socket, &code);
  if (!client) return code;
  auto n = client->Warm();
  if (!n.ok()) return Fail(n.status());
  if (as_json) {
    PrintJson({{"queued", *n}});
  } else {
    std::printf("%u warm-up reads queued (the most used records, into free slots)\n", *n);
  }
  return kOk;
}

// Seconds as "42 s", "3.5 min", "2.0 h", "1.5 d".
std::string Age(double s) {
  char buf[32];
  if (s < 120) std::snprintf(buf, sizeof buf, "%.0f s", s);
  else if (s < 7200) std::snprintf(buf, sizeof buf, "%.1f min", s / 60);
  else if (s < 172800) std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  else std::snprintf(buf, sizeof buf, "%.1f d", s / 86400);
  return buf;
}

int RunStates(const std::string& socket, bool as_json) {
  int code = kOk;
  auto client = Connect(socket, &code);
  if (!client) return code;
  auto list = client->ListStates();
  if (!list.ok()) return Fail(list.status());
  uint64_t total = 0;
  for (const waste::PromptStateInfo& s : list->states) total += s.bytes;
  if (as_json) {
    json states = json::array();
    for (const waste::PromptStateInfo& s : list->states)
      states.push_back({{"tokens", s.tokens}, {"bytes", s.bytes}, {"uid", s.uid},
                        {"age_seconds", s.age_seconds}, {"idle_seconds", s.idle_seconds},
                        {"fingerprint", s.fingerprint},
                        {"tier", s.in_memory ? "memory" : "disk"}});
    PrintJson({{"budget_bytes", list->budget},
               {"memory_budget_bytes", list->memory_budget},
               {"bytes", total},
               {"states", states}});
    return kOk;
  }
  if (list->budget == 0 && list->memory_budget == 0) {
    std::printf(
        "this wasted keeps no prompt states (no state-dir, or states-budget and states-memory "
        "0)\n");
    return kOk;
  }
  uint64_t in_memory = 0;
  for (const waste::PromptStateInfo& s : list->states) in_memory += s.in_memory ? s.bytes : 0;
  std::printf("%zu prompt states, %s in memory of a budget of %s, %s on disk of a budget of %s\n",
              list->states.size(), waste::FormatSize(in_memory).c_str(),
              waste::FormatSize(list->memory_budget).c_str(),
              waste::FormatSize(total - in_memory).c_str(),
              waste::FormatSize(list->budget).c_str());
  if (list->states.empty()) return kOk;
  std::vector<std::vector<std::string>> rows = {
      {"tokens", "bytes", "tier", "uid", "age", "last use"}};
  for (const waste::PromptStateInfo& s : list->states)
    rows.push_back({std::to_string(s.tokens), waste::FormatSize(s.bytes),
                    s.in_memory ? "memory" : "disk", std::to_string(s.uid), Age(s.age_seconds),
                    Age(s.idle_seconds) + " ago"});
  for (const std::string& line : waste::ctl::Table(rows, std::string::npos))
    std::printf("%s\n", line.c_str());
  return kOk;
}

int RunDropStates(const std::string& socket, bool as_json) {
  int code = kOk;
  auto client = Connect(socket, &code);
  if (!client) return code;
  auto n = client->DropStates();
  if (!n.ok()) return Fail(n.status());
  if (as_json) {
    PrintJson({{"dropped_states", *n}});
  } else {
    std::printf("%u prompt states removed\n", *n);
  }
  return kOk;
}

int RunDrop(const std::string& socket, int layer, bool as_json) {
  int code = kOk;
  auto client = Connect(socket, &code);
  if (!client) return code;
  auto n = client->Drop(layer);
  if (!n.ok()) return Fail(n.status());
  if (as_json) {
    PrintJson({{"dropped", *n}, {"layer", layer < 0 ? json(nullptr) : json(layer)}});
  } else {
    std::printf("%u slots emptied%s\n", *n,
                layer < 0 ? "" : (" in layer " + std::to_string(layer)).c_str());
  }
  return kOk;
}

int RunReload(const std::string& socket, bool as_json) {
  int code = kOk;
  auto client = Connect(socket, &code);
  if (!client) return code;
  auto r = client->Reload();
  if (!r.ok()) return Fail(r.status());
  if (as_json) {
    PrintJson({{"applied", r->applied}, {"need_restart", r->need_restart}});
    return kOk;
  }
  if (r->applied.empty() && r->need_restart.empty())
    std::printf("settings reloaded: nothing changed\n");
  for (const std::string& a : r->applied) std::printf("applied   %s\n", a.c_str());
  for (const std::string& n : r->need_restart)
    std::printf("changed, takes effect at restart   %s\n", n.c_str());
  return kOk;
}

// Every wasted on the machine, as /proc shows them; those whose socket is on
// their command line and answers also give their model, budget and clients.
int RunDaemons(bool as_json) {
  const std::vector<waste::RunningDaemon> list = waste::RunningDaemons();
  json out = json::array();
  std::vector<std::vector<std::string>> rows = {
      {"pid", "uid", "resident", "budget", "clients", "socket", "model"}};
  for (const waste::RunningDaemon& d : list) {
    std::optional<waste::DaemonStatus> status;
    if (!d.socket.empty()) {
      auto client = waste::DaemonClient::Connect(d.socket);
      if (client.ok()) {
        auto s = (*client)->GetStatus();
        if (s.ok()) status = std::move(*s);
      }
    }
    json j = {{"pid", d.pid}, {"uid", d.uid}, {"resident_bytes", d.resident_bytes},
              {"args", d.args}, {"socket", d.socket.empty() ? json(nullptr) : json(d.socket)}};
    if (status) {
      j["container"] = status->container;
      j["budget_bytes"] = status->budget;
      j["clients"] = status->clients.size();
    }
    out.push_back(j);
    std::string command = "wasted";
    for (const std::string& a : d.args) command += " " + a;
    rows.push_back({std::to_string(d.pid), std::to_string(d.uid),
                    waste::FormatSize(d.resident_bytes),
                    status ? waste::FormatSize(status->budget) : "-",
                    status ? std::to_string(status->clients.size()) : "-",
                    d.socket.empty() ? "-" : d.socket, status ? status->container : command});
  }
  if (as_json) {
    PrintJson(out);
  } else if (list.empty()) {
    std::printf("no wasted is running on this machine\n");
  } else {
    for (const std::string& line : waste::ctl::Table(rows, std::string::npos))
      std::printf("%s\n", line.c_str());
  }
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
  // Every command takes --socket and --json.
  auto command = [&](const std::string& name, const std::string& what) {
    CLI::App* cmd = app.add_subcommand(name, what);
    cmd->add_option("--socket", socket, "wasted's Unix socket")->capture_default_str();
    cmd->add_flag("--json", as_json, "Print JSON instead of text");
    return cmd;
  };
  bool watch = false;
  double interval = 1;
  CLI::App* status = command(
      "status", "Show the model, the memory budget, the cache, the reads, the clients and the layers");
  status->add_flag("--watch", watch, "Redraw a live view in place until q or Ctrl-C (as top does)");
  status->add_option("--interval", interval, "Seconds between refreshes of --watch")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  CLI::App* clients = command(
      "clients", "List the attached clients: pid, uid, command line, time attached, tokens, hits, late, "
                 "misses, pins");
  CLI::App* metrics = command(
      "metrics", "Print the status counters in the Prometheus text format (--json: as a list)");
  CLI::App* stop =
      command("stop", "Stop the daemon as SIGTERM would: its clients are told, its state is saved");
  CLI::App* warm = command(
      "warm", "Read the most used records (by the saved and current use counts) into free slots");
  int layer = -1;
  bool drop_states = false;
  CLI::App* drop = command("drop", "Empty every slot no client has pinned (in one layer with "
                                   "--layer), or with --states remove the prompt states");
  CLI::Option* layer_opt =
      drop->add_option("--layer", layer, "Only this layer")->check(CLI::NonNegativeNumber);
  drop->add_flag("--states", drop_states,
                 "Remove the prompt states you may see (all of them for root and the daemon's "
                 "user) instead of emptying slots")
      ->excludes(layer_opt);
  CLI::App* states = command(
      "states", "List the prompt states the daemon keeps: tokens, bytes, uid, age, last use");
  CLI::App* reload =
      command("reload", "Re-read the daemon's settings file and apply what can change while it runs");
  CLI::App* daemons = app.add_subcommand(
      "daemons", "List every wasted running on this machine (from /proc): pid, uid, resident memory, "
                 "and, where its socket answers, its budget, clients and model");
  daemons->add_flag("--json", as_json, "Print JSON instead of text");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, the version or the error
    return code == 0 ? kOk : kUsage;
  }
  if (status->parsed()) {
    if (watch && as_json) {
      std::fprintf(stderr, "wastectl: status --watch draws for a terminal; --json is for status alone\n");
      return kUsage;
    }
    return watch ? RunWatch(socket, interval) : RunStatus(socket, as_json);
  }
  if (clients->parsed()) return RunClients(socket, as_json);
  if (metrics->parsed()) return RunMetrics(socket, as_json);
  if (stop->parsed()) return RunStop(socket, as_json);
  if (warm->parsed()) return RunWarm(socket, as_json);
  if (drop->parsed())
    return drop_states ? RunDropStates(socket, as_json) : RunDrop(socket, layer, as_json);
  if (states->parsed()) return RunStates(socket, as_json);
  if (reload->parsed()) return RunReload(socket, as_json);
  if (daemons->parsed()) return RunDaemons(as_json);
  std::fprintf(stderr, "wastectl: no command given (see --help)\n");
  return kUsage;
}
