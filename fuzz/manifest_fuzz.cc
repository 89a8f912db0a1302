// Fuzz target: the container's manifest parser (engine/format/), which reads
// an untrusted manifest.json: any bytes must give a manifest or an error,
// never a crash, a hang or an allocation out of proportion to the input.
#include <cstdint>
#include <string_view>

#include "engine/format/container.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = waste::Manifest::Parse(text);
  if (!m.ok()) return 0;
  // A manifest that parsed describes itself consistently.
  (void)m->ToJson().dump();
  for (int L = 0; L < m->config.n_layers; ++L) (void)m->Bank(L);
  return 0;
}
