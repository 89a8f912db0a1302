// The counters of wasted's status as metrics: one list of samples, written
// in the Prometheus text exposition format (version 0.0.4) by `wastectl
// metrics` and by wasted's own HTTP listener (--metrics-listen), so both say
// exactly the same thing. Counters end in _total, sizes are bytes, times
// seconds; labels name the layer, the client, the priority or the part.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "protocol/status.h"

namespace waste {

struct MetricSample {
  std::vector<std::pair<std::string, std::string>> labels;  // name, value
  double value = 0;
};

struct MetricFamily {
  std::string name;  // waste_...
  std::string type;  // "counter" or "gauge"
  std::string help;
  std::vector<MetricSample> samples;
};

// Every metric of a status, in a fixed order.
std::vector<MetricFamily> StatusMetrics(const DaemonStatus& s);

// The text exposition format: # HELP and # TYPE lines, then the samples, one
// a line; label values escaped (\\, \", \n).
std::string PrometheusText(const std::vector<MetricFamily>& families);

}  // namespace waste
