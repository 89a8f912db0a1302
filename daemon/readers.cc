#include "daemon/readers.h"

#include <algorithm>

namespace waste::daemon {

Readers::Readers(const Container& ct, int threads, bool verify_crc,
                 std::function<uint8_t*(uint32_t)> slot_memory,
                 std::function<void(ReadResult)> done, uint64_t piece_bytes)
    : ct_(ct),
      verify_crc_(verify_crc),
      piece_bytes_(piece_bytes),
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
  const uint64_t n = ct_.record_bytes();
  {
    std::lock_guard<std::mutex> lock(mu_);
    InFlight& r = in_flight_[job.slot];
    r = InFlight{job, 0, {}};
    std::deque<Piece>& queue = job.kind == HintKind::kDemand ? demand_ : other_;
    for (uint64_t begin = 0; begin < n; begin += piece_bytes_, ++r.left)
      queue.push_back({job.slot, begin, std::min(n, begin + piece_bytes_)});
  }
  cv_.notify_all();
}

std::optional<Readers::InFlight> Readers::ReadPiece(const Piece& piece) {
  ReadJob job;
  bool failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const InFlight& r = in_flight_.at(piece.slot);
    job = r.job;
    failed = !r.outcome.ok();
  }
  RecordReader::Outcome o;
  if (!failed)  // after a failed piece the record is lost: skip the rest
    o = banks_->ReadPart(KeyLayer(job.key), KeyExpert(job.key), slot_memory_(job.slot), piece.begin,
                         piece.end);
  std::lock_guard<std::mutex> lock(mu_);
  InFlight& r = in_flight_.at(piece.slot);
  if (!o.ok() && r.outcome.ok()) r.outcome = std::move(o);
  if (--r.left > 0) return std::nullopt;
  InFlight done = std::move(r);
  in_flight_.erase(piece.slot);
  return done;
}

void Readers::Loop() {
  for (;;) {
    Piece piece;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !demand_.empty() || !other_.empty(); });
      if (stop_) return;
      std::deque<Piece>& queue = demand_.empty() ? other_ : demand_;
      piece = queue.front();
      queue.pop_front();
    }
    std::optional<InFlight> r = ReadPiece(piece);
    if (!r) continue;
    const int layer = KeyLayer(r->job.key), expert = KeyExpert(r->job.key);
    if (r->outcome.ok())
      r->outcome = banks_->Check(layer, expert, slot_memory_(r->job.slot), verify_crc_);
    ReadResult result;
    result.job = r->job;
    if (!r->outcome.ok()) {
      result.error = r->outcome.error;
      result.detail = static_cast<uint32_t>(r->outcome.errno_value);
      result.message = "layer " + std::to_string(layer) + " expert " + std::to_string(expert) +
                       ": " + r->outcome.message;
    }
    done_(std::move(result));
  }
}

}  // namespace waste::daemon
