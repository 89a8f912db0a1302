// Fuzz target: the expert record check (Container::CheckRecord), which every
// record read from a bank goes through before it is published. The input
// picks a record of a tiny synthetic container and overwrites part of its
// real bytes (or replaces them), so the header, the layout fields and the
// crc32 are all reached: any bytes give ok or an error naming the record.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/tiny.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const waste::Container& ct = waste::fuzz::Tiny::Get();
  std::vector<int> moe;
  for (int L = 0; L < ct.config().n_layers; ++L)
    if (ct.manifest().Bank(L)) moe.push_back(L);
  const int layer = moe[data[0] % moe.size()];
  const int expert = data[1] % ct.config().n_experts;
  const bool verify_crc = data[2] & 1;
  const bool whole = data[2] & 2;  // the input is the record, not a patch
  const size_t at = data[3] * size_t{97};
  data += 4;
  size -= 4;
  std::vector<uint8_t> rec(ct.record_bytes());
  if (whole) {
    std::memcpy(rec.data(), data, std::min(size, rec.size()));
  } else {
    if (!ct.ReadRecord(layer, expert, rec.data(), false).ok()) std::abort();
    if (at < rec.size()) std::memcpy(rec.data() + at, data, std::min(size, rec.size() - at));
  }
  const waste::Status st = ct.CheckRecord(layer, expert, rec, verify_crc);
  // A refusal names the record it refused.
  if (!st.ok() && st.message().find("record " + std::to_string(expert)) == std::string::npos)
    std::abort();
  // The record truncated: always refused, never read past its end.
  if (size % 3 == 0 && ct.CheckRecord(layer, expert, {rec.data(), rec.size() / 2}, false).ok())
    std::abort();
  return 0;
}
