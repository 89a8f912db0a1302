// Stepper, what serve's scheduler steps: a header of its own, so that the
// scheduler depends on the three calls it makes, not on how an engine is
// opened (runtime/engine.h).
#pragma once

#include <span>

#include "base/status.h"
#include "engine/model/model.h"

namespace waste {

// Prompts shorter than this are not shared through wasted's prompt states
// (neither published nor looked up): their prefill costs less than the
// round trip and the copy. `waste serve`'s default, `waste run`'s rule.
constexpr int kShareMinTokens = 256;

// What a batch scheduler steps (serve::Scheduler), all from one thread: a
// model that may be built again between two calls. Engine is the one the
// programs use; a test gives its own to hold or fail a step.
class Stepper {
 public:
  virtual ~Stepper() = default;
  // Model::ForwardBatch(items); a failed step leaves every session as it was.
  virtual Status Step(std::span<const Model::BatchItem> items) = 0;
  // A fresh session of the model, with room for `max_context` tokens.
  virtual Result<Session> NewSession(int max_context) = 0;
  // Whether the model is there to run (false after wasted went away and
  // none serving the container came back).
  virtual bool attached() const = 0;

  // Prompt states shared beyond this process (wasted's, for an Engine
  // attached to one; none by default). The longest shared state whose
  // tokens begin `tokens` and are more than `longer_than`, restored into
  // `to` with the logits after it put in `logits` ([vocab]): how many tokens
  // it covers; 0 when there is none or it was refused (then `to` and
  // `logits` are as they were).
  virtual int FindSharedState(std::span<const int> /*tokens*/, int /*longer_than*/,
                              Session& /*to*/, std::span<float> /*logits*/) {
    return 0;
  }
  // Shares `s`, which has run `tokens`, with `logits` after the last of them.
  virtual void PublishSharedState(std::span<const int> /*tokens*/, const Session& /*s*/,
                                  std::span<const float> /*logits*/) {}
};

}  // namespace waste
