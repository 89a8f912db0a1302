// Google Benchmark microbenchmarks of the trunk's matrix-vector product at
// shapes of the kimi-linear-48b preset: a KDA projection (4096 rows x 2304
// inputs) and its output (2304 x 4096) in Q4G, and 16384 rows of the LM
// head (Q8G, 2304 inputs). Reports weight bytes per second. One thread; not
// run by CI. Example:
//   build/bin/matvec_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "engine/format/encoding.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/matvec.h"

namespace waste::kernels {
namespace {

struct Setup {
  std::vector<uint8_t> payload;
  std::vector<uint16_t> scales;
  std::vector<float> x, y;
  MatrixView view;

  Setup(format::Fmt fmt, int64_t rows, int64_t cols, int group) {
    std::mt19937 rng(1);
    view.fmt = fmt;
    view.rows = rows;
    view.cols = cols;
    view.group = group;
    payload.resize(static_cast<size_t>(MatrixRowBytes(view) * rows));
    for (uint8_t& b : payload) b = static_cast<uint8_t>(rng());
    scales.assign(static_cast<size_t>(rows * ((cols + group - 1) / group)),
                  format::F32ToF16(0.01f));
    std::normal_distribution<float> normal(0.f, 1.f);
    x.resize(static_cast<size_t>(cols));
    for (float& v : x) v = normal(rng);
    y.resize(static_cast<size_t>(rows));
    view.payload = payload.data();
    view.scales = scales.data();
  }
};

void Run(benchmark::State& state, format::Fmt fmt, int64_t rows, int64_t cols, int group) {
  Setup s(fmt, rows, cols, group);
  const Isa isa = UsableIsa(Isa::kAvx512);
  for (auto _ : state) {
    MatVec(s.view, s.x.data(), s.y.data(), 0, rows, isa);
    benchmark::DoNotOptimize(s.y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(s.payload.size()));
}

BENCHMARK_CAPTURE(Run, q4g_4096x2304, format::Fmt::kQ4G, 4096, 2304, 128);
BENCHMARK_CAPTURE(Run, q4g_2304x4096, format::Fmt::kQ4G, 2304, 4096, 128);
BENCHMARK_CAPTURE(Run, q8g_16384x2304, format::Fmt::kQ8G, 16384, 2304, 128);

}  // namespace
}  // namespace waste::kernels

BENCHMARK_MAIN();
