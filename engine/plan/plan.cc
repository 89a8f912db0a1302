#include "engine/plan/plan.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "engine/format/trunk_pack.h"

namespace waste {
namespace {

std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return std::nullopt;
  try {
    return std::stoull(s);
  } catch (...) {
    return std::nullopt;
  }
}

// The tightest memory limit on the cgroup path of this process, v2 or v1.
std::optional<uint64_t> CgroupLimit() {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  std::optional<uint64_t> best;
  auto take = [&](std::optional<uint64_t> v) {
    if (v && *v < (uint64_t{1} << 60)) best = best ? std::min(*best, *v) : *v;
  };
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (controllers.empty()) {  // v2: walk up to the root
      for (;;) {
        take(ReadNumber("/sys/fs/cgroup" + path + "/memory.max"));
        if (path.empty() || path == "/") break;
        path = path.substr(0, path.find_last_of('/'));
      }
    } else if (controllers.find("memory") != std::string::npos) {  // v1
      take(ReadNumber("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes"));
      take(ReadNumber("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
    }
  }
  return best;
}

}  // namespace

MemoryPlan PlanMemory(const Manifest& m, int context) {
  const ModelConfig& c = m.config;
  MemoryPlan p;
  p.context = context;
  p.trunk = PackedTrunkBytes(m);  // what is resident: the trunk as packed, derived tensors included
  const uint64_t f = sizeof(float);
  for (int L = 0; L < c.n_layers; ++L) {
    // Recurrent kinds twice: the committed state and the spare a chunk
    // computes into (model.h, Session).
    switch (c.layer_kind[L]) {
      case LayerKind::kKda: {
        const uint64_t C = static_cast<uint64_t>(c.kda_width());
        p.client_state +=
            2 * uint64_t(c.kda_heads) * c.kda_head_dim * c.kda_head_dim * f;         // recurrent state
        p.client_state += 2 * 3 * C * static_cast<uint64_t>(c.conv_kernel - 1) * f;  // conv rings
        break;
      }
      case LayerKind::kGatedDeltaNet:
        p.client_state += 2 * uint64_t(c.gdn_v_heads) * c.gdn_k_dim * c.gdn_v_dim * f;
        p.client_state +=
            2 * uint64_t(c.gdn_conv_width()) * static_cast<uint64_t>(c.conv_kernel - 1) * f;
        break;
      case LayerKind::kMla:
        p.client_state += static_cast<uint64_t>(context) * c.mla_row(L) * f;  // latent KV (+ DSA keys)
        break;
      case LayerKind::kGqa:
        p.client_state += static_cast<uint64_t>(context) * 2 * c.kv_width() * f;  // K/V cache
        break;
    }
  }
  const uint64_t widest =
      std::max({uint64_t(c.hidden), uint64_t(c.kda_width()), uint64_t(c.dense_inter),
                2 * uint64_t(c.gdn_conv_width()),
                uint64_t(c.shared_inter()), uint64_t(c.moe_inter) * c.top_k,
                uint64_t(c.expert_width()) * c.top_k,  // the per-slot outputs
                uint64_t(c.hidden) * c.attn_res_blocks(),  // AttnRes' block representations
                uint64_t(c.n_heads) * (c.qk_nope + c.qk_rope + c.v_head),
                uint64_t(c.q_width()) + 2 * uint64_t(c.kv_width())});
  p.scratch = 16 * widest * f + uint64_t(c.vocab) * f + uint64_t(context) * c.n_heads * f;
  if (c.n_experts > 0) {  // per-input lookup tables for the expert matvecs
    const ExpertQuant& q = m.quant;
    p.scratch += 2 * uint64_t(c.expert_width() / q.vec_dim) * q.stages * q.entries * f;
    p.scratch += uint64_t(c.moe_inter / q.vec_dim) * q.stages * q.entries * f * c.top_k;
    p.min_cache = uint64_t(c.top_k) * m.record.record_bytes;
    p.working_set = p.min_cache * c.n_moe_layers();
  }
  p.daemon_overhead = 16ull << 20;
  return p;
}

uint64_t ChunkBytesPerToken(const Manifest& m) {
  const ModelConfig& c = m.config;
  const uint64_t f = sizeof(float), hid = uint64_t(c.hidden);
  // x, hn, y and the lookahead's input; with AttnRes the blocks and the mix.
  uint64_t floats = 4 * hid;
  if (c.attn_res_block > 0) floats += (uint64_t(c.attn_res_blocks()) + 1) * hid;
  uint64_t attention = 0;  // the largest kind's buffers, [T][...]
  for (int L = 0; L < c.n_layers; ++L) {
    uint64_t a = 0;
    switch (c.layer_kind[L]) {
      case LayerKind::kKda: {  // qkv, fg, gate, o [C]; f, ga [D]; beta [H]
        const uint64_t C = uint64_t(c.kda_width());
        a = 6 * C + 2 * uint64_t(c.kda_head_dim) + uint64_t(c.kda_heads);
        break;
      }
      case LayerKind::kGatedDeltaNet:  // qkvz, ba, o
        a = 2 * uint64_t(c.gdn_key_width()) + 3 * uint64_t(c.gdn_value_width()) +
            2 * uint64_t(c.gdn_v_heads);
        break;
      case LayerKind::kMla: {  // q, the latent row, K3's gate, q_a and its norm, o
        const uint64_t nh = uint64_t(c.n_heads), vd = uint64_t(c.v_head);
        a = nh * (c.qk_nope + c.qk_rope) + uint64_t(c.kv_lora + c.qk_rope) +
            (c.mla_output_gate ? nh * vd : 0) + 2 * uint64_t(c.q_lora) + nh * vd;
        break;
      }
      case LayerKind::kGqa:  // q (and its gate), o
        a = uint64_t(c.n_heads) * c.head_dim * (c.attn_output_gate ? 2 : 1) +
            uint64_t(c.q_width());
        break;
    }
    attention = std::max(attention, a);
  }
  floats += attention;
  uint64_t bytes = floats * f;
  if (c.n_experts > 0) {
    const ExpertQuant& q = m.quant;
    const uint64_t ew = uint64_t(c.expert_width());
    // per_slot [top_k][expert width], shared_out [hidden]; K3's latent_in,
    // weighted sum and its norm [latent] each
    bytes += (uint64_t(c.top_k) * ew + hid + 3 * uint64_t(c.latent)) * f;
    // gate's and up's float tables (the largest of their three forms)
    if (!q.direct()) bytes += 2 * (ew / q.vec_dim) * q.stages * q.entries * f;
    bytes += uint64_t(c.n_experts) * f;  // its router logits
    bytes += 2 * 64 * 4 + 4;             // its Routing (engine/model/router.h)
    bytes += uint64_t(c.top_k) * 8;      // its (token, slot) pairs among its experts' users
  }
  return bytes + 8 * sizeof(void*);  // the products' row pointers
}

uint64_t ChunkScratchCap(uint64_t room) { return std::min(kChunkScratchMax, room / 4); }

int PlanChunk(const Manifest& m, bool experts_fit, uint64_t scratch_cap, int context) {
  int chunk = kShortChunk;
  if (!experts_fit) {
    const uint64_t fit = scratch_cap / ChunkBytesPerToken(m);
    chunk = static_cast<int>(std::clamp<uint64_t>(fit, kShortChunk, kLongChunk));
  }
  return std::max(1, std::min(chunk, context));
}

MemoryLimit ProcessMemoryLimit() {
  MemoryLimit lim;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  lim.bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  lim.source = "physical memory";
  if (auto cg = CgroupLimit(); cg && *cg < lim.bytes) {
    lim.bytes = *cg;
    lim.source = "cgroup memory limit";
  }
  return lim;
}

uint64_t SlotStride(const Manifest& m) {
  return (uint64_t{m.record.record_bytes} + 4095) / 4096 * 4096;
}

DaemonPlan PlanDaemon(const Manifest& m, const SegmentCosts& costs) {
  const ModelConfig& c = m.config;
  const uint64_t stride = SlotStride(m);
  const uint64_t records = uint64_t(c.n_experts) * c.n_moe_layers();
  DaemonPlan p;
  p.trunk = costs.segment(PackedTrunkBytes(m));
  const uint64_t table = costs.slot_table(static_cast<uint32_t>(c.n_layers),
                                          static_cast<uint32_t>(std::max(c.n_experts, 1)),
                                          static_cast<uint32_t>(std::max<uint64_t>(records, 1)));
  // Thread stacks, the heap, Cap'n Proto buffers: 16 MiB; then the table and
  // a pin page for every client the daemon may have.
  p.overhead = (16ull << 20) + table + kPlannedClients * costs.pin_page;
  // A forward pass pins one record at a time, but each client has a layer's
  // experts on their way: room for top-k records of two clients at least.
  p.min_cache = stride * std::max<uint64_t>(2 * std::max(c.top_k, 1), 4);
  if (records > 0) p.min_cache = std::min(p.min_cache, stride * records);
  p.min_cache = costs.segment(p.min_cache);
  p.working_set = stride * uint64_t(c.top_k) * c.n_moe_layers();
  return p;
}

namespace {

// The rule of DefaultBudget; nullopt when not even the floor fits.
std::optional<uint64_t> FitBudget(uint64_t floor, uint64_t working_set, uint64_t cap) {
  for (int sets = 3; sets >= 1; --sets) {
    const uint64_t want = floor + static_cast<uint64_t>(sets) * working_set;
    if (want <= cap) return want;
  }
  if (floor <= cap) return cap;
  return std::nullopt;
}

std::string DaemonFloorParts(const DaemonPlan& plan) {
  return "trunk " + FormatSize(plan.trunk) + " + smallest expert cache " +
         FormatSize(plan.min_cache) + " + daemon overhead " + FormatSize(plan.overhead);
}

}  // namespace

Result<uint64_t> DefaultBudget(const MemoryPlan& plan, const MemoryLimit& limit) {
  const uint64_t cap = limit.bytes / 4 * 3;
  if (auto b = FitBudget(plan.floor(), plan.working_set, cap)) return *b;
  return Status::Error(
      "the model needs at least " + FormatSize(plan.floor()) + " (trunk " + FormatSize(plan.trunk) +
      " + client state " + FormatSize(plan.client_state) + " at " + std::to_string(plan.context) +
      " tokens + scratch " + FormatSize(plan.scratch) + " + minimum expert cache " +
      FormatSize(plan.min_cache) + " + daemon " + FormatSize(plan.daemon_overhead) +
      "), but 3/4 of the " + FormatSize(limit.bytes) + " this process may use (" + limit.source +
      ") is " + FormatSize(cap));
}

Result<uint64_t> DefaultBudget(const DaemonPlan& plan, const MemoryLimit& limit) {
  const uint64_t cap = limit.bytes / 4 * 3;
  if (auto b = FitBudget(plan.floor(), plan.working_set, cap)) return *b;
  return Status::Error("the model needs at least " + FormatSize(plan.floor()) + " (" +
                       DaemonFloorParts(plan) + "), but 3/4 of the " + FormatSize(limit.bytes) +
                       " this process may use (" + limit.source + ") is " + FormatSize(cap));
}

Result<uint64_t> DaemonBudget(const DaemonPlan& plan, uint64_t requested,
                              const MemoryLimit& limit, const OtherDaemons& others) {
  if (!requested && others.bytes > 0) {
    const uint64_t cap = limit.bytes / 4 * 3;
    const uint64_t left = cap > others.bytes ? cap - others.bytes : 0;
    if (auto b = FitBudget(plan.floor(), plan.working_set, left)) return *b;
    return Status::Error("the model needs at least " + FormatSize(plan.floor()) + " (" +
                         DaemonFloorParts(plan) + "), but of 3/4 of the " +
                         FormatSize(limit.bytes) + " this process may use (" + limit.source +
                         "), the daemons already running hold " + FormatSize(others.bytes) +
                         " and leave " + FormatSize(left) + " (" + others.names +
                         "): stop one, or give --budget to override");
  }
  if (!requested) return DefaultBudget(plan, limit);
  if (requested < plan.floor())
    return Status::Error("--budget " + FormatSize(requested) + " is below the floor of " +
                         FormatSize(plan.floor()) + " (" + DaemonFloorParts(plan) + ")");
  return requested;
}

Result<uint64_t> ParseSize(std::string_view text) {
  std::string s(text);
  size_t used = 0;
  double v;
  try {
    v = std::stod(s, &used);
  } catch (...) {
    return Status::Error("size \"" + s + "\" is not a number with an optional unit (K, M, G, T)");
  }
  std::string unit = s.substr(used);
  std::transform(unit.begin(), unit.end(), unit.begin(), ::toupper);
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();
  double mult;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "K")
    mult = 1024.0;
  else if (unit == "M")
    mult = 1024.0 * 1024;
  else if (unit == "G")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    return Status::Error("size \"" + s + "\": unknown unit (K, M, G, T)");
  const double bytes = v * mult;
  if (!std::isfinite(bytes) || bytes < 0 || bytes > 1e18)
    return Status::Error("size \"" + s + "\" is out of range");
  return static_cast<uint64_t>(bytes);
}
}  // namespace waste
