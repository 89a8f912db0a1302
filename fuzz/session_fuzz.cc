// Fuzz target: a session state file (engine/model/session_io.cc,
// LoadSession), which `waste chat /load FILE` reads: the input is the file,
// loaded for a tiny synthetic model (fuzz/tiny.h) with a planned context of
// 64. Any bytes give a session within that context or an error naming the
// file; a session that loaded runs one more token. The fingerprint in a
// file's header is the model's, so the seeds are states saved from it.
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/experts/cache.h"
#include "engine/model/model.h"
#include "engine/model/session_io.h"
#include "fuzz/scratch.h"
#include "fuzz/tiny.h"

namespace {

struct Engine {
  std::unique_ptr<waste::ExpertCache> cache;
  std::unique_ptr<waste::Model> model;
  Engine() {
    const waste::Container& ct = waste::fuzz::Tiny::Get();
    waste::CacheOptions co;
    co.slots = 64;
    co.readers = 1;
    auto c = waste::ExpertCache::Create(ct, co);
    if (!c.ok()) std::abort();
    cache = std::move(*c);
    waste::ModelOptions mo;
    mo.threads = 1;
    auto m = waste::Model::Load(ct, cache.get(), mo);
    if (!m.ok()) std::abort();
    model = std::move(*m);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Engine e;
  constexpr int kContext = 64;
  const std::string path =
      waste::fuzz::WriteScratch("state.bin", std::string_view(reinterpret_cast<const char*>(data), size));
  auto s = waste::LoadSession(*e.model, path, kContext);
  if (!s.ok()) return 0;
  if (s->max_context > kContext || s->position < 0 || s->position > s->max_context) __builtin_trap();
  std::vector<float> logits(e.model->config().vocab);
  const int token[1] = {1};
  (void)e.model->Forward(*s, token, logits.data());
  return 0;
}
