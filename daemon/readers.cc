#include "daemon/readers.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace waste::daemon {

Readers::Readers(const Container& ct, int threads, bool verify_crc,
                 std::function<uint8_t*(uint32_t)> slot_memory,
                 std::function<void(ReadResult)> done)
    : ct_(ct),
      verify_crc_(verify_crc),
      slot_memory_(std::move(slot_memory)),
      done_(std::move(done)),
      n_threads_(threads) {}

Readers::~Readers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

Status Readers::Open() {
  fds_.assign(ct_.config().n_layers, -1);
  for (int L = 0; L < ct_.config().n_layers; ++L) {
    const ExpertBank* b = ct_.manifest().Bank(L);
    if (!b) continue;
    const std::string path = ct_.dir() + "/" + b->file;
    // O_DIRECT: records go from the disk into the slot without a copy in
    // the page cache, which would otherwise hold a second copy of the cache.
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0) fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::Error(b->file + ": " + std::strerror(errno));
    fds_[L] = fd;
  }
  for (int i = 0; i < n_threads_; ++i) threads_.emplace_back([this] { Loop(); });
  return Status::Ok();
}

void Readers::Submit(const ReadJob& job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(job);
  }
  cv_.notify_one();
}

ReadResult Readers::Read(const ReadJob& job) {
  ReadResult r;
  r.job = job;
  const int layer = shm::KeyLayer(job.key), expert = shm::KeyExpert(job.key);
  const std::string name = "layer " + std::to_string(layer) + " expert " + std::to_string(expert);
  const uint64_t n = ct_.record_bytes();
  const uint64_t off = n * static_cast<uint64_t>(expert);
  uint8_t* dst = slot_memory_(job.slot);
  uint64_t done = 0;
  while (done < n) {
    const ssize_t got = pread(fds_[layer], dst + done, n - done, static_cast<off_t>(off + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      r.error = shm::ReadError::kIo;
      r.detail = static_cast<uint32_t>(errno);
      r.message = name + ": " + std::strerror(errno);
      return r;
    }
    if (got == 0) {
      r.error = shm::ReadError::kShortRead;
      r.message = name + ": short read (" + std::to_string(done) + " of " + std::to_string(n) +
                  " bytes)";
      return r;
    }
    done += static_cast<uint64_t>(got);
  }
  const Status st = ct_.CheckRecord(layer, expert, {dst, n}, verify_crc_);
  if (!st.ok()) {
    r.error = shm::ReadError::kBadRecord;
    r.message = name + ": " + st.message();
  }
  return r;
}

void Readers::Loop() {
  for (;;) {
    ReadJob job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) return;
      job = jobs_.front();
      jobs_.pop_front();
    }
    done_(Read(job));
  }
}

}  // namespace waste::daemon
