// Google Benchmark microbenchmarks of the attention layers' own loops
// (engine/kernels/recurrence.h) at the shapes of the kimi-linear-48b preset:
//   kda_step  KdaStateStep over a KDA layer's 32 heads of 128 x 128 (2 MiB of
//             state); state bytes per second (each step reads and writes the
//             state twice) and head steps per second (items).
//   latent    WeightedRowSum, MLA's attended latent: 512 latent floats of each
//             cached position (rows 576 floats apart, the latent then the
//             64 rope floats) at 512 and 4096 positions; bytes of latent read
//             per second and positions per second (items).
// Paths: scalar, avx2 and avx512. One thread; not run by CI. Example:
//   build/bin/recurrence_bench --benchmark_filter='kda_step' --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_main.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/recurrence.h"

namespace waste::kernels {
namespace {

constexpr int kHeads = 32, kHeadDim = 128;
constexpr int64_t kLatent = 512, kRope = 64;

std::vector<float> Normal(size_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

void KdaStep(benchmark::State& state, Isa isa) {
  if (UsableIsa(isa) != isa) return state.SkipWithError("ISA not available");
  constexpr int d = kHeadDim;
  std::mt19937 rng(1);
  // Inputs as the model gives them: decay in (0, 1), k of unit length, a
  // beta below 1, so the state stays bounded however many steps run.
  std::vector<float> S = Normal(static_cast<size_t>(kHeads) * d * d, 0.05f, rng);
  std::vector<float> k = Normal(d, 1.f, rng), v = Normal(d, 1.f, rng), q = Normal(d, 1.f, rng);
  double norm = 0;
  for (float x : k) norm += x * x;
  for (float& x : k) x /= static_cast<float>(std::sqrt(norm));
  std::vector<float> decay(d), u(d), o(static_cast<size_t>(kHeads) * d);
  std::uniform_real_distribution<float> unit(0.9f, 0.999f);
  for (float& x : decay) x = unit(rng);
  for (auto _ : state) {
    for (int h = 0; h < kHeads; ++h)
      KdaStateStep(S.data() + static_cast<size_t>(h) * d * d, d, decay.data(), k.data(), v.data(),
                   0.5f, q.data(), u.data(), o.data() + h * d, isa);
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(S.size() * sizeof(float)));
  state.SetItemsProcessed(state.iterations() * kHeads);
}

void Latent(benchmark::State& state, int64_t positions, Isa isa) {
  if (UsableIsa(isa) != isa) return state.SkipWithError("ISA not available");
  std::mt19937 rng(1);
  const int64_t stride = kLatent + kRope;
  const std::vector<float> cache = Normal(static_cast<size_t>(positions * stride), 1.f, rng);
  std::vector<float> p(static_cast<size_t>(positions), 1.f / static_cast<float>(positions));
  std::vector<float> y(kLatent);
  for (auto _ : state) {
    WeightedRowSum(p.data(), cache.data(), positions, stride, kLatent, y.data(), isa);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * positions * kLatent *
                          static_cast<int64_t>(sizeof(float)));
  state.SetItemsProcessed(state.iterations() * positions);
}

}  // namespace

void RegisterBenchmarks() {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    const std::string name = IsaName(isa);
    benchmark::RegisterBenchmark(("kda_step/32x128x128/" + name).c_str(), KdaStep, isa);
    for (int64_t positions : {512, 4096})
      benchmark::RegisterBenchmark(("latent/" + std::to_string(positions) + "x512/" + name).c_str(),
                                   Latent, positions, isa);
  }
}

}  // namespace waste::kernels
