// An expert record's key: (layer, expert) in one 32-bit word, layer in the
// high half. The daemon's slot table stores it (shm/table.h), and the
// daemon's cache and its clients find records by it.
#pragma once

#include <cstdint>

namespace waste {

constexpr uint32_t kNoKey = 0xffffffffu;  // no record (an empty slot)

inline uint32_t ExpertKey(int layer, int expert) {
  return static_cast<uint32_t>(layer) << 16 | static_cast<uint32_t>(expert);
}
inline int KeyLayer(uint32_t key) {
  return static_cast<int>(key >> 16);
}
inline int KeyExpert(uint32_t key) {
  return static_cast<int>(key & 0xffffu);
}

}  // namespace waste
