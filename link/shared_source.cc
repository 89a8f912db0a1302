#include "link/shared_source.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>

namespace waste {
namespace {

using Clock = std::chrono::steady_clock;

// Longest single sleep: bounds how late a dead daemon, a stopping daemon or
// a lost wake-up is noticed, and how often a demand hint is repeated.
constexpr int kWaitMs = 50;
// How long a failure that predates our demand may stay unchanged before we
// stop waiting for the daemon's retry and report it.
constexpr auto kRetryPatience = std::chrono::seconds(1);

std::string Where(int layer, int expert) {
  return "layer " + std::to_string(layer) + " expert " + std::to_string(expert);
}

// Maps [p, p + n) into this process's page tables now. Advice: where the
// kernel lacks MADV_POPULATE_READ (before 5.14) the pages fault in as read.
void MapSlot(const uint8_t* p, uint64_t n) {
#ifdef MADV_POPULATE_READ
  const uintptr_t page = 4096;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ);
#else
  (void)p;
  (void)n;
#endif
}

int BoundedLayers(const std::vector<bool>& has_experts, const shm::SlotTable& t) {
  return static_cast<int>(std::min<uint64_t>(has_experts.size(), t.header().layers));
}

}  // namespace

SharedExpertSource::SharedExpertSource(SharedCacheView view, std::vector<bool> has_experts,
                                       int experts, HintSink* sink, double give_up_seconds)
    : view_(view),
      has_experts_(std::move(has_experts)),
      layers_(BoundedLayers(has_experts_, view_.table)),
      experts_(static_cast<int>(
          std::min<int64_t>(std::max(experts, 0), int64_t{view_.table.header().experts}))),
      sink_(sink),
      give_up_seconds_(give_up_seconds),
      pinset_(view_.pins, view_.table.pins_per_client()) {}

SharedExpertSource::~SharedExpertSource() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Held& h : held_) pinset_.Remove(h.slot);
}

Status SharedExpertSource::CheckIds(int layer, int expert) const {
  if (layer < 0 || layer >= layers_)
    return Status::Error(Where(layer, expert) + ": no such layer (the model has " +
                         std::to_string(layers_) + ")");
  if (!has_experts_[static_cast<size_t>(layer)])
    return Status::Error(Where(layer, expert) + ": layer " + std::to_string(layer) +
                         " has no experts");
  if (expert < 0 || expert >= experts_)
    return Status::Error(Where(layer, expert) + ": no such expert (a layer has " +
                         std::to_string(experts_) + ")");
  return Status::Ok();
}

void SharedExpertSource::Hint(int layer, std::span<const int> experts, HintKind kind) {
  if (layer < 0 || layer >= layers_ || !has_experts_[static_cast<size_t>(layer)]) return;
  const auto bad = [&](int e) { return e < 0 || e >= experts_; };
  std::vector<int> kept;
  if (std::any_of(experts.begin(), experts.end(), bad)) {  // rare: copy only then
    std::copy_if(experts.begin(), experts.end(), std::back_inserter(kept),
                 [&](int e) { return !bad(e); });
    experts = kept;
  }
  if (!experts.empty()) sink_->SendHint(layer, experts, kind);
}

bool SharedExpertSource::Ready(int layer, int expert) {
  if (!CheckIds(layer, expert).ok()) return false;
  const shm::SlotTable& t = view_.table;
  const uint32_t s = t.index(layer, expert).load(std::memory_order_acquire);
  if (s == shm::kNoSlot || s >= t.slots()) return false;
  const shm::SlotEntry& e = t.slot(s);
  return shm::StateOf(e.word.load(std::memory_order_acquire)) == shm::SlotState::kReady &&
         e.key.load(std::memory_order_acquire) == ExpertKey(layer, expert);
}

Result<const uint8_t*> SharedExpertSource::Pinned(int layer, int expert, uint32_t slot,
                                                  std::unique_lock<std::mutex>& lock) {
  const shm::TableHeader& header = view_.table.header();
  const uint64_t offset = uint64_t{slot} * header.slot_stride;
  if (offset > view_.cache_bytes || view_.cache_bytes - offset < header.record_bytes) {
    pinset_.Remove(slot);
    return Status::Error(Where(layer, expert) + ": slot " + std::to_string(slot) +
                         " lies outside the cache segment (" + std::to_string(view_.cache_bytes) +
                         " bytes)");
  }
  held_.push_back({ExpertKey(layer, expert), slot});
  if (slot >= slot_mapped_.size()) slot_mapped_.resize(slot + 1, false);
  if (!slot_mapped_[slot]) {
    slot_mapped_[slot] = true;
    // Outside the lock: the forward pass's other threads pin their own
    // records meanwhile (a slot mapped twice is harmless).
    lock.unlock();
    MapSlot(view_.cache + offset, header.record_bytes);
    lock.lock();
  }
  return view_.cache + offset;
}

Result<const uint8_t*> SharedExpertSource::TryAcquire(int layer, int expert) {
  WASTE_RETURN_IF_ERROR(CheckIds(layer, expert));
  std::unique_lock<std::mutex> lock(mu_);
  const shm::PinAttempt a = shm::TryPin(view_.table, pinset_, layer, expert);
  if (a.kind != shm::PinAttempt::kPinned) return nullptr;
  Result<const uint8_t*> r = Pinned(layer, expert, a.slot, lock);
  if (r.ok()) ++stats_.hits;
  return r;
}

Result<const uint8_t*> SharedExpertSource::Acquire(int layer, int expert) {
  WASTE_RETURN_IF_ERROR(CheckIds(layer, expert));
  std::unique_lock<std::mutex> lock(mu_);
  const auto t0 = Clock::now();
  bool waited = false;
  Result<const uint8_t*> r = AcquireLocked(layer, expert, lock, &waited);
  if (r.ok() && !waited) {
    ++stats_.hits;
  } else {
    ++stats_.misses;
    stats_.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return r;
}

Result<const uint8_t*> SharedExpertSource::AcquireLocked(int layer, int expert,
                                                         std::unique_lock<std::mutex>& lock,
                                                         bool* waited) {
  const shm::TableHeader& header = view_.table.header();

  // Hints sent during this Acquire. `demanded`: one was sent while the record
  // was absent or failed, so the next failure is the answer to our demand.
  bool hinted = false, demanded = false;
  Clock::time_point last_hint;
  const auto send_hint = [&] {
    sink_->SendHint(layer, std::span<const int>(&expert, 1), HintKind::kDemand);
    hinted = true;
    last_hint = Clock::now();
  };
  // Repeated after a quiet interval: the daemon merges duplicates, and the
  // record may have come and gone between our looks.
  const auto hint_due = [&] {
    return !hinted || Clock::now() - last_hint >= std::chrono::milliseconds(kWaitMs);
  };
  // Failures (slot, word) seen before our demand: a read someone else asked
  // for; the daemon retries it once we ask.
  std::vector<std::pair<uint32_t, uint32_t>> stale_failures;
  Clock::time_point demanded_at;
  const auto t0 = Clock::now();

  for (;;) {
    shm::PinAttempt a = shm::TryPin(view_.table, pinset_, layer, expert);
    uint32_t epoch = 0;
    if (a.kind == shm::PinAttempt::kAbsent) {
      // Read the epoch before the second look: anything published after that
      // look bumps the epoch, so the wait below cannot miss it.
      epoch = header.epoch.load(std::memory_order_acquire);
      a = shm::TryPin(view_.table, pinset_, layer, expert);
    }

    const std::atomic<uint32_t>* wait_on = nullptr;
    uint32_t wait_for = 0;
    switch (a.kind) {
      case shm::PinAttempt::kPinned:
        return Pinned(layer, expert, a.slot, lock);
      case shm::PinAttempt::kNoRoom:
        return Status::Error(Where(layer, expert) + ": pin page full (" +
                             std::to_string(pinset_.held()) + " records held)");
      case shm::PinAttempt::kLoading:
        // Possibly a lookahead read: one demand hint lets the daemon move it up.
        if (!hinted) send_hint();
        wait_on = &view_.table.slot(a.slot).word;
        wait_for = a.word;
        break;
      case shm::PinAttempt::kAbsent:
        if (hint_due()) send_hint();
        demanded = true;
        if (demanded_at == Clock::time_point{}) demanded_at = Clock::now();
        wait_on = &header.epoch;
        wait_for = epoch;
        break;
      case shm::PinAttempt::kFailed: {
        const std::pair<uint32_t, uint32_t> seen{a.slot, a.word};
        const bool stale =
            std::find(stale_failures.begin(), stale_failures.end(), seen) != stale_failures.end();
        if (!demanded) {
          // Failed before we asked: ask, which makes the daemon read it again.
          stale_failures.push_back(seen);
          send_hint();
          demanded = true;
          demanded_at = Clock::now();
        } else if (stale && Clock::now() - demanded_at < kRetryPatience) {
          if (hint_due()) send_hint();  // the daemon has not reacted yet
        } else {
          std::string why = Where(layer, expert) +
                            ": wasted could not read the record: " + ReadErrorText(a.error);
          if (a.error == ReadError::kIo)
            why += std::string(": ") + std::strerror(static_cast<int>(a.detail));
          return Status::Error(why);
        }
        wait_on = &view_.table.slot(a.slot).word;
        wait_for = a.word;
        break;
      }
    }

    *waited = true;
    lock.unlock();  // the other threads pin and release meanwhile
    shm::FutexWait(wait_on, wait_for, kWaitMs);
    lock.lock();
    const Status health = sink_->Health();
    if (!health.ok()) return health.Prefixed(Where(layer, expert));
    if (header.serving.load(std::memory_order_acquire) == 0)
      return Status::Error(Where(layer, expert) + ": wasted is stopping");
    if (std::chrono::duration<double>(Clock::now() - t0).count() >= give_up_seconds_) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", give_up_seconds_);
      return Status::Error(Where(layer, expert) + ": wasted did not bring the record in within " +
                           secs + " s");
    }
  }
}

uint64_t SharedExpertSource::PinLimit() const {
  return std::max<uint64_t>(
      1, std::min<uint64_t>(view_.table.pins_per_client(), view_.table.slots()));
}

void SharedExpertSource::Release(int layer, int expert) {
  if (layer < 0 || expert < 0) return;
  const uint32_t key = ExpertKey(layer, expert);
  std::lock_guard<std::mutex> lock(mu_);
  // The latest matching acquire: the same record may be held twice.
  for (auto it = held_.rbegin(); it != held_.rend(); ++it) {
    if (it->key != key) continue;
    pinset_.Remove(it->slot);
    held_.erase(std::next(it).base());
    return;
  }
}

void SharedExpertSource::TokensDone(int tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  tokens_ += static_cast<uint64_t>(std::max(tokens, 0));
  sink_->SendProgress(tokens_);
}

ExpertStats SharedExpertSource::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

uint32_t SharedExpertSource::held() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pinset_.held();
}

}  // namespace waste
