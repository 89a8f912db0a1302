// Memory planning: what a model needs at least (the floor), what it should
// get (the recommendation) and what this machine would give it (the default
// budget), from the container's manifest and the memory this process may
// use (cgroup v1/v2 limits honoured, never the host's total alone).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/size_text.h"  // FormatSize
#include "engine/format/container.h"

namespace waste {

struct MemoryPlan {
  int context = 0;  // tokens of context the per-client state is sized for
  // The floor's parts, in bytes.
  uint64_t trunk = 0;            // resident trunk (the embedding table stays on disk)
  uint64_t client_state = 0;     // one client's KDA states, convolution rings and latent KV
  uint64_t scratch = 0;          // one client's activations, logits and lookup tables
  uint64_t min_cache = 0;        // the experts of one MoE layer, pinned while they are used
  uint64_t daemon_overhead = 0;  // slot table, pin pages, buffers
  uint64_t working_set = 0;      // one token's routed experts over every MoE layer
  uint64_t floor() const { return trunk + client_state + scratch + min_cache + daemon_overhead; }
  uint64_t recommended() const { return floor() + 3 * working_set; }
};

MemoryPlan PlanMemory(const Manifest& m, int context);

// The memory this process may use: the smaller of the machine's RAM and any
// cgroup limit on this process. `source` says which one decided.
struct MemoryLimit {
  uint64_t bytes = 0;
  std::string source;
};
MemoryLimit ProcessMemoryLimit();

// The budget this machine would give the model with no --budget: the largest
// of floor + 3, 2 or 1 working sets under 3/4 of the limit, else everything
// under 3/4 if that still clears the floor; an error naming the floor's
// parts when even the floor does not fit.
Result<uint64_t> DefaultBudget(const MemoryPlan& plan, const MemoryLimit& limit);

// "4G", "512MiB", "1.5g", "123456" (bytes) -> bytes; binary units.
Result<uint64_t> ParseSize(std::string_view text);

}  // namespace waste
