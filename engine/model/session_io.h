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

#include <string>

#include "engine/model/model.h"

namespace waste {

// Needs only the container the session's model was built over: a client
// whose daemon went away, with no model left, can still save its session.
Status SaveSession(const Container& ct, const Session& s, const std::string& path);
Result<Session> LoadSession(const Model& m, const std::string& path, int max_context);
// The shape fingerprint of a container's model (config and trunk index), as
// stored in state files.
uint64_t ModelFingerprint(const Container& ct);

}  // namespace waste
