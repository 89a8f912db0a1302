#include "protocol/answers.h"

namespace waste {

void ModelToProto(const DaemonModel& m, proto::ModelDescription::Builder d) {
  d.setContainer(m.container);
  d.setFingerprint(m.fingerprint);
  d.setArch(m.arch);
  d.setLayers(m.layers);
  d.setExperts(m.experts);
  d.setTopK(m.top_k);
  d.setRecordBytes(m.record_bytes);
  d.setSlots(m.slots);
  d.setSlotStride(m.slot_stride);
}

DaemonModel ModelFromProto(proto::ModelDescription::Reader r) {
  DaemonModel m;
  m.container = r.getContainer().cStr();
  m.fingerprint = r.getFingerprint().cStr();
  m.arch = r.getArch().cStr();
  m.layers = r.getLayers();
  m.experts = r.getExperts();
  m.top_k = r.getTopK();
  m.slots = r.getSlots();
  m.record_bytes = r.getRecordBytes();
  m.slot_stride = r.getSlotStride();
  return m;
}

void ReloadToProto(const ReloadOutcome& r, proto::Daemon::ReloadResults::Builder out) {
  auto applied = out.initApplied(static_cast<unsigned>(r.applied.size()));
  for (size_t i = 0; i < r.applied.size(); ++i) applied.set(static_cast<unsigned>(i), r.applied[i]);
  auto later = out.initNeedRestart(static_cast<unsigned>(r.need_restart.size()));
  for (size_t i = 0; i < r.need_restart.size(); ++i)
    later.set(static_cast<unsigned>(i), r.need_restart[i]);
}

ReloadOutcome ReloadFromProto(proto::Daemon::ReloadResults::Reader r) {
  ReloadOutcome a;
  for (auto t : r.getApplied()) a.applied.emplace_back(t.cStr());
  for (auto t : r.getNeedRestart()) a.need_restart.emplace_back(t.cStr());
  return a;
}

void PromptStateToProto(const PromptStateInfo& s, proto::PromptState::Builder out) {
  out.setTokens(s.tokens);
  out.setBytes(s.bytes);
  out.setUid(s.uid);
  out.setAgeSeconds(s.age_seconds);
  out.setIdleSeconds(s.idle_seconds);
  out.setFingerprint(s.fingerprint);
  out.setInMemory(s.in_memory);
}

PromptStateInfo PromptStateFromProto(proto::PromptState::Reader r) {
  return {r.getTokens(), r.getBytes(), r.getUid(), r.getAgeSeconds(), r.getIdleSeconds(),
          r.getFingerprint(), r.getInMemory()};
}

}  // namespace waste
