// Google Benchmark microbenchmarks of the trunk's matrix products
// (engine/kernels/matvec.h) at shapes of the kimi-linear-48b preset, per
// path (scalar, avx2, avx512):
//   MatVec  a KDA projection (4096 rows x 2304 inputs) and its output
//           (2304 x 4096) in Q4G (--trunk-bits 4) and BF16 (--trunk-bits
//           16), 16384 rows of the LM head in Q8G (2304 inputs), and a
//           BF16R expert's gate (1024 x 2304, --expert-format bf16), and
//           MLA's value rows of one head (128 rows of kv_b_proj x 512
//           latent, read in place) in Q4G, Q8G and BF16.
//   MatVecBlocks  a Q4GR expert's gate (1024 x 2304) and down (2304 x
//           1024) against 1, 4, 8 and 16 inputs, as a prefill chunk's
//           tokens routed to one expert (bytes: the payload once per input),
//           with exact and (/int8) int8 inputs (matvec.h's Q4Input);
//           blocks_from_memory the same and a KDA projection against
//           1 and 8 inputs with the matrix read from memory (1 GiB of
//           copies), as in decode and a prefill chunk's experts.
//   WeightedRows  MLA's query in latent space: one head's 128 key rows of
//           kv_b_proj (8192 rows x 512 latent), read in place, in Q4G, Q8G
//           and BF16.
// Reports weight bytes per second (the payload read, scales not counted).
// One thread; not run by CI. Example:
//   build/bin/matvec_bench --benchmark_filter='/avx512' --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_main.h"
#include "engine/format/encoding.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/matvec.h"

namespace waste::kernels {
namespace {

struct Shape {
  const char* name;
  format::Fmt fmt;
  bool bf16;
  int64_t rows, cols;
};

struct Setup {
  std::vector<uint8_t> payload;
  std::vector<uint16_t> scales;
  std::vector<float> x, y;
  MatrixView view;

  explicit Setup(const Shape& sh) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.f, 1.f);
    view.fmt = sh.fmt;
    view.bf16 = sh.bf16;
    view.rows = sh.rows;
    view.cols = sh.cols;
    view.group = sh.fmt == format::Fmt::kF16 ? 0 : 128;
    payload.resize(static_cast<size_t>(MatrixRowBytes(view) * sh.rows));
    if (sh.bf16) {  // real weights: random bits would be NaNs and subnormals
      for (size_t i = 0; i + 1 < payload.size(); i += 2) {
        const uint16_t h = format::F32ToBf16(0.02f * normal(rng));
        std::memcpy(&payload[i], &h, 2);
      }
    } else {
      for (uint8_t& b : payload) b = static_cast<uint8_t>(rng());
      scales.assign(static_cast<size_t>(sh.rows * ((sh.cols + 127) / 128)),
                    format::F32ToF16(0.01f));
    }
    x.resize(static_cast<size_t>(std::max(sh.rows, sh.cols)));
    for (float& v : x) v = normal(rng);
    y.resize(static_cast<size_t>(std::max(sh.rows, sh.cols)));
    view.payload = payload.data();
    view.scales = scales.empty() ? nullptr : scales.data();
  }
};

void Run(benchmark::State& state, Shape sh, Isa isa) {
  if (UsableIsa(isa) != isa) return state.SkipWithError("ISA not available");
  Setup s(sh);
  for (auto _ : state) {
    MatVec(s.view, s.x.data(), s.y.data(), 0, sh.rows, isa);
    benchmark::DoNotOptimize(s.y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(s.payload.size()));
}

// One head's key rows (the first head's: every head's slice has the same
// size); the input is the head's 128 q_nope floats.
void Rows(benchmark::State& state, Shape sh, Isa isa) {
  if (UsableIsa(isa) != isa) return state.SkipWithError("ISA not available");
  constexpr int64_t kKeyRows = 128;
  Setup s(sh);
  for (auto _ : state) {
    WeightedRows(s.view, 0, s.x.data(), kKeyRows, s.y.data(), isa);
    benchmark::DoNotOptimize(s.y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kKeyRows * MatrixRowBytes(s.view));
}

// MatVecBlocks as a prefill chunk applies a routed expert: every token
// routed to it, 32 rows at a time. Bytes are the payload once per input.
// From memory, the product walks copies of the matrix, 1 GiB in all (past
// the L3 cache), one copy an iteration, as a decode step reads its experts.
void Blocks(benchmark::State& state, Shape sh, int inputs, Isa isa, Q4Input in,
            bool from_memory) {
  if (UsableIsa(isa) != isa) return state.SkipWithError("ISA not available");
  Setup s(sh);
  std::vector<std::vector<float>> x(inputs, s.x), y(inputs, s.y);
  for (int i = 0; i < inputs; ++i) x[i][0] += static_cast<float>(i);  // distinct inputs
  std::vector<const float*> xs;
  std::vector<float*> ys;
  for (int i = 0; i < inputs; ++i) {
    xs.push_back(x[i].data());
    ys.push_back(y[i].data());
  }
  const size_t bytes = s.payload.size();
  const size_t copies = from_memory ? (size_t{1} << 30) / bytes + 1 : 0;
  std::vector<uint8_t> pool(copies * bytes);
  for (size_t c = 0; c < copies; ++c) std::memcpy(pool.data() + c * bytes, s.payload.data(), bytes);
  MatrixView view = s.view;
  size_t c = 0;
  for (auto _ : state) {
    if (copies > 0) {
      view.payload = pool.data() + c * bytes;
      c = c + 1 == copies ? 0 : c + 1;
    }
    MatVecBlocks(view, xs, ys, 0, sh.rows, 32, isa, in);
    benchmark::DoNotOptimize(ys.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * inputs * static_cast<int64_t>(bytes));
}

}  // namespace

void RegisterBenchmarks() {
  using format::Fmt;
  const Shape matvec[] = {
      {"q4g_4096x2304", Fmt::kQ4G, false, 4096, 2304},
      {"q4g_2304x4096", Fmt::kQ4G, false, 2304, 4096},
      {"q8g_16384x2304", Fmt::kQ8G, false, 16384, 2304},
      {"bf16_4096x2304", Fmt::kF16, true, 4096, 2304},
      {"bf16_2304x4096", Fmt::kF16, true, 2304, 4096},
      {"bf16_1024x2304", Fmt::kF16, true, 1024, 2304},
      {"value_rows/q4g_128x512", Fmt::kQ4G, false, 128, 512},
      {"value_rows/q8g_128x512", Fmt::kQ8G, false, 128, 512},
      {"value_rows/bf16_128x512", Fmt::kF16, true, 128, 512},
  };
  const Shape kv_b[] = {
      {"q4g", Fmt::kQ4G, false, 8192, 512},
      {"q8g", Fmt::kQ8G, false, 8192, 512},
      {"bf16", Fmt::kF16, true, 8192, 512},
  };
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    for (const Shape& sh : matvec)
      benchmark::RegisterBenchmark((std::string(sh.name) + "/" + IsaName(isa)).c_str(), Run, sh,
                                   isa);
  const Shape expert[] = {
      {"gate_1024x2304", Fmt::kQ4G, false, 1024, 2304},
      {"down_2304x1024", Fmt::kQ4G, false, 2304, 1024},
  };
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    for (Q4Input in : {Q4Input::kExact, Q4Input::kInt8})
      for (const Shape& sh : expert)
        for (int inputs : {1, 4, 8, 16, 64})
          benchmark::RegisterBenchmark(
              ("blocks/" + std::string(sh.name) + "/" + std::to_string(inputs) + "/" +
               IsaName(isa) + (in == Q4Input::kInt8 ? "/int8" : ""))
                  .c_str(),
              Blocks, sh, inputs, isa, in, false);
  const Shape from_memory[] = {expert[0], expert[1], matvec[0]};
  for (Isa isa : {Isa::kAvx512, Isa::kAmx})
    for (const Shape& sh : from_memory)
      for (int inputs : {1, 8})
        benchmark::RegisterBenchmark(("blocks_from_memory/" + std::string(sh.name) + "/" +
                                      std::to_string(inputs) + "/" + IsaName(isa))
                                         .c_str(),
                                     Blocks, sh, inputs, isa, Q4Input::kExact, true);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    for (const Shape& sh : kv_b)
      benchmark::RegisterBenchmark(
          ("weighted_rows/" + std::string(sh.name) + "_128x512/" + IsaName(isa)).c_str(), Rows, sh,
          isa);
}

}  // namespace waste::kernels
