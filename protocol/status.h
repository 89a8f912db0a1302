// The daemon's status: one plain C++ type, which wasted fills on its event
// loop (daemon/status.cc), the RPC server sends as the protocol's Status, the
// client returns (DaemonClient::GetStatus), and wastectl's text, --json and
// metrics views and wasted's metrics page all read. StatusToProto and
// StatusFromProto are the two conversions, each written once; a status comes
// back from a round trip equal to what went in. Its counters are declared in
// protocol/counters.h, and every view of them reads kStatusCounters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/counters.h"
#include "wasted.capnp.h"

namespace waste {

// One attached client (proto::ClientStatus).
struct ClientStatusInfo {
  uint32_t id = 0;
  uint32_t pid = 0;
  uint32_t uid = 0;
  std::string command;
  double attached_seconds = 0;
  WASTE_CLIENT_COUNTERS(WASTE_COUNTER_FIELD)  // hits, late, misses
  uint32_t pins = 0;    // slots pinned right now
  uint64_t tokens = 0;  // tokens run, as the client reported them
  bool command_from_proc = false;  // the daemon read `command` from /proc; false: the client's word

  bool operator==(const ClientStatusInfo&) const = default;
};

// One expert's popularity in its layer (proto::ExpertUse).
struct ExpertUseInfo {
  uint32_t expert = 0;
  uint64_t uses = 0;  // demand hints, saved counts of earlier runs included
  bool resident = false;

  bool operator==(const ExpertUseInfo&) const = default;
};

// One layer with experts (proto::LayerStatus).
struct LayerStatusInfo {
  uint32_t layer = 0;
  WASTE_LAYER_COUNTERS(WASTE_COUNTER_FIELD)  // hits, late, misses
  uint32_t slots_ready = 0, slots_loading = 0;
  std::vector<uint8_t> resident;  // bit e (byte e / 8, bit e % 8): expert e is ready
  std::vector<ExpertUseInfo> hottest;  // most used first

  bool is_resident(uint32_t expert) const {
    return expert / 8 < resident.size() && (resident[expert / 8] >> (expert % 8) & 1) != 0;
  }
  bool operator==(const LayerStatusInfo&) const = default;
};

// The reads' priorities as `queued` and `in_flight` index them: "demand",
// "lookahead", "warm" (and "priorityN" past those), for every view.
std::string PriorityName(size_t i);

// The daemon's state (proto::Status), field for field.
struct DaemonStatus {
  std::string version;  // wasted's version
  uint32_t pid = 0;
  double uptime_seconds = 0;
  std::string container;
  std::string arch;
  uint64_t budget = 0;  // the ceiling on trunk + cache + overhead
  uint64_t trunk_bytes = 0;
  uint64_t cache_bytes = 0;
  uint64_t overhead_bytes = 0;
  bool trunk_wired = false;  // mlock succeeded
  std::string page_kind;     // which pages back the segments
  uint32_t slots = 0;
  uint32_t slots_ready = 0;
  uint32_t slots_loading = 0;
  uint32_t slots_pinned = 0;  // a subset of the ready ones
  uint32_t slots_failed = 0;
  // hits, late, misses, reads, bytes_read, read_errors, lookahead_reads, ...:
  // every counter of protocol/counters.h.
  WASTE_STATUS_COUNTERS(WASTE_COUNTER_FIELD)
  std::vector<uint32_t> queued;     // waiting reads by priority: demand, lookahead, warm
  std::vector<uint32_t> in_flight;  // reads under way by priority
  std::vector<ClientStatusInfo> clients;
  uint32_t io_depth = 0;
  std::string policy;            // eviction: lfru or lru
  double read_busy_seconds = 0;  // with a read in flight: bytes_read / this = read throughput
  std::vector<LayerStatusInfo> layers;  // layers with experts, in order
  uint32_t experts = 0;                 // experts per layer
  uint64_t record_bytes = 0;            // one record, one read

  uint64_t demands() const { return hits + late + misses; }
  // Slots holding something or getting it (ready, loading or failed), and the rest.
  uint32_t slots_used() const { return slots_ready + slots_loading + slots_failed; }
  uint32_t slots_free() const { return slots > slots_used() ? slots - slots_used() : 0; }
  bool operator==(const DaemonStatus&) const = default;
};

// One counter of protocol/counters.h, as the views read it: a field of T
// (DaemonStatus, LayerStatusInfo or ClientStatusInfo).
template <typename T>
struct CounterOf {
  uint64_t T::*value;
  const char* kind;    // "counter" or "gauge"
  const char* metric;  // waste_..._total
  const char* help;
  const char* json;   // "hits", "lookahead.reads"
  const char* label;  // the text view's line or column, "" for none
};

// Every counter of each list, in the declaration's order (the protocol's).
#define WASTE_STATUS_ENTRY(member, ...) {&DaemonStatus::member, __VA_ARGS__},
#define WASTE_LAYER_ENTRY(member, ...) {&LayerStatusInfo::member, __VA_ARGS__},
#define WASTE_CLIENT_ENTRY(member, ...) {&ClientStatusInfo::member, __VA_ARGS__},
inline constexpr CounterOf<DaemonStatus> kStatusCounters[] = {
    WASTE_STATUS_COUNTERS(WASTE_STATUS_ENTRY)};
inline constexpr CounterOf<LayerStatusInfo> kLayerCounters[] = {
    WASTE_LAYER_COUNTERS(WASTE_LAYER_ENTRY)};
inline constexpr CounterOf<ClientStatusInfo> kClientCounters[] = {
    WASTE_CLIENT_COUNTERS(WASTE_CLIENT_ENTRY)};
#undef WASTE_STATUS_ENTRY
#undef WASTE_LAYER_ENTRY
#undef WASTE_CLIENT_ENTRY

// Writes `s` as the protocol's Status (the answer to status).
void StatusToProto(const DaemonStatus& s, proto::Status::Builder out);
// A Status message as the plain type (what GetStatus returns).
DaemonStatus StatusFromProto(proto::Status::Reader r);

}  // namespace waste
