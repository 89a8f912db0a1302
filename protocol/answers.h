// The daemon's answers to attach (the model it serves) and to reload, as
// plain C++ types that the daemon fills and the client returns, each
// converted to its Cap'n Proto message and back once, here. The status has
// its own header (protocol/status.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "wasted.capnp.h"

namespace waste {

// What wasted serves, as the attach answer describes it (proto::ModelDescription).
struct DaemonModel {
  std::string container;    // the container directory (absolute)
  std::string fingerprint;  // of its manifest: check it against the one opened locally
  std::string arch;
  uint32_t layers = 0;
  uint32_t experts = 0;
  uint32_t top_k = 0;
  uint32_t slots = 0;         // expert cache slots
  uint64_t record_bytes = 0;  // one expert record
  uint64_t slot_stride = 0;   // bytes from one slot to the next in the cache segment

  bool operator==(const DaemonModel&) const = default;
};

void ModelToProto(const DaemonModel& m, proto::ModelDescription::Builder out);
DaemonModel ModelFromProto(proto::ModelDescription::Reader r);

// What a reload did, one "name: old -> new" per changed setting.
struct ReloadOutcome {
  std::vector<std::string> applied;       // in effect now
  std::vector<std::string> need_restart;  // changed in the settings; take effect at restart

  bool operator==(const ReloadOutcome&) const = default;
};

void ReloadToProto(const ReloadOutcome& r, proto::Daemon::ReloadResults::Builder out);
ReloadOutcome ReloadFromProto(proto::Daemon::ReloadResults::Reader r);

// A prompt state the daemon keeps, as listStates describes it (proto::PromptState).
struct PromptStateInfo {
  uint32_t tokens = 0;
  uint64_t bytes = 0;  // its file (its memfd's when in memory)
  uint32_t uid = 0;    // who published it
  double age_seconds = 0, idle_seconds = 0;  // since published; since last published or found
  uint64_t fingerprint = 0;  // the publisher's word for the model's shape
  bool in_memory = false;    // in the memory tier, not yet on disk

  bool operator==(const PromptStateInfo&) const = default;
};

void PromptStateToProto(const PromptStateInfo& s, proto::PromptState::Builder out);
PromptStateInfo PromptStateFromProto(proto::PromptState::Reader r);

}  // namespace waste
