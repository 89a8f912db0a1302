// A fork-join thread pool for the kernels: ParallelFor splits a range of
// rows across the pool's threads and the calling thread, and returns when
// every chunk is done. No global pool: whoever runs a model owns one.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace waste::kernels {

class ThreadPool {
 public:
  // `threads` in total, the caller's included: threads - 1 workers are
  // started (values below 1 count as 1, which starts none).
  explicit ThreadPool(int threads);
  ~ThreadPool();  // joins the workers
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) on the pool's threads, the caller's
  // included, and returns when every call has returned (a worker that is
  // slow to wake may take no chunk at all). The calls cover each index exactly once; each begins
  // at a multiple of `grain` (values below 1 count as 1) and spans at least
  // `grain` indices except the one that ends at n. Which thread runs which
  // chunk, and how many chunks there are, varies, so callers must make
  // results independent of the split (e.g. one row computed wholly by one
  // call). n <= 0 calls nothing; a range of at most `grain`, or a pool of one
  // thread, runs as a single call on the caller's thread.
  //
  // Calls from several threads at once are serialized. A call from inside
  // `fn` (nested) runs serially on the calling thread. If `fn` throws, the
  // remaining chunks still run and the first exception is rethrown here.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // ParallelFor calls handed to the workers since construction: each is a
  // barrier (the caller waits for the slowest chunk). Calls that ran
  // wholly on the caller's thread (small, nested, or a pool of one) are
  // not counted. A count, not a time, so it is the same on a busy machine.
  uint64_t jobs() const { return jobs_.load(std::memory_order_relaxed); }

 private:
  void WorkerLoop();
  // Claims and runs chunks of job `generation` until none is left (or a
  // newer job has replaced it).
  void RunChunks(uint32_t generation);
  bool InsideJob() const;

  std::vector<std::thread> workers_;

  std::mutex call_mu_;                     // one ParallelFor at a time
  std::atomic<std::thread::id> caller_{};  // the thread inside ParallelFor, if any

  // The current job. The caller writes these before publishing the job in
  // `claims_`; a worker reads them only after claiming one of its chunks,
  // and the job cannot end (nor these change) before that chunk is done.
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
  std::mutex error_mu_;
  std::exception_ptr error_;

  // generation << 32 | chunks << 16 | next chunk, claimed by compare-exchange,
  // so a worker that wakes late for a finished job claims nothing.
  std::atomic<uint64_t> claims_{0};
  std::atomic<int> done_{0};  // chunks of the current job finished

  std::atomic<uint32_t> generation_{0};  // bumped per job (and at exit); workers wait on it
  std::atomic<int> sleepers_{0};         // workers blocked in generation_.wait
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> jobs_{0};  // see jobs()
};

// The CPUs this process may run on (sched_getaffinity), at least 1.
int DefaultThreads();

}  // namespace waste::kernels
