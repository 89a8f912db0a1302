// The saved use counts as a file: what LoadUses (uses.cc) reads at start,
// separate from the daemon so that it can be fuzzed (fuzz/uses_fuzz.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace waste::daemon {

// The largest use-counts file read: a count is at most 10 digits and a
// comma, and the largest models have 61 x 384 records; this leaves room for
// `hits` and whitespace many times over.
constexpr uint64_t kMaxUsesFileBytes = 64ull << 20;

// The counts of `text` (a file saved by SaveUses, named `path` in errors),
// `records` of them, row-major by layer. An error, naming the path and the
// field, for anything else: not JSON, not an object, a fingerprint that is
// not a string or not `fingerprint` (another container's counts), a list
// of the wrong length or holding something other than a count. Counts
// above 2^32 - 1 are clamped.
Result<std::vector<uint32_t>> ParseUses(std::string_view text, const std::string& path,
                                        const std::string& fingerprint, size_t records);

}  // namespace waste::daemon
