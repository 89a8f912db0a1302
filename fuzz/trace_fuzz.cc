// Fuzz target: the routing traces `waste replay` reads (clients/waste/
// trace.cc): one JSON line per token. The container is pretended to have
// Kimi-Linear-48B's shape (26 MoE layers of 256 experts), the shape of the
// committed seeds (lines of ../shared/data's trace). Any bytes give tokens
// whose experts exist, or an error naming the line.
#include <cstdint>
#include <string_view>

#include "clients/waste/trace.h"
#include "fuzz/scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      waste::fuzz::WriteScratch("trace.jsonl", std::string_view(reinterpret_cast<const char*>(data), size));
  auto trace = waste::cli::ReadTrace(path, 26, 256);
  if (!trace.ok()) return 0;
  for (const auto& t : *trace) {
    if (t.layers.size() != 26) __builtin_trap();
    for (const auto& ids : t.layers)
      for (int e : ids)
        if (e < 0 || e >= 256) __builtin_trap();
  }
  return 0;
}
