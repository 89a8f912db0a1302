// Saving and restoring a Session: recurrent states, convolution rings, the
// cache rows (MLA's latent KV, GQA's K/V) up to the current position, and
// the position. The file carries
// a fingerprint of the model's shape; a state saved from another model is
// refused, as is any file that does not add up.
//
// A state file is untrusted: LoadSession checks the context it claims
// against `max_context` (the caller's planned context, e.g. --ctx) and the
// file's size against what that header implies before it allocates.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model.h"

namespace waste {

// Needs only the container the session's model was built over: a client
// whose daemon went away, with no model left, can still save its session.
Status SaveSession(const Container& ct, const Session& s, const std::string& path);
Result<Session> LoadSession(const Model& m, const std::string& path, int max_context);
// The shape fingerprint of a container's model (config and trunk index), as
// stored in state files.
uint64_t ModelFingerprint(const Container& ct);

// A prompt state as bytes, for wasted to keep (daemon/prompt_states.h): the
// model's fingerprint, a snapshot and the logits after its last token.
std::vector<uint8_t> PackPromptState(uint64_t fingerprint, const SessionSnapshot& snap,
                                     std::span<const float> logits);
struct PromptState {
  SessionSnapshot state;
  std::vector<float> logits;  // [vocab]
};
// Untrusted bytes back: refused unless they say this `fingerprint`, a
// position of `tokens`, `vocab` logits and a size that adds up (the
// snapshot's floats against a session are RestoreSnapshot's check).
Result<PromptState> UnpackPromptState(std::span<const uint8_t> bytes, uint64_t fingerprint,
                                      int tokens, int vocab);

}  // namespace waste
