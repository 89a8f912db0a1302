#include "engine/kernels/cpu.h"

#include <cpuid.h>

namespace waste::kernels {
namespace {

// F16C from cpuid itself: clang (the fuzz build's compiler) does not know
// "f16c" as a __builtin_cpu_supports feature.
bool HasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

Isa Detect() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
  if (!avx2) return Isa::kScalar;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi") &&
                      __builtin_cpu_supports("avx512vnni");
  return avx512 ? Isa::kAvx512 : Isa::kAvx2;
}

}  // namespace

Isa BestIsa() {
  static const Isa best = Detect();
  return best;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

std::vector<Isa> AvailableIsas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa <= BestIsa()) out.push_back(isa);
  return out;
}

Isa UsableIsa(Isa isa) {
  return isa <= BestIsa() ? isa : BestIsa();
}

}  // namespace waste::kernels
