// The machine's memory read bandwidth, the roofline's ceiling
// (docs/log/2026-12-02.md, "roofline"): each of 1 or 2 threads sums its own
// half of a 4 GiB buffer (far past the caches), 64 bytes a load. Reports
// bytes read per wall second over all threads. Not run by CI. Example:
//   build/bin/bandwidth_bench --benchmark_repetitions=9 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>

#include "bench/bench_main.h"

namespace waste::kernels {
namespace {

constexpr size_t kBufferBytes = size_t{4} << 30;

// Touched once, before any timing: first touches are slow on this VM.
const uint64_t* Buffer() {
  static const uint64_t* buf = [] {
    auto* p = new uint64_t[kBufferBytes / 8];
    std::memset(p, 1, kBufferBytes);
    return p;
  }();
  return buf;
}

void ReadBandwidth(benchmark::State& state) {
  const uint64_t* buf = Buffer();
  const size_t share = kBufferBytes / 8 / static_cast<size_t>(state.threads());
  const uint64_t* mine = buf + share * static_cast<size_t>(state.thread_index());
  for (auto _ : state) {
    // Eight independent sums: one cache line a step, with no carried
    // dependency for the loads to wait on.
    uint64_t s[8] = {};
    for (size_t i = 0; i < share; i += 8)
      for (int k = 0; k < 8; ++k) s[k] += mine[i + k];
    uint64_t all = 0;
    for (uint64_t v : s) all += v;
    benchmark::DoNotOptimize(all);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(share * 8));
}

}  // namespace

void RegisterBenchmarks() {
  benchmark::RegisterBenchmark("read_bandwidth", ReadBandwidth)
      ->Threads(1)
      ->Threads(2)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace waste::kernels
