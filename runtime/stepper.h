// Stepper, what serve's scheduler steps: a header of its own, so that the
// scheduler depends on the three calls it makes, not on how an engine is
// opened (runtime/engine.h).
#pragma once

#include <span>

#include "base/status.h"
#include "engine/model/model.h"

namespace waste {

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
};

}  // namespace waste
