// A routing trace as `waste replay` reads it: one JSON line per token,
// {"tok": N, "layers": [[experts of MoE layer 0], ...]}, as `waste run
// --trace` writes it. Untrusted: every line is checked against the
// container's shape, and fuzzed (fuzz/trace_fuzz.cc).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace waste::cli {

// A line longer than this is refused: a token of the largest model (61 MoE
// layers of 8 experts) takes about 2 KB.
constexpr size_t kMaxTraceLine = 1 << 20;

// One token of the trace: its line in the file (1-based, for messages) and
// the experts of each MoE layer, in ascending id (the order in which the
// forward pass acquires them).
struct TraceToken {
  int line = 0;
  std::vector<std::vector<int>> layers;
};

// Why a line is refused, or empty when it is a good token (then in *out).
std::string ParseTraceLine(std::string_view text, int moe_layers, int experts, TraceToken* out);

// The whole trace, checked against the container's shape before anything is
// sent to the daemon: a bad line anywhere is refused, naming its number.
Result<std::vector<TraceToken>> ReadTrace(const std::string& path, int moe_layers, int experts);

}  // namespace waste::cli
