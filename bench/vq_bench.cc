// Google Benchmark microbenchmarks of the routed experts' kernels at the
// shapes of the kimi-linear-48b preset (hidden 2304, expert width 1024):
// gate and up are 1024 rows x 2304 inputs, down 2304 rows x 1024 inputs.
// apply_f32 is VqApply (gathers), apply_split the same product from the
// byte-plane split (VqApplySplit, exact), apply_i8 the int8 table (VqApplyQ).
// Each product reports index bytes per second (bytes_per_second) and table
// lookups per second (lookups, one per row, vector position and stage).
// One thread; not run by CI. Example:
//   build/bin/vq_bench --benchmark_filter='VQ3R/gate' --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_main.h"
#include "engine/format/encoding.h"
#include "engine/kernels/cpu.h"
#include "engine/kernels/vq.h"

namespace waste::kernels {
namespace {

struct Format {
  const char* name;
  int stages, entries, index_bits;
};
const Format kFormats[] = {{"VQ3R", 3, 256, 8}, {"VQ2R", 2, 256, 8}, {"VQ4P", 4, 64, 6}};

struct Shape {
  const char* name;
  int64_t rows, cols;
};
const Shape kShapes[] = {{"gate", 1024, 2304}, {"down", 2304, 1024}};

// One matrix with random indices and scales, its codebooks, an input and
// both tables.
struct Setup {
  Format f;
  Shape shape;
  std::vector<uint8_t> indices, scales;
  std::vector<float> books, x, lut, y;
  std::vector<const float*> book_ptrs;
  std::vector<uint8_t> qlut, planes;
  VqMatrixView view;

  Setup(const Format& format, const Shape& sh) : f(format), shape(sh) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.f, 1.f);
    const int64_t blocks = (shape.rows + 63) / 64;
    const int bytes_per_vector = f.index_bits == 6 ? 3 : f.stages;
    indices.resize(static_cast<size_t>(blocks * 64 * (shape.cols / 8) * bytes_per_vector));
    std::uniform_int_distribution<int> pick(0, f.index_bits == 6 ? 255 : f.entries - 1);
    for (uint8_t& b : indices) b = static_cast<uint8_t>(pick(rng));
    scales.resize(static_cast<size_t>(shape.rows) * 2);
    for (int64_t r = 0; r < shape.rows; ++r) {
      const uint16_t h = format::F32ToF16(0.5f + 0.001f * static_cast<float>(r % 100));
      scales[2 * r] = static_cast<uint8_t>(h);
      scales[2 * r + 1] = static_cast<uint8_t>(h >> 8);
    }
    books.resize(static_cast<size_t>(f.stages) * f.entries * 8);
    for (float& b : books) b = 0.1f * normal(rng);
    for (int s = 0; s < f.stages; ++s) book_ptrs.push_back(books.data() + s * f.entries * 8);
    x.resize(static_cast<size_t>(shape.cols));
    for (float& v : x) v = normal(rng);
    lut.resize(VqLutFloats(shape.cols, f.stages, f.entries));
    VqBuildLut(book_ptrs.data(), f.stages, f.entries, x.data(), shape.cols, lut.data(), BestIsa());
    qlut.resize(VqQLutBytes(shape.cols, f.stages, f.index_bits));
    VqQuantizeLut(lut.data(), shape.cols, f.stages, f.entries, f.index_bits, qlut.data(),
                  BestIsa());
    if (f.index_bits == 8) {
      planes.resize(VqSplitLutBytes(shape.cols, f.stages));
      VqSplitLut(lut.data(), shape.cols, f.stages, f.entries, planes.data(), BestIsa());
    }
    y.resize(static_cast<size_t>(shape.rows));
    view.indices = indices.data();
    view.scales = scales.data();
    view.rows = shape.rows;
    view.cols = shape.cols;
    view.stages = f.stages;
    view.entries = f.entries;
    view.index_bits = f.index_bits;
    view.index_block = 64;
  }
  void Count(benchmark::State& state) const {
    const int bytes_per_vector = f.index_bits == 6 ? 3 : f.stages;
    const int64_t per_call = shape.rows * (shape.cols / 8);
    state.SetBytesProcessed(state.iterations() * per_call * bytes_per_vector);
    state.counters["lookups"] = benchmark::Counter(
        static_cast<double>(state.iterations() * per_call * f.stages), benchmark::Counter::kIsRate);
  }
};

void ApplyF32(benchmark::State& state, Format f, Shape sh, Isa isa) {
  if (UsableIsa(isa) != isa) return state.SkipWithError("ISA not available");
  Setup s(f, sh);
  for (auto _ : state) {
    VqApply(s.view, s.lut.data(), s.y.data(), 0, sh.rows, isa);
    benchmark::DoNotOptimize(s.y.data());
    benchmark::ClobberMemory();
  }
  s.Count(state);
}

// The exact product from the byte-plane split of the float table.
void ApplySplit(benchmark::State& state, Format f, Shape sh, Isa isa) {
  if (UsableIsa(isa) != isa) return state.SkipWithError("ISA not available");
  Setup s(f, sh);
  for (auto _ : state) {
    VqApplySplit(s.view, s.lut.data(), s.planes.data(), s.y.data(), 0, sh.rows, isa);
    benchmark::DoNotOptimize(s.y.data());
    benchmark::ClobberMemory();
  }
  s.Count(state);
}

void ApplyI8(benchmark::State& state, Format f, Shape sh, Isa isa) {
  if (UsableIsa(isa) != isa) return state.SkipWithError("ISA not available");
  Setup s(f, sh);
  for (auto _ : state) {
    VqApplyQ(s.view, s.qlut.data(), s.y.data(), 0, sh.rows, isa);
    benchmark::DoNotOptimize(s.y.data());
    benchmark::ClobberMemory();
  }
  s.Count(state);
}

// Table building, per input vector: floats, then (kind) the int8 copy or
// the byte-plane split, or the planes built directly (kBuiltSplit, the
// model's path). Bytes: the float table's.
enum class Derived { kNone, kI8, kSplit, kBuiltSplit };
void BuildLut(benchmark::State& state, Format f, Shape sh, Isa isa, Derived kind) {
  if (UsableIsa(isa) != isa) return state.SkipWithError("ISA not available");
  Setup s(f, sh);
  for (auto _ : state) {
    if (kind == Derived::kBuiltSplit) {
      VqBuildSplitLut(s.book_ptrs.data(), f.stages, f.entries, s.x.data(), sh.cols,
                      s.planes.data(), isa);
      benchmark::DoNotOptimize(s.planes.data());
      benchmark::ClobberMemory();
      continue;
    }
    VqBuildLut(s.book_ptrs.data(), f.stages, f.entries, s.x.data(), sh.cols, s.lut.data(), isa);
    if (kind == Derived::kI8)
      VqQuantizeLut(s.lut.data(), sh.cols, f.stages, f.entries, f.index_bits, s.qlut.data(), isa);
    if (kind == Derived::kSplit)
      VqSplitLut(s.lut.data(), sh.cols, f.stages, f.entries, s.planes.data(), isa);
    benchmark::DoNotOptimize(s.qlut.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(s.lut.size() * 4));
}

}  // namespace

void RegisterBenchmarks() {
  const Isa isas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
  for (const Format& f : kFormats)
    for (const Shape& sh : kShapes) {
      const std::string base = std::string(f.name) + "/" + sh.name + "/";
      for (Isa isa : isas) {
        benchmark::RegisterBenchmark((base + "apply_f32/" + IsaName(isa)).c_str(), ApplyF32, f, sh,
                                     isa);
        benchmark::RegisterBenchmark((base + "apply_i8/" + IsaName(isa)).c_str(), ApplyI8, f, sh,
                                     isa);
        benchmark::RegisterBenchmark((base + "lut_f32/" + IsaName(isa)).c_str(), BuildLut, f, sh,
                                     isa, Derived::kNone);
        benchmark::RegisterBenchmark((base + "lut_i8/" + IsaName(isa)).c_str(), BuildLut, f, sh,
                                     isa, Derived::kI8);
        if (f.index_bits != 8) continue;
        benchmark::RegisterBenchmark((base + "apply_split/" + IsaName(isa)).c_str(), ApplySplit, f,
                                     sh, isa);
        benchmark::RegisterBenchmark((base + "lut_split/" + IsaName(isa)).c_str(), BuildLut, f,
                                     sh, isa, Derived::kSplit);
        benchmark::RegisterBenchmark((base + "lut_built_split/" + IsaName(isa)).c_str(), BuildLut,
                                     f, sh, isa, Derived::kBuiltSplit);
      }
    }
}

}  // namespace waste::kernels
