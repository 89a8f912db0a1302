#include "engine/format/record_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace waste {

Result<RecordReader> RecordReader::Open(const Container& ct, bool direct_io) {
  RecordReader r(ct);
  r.fds_.assign(ct.config().n_layers, -1);
  for (int L = 0; L < ct.config().n_layers; ++L) {
    const ExpertBank* b = ct.manifest().Bank(L);
    if (!b) continue;
    const std::string path = ct.dir() + "/" + b->file;
    int fd = direct_io ? open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT) : -1;
    if (fd < 0) fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);  // no O_DIRECT here (tmpfs)
    if (fd < 0) return Status::Error(b->file + ": " + std::strerror(errno));
    r.fds_[L] = fd;
  }
  return r;
}

RecordReader::RecordReader(RecordReader&& o) noexcept : ct_(o.ct_), fds_(std::move(o.fds_)) {
  o.fds_.clear();
}

RecordReader& RecordReader::operator=(RecordReader&& o) noexcept {
  if (this != &o) {
    for (int fd : fds_)
      if (fd >= 0) close(fd);
    ct_ = o.ct_;
    fds_ = std::move(o.fds_);
    o.fds_.clear();
  }
  return *this;
}

RecordReader::~RecordReader() {
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

RecordReader::Outcome RecordReader::Read(int layer, int expert, uint8_t* dst,
                                         bool verify_crc) const {
  Outcome r = ReadPart(layer, expert, dst, 0, ct_->record_bytes());
  return r.ok() ? Check(layer, expert, dst, verify_crc) : r;
}

RecordReader::Outcome RecordReader::ReadPart(int layer, int expert, uint8_t* dst, uint64_t begin,
                                             uint64_t end) const {
  Outcome r;
  const uint64_t off = ct_->record_bytes() * static_cast<uint64_t>(expert);
  uint64_t done = begin;
  while (done < end) {
    const ssize_t got = pread(fds_[layer], dst + done, end - done, static_cast<off_t>(off + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      r.error = ReadError::kIo;
      r.errno_value = errno;
      r.message = std::strerror(errno);
      return r;
    }
    if (got == 0) {
      r.error = ReadError::kShortRead;
      r.message = "short read (" + std::to_string(done) + " of " +
                  std::to_string(ct_->record_bytes()) + " bytes)";
      return r;
    }
    done += static_cast<uint64_t>(got);
  }
  return r;
}

RecordReader::Outcome RecordReader::Check(int layer, int expert, const uint8_t* dst,
                                          bool verify_crc) const {
  Outcome r;
  if (Status st = ct_->CheckRecord(layer, expert, {dst, ct_->record_bytes()}, verify_crc);
      !st.ok()) {
    r.error = ReadError::kBadRecord;
    r.message = st.message();
  }
  return r;
}

}  // namespace waste
