#include "clients/wastectl/status_view.h"

#include <algorithm>
#include <cstdio>

#include "base/size_text.h"

namespace waste::ctl {

using nlohmann::json;

namespace {

std::string U(uint64_t v) {
  return std::to_string(v);
}

json ByPriority(const std::vector<uint32_t>& counts) {
  json j = json::object();
  for (size_t i = 0; i < counts.size(); ++i) j[PriorityName(i)] = counts[i];
  return j;
}

std::string ByPriorityText(const std::vector<uint32_t>& counts) {
  if (counts.empty()) return "none reported";
  std::string out;
  for (size_t i = 0; i < counts.size(); ++i)
    out += (i ? ", " : "") + PriorityName(i) + " " + std::to_string(counts[i]);
  return out;
}

json Nullable(std::optional<double> v) {
  return v ? json(*v) : json(nullptr);
}

// Bytes per second while at least one read was in flight.
std::optional<double> Throughput(const DaemonStatus& s) {
  if (s.read_busy_seconds <= 0) return std::nullopt;
  return static_cast<double>(s.bytes_read) / s.read_busy_seconds;
}

// Of the lookahead's reads, the share demanded before eviction.
std::optional<double> Precision(const DaemonStatus& s) {
  if (s.lookahead_reads == 0) return std::nullopt;
  return static_cast<double>(s.lookahead_used) / static_cast<double>(s.lookahead_reads);
}

// Of the demand hints, the share a lookahead hint had named first.
std::optional<double> Recall(const DaemonStatus& s) {
  if (s.demands() == 0) return std::nullopt;
  return static_cast<double>(s.demand_hinted) / static_cast<double>(s.demands());
}

uint32_t ResidentCount(const LayerStatusInfo& l, uint32_t experts) {
  uint32_t n = 0;
  for (uint32_t e = 0; e < experts; ++e) n += l.is_resident(e);
  return n;
}

}  // namespace

std::string Duration(double seconds) {
  char buf[48];
  const auto s = static_cast<unsigned long long>(seconds);
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%llum %02llus", s / 60, s % 60);
  } else if (s < 86400) {
    std::snprintf(buf, sizeof buf, "%lluh %02llum", s / 3600, s / 60 % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%llud %02lluh", s / 86400, s / 3600 % 24);
  }
  return buf;
}

std::optional<double> HitRate(uint64_t hits, uint64_t late, uint64_t misses) {
  if (hits + late + misses == 0) return std::nullopt;
  return static_cast<double>(hits) / static_cast<double>(hits + late + misses);
}

std::optional<double> LateRate(uint64_t hits, uint64_t late, uint64_t misses) {
  return HitRate(late, hits, misses);
}

std::string Percent(std::optional<double> rate) {
  if (!rate) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * *rate);
  return buf;
}

std::string ShortCommand(const std::string& command) {
  const size_t space = command.find(' ');
  const size_t slash = command.rfind('/', space == std::string::npos ? command.npos : space);
  return slash == std::string::npos ? command : command.substr(slash + 1);
}

std::string Fit(const std::string& text, size_t width) {
  if (text.size() <= width) return text;
  if (width <= 3) return text.substr(0, width);
  return text.substr(0, width - 3) + "...";
}

std::vector<std::string> Table(const std::vector<std::vector<std::string>>& rows, size_t width) {
  std::vector<size_t> w;
  for (const auto& row : rows) {
    if (w.size() < row.size()) w.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], row[i].size());
  }
  std::vector<std::string> lines;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i + 1 < row.size(); ++i)
      line += "  " + std::string(w[i] - row[i].size(), ' ') + row[i];
    if (!row.empty()) line += "  " + row.back();
    lines.push_back(Fit(line, width));
  }
  return lines;
}

std::vector<std::vector<std::string>> ClientRows(const DaemonStatus& s, bool compact) {
  std::vector<std::string> head = {"id", "pid", "uid", "attached", "tokens"};
  for (const auto& k : kClientCounters) head.push_back(k.label);
  if (!compact) head.push_back("hit%");
  head.insert(head.end(), {"pins", "command"});
  std::vector<std::vector<std::string>> rows = {head};
  for (const ClientStatusInfo& c : s.clients) {
    std::vector<std::string> row = {U(c.id), U(c.pid), U(c.uid), Duration(c.attached_seconds),
                                    U(c.tokens)};
    for (const auto& k : kClientCounters) row.push_back(U(c.*k.value));
    if (!compact) row.push_back(Percent(HitRate(c.hits, c.late, c.misses)));
    row.insert(row.end(), {U(c.pins), compact ? ShortCommand(c.command) : c.command});
    rows.push_back(std::move(row));
  }
  return rows;
}

json ClientsJson(const DaemonStatus& s) {
  json clients = json::array();
  for (const ClientStatusInfo& c : s.clients) {
    json j = {{"id", c.id},
              {"pid", c.pid},
              {"uid", c.uid},
              {"attached_seconds", c.attached_seconds},
              {"tokens", c.tokens},
              {"hit_rate", Nullable(HitRate(c.hits, c.late, c.misses))},
              {"late_rate", Nullable(LateRate(c.hits, c.late, c.misses))},
              {"pins", c.pins},
              {"command", c.command},
              {"command_from_proc", c.command_from_proc}};
    for (const auto& k : kClientCounters) j[k.json] = c.*k.value;
    clients.push_back(std::move(j));
  }
  return clients;
}

json StatusJson(const DaemonStatus& s, const std::string& socket) {
  json layers = json::array();
  for (const LayerStatusInfo& l : s.layers) {
    json resident = json::array();
    for (uint32_t e = 0; e < s.experts; ++e)
      if (l.is_resident(e)) resident.push_back(e);
    json hottest = json::array();
    for (const ExpertUseInfo& h : l.hottest)
      hottest.push_back({{"expert", h.expert}, {"uses", h.uses}, {"resident", h.resident}});
    json j = {{"layer", l.layer},
              {"slots_ready", l.slots_ready},
              {"slots_loading", l.slots_loading},
              {"hit_rate", Nullable(HitRate(l.hits, l.late, l.misses))},
              {"late_rate", Nullable(LateRate(l.hits, l.late, l.misses))},
              {"resident", resident},
              {"hottest", hottest}};
    for (const auto& k : kLayerCounters) j[k.json] = l.*k.value;
    layers.push_back(std::move(j));
  }
  json j = {{"socket", socket},
            {"version", s.version},
            {"pid", s.pid},
            {"uptime_seconds", s.uptime_seconds},
            {"container", s.container},
            {"arch", s.arch},
            {"experts", s.experts},
            {"record_bytes", s.record_bytes},
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
            {"hit_rate", Nullable(HitRate(s.hits, s.late, s.misses))},
            {"late_rate", Nullable(LateRate(s.hits, s.late, s.misses))},
            {"read_busy_seconds", s.read_busy_seconds},
            {"read_bytes_per_second", Nullable(Throughput(s))},
            {"queued", ByPriority(s.queued)},
            {"in_flight", ByPriority(s.in_flight)},
            {"io_depth", s.io_depth},
            {"policy", s.policy},
            {"lookahead", {{"precision", Nullable(Precision(s))}, {"recall", Nullable(Recall(s))}}},
            {"clients", ClientsJson(s)},
            {"layers", layers}};
  // The counters under their keys, "group.key" inside the group's object.
  for (const auto& c : kStatusCounters) {
    const std::string key = c.json;
    const size_t dot = key.find('.');
    if (dot == std::string::npos)
      j[key] = s.*c.value;
    else
      j[key.substr(0, dot)][key.substr(dot + 1)] = s.*c.value;
  }
  return j;
}

std::string StatusText(const DaemonStatus& s, const std::string& socket, size_t width) {
  std::vector<std::string> lines;
  char buf[512];
  auto add = [&](const std::string& label, const std::string& text) {
    lines.push_back(Fit(label.empty() ? text : label + std::string(11 - label.size(), ' ') + text,
                        width));
  };
  add("", "wasted " + s.version + ", pid " + U(s.pid) + ", up " + Duration(s.uptime_seconds));
  add("socket", socket);
  add("model", s.arch + ": " + U(s.layers.size()) + " layers with " + U(s.experts) +
                   " experts, records of " + FormatSize(s.record_bytes));
  add("container", s.container);
  // The budget is a ceiling; the parts may add up to less (a small container).
  add("budget", FormatSize(s.budget) + ": trunk " + FormatSize(s.trunk_bytes) + " + cache " +
                    FormatSize(s.cache_bytes) + " + overhead " + FormatSize(s.overhead_bytes));
  add("trunk", std::string(s.trunk_wired ? "wired (mlock)" : "NOT wired (mlock failed; it may be "
                                                             "paged out)") +
                   "; pages: " + s.page_kind);
  std::snprintf(buf, sizeof buf, "%u: %u used (%u ready, %u loading, %u failed), %u pinned, %u free",
                s.slots, s.slots_used(), s.slots_ready, s.slots_loading, s.slots_failed,
                s.slots_pinned, s.slots_free());
  add("slots", buf);
  add("hit rate", Percent(HitRate(s.hits, s.late, s.misses)) + " (" + U(s.hits) + " hits, " +
                      U(s.late) + " late, " + U(s.misses) + " misses of demand hints)");
  add("late", Percent(LateRate(s.hits, s.late, s.misses)) +
                  " of demands (asked for ahead, still queued or being read)");
  const auto tput = Throughput(s);
  add("reads", U(s.reads) + " records, " + FormatSize(s.bytes_read) + ", " +
                   (tput ? FormatSize(static_cast<uint64_t>(*tput)) + "/s while reading"
                         : std::string("no reads yet")) +
                   ", " + U(s.read_errors) + " errors");
  add("in flight", ByPriorityText(s.in_flight) + " (io depth " + U(s.io_depth) + ")");
  add("queued", ByPriorityText(s.queued));
  if (s.lookahead_reads + s.demand_hinted + s.lookahead_dropped == 0) {
    add("lookahead", "no lookahead hints yet");
  } else {
    std::snprintf(buf, sizeof buf, "precision %s, recall %s; %llu reads, %llu used",
                  Percent(Precision(s)).c_str(), Percent(Recall(s)).c_str(),
                  static_cast<unsigned long long>(s.lookahead_reads),
                  static_cast<unsigned long long>(s.lookahead_used));
    add("lookahead", buf);
    add(" ", FormatSize(s.lookahead_unused_bytes) + " read and evicted unused, " +
                 U(s.lookahead_dropped) + " reads dropped as stale (layer passed)");
  }
  add("eviction", s.policy + "; " + U(s.warm_reads) + " warm-up reads");
  // A counter no line above shows has a line of its own.
  for (const auto& c : kStatusCounters)
    if (*c.label) add(c.label, U(s.*c.value));

  lines.push_back("");
  if (s.clients.empty()) {
    add("clients", "none attached");
  } else {
    lines.push_back("clients (" + U(s.clients.size()) + ")");
    for (std::string& l : Table(ClientRows(s, /*compact=*/true), width))
      lines.push_back(std::move(l));
  }

  lines.push_back("");
  lines.push_back(Fit("layers (ready: experts of the layer in the cache; hottest: expert:uses, * ready)",
                      width));
  std::vector<std::string> head = {"layer", "ready"};
  for (const auto& k : kLayerCounters) head.push_back(k.label);
  head.insert(head.end(), {"hit%", "hottest"});
  std::vector<std::vector<std::string>> rows = {head};
  for (const LayerStatusInfo& l : s.layers) {
    std::string hot;
    for (const ExpertUseInfo& h : l.hottest)
      hot += (hot.empty() ? "" : " ") + U(h.expert) + (h.resident ? "*" : "") + ":" + U(h.uses);
    std::vector<std::string> row = {U(l.layer),
                                    U(ResidentCount(l, s.experts)) + "/" + U(s.experts)};
    for (const auto& k : kLayerCounters) row.push_back(U(l.*k.value));
    row.insert(row.end(), {Percent(HitRate(l.hits, l.late, l.misses)), hot});
    rows.push_back(std::move(row));
  }
  for (std::string& l : Table(rows, width)) {
    // The hottest list is cut at a whole entry, not in the middle of one.
    if (l.size() >= 3 && l.compare(l.size() - 3, 3, "...") == 0) {
      const size_t space = l.rfind(' ', l.size() - 4);
      if (space != std::string::npos) l = l.substr(0, space) + " ...";
    }
    lines.push_back(std::move(l));
  }
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

}  // namespace waste::ctl
