#include "protocol/metrics.h"

#include <cmath>
#include <cstdio>

namespace waste {
namespace {

class Builder {
 public:
  // Starts a family; the samples added next belong to it.
  Builder& Family(const std::string& name, const char* type, const std::string& help) {
    out_.push_back({name, type, help, {}});
    return *this;
  }
  Builder& Sample(double value, std::vector<std::pair<std::string, std::string>> labels = {}) {
    out_.back().samples.push_back({std::move(labels), value});
    return *this;
  }
  std::vector<MetricFamily> Take() { return std::move(out_); }

 private:
  std::vector<MetricFamily> out_;
};

double D(uint64_t v) {
  return static_cast<double>(v);
}

std::string Escape(const std::string& v) {
  std::string out;
  for (char ch : v) {
    if (ch == '\\') out += "\\\\";
    else if (ch == '"') out += "\\\"";
    else if (ch == '\n') out += "\\n";
    else out += ch;
  }
  return out;
}

std::string Number(double v) {
  char buf[40];
  if (std::isnan(v)) return "NaN";
  if (std::floor(v) == v && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

std::vector<MetricFamily> StatusMetrics(const DaemonStatus& s) {
  Builder b;
  b.Family("waste_info", "gauge", "wasted's version and what it serves (always 1)")
      .Sample(1, {{"version", s.version},
                  {"arch", s.arch},
                  {"container", s.container},
                  {"policy", s.policy},
                  {"page_kind", s.page_kind}});
  b.Family("waste_uptime_seconds", "gauge", "Seconds since wasted started").Sample(s.uptime_seconds);
  b.Family("waste_budget_bytes", "gauge", "The memory budget and its parts")
      .Sample(D(s.budget), {{"part", "total"}})
      .Sample(D(s.trunk_bytes), {{"part", "trunk"}})
      .Sample(D(s.cache_bytes), {{"part", "cache"}})
      .Sample(D(s.overhead_bytes), {{"part", "overhead"}});
  b.Family("waste_trunk_wired", "gauge", "1 when the trunk is locked in memory (mlock)")
      .Sample(s.trunk_wired ? 1 : 0);
  b.Family("waste_cache_slots", "gauge", "Expert cache slots by state")
      .Sample(s.slots_ready, {{"state", "ready"}})
      .Sample(s.slots_loading, {{"state", "loading"}})
      .Sample(s.slots_failed, {{"state", "failed"}})
      .Sample(s.slots_free(), {{"state", "free"}});
  b.Family("waste_cache_slots_pinned", "gauge", "Slots some client has pinned (among the ready)")
      .Sample(s.slots_pinned);
  for (const auto& c : kStatusCounters) b.Family(c.metric, c.kind, c.help).Sample(D(s.*c.value));
  b.Family("waste_read_busy_seconds_total", "counter",
           "Seconds with at least one read in flight (read bytes / this = read throughput)")
      .Sample(s.read_busy_seconds);
  auto& queued = b.Family("waste_reads_queued", "gauge", "Reads waiting, by priority");
  for (size_t k = 0; k < s.queued.size() && k < 3; ++k)
    queued.Sample(s.queued[k], {{"priority", PriorityName(k)}});
  auto& flying = b.Family("waste_reads_in_flight", "gauge", "Reads under way, by priority");
  for (size_t k = 0; k < s.in_flight.size() && k < 3; ++k)
    flying.Sample(s.in_flight[k], {{"priority", PriorityName(k)}});
  b.Family("waste_io_depth", "gauge", "Reads wasted keeps in flight at most").Sample(s.io_depth);

  for (const auto& c : kLayerCounters) {
    auto& f = b.Family(c.metric, c.kind, c.help);
    for (const LayerStatusInfo& l : s.layers)
      f.Sample(D(l.*c.value), {{"layer", std::to_string(l.layer)}});
  }
  auto& lr = b.Family("waste_layer_slots_ready", "gauge", "Slots holding a ready record, by layer");
  for (const LayerStatusInfo& l : s.layers)
    lr.Sample(l.slots_ready, {{"layer", std::to_string(l.layer)}});

  b.Family("waste_clients", "gauge", "Clients attached").Sample(D(s.clients.size()));
  // Clients come and go: their series carry the daemon's id for them and the pid.
  auto client_labels = [](const ClientStatusInfo& c) {
    return std::vector<std::pair<std::string, std::string>>{{"client", std::to_string(c.id)},
                                                            {"pid", std::to_string(c.pid)}};
  };
  for (const auto& c : kClientCounters) {
    auto& f = b.Family(c.metric, c.kind, c.help);
    for (const ClientStatusInfo& x : s.clients) f.Sample(D(x.*c.value), client_labels(x));
  }
  auto& ct = b.Family("waste_client_tokens_total", "counter", "Tokens run, by client");
  for (const auto& c : s.clients) ct.Sample(D(c.tokens), client_labels(c));
  auto& cp = b.Family("waste_client_pins", "gauge", "Slots pinned now, by client");
  for (const auto& c : s.clients) cp.Sample(c.pins, client_labels(c));
  return b.Take();
}

std::string PrometheusText(const std::vector<MetricFamily>& families) {
  std::string out;
  for (const MetricFamily& f : families) {
    out += "# HELP " + f.name + " " + f.help + "\n";
    out += "# TYPE " + f.name + " " + f.type + "\n";
    for (const MetricSample& m : f.samples) {
      out += f.name;
      if (!m.labels.empty()) {
        out += "{";
        for (size_t i = 0; i < m.labels.size(); ++i)
          out += (i ? "," : "") + m.labels[i].first + "=\"" + Escape(m.labels[i].second) + "\"";
        out += "}";
      }
      out += " " + Number(m.value) + "\n";
    }
  }
  return out;
}

}  // namespace waste
