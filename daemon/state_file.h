// The bytes of one prompt state as wasted keeps it, in memory (a sealed
// memfd) or on disk (a file under state-dir/states/<container>): the same
// layout in both tiers, so moving a state from one to the other is a copy.
//
//   StateHeader | int32 tokens[token_count] | payload[payload_bytes]
//
// The header's crc32 covers the whole file, read with the crc field 0.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace waste::daemon {

// The most tokens a state is filed under (a prompt of a million tokens; the
// list fits in an RPC message many times over).
constexpr uint32_t kMaxStateTokens = 1u << 20;
constexpr size_t kStateModelChars = 16;  // ManifestFingerprint: 16 hex digits

struct StateHeader {
  char magic[8];
  uint32_t version;
  uint32_t uid;
  char model[kStateModelChars];  // the container's fingerprint
  uint64_t fingerprint;          // the publisher's
  uint32_t token_count;
  uint32_t crc;  // of the whole file, read with this field 0
  uint64_t payload_bytes;
  int64_t created_ms;  // unix milliseconds
};
static_assert(sizeof(StateHeader) == 64, "a state's header is 64 bytes");

// A state's header (crc 0) for `uid`'s state of `tokens` and `bytes` bytes.
StateHeader NewStateHeader(const std::string& model, uid_t uid, uint64_t fingerprint,
                           size_t token_count, uint64_t bytes, double created);

// The file name of a state: a hash of its uid, fingerprint and tokens.
std::string StateNameOf(uid_t uid, uint64_t fingerprint, std::span<const int32_t> tokens);

// What a state's header and tokens say, checked against its size.
struct StateFileInfo {
  uid_t uid = 0;
  uint64_t fingerprint = 0;
  std::vector<int32_t> tokens;
  uint64_t payload_offset = 0, payload_bytes = 0;
  double created = 0;
};
// Reads and checks the header and tokens of the state in `fd` (magic,
// version, the container `model`, token count, the size the header implies
// against the file's): no payload is read, so a scan of many states is
// quick. The checksum is CheckStateChecksum's.
Result<StateFileInfo> ReadStateHeader(int fd, const std::string& model);
// Reads the whole state in `fd` and compares its crc32 with its header's.
Status CheckStateChecksum(int fd);

// Writes `h`, `tokens` and the first `bytes` bytes of `from` (pread: a
// descriptor shorter than announced is an error, not a fault) to `out` at
// its start, the crc filled in. Errors name what failed (ENOSPC included).
Status WriteState(int out, StateHeader h, std::span<const int32_t> tokens, int from,
                  uint64_t bytes);
// Copies `bytes` bytes of `from` (from its start) to `out`.
Status CopyState(int from, int out, uint64_t bytes);

}  // namespace waste::daemon
