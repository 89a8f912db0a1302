// Google Benchmark microbenchmarks of the products straight from GGUF
// blocks (engine/kernels/gguf_matvec.h) at kimi-linear-48b's expert shapes
// (gate/up 1024 x 2304, down 2304 x 1024), for each type and ISA: `matvec`
// (one token, GgufMatVec) and `chunk64` (a prefill chunk of 64 tokens,
// GgufMatMul). The matrices are tiled from tests/fixtures/gguf/quants'
// blocks (the gguf package's). Reports weight bytes per second (a chunk
// reads the weights once for its 64 tokens), one thread. Example:
//   build/bin/gguf_bench --benchmark_filter='q4_k/.*/avx512' --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_main.h"
#include "engine/gguf/gguf.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/gguf_matvec.h"

namespace waste::kernels {
namespace {

// A rows x cols matrix of the fixture file's blocks, in a scrambled order.
std::vector<uint8_t> Tile(const std::string& name, int64_t rows, int64_t cols, uint32_t* type) {
  std::ifstream in(std::string(WASTE_FIXTURES) + "/gguf/quants/" + name + ".bin", std::ios::binary);
  const std::vector<uint8_t> f{std::istreambuf_iterator<char>(in),
                               std::istreambuf_iterator<char>()};
  uint32_t head[4] = {};  // type, block, size, n
  if (f.size() >= 16) std::memcpy(head, f.data(), 16);
  *type = head[0];
  const int64_t block = head[1], size = head[2], n = head[3];
  if (block == 0 || n == 0 || cols % block != 0 || f.size() < 16 + static_cast<size_t>(n * size))
    return {};
  const int64_t per_row = cols / block;
  std::vector<uint8_t> m(static_cast<size_t>(rows * per_row * size));
  for (int64_t i = 0; i < rows * per_row; ++i)
    std::memcpy(m.data() + i * size, f.data() + 16 + (i * 7) % n * size, static_cast<size_t>(size));
  return m;
}

void Run(benchmark::State& state, const std::string& name, int64_t rows, int64_t cols, int tokens,
         Isa isa) {
  if (UsableIsa(isa) != isa) return state.SkipWithError("ISA not available");
  uint32_t type = 0;
  const std::vector<uint8_t> m = Tile(name, rows, cols, &type);
  const GgufMatrixView w{type, m.data(), static_cast<int64_t>(m.size()), rows, cols};
  if (m.empty() || !CheckGgufMatrix(w).ok()) return state.SkipWithError("fixture unreadable");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<std::vector<float>> x(static_cast<size_t>(tokens)), y(x.size());
  std::vector<const float*> xs;
  std::vector<float*> ys;
  for (size_t t = 0; t < x.size(); ++t) {
    x[t].resize(static_cast<size_t>(cols));
    for (float& v : x[t]) v = normal(rng);
    y[t].resize(static_cast<size_t>(rows));
    xs.push_back(x[t].data());
    ys.push_back(y[t].data());
  }
  for (auto _ : state) {
    GgufMatMul(w, xs, ys, 0, rows, isa);
    benchmark::DoNotOptimize(ys.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(m.size()));
}

}  // namespace

void RegisterBenchmarks() {
  struct Shape {
    const char* name;
    int64_t rows, cols;
  };
  for (const char* type :
       {"q4_k",    "q5_k",  "q6_k",    "q8_0",   "q2_k",   "q3_k",  "iq4_xs", "mxfp4",
        "q4_0",    "q4_1",  "q5_0",    "q5_1",   "iq4_nl", "bf16",  "f16",    "f32",
        "iq3_xxs", "iq3_s", "iq2_xxs", "iq2_xs", "iq2_s",  "iq1_s", "iq1_m"})
    for (const Shape s :
         {Shape{"gate_up_1024x2304", 1024, 2304}, Shape{"down_2304x1024", 2304, 1024}})
      for (const int tokens : {1, 64})
        for (const Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
          benchmark::RegisterBenchmark((std::string(type) + "/" + s.name + "/" +
                                        (tokens == 1 ? "matvec" : "chunk64") + "/" + IsaName(isa))
                                           .c_str(),
                                       Run, std::string(type), s.rows, s.cols, tokens, isa);
}

}  // namespace waste::kernels
