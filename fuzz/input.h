// The fuzz input read as a stream of bytes, for targets that turn it into a
// program of operations. Past the end every read gives zeros, so any input,
// however short, is a whole program.
#pragma once

#include <cstddef>
#include <cstdint>

namespace waste::fuzz {

struct Input {
  const uint8_t* p;  // the next unread byte
  size_t n;          // bytes left
  uint8_t Byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  // Four bytes, little-endian.
  uint32_t Word() { return Byte() | Byte() << 8 | Byte() << 16 | uint32_t{Byte()} << 24; }
};

}  // namespace waste::fuzz
