// The main() every benchmark program shares (bench_main.cc): it reads
// Google Benchmark's flags, calls RegisterBenchmarks() and runs what the
// flags select. Each program defines RegisterBenchmarks, registering its
// benchmarks by name (shape, kernel, ISA) so that --benchmark_filter can
// pick them.
#pragma once

namespace waste::kernels {

void RegisterBenchmarks();

}  // namespace waste::kernels
