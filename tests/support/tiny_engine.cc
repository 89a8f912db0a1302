#include "tests/support/tiny_engine.h"

#include <utility>

namespace waste::testing {

Result<std::unique_ptr<TinyEngine>> TinyEngine::Create(const SynthSpec& spec,
                                                       const std::string& dir,
                                                       const TinyEngineOptions& o) {
  auto written = WriteSynthetic(spec, dir, /*overwrite=*/true, o.jobs, nullptr);
  if (!written.ok()) return written.status().Prefixed("synthesizing " + spec.name);
  return Open(dir, o);
}

Result<std::unique_ptr<TinyEngine>> TinyEngine::Open(const std::string& dir,
                                                     const TinyEngineOptions& o) {
  std::unique_ptr<TinyEngine> e(new TinyEngine());
  e->dir_ = dir;
  auto ct = Container::Open(dir);
  if (!ct.ok()) return ct.status().Prefixed("opening " + dir);
  e->container_ = std::make_unique<Container>(std::move(*ct));
  CacheOptions co;
  co.slots = o.slots;
  auto cache = ExpertCache::Create(*e->container_, co);
  if (!cache.ok()) return cache.status().Prefixed("making the cache");
  e->cache_ = std::move(*cache);
  if (o.load) {
    auto model = Model::Load(*e->container_, e->cache_.get(), o.model);
    if (!model.ok()) return model.status().Prefixed("loading the model");
    e->model_ = std::move(*model);
  }
  return e;
}

Result<std::unique_ptr<TinyEngine>> TinyEngine::Create(const std::string& preset,
                                                       const std::string& dir,
                                                       const TinyEngineOptions& o) {
  auto spec = SynthPreset(preset);
  if (!spec.ok()) return spec.status();
  return Create(*spec, dir, o);
}

}  // namespace waste::testing
