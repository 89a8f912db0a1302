#include "protocol/status.h"

#include <utility>

namespace waste {

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
  d.hits = r.getHits();
  d.late = r.getLate();
  d.misses = r.getMisses();
  d.reads = r.getReads();
  d.bytes_read = r.getBytesRead();
  d.read_errors = r.getReadErrors();
  for (uint32_t q : r.getQueued()) d.queued.push_back(q);
  for (uint32_t q : r.getInFlight()) d.in_flight.push_back(q);
  for (const auto c : r.getClients()) {
    ClientStatusInfo info;
    info.id = c.getId();
    info.pid = c.getPid();
    info.uid = c.getUid();
    info.command = c.getCommand().cStr();
    info.attached_seconds = c.getAttachedSeconds();
    info.hits = c.getHits();
    info.late = c.getLate();
    info.misses = c.getMisses();
    info.pins = c.getPins();
    info.tokens = c.getTokens();
    info.command_from_proc = c.getCommandFromProc();
    d.clients.push_back(std::move(info));
  }
  d.io_depth = r.getIoDepth();
  d.policy = r.getPolicy().cStr();
  d.lookahead_reads = r.getLookaheadReads();
  d.lookahead_used = r.getLookaheadUsed();
  d.lookahead_unused_bytes = r.getLookaheadUnusedBytes();
  d.lookahead_dropped = r.getLookaheadDropped();
  d.demand_hinted = r.getDemandHinted();
  d.warm_reads = r.getWarmReads();
  d.read_busy_seconds = r.getReadBusySeconds();
  d.experts = r.getExperts();
  d.record_bytes = r.getRecordBytes();
  for (const auto l : r.getLayers()) {
    LayerStatusInfo info;
    info.layer = l.getLayer();
    info.hits = l.getHits();
    info.late = l.getLate();
    info.misses = l.getMisses();
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

}  // namespace waste
