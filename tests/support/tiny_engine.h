// A tiny synthetic model in the test's own process: the container
// `WriteSynthetic` makes of a spec, opened, an in-process cache of its
// experts and a model loaded over it, for the suites that drive the engine
// (the scheduler, the API server, the router's cut, the reference logits).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "engine/experts/cache.h"
#include "engine/format/container.h"
#include "engine/model/model.h"
#include "engine/synth/synth.h"

namespace waste::testing {

struct TinyEngineOptions {
  int jobs = 2;           // threads writing the expert records
  uint64_t slots = 1000;  // the cache's records: 1000 holds every tiny preset whole
  bool load = true;       // false: the container and cache only, no model
  ModelOptions model;     // the model's options, when `load`
};

class TinyEngine {
 public:
  // Writes `spec`'s container into `dir` (replacing what is there), opens
  // it, makes the cache and, if `o.load`, loads the model. An error names
  // the step that failed.
  static Result<std::unique_ptr<TinyEngine>> Create(const SynthSpec& spec, const std::string& dir,
                                                    const TinyEngineOptions& o = {});
  // A container already in `dir` (a converted one), opened as Create opens its own.
  static Result<std::unique_ptr<TinyEngine>> Open(const std::string& dir,
                                                  const TinyEngineOptions& o = {});
  // The same for the preset `preset` (SynthPreset's names, e.g. "tiny-kimi").
  static Result<std::unique_ptr<TinyEngine>> Create(const std::string& preset,
                                                    const std::string& dir,
                                                    const TinyEngineOptions& o = {});

  const std::string& dir() const { return dir_; }
  Container& container() { return *container_; }
  ExpertCache* cache() { return cache_.get(); }
  Model& model() { return *model_; }  // only when loaded

 private:
  TinyEngine() = default;

  std::string dir_;
  std::unique_ptr<Container> container_;
  std::unique_ptr<ExpertCache> cache_;
  std::unique_ptr<Model> model_;
};

}  // namespace waste::testing
