#include "daemon/readers.h"

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
}

Status Readers::Open() {
  auto banks = RecordReader::Open(ct_, /*direct_io=*/true);
  if (!banks.ok()) return banks.status();
  banks_.emplace(std::move(*banks));
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
  const int layer = KeyLayer(job.key), expert = KeyExpert(job.key);
  const RecordReader::Outcome o = banks_->Read(layer, expert, slot_memory_(job.slot), verify_crc_);
  if (o.ok()) return r;
  r.error = o.error;
  r.detail = static_cast<uint32_t>(o.errno_value);
  r.message = "layer " + std::to_string(layer) + " expert " + std::to_string(expert) + ": " +
              o.message;
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
