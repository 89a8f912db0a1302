// Google Benchmark microbenchmarks of the MXFP4 expert record's product
// (engine/kernels/mxfp4.h) at GPT-OSS-20B's expert shapes (hidden 2880,
// expert width 2880): gate_up is one of gate and up (2880 rows x 2880
// inputs), per path (scalar, avx2, avx512). Random codes over all 16 E2M1
// values and scales near 2^0. Reports record bytes per second (codes and
// scales). One thread; not run by CI. Example:
//   build/bin/mxfp4_bench --benchmark_filter='/avx2' --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_main.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/mxfp4.h"

namespace waste::kernels {
namespace {

void Run(benchmark::State& state, int64_t rows, int64_t cols, Isa isa) {
  if (UsableIsa(isa) != isa) return state.SkipWithError("ISA not available");
  std::mt19937 rng(1);
  std::vector<uint8_t> codes(static_cast<size_t>(rows * cols / 2)),
      scales(static_cast<size_t>(rows * cols / 32));
  for (uint8_t& c : codes) c = static_cast<uint8_t>(rng());
  for (uint8_t& s : scales) s = static_cast<uint8_t>(124 + rng() % 6);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
  for (float& v : x) v = normal(rng);
  const Mxfp4MatrixView w{codes.data(), scales.data(), rows, cols};
  for (auto _ : state) {
    Mxfp4MatVec(w, x.data(), y.data(), 0, rows, isa);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(codes.size() + scales.size()));
}

}  // namespace

void RegisterBenchmarks() {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    benchmark::RegisterBenchmark((std::string("gate_up_2880x2880/") + IsaName(isa)).c_str(), Run,
                                 int64_t{2880}, int64_t{2880}, isa);
}

}  // namespace waste::kernels
