// Which instruction sets the kernels may use on this CPU.
//
// Every kernel has a scalar reference and, where it pays, AVX2 and AVX-512
// paths compiled in their own translation units with their own flags (see
// README.md). Callers pick an Isa once, normally BestIsa(), and pass it to
// each kernel; tests and benchmarks walk AvailableIsas().
#pragma once

#include <vector>

namespace waste::kernels {

// Ordered: a higher value can run everything a lower one can.
enum class Isa {
  kScalar,  // baseline x86-64
  kAvx2,    // AVX2 + FMA + F16C
  kAvx512,  // AVX-512 F, BW, VL, VBMI and VNNI, on top of kAvx2
  kAmx,     // AMX-INT8 tiles, on top of kAvx512: only the exact Q4G product
            // in groups of 128 differs from kAvx512 (matvec_amx.cc)
};

// The best Isa this CPU and OS support (cpuid via __builtin_cpu_supports,
// which also checks that the OS saves the vector state; for AMX, cpuid,
// XCR0 and Linux's permission for the tile data, asked for once for the
// whole process here). Computed once, thread-safe.
Isa BestIsa();

// "scalar", "avx2", "avx512" or "amx".
const char* IsaName(Isa isa);

// Every Isa usable here, scalar first, ascending.
std::vector<Isa> AvailableIsas();

// `isa` if this CPU supports it, otherwise BestIsa(). The kernels apply this
// to the Isa they are given, so asking for AVX-512 on an AVX2 machine runs
// the AVX2 path instead of faulting.
Isa UsableIsa(Isa isa);

}  // namespace waste::kernels
