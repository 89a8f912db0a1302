#include "engine/kernels/thread_pool.h"

#include <sched.h>

#include <immintrin.h>

#include <algorithm>

namespace waste::kernels {
namespace {

// Busy-wait this many pauses before sleeping on a futex: ParallelFor calls
// come back to back while a token is computed, and a sleeping worker takes
// tens of microseconds to wake.
constexpr int kSpins = 4000;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  const int workers = std::max(threads, 1) - 1;
  workers_.reserve(static_cast<size_t>(workers));
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

bool ThreadPool::InsideJob() const {
  const std::thread::id self = std::this_thread::get_id();
  if (caller_.load(std::memory_order_relaxed) == self) return true;
  for (const std::thread& t : workers_)
    if (t.get_id() == self) return true;
  return false;
}

void ThreadPool::RunChunks(uint32_t generation) {
  uint64_t claims = claims_.load(std::memory_order_acquire);
  for (;;) {
    const uint32_t chunks = static_cast<uint32_t>(claims >> 16) & 0xffff;
    const uint32_t next = static_cast<uint32_t>(claims) & 0xffff;
    if (static_cast<uint32_t>(claims >> 32) != generation || next >= chunks) return;
    if (!claims_.compare_exchange_weak(claims, claims + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire))
      continue;
    const int64_t begin = static_cast<int64_t>(next) * chunk_;
    try {
      (*fn_)(begin, std::min(begin + chunk_, n_));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    // The last chunk done wakes the caller if it sleeps.
    if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == static_cast<int>(chunks) &&
        caller_sleeping_.load(std::memory_order_seq_cst))
      done_.notify_one();
    claims = claims_.load(std::memory_order_acquire);
  }
}

void ThreadPool::WorkerLoop() {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen; g = generation_.load(std::memory_order_acquire)) {
      if (spin++ < kSpins) {
        _mm_pause();
        continue;
      }
      // Announce the sleep before the last look, so the caller either sees
      // us sleeping (and notifies) or we see its new generation.
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (generation_.load(std::memory_order_seq_cst) == seen)
        generation_.wait(seen, std::memory_order_seq_cst);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      spin = 0;
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    RunChunks(g);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (workers_.empty() || n <= grain || InsideJob()) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> lock(call_mu_);
  caller_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  jobs_.fetch_add(1, std::memory_order_relaxed);

  // About four chunks per thread, each a whole number of grains.
  const int64_t grains = (n + grain - 1) / grain;
  const int64_t target = std::min<int64_t>(4 * static_cast<int64_t>(size()), 0xffff);
  const int64_t per_chunk = (grains + target - 1) / target;
  const int chunks = static_cast<int>((grains + per_chunk - 1) / per_chunk);
  fn_ = &fn;
  n_ = n;
  chunk_ = per_chunk * grain;
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t g = generation_.load(std::memory_order_relaxed) + 1;
  claims_.store(uint64_t{g} << 32 | uint64_t(chunks) << 16, std::memory_order_release);
  generation_.store(g, std::memory_order_seq_cst);  // wakes the workers
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();

  RunChunks(g);

  // Wait for chunks other threads still run.
  int done = done_.load(std::memory_order_acquire);
  for (int spin = 0; done != chunks; done = done_.load(std::memory_order_acquire)) {
    if (spin++ < kSpins) {
      _mm_pause();
      continue;
    }
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    done = done_.load(std::memory_order_seq_cst);
    if (done != chunks) done_.wait(done, std::memory_order_seq_cst);
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }
  fn_ = nullptr;
  caller_.store(std::thread::id(), std::memory_order_relaxed);
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

int DefaultThreads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

}  // namespace waste::kernels
