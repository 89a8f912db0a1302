// Why a record read failed: one code for every reader of the banks (the
// in-process cache's and wasted's, engine/format/record_reader.h) and for
// the slot table, which tells clients why a slot failed (shm/table.h,
// SlotEntry::error). Header only; in base/ because the reader (format) and
// the table (shm) both need it.
#pragma once

#include <cstdint>

namespace waste {

// Stored in the slot table as a uint32_t: the values are part of its layout.
enum class ReadError : uint32_t { kNone = 0, kIo = 1, kShortRead = 2, kBadRecord = 3 };

// "I/O error", "short read (...)", "damaged record (...)".
inline const char* ReadErrorText(ReadError e) {
  switch (e) {
    case ReadError::kNone:
      return "no error";
    case ReadError::kIo:
      return "I/O error";
    case ReadError::kShortRead:
      return "short read (the bank is truncated)";
    case ReadError::kBadRecord:
      return "damaged record (header or crc32 check failed)";
  }
  return "unknown error";
}

}  // namespace waste
