// Google Benchmark microbenchmarks of the nearest-entry search `waste
// convert` runs (engine/kernels/nearest.h, NearestEntry::Find) at the shapes
// of the kimi-linear-48b preset's experts: codebooks of 256 entries (VQ3R,
// VQ2R stages) and 64 (VQ4P); 288 vectors per call (one gate/up row of 2304,
// as QuantizeMatrix searches) and 2048 (one of k-means' 32 blocks of 65536
// vectors). Reports vectors per second (items) and distances per second
// (distances, one per vector and entry). Paths: scalar, avx2, avx512. One
// thread; not run by CI. Example:
//   build/bin/nearest_bench --benchmark_filter='e256/.*/avx512' --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_main.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/nearest.h"

namespace waste::kernels {
namespace {

void Find(benchmark::State& state, int entries, int64_t vectors, Isa isa) {
  if (UsableIsa(isa) != isa) return state.SkipWithError("ISA not available");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> books(static_cast<size_t>(entries) * 8), x(static_cast<size_t>(vectors) * 8);
  for (float& b : books) b = normal(rng);
  for (float& v : x) v = normal(rng);
  const NearestEntry search(books.data(), entries, isa);
  std::vector<int32_t> out(static_cast<size_t>(vectors));
  for (auto _ : state) {
    search.Find(x.data(), vectors, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * vectors);
  state.counters["distances"] = benchmark::Counter(
      static_cast<double>(state.iterations() * vectors * entries), benchmark::Counter::kIsRate);
}

}  // namespace

void RegisterBenchmarks() {
  for (int entries : {256, 64})
    for (int64_t vectors : {288, 2048})
      for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
        benchmark::RegisterBenchmark(
            ("e" + std::to_string(entries) + "/" + std::to_string(vectors) + "/" + IsaName(isa))
                .c_str(),
            Find, entries, vectors, isa);
}

}  // namespace waste::kernels
