#include "engine/experts/cache.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "base/expert_key.h"

namespace waste {

Result<std::unique_ptr<ExpertCache>> ExpertCache::Create(const Container& ct,
                                                         const CacheOptions& opt) {
  if (opt.slots < 1) return Status::Error("expert cache: needs at least one slot");
  if (opt.readers < 1 || opt.readers > 256)
    return Status::Error("expert cache: readers must be in [1, 256]");
  std::unique_ptr<ExpertCache> c(new ExpertCache(ct, opt));
  auto memory = Region::Allocate(c->record_bytes_ * opt.slots);
  if (!memory.ok()) return memory.status().Prefixed("expert cache");
  c->memory_ = std::move(*memory);
  auto banks = RecordReader::Open(ct, opt.direct_io);
  if (!banks.ok()) return banks.status();
  c->banks_.emplace(std::move(*banks));
  for (int i = 0; i < opt.readers; ++i)
    c->readers_.emplace_back([p = c.get()] { p->ReaderLoop(); });
  return c;
}

// Records are numbered layer x the most experts a bank has + expert.
int ExpertCache::MaxExperts(const Container& ct) {
  int n = 1;
  for (const ExpertBank& b : ct.manifest().banks) n = std::max(n, b.experts);
  return n;
}

uint32_t ExpertCache::Records(const Container& ct) {
  const auto& banks = ct.manifest().banks;
  const int layers = banks.empty() ? 1 : banks.back().layer + 1;  // banks ascend by layer
  return static_cast<uint32_t>(layers) * static_cast<uint32_t>(MaxExperts(ct));
}

ExpertCache::ExpertCache(const Container& ct, const CacheOptions& opt)
    : ct_(ct),
      opt_(opt),
      record_bytes_(ct.record_bytes()),
      record_stride_(MaxExperts(ct)),
      slots_(opt.slots),
      eviction_(static_cast<uint32_t>(opt.slots), Records(ct)) {}

ExpertCache::~ExpertCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  request_cv_.notify_all();
  for (auto& t : readers_) t.join();
}

int ExpertCache::Victim() const {
  // A failed read stands as a record: the next Acquire of it retries.
  const uint32_t v = eviction_.Victim([&](uint32_t i) {
    const Slot& s = slots_[i];
    if (s.state == State::kEmpty) return SlotStanding{SlotStanding::kEmpty};
    if (s.pins > 0 || s.state == State::kLoading) return SlotStanding{SlotStanding::kKept};
    return SlotStanding{SlotStanding::kHeld, s.awaited};
  });
  return v == Eviction::kNone ? -1 : static_cast<int>(v);
}

int ExpertCache::SlotFor(uint32_t key, HintKind kind, bool* hit) {
  if (auto it = index_.find(key); it != index_.end()) {
    const Slot& s = slots_[it->second];
    if (s.state != State::kFailed) {
      *hit = s.state == State::kReady;
      return it->second;
    }
    index_.erase(it);  // a failed read is retried
  }
  *hit = false;
  const int v = Victim();
  if (v < 0) return -1;
  Slot& s = slots_[v];
  if (s.state != State::kEmpty) index_.erase(s.key);
  s = Slot{};
  // Its uses come with the Acquire it is for (none for a hint never acquired).
  eviction_.Admit(static_cast<uint32_t>(v),
                  static_cast<uint32_t>(KeyLayer(key) * record_stride_ + KeyExpert(key)), 0);
  s.state = State::kLoading;
  s.key = key;
  s.awaited = true;  // cleared by the Acquire it was brought in for
  index_[key] = v;
  queue_[static_cast<int>(kind)].push_back({key, v, kind});
  request_cv_.notify_one();
  return v;
}

void ExpertCache::Hint(int layer, std::span<const int> experts, HintKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int e : experts) {
    if (!CheckIds(layer, e).ok()) continue;  // a hint only advises: the Acquire says what is wrong
    bool hit;
    SlotFor(ExpertKey(layer, e), kind, &hit);
  }
}

Status ExpertCache::CheckIds(int layer, int expert) const {
  const ExpertBank* bank = ct_.manifest().Bank(layer);
  if (!bank || expert < 0 || expert >= bank->experts)
    return Status::Error("expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                         " does not exist");
  return Status::Ok();
}

Result<const uint8_t*> ExpertCache::TryAcquire(int layer, int expert) {
  WASTE_RETURN_IF_ERROR(CheckIds(layer, expert));
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(ExpertKey(layer, expert));
  if (it == index_.end() || slots_[it->second].state != State::kReady) return nullptr;
  Slot& s = slots_[it->second];
  ++s.pins;
  ++stats_.hits;
  CountUse(it->second);
  return memory_.data() + record_bytes_ * static_cast<size_t>(it->second);
}

void ExpertCache::CountUse(int i) {
  slots_[i].awaited = false;
  eviction_.Touch(static_cast<uint32_t>(i));
  eviction_.CountUse();  // after the touch: a fading halves this use too
}

bool ExpertCache::Ready(int layer, int expert) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(ExpertKey(layer, expert));
  return it != index_.end() && slots_[it->second].state == State::kReady;
}

Result<const uint8_t*> ExpertCache::Acquire(int layer, int expert) {
  WASTE_RETURN_IF_ERROR(CheckIds(layer, expert));
  const uint32_t key = ExpertKey(layer, expert);
  std::unique_lock<std::mutex> lock(mu_);
  // A new layer: the records hinted for the one before and never acquired
  // (wrong lookahead guesses) are awaited no longer, so they go first.
  if (layer != current_layer_) {
    for (Slot& x : slots_)
      if (x.awaited && KeyLayer(x.key) == current_layer_) x.awaited = false;
    current_layer_ = layer;
  }
  bool hit = false;
  int i;
  // Every slot loading (hinted reads can take them all in a small cache):
  // wait for one to finish. Every slot pinned: that cannot resolve.
  while ((i = SlotFor(key, HintKind::kDemand, &hit)) < 0) {
    const bool loading = std::any_of(slots_.begin(), slots_.end(),
                                     [](const Slot& x) { return x.state == State::kLoading; });
    if (!loading)
      return Status::Error("expert cache: all " + std::to_string(slots_.size()) +
                           " slots are pinned; cannot load expert " + std::to_string(expert) +
                           " of layer " + std::to_string(layer));
    ready_cv_.wait(lock);
  }
  Slot& s = slots_[i];
  ++s.pins;  // pinned before waiting: the slot cannot be reassigned under us
  if (hit) {
    ++stats_.hits;
  } else {
    ++stats_.misses;
    // A hinted read still queued at a lower priority moves to the front.
    for (int k = 1; k < 3; ++k)
      for (auto it = queue_[k].begin(); it != queue_[k].end(); ++it)
        if (it->slot == i) {
          queue_[0].push_front(*it);
          queue_[k].erase(it);
          break;
        }
    const auto t0 = std::chrono::steady_clock::now();
    ready_cv_.wait(lock, [&] { return s.state != State::kLoading; });
    stats_.wait_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  CountUse(i);
  if (s.state == State::kFailed) {
    --s.pins;
    return Status::Error(s.error);
  }
  return memory_.data() + record_bytes_ * static_cast<size_t>(i);
}

void ExpertCache::Release(int layer, int expert) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(ExpertKey(layer, expert));
  if (it != index_.end() && slots_[it->second].pins > 0) --slots_[it->second].pins;
}

ExpertStats ExpertCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Status ExpertCache::ReadInto(uint32_t key, uint8_t* dst) {
  const int layer = KeyLayer(key), expert = KeyExpert(key);
  const RecordReader::Outcome r = banks_->Read(layer, expert, dst, opt_.verify_crc);
  if (r.ok()) return Status::Ok();
  return Status::Error("expert " + std::to_string(expert) + " of layer " + std::to_string(layer) +
                       ": " + r.message);
}

void ExpertCache::ReaderLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    request_cv_.wait(lock, [&] {
      return stop_ || !queue_[0].empty() || !queue_[1].empty() || !queue_[2].empty();
    });
    if (stop_) return;
    Request r{};
    for (auto& q : queue_) {
      if (!q.empty()) {
        r = q.front();
        q.pop_front();
        break;
      }
    }
    uint8_t* dst = memory_.data() + record_bytes_ * static_cast<size_t>(r.slot);
    if (reading_++ == 0) busy_since_ = std::chrono::steady_clock::now();
    lock.unlock();
    const Status st = ReadInto(r.key, dst);  // the slot is loading: nobody else touches it
    lock.lock();
    if (--reading_ == 0)
      stats_.read_busy_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
    Slot& s = slots_[r.slot];
    s.state = st.ok() ? State::kReady : State::kFailed;
    if (!st.ok()) s.error = st.message();
    ++stats_.reads;
    stats_.bytes_read += record_bytes_;
    ready_cv_.notify_all();
  }
}

}  // namespace waste
