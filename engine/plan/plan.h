// Memory planning: what a model needs at least (the floor), what it should
// get (the recommendation) and what this machine would give it (the default
// budget), from the container's manifest and the memory this process may
// use (cgroup v1/v2 limits honoured, never the host's total alone).
//
// Two plans, each made here and nowhere else:
// - MemoryPlan: one process running the model by itself (`waste run
//   --local`): its trunk, its state and scratch, its cache.
// - DaemonPlan: wasted's own budget (trunk segment + cache segment + its
//   overhead), which `wasted` and `wasted --check` use and `waste plan`
//   shows; each client attached to it adds its state and scratch
//   (MemoryPlan::client_state, scratch) outside that budget.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/size_text.h"  // FormatSize
#include "engine/format/container.h"

namespace waste {

// One process running the model by itself; client_state and scratch are
// also each client's own share when it is attached to wasted.
struct MemoryPlan {
  int context = 0;  // tokens of context the per-client state is sized for
  // The floor's parts, in bytes.
  uint64_t trunk = 0;            // resident trunk (the embedding table stays on disk)
  uint64_t client_state = 0;     // one client's KDA states, convolution rings, latent and K/V caches
  uint64_t scratch = 0;          // one client's activations, logits and lookup tables
  uint64_t min_cache = 0;        // the experts of one MoE layer, pinned while they are used
  uint64_t daemon_overhead = 0;  // 16 MiB: tables and buffers
  uint64_t working_set = 0;      // one token's routed experts over every MoE layer
  uint64_t floor() const { return trunk + client_state + scratch + min_cache + daemon_overhead; }
  uint64_t recommended() const { return floor() + 3 * working_set; }
};

MemoryPlan PlanMemory(const Manifest& m, int context);

// A prefill chunk's work memory per token of the chunk (the forward pass
// sizes these buffers to the chunk, engine/model/forward.cc, moe.cc and the
// attention kinds' files): the activations every layer passes on (x, its
// norm, the sublayer's output, the lookahead's input, K3's block
// representations), the largest attention kind's buffers (its projections
// and heads' outputs), and the MoE layers' shared buffers (each routed
// slot's output, the shared expert's, K3's latent input, the gate and up
// lookup tables, the router's logits and the routing).
uint64_t ChunkBytesPerToken(const Manifest& m);

// The prefill chunk a compute client runs with when no --chunk is given.
// When every expert record fits in the cache, kShortChunk (32, what was
// always used): nothing is read twice whatever the chunk, and a short step
// keeps a served batch's decoding going between prompt parts. When they do
// not, a long prompt in chunks of 32 reads nearly every expert in every
// chunk (kl48b's 64 experts a layer, 8 a token: 32 tokens pick ~63 of them),
// so the chunk is as long as `scratch_cap` bytes of ChunkBytesPerToken allow,
// from kShortChunk up to kLongChunk: each expert is then read once per
// kLongChunk tokens instead of once per 32. No longer than `context`.
constexpr int kShortChunk = 32;
constexpr int kLongChunk = 2048;
// The most a long chunk's work memory may take: 512 MiB (kl48b's 215 KiB a
// token: 2048 tokens in 430 MiB), or less (ChunkScratchCap).
constexpr uint64_t kChunkScratchMax = 512ull << 20;
// `room`: what the chunk's memory would be taken from (an in-process
// cache's bytes, or the memory this process may use with a daemon): a
// quarter of it at most, so the cache keeps three quarters.
uint64_t ChunkScratchCap(uint64_t room);
int PlanChunk(const Manifest& m, bool experts_fit, uint64_t scratch_cap, int context);

// What shared memory costs, which shm/ decides (engine/plan does not depend
// on it): the caller passes shm::Segment::SizeFor with its huge-page choice
// bound in, shm::SlotTable::BytesFor and sizeof(shm::PinPage).
struct SegmentCosts {
  std::function<uint64_t(uint64_t bytes)> segment;  // the bytes a segment of `bytes` takes
  std::function<uint64_t(uint32_t layers, uint32_t experts, uint32_t slots)> slot_table;
  uint64_t pin_page = 0;
};

// Pin pages the daemon's overhead is planned for: one per client.
constexpr uint64_t kPlannedClients = 1024;

// A record's slot in the daemon's cache: the record rounded up to 4 KiB, so
// that it is read with O_DIRECT straight into place.
uint64_t SlotStride(const Manifest& m);

// The daemon's share: what its --budget holds.
struct DaemonPlan {
  uint64_t trunk = 0;        // the packed trunk segment
  uint64_t overhead = 0;     // 16 MiB for the process, the slot table, a pin page per client
  uint64_t min_cache = 0;    // the fewest slots that let its clients' forward passes proceed
  uint64_t working_set = 0;  // one token's routed experts over every MoE layer, in slots
  uint64_t floor() const { return trunk + overhead + min_cache; }
};
DaemonPlan PlanDaemon(const Manifest& m, const SegmentCosts& costs);

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
// parts when even the floor does not fit. The same rule for both plans.
Result<uint64_t> DefaultBudget(const MemoryPlan& plan, const MemoryLimit& limit);
Result<uint64_t> DefaultBudget(const DaemonPlan& plan, const MemoryLimit& limit);

// What the other wasted processes on this machine hold (protocol/
// running_daemons.h finds them), which a new daemon's default budget leaves
// to them: all daemons together stay under 3/4 of the memory limit.
struct OtherDaemons {
  uint64_t bytes = 0;  // resident, together
  std::string names;   // each named, "; " between, for the message that refuses
};

// wasted's budget: `requested` (its --budget) when given, refused below the
// floor with the floor's parts (it may exceed what the others leave: the
// user said so); with none (0), DefaultBudget of 3/4 of `limit` less what
// `others` hold, refused naming them when that is below the floor.
Result<uint64_t> DaemonBudget(const DaemonPlan& plan, uint64_t requested,
                              const MemoryLimit& limit, const OtherDaemons& others = {});

// "4G", "512MiB", "1.5g", "123456" (bytes) -> bytes; binary units.
Result<uint64_t> ParseSize(std::string_view text);

}  // namespace waste
