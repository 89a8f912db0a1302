// The hint vocabulary: how urgently a caller wants an expert record. Spoken
// by the forward pass (engine/experts/expert_source.h), the daemon's client
// (link/daemon_client.h), the protocol and the daemon's cache policy alike.
#pragma once

namespace waste {

enum class HintKind {
  kDemand,     // needed now
  kLookahead,  // predicted for a coming layer
  kWarm,       // background warm-up
};

}  // namespace waste
