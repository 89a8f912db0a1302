#include "protocol/status.h"

#include <iterator>
#include <utility>

namespace waste {
namespace {

// `x`'s counters of `table`, as a protocol list in the table's order.
template <typename T, size_t N>
void CountersToProto(const T& x, const CounterOf<T> (&table)[N],
                     capnp::List<uint64_t>::Builder out) {
  for (size_t k = 0; k < N; ++k) out.set(static_cast<unsigned>(k), x.*table[k].value);
}

// The inverse. A daemon older than this client lacks the last counters
// (they stay 0), a newer one sends more than it knows.
template <typename T, size_t N>
void CountersFromProto(capnp::List<uint64_t>::Reader in, const CounterOf<T> (&table)[N], T& x) {
  for (size_t k = 0; k < N && k < in.size(); ++k) x.*table[k].value = in[static_cast<unsigned>(k)];
}

}  // namespace

void StatusToProto(const DaemonStatus& s, proto::Status::Builder o) {
  o.setVersion(s.version);
  o.setPid(s.pid);
  o.setUptimeSeconds(s.uptime_seconds);
  o.setContainer(s.container);
  o.setArch(s.arch);
  o.setBudget(s.budget);
  o.setTrunkBytes(s.trunk_bytes);
  o.setCacheBytes(s.cache_bytes);
  o.setOverheadBytes(s.overhead_bytes);
  o.setTrunkWired(s.trunk_wired);
  o.setPageKind(s.page_kind);
  o.setSlots(s.slots);
  o.setSlotsReady(s.slots_ready);
  o.setSlotsLoading(s.slots_loading);
  o.setSlotsPinned(s.slots_pinned);
  o.setSlotsFailed(s.slots_failed);
  CountersToProto(s, kStatusCounters, o.initCounters(std::size(kStatusCounters)));
  o.setIoDepth(s.io_depth);
  o.setPolicy(s.policy);
  o.setReadBusySeconds(s.read_busy_seconds);
  o.setExperts(s.experts);
  o.setRecordBytes(s.record_bytes);
  auto q = o.initQueued(static_cast<unsigned>(s.queued.size()));
  for (size_t k = 0; k < s.queued.size(); ++k) q.set(static_cast<unsigned>(k), s.queued[k]);
  auto fl = o.initInFlight(static_cast<unsigned>(s.in_flight.size()));
  for (size_t k = 0; k < s.in_flight.size(); ++k) fl.set(static_cast<unsigned>(k), s.in_flight[k]);
  auto cl = o.initClients(static_cast<unsigned>(s.clients.size()));
  for (size_t i = 0; i < s.clients.size(); ++i) {
    const ClientStatusInfo& c = s.clients[i];
    auto x = cl[static_cast<unsigned>(i)];
    x.setId(c.id);
    x.setPid(c.pid);
    x.setUid(c.uid);
    x.setCommand(c.command);
    x.setAttachedSeconds(c.attached_seconds);
    CountersToProto(c, kClientCounters, x.initCounters(std::size(kClientCounters)));
    x.setPins(c.pins);
    x.setTokens(c.tokens);
    x.setCommandFromProc(c.command_from_proc);
  }
  auto ls = o.initLayers(static_cast<unsigned>(s.layers.size()));
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const LayerStatusInfo& l = s.layers[i];
    auto x = ls[static_cast<unsigned>(i)];
    x.setLayer(l.layer);
    CountersToProto(l, kLayerCounters, x.initCounters(std::size(kLayerCounters)));
    x.setSlotsReady(l.slots_ready);
    x.setSlotsLoading(l.slots_loading);
    x.setResident(kj::arrayPtr(l.resident.data(), l.resident.size()));
    auto hot = x.initHottest(static_cast<unsigned>(l.hottest.size()));
    for (size_t j = 0; j < l.hottest.size(); ++j) {
      auto h = hot[static_cast<unsigned>(j)];
      h.setExpert(l.hottest[j].expert);
      h.setUses(l.hottest[j].uses);
      h.setResident(l.hottest[j].resident);
    }
  }
}

DaemonStatus StatusFromProto(proto::Status::Reader r) {
  DaemonStatus d;
  d.version = r.getVersion().cStr();
  d.pid = r.getPid();
  d.uptime_seconds = r.getUptimeSeconds();
  d.container = r.getContainer().cStr();
  d.arch = r.getArch().cStr();
  d.budget = r.getBudget();
  d.trunk_bytes = r.getTrunkBytes();
  d.cache_bytes = r.getCacheBytes();
  d.overhead_bytes = r.getOverheadBytes();
  d.trunk_wired = r.getTrunkWired();
  d.page_kind = r.getPageKind().cStr();
  d.slots = r.getSlots();
  d.slots_ready = r.getSlotsReady();
  d.slots_loading = r.getSlotsLoading();
  d.slots_pinned = r.getSlotsPinned();
  d.slots_failed = r.getSlotsFailed();
  CountersFromProto(r.getCounters(), kStatusCounters, d);
  for (uint32_t q : r.getQueued()) d.queued.push_back(q);
  for (uint32_t q : r.getInFlight()) d.in_flight.push_back(q);
  for (const auto c : r.getClients()) {
    ClientStatusInfo info;
    info.id = c.getId();
    info.pid = c.getPid();
    info.uid = c.getUid();
    info.command = c.getCommand().cStr();
    info.attached_seconds = c.getAttachedSeconds();
    CountersFromProto(c.getCounters(), kClientCounters, info);
    info.pins = c.getPins();
    info.tokens = c.getTokens();
    info.command_from_proc = c.getCommandFromProc();
    d.clients.push_back(std::move(info));
  }
  d.io_depth = r.getIoDepth();
  d.policy = r.getPolicy().cStr();
  d.read_busy_seconds = r.getReadBusySeconds();
  d.experts = r.getExperts();
  d.record_bytes = r.getRecordBytes();
  for (const auto l : r.getLayers()) {
    LayerStatusInfo info;
    info.layer = l.getLayer();
    CountersFromProto(l.getCounters(), kLayerCounters, info);
    info.slots_ready = l.getSlotsReady();
    info.slots_loading = l.getSlotsLoading();
    const auto bits = l.getResident();
    info.resident.assign(bits.begin(), bits.end());
    for (const auto h : l.getHottest())
      info.hottest.push_back({h.getExpert(), h.getUses(), h.getResident()});
    d.layers.push_back(std::move(info));
  }
  return d;
}

std::string PriorityName(size_t i) {
  static const char* const kNames[] = {"demand", "lookahead", "warm"};
  return i < 3 ? kNames[i] : "priority" + std::to_string(i);
}

}  // namespace waste
