// RecordReader: whole expert records read from the banks, checked. The
// banks are opened with O_DIRECT where the filesystem allows (a record goes
// from the disk into the caller's page-aligned buffer without a second copy
// in the page cache). Shared by the in-process cache and wasted's readers.
// Read is safe from several threads at once (pread on shared descriptors).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/read_error.h"
#include "engine/format/container.h"

namespace waste {

class RecordReader {
 public:
  // How a read went: a code (what the daemon's slot table keeps) and a message.
  struct Outcome {
    ReadError error = ReadError::kNone;
    int errno_value = 0;  // for kIo
    std::string message;  // what went wrong, without the record's name
    bool ok() const { return error == ReadError::kNone; }
  };

  // Opens every bank of `ct` (which must outlive the reader).
  static Result<RecordReader> Open(const Container& ct, bool direct_io);
  RecordReader(RecordReader&& o) noexcept;
  RecordReader& operator=(RecordReader&& o) noexcept;
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;
  ~RecordReader();

  // Reads record (layer, expert) into dst (record_bytes() long, page aligned
  // for O_DIRECT) and checks its header, and its crc32 with `verify_crc`.
  // The caller has checked that the layer has a bank and the expert exists.
  Outcome Read(int layer, int expert, uint8_t* dst, bool verify_crc) const;

  // Read in parts (wasted reads a record as several pieces at once): bytes
  // [begin, end) of the record into dst + begin, begin and end multiples of
  // 4096 or end = record_bytes(); then, once every part is in, Check.
  Outcome ReadPart(int layer, int expert, uint8_t* dst, uint64_t begin, uint64_t end) const;
  Outcome Check(int layer, int expert, const uint8_t* dst, bool verify_crc) const;

 private:
  explicit RecordReader(const Container& ct) : ct_(&ct) {}
  const Container* ct_;
  std::vector<int> fds_;  // by layer, -1 where there is no bank
};

}  // namespace waste
