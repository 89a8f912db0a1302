#include "engine/kernels/cpu.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace waste::kernels {
namespace {

// F16C from cpuid itself: clang (the fuzz build's compiler) does not know
// "f16c" as a __builtin_cpu_supports feature.
bool HasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

// AMX-INT8: the CPU has the tiles (cpuid 7.0 EDX bits 24 and 25), the OS
// saves their state (XCR0 bits 17 and 18), and Linux lets this process use
// the tile data, which it grants only on request (ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA; process-wide, threads included).
bool HasAmxInt8() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE)) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  constexpr unsigned kAmxTile = 1u << 24, kAmxInt8 = 1u << 25;
  if ((d & (kAmxTile | kAmxInt8)) != (kAmxTile | kAmxInt8)) return false;
  uint32_t xcr0_low = 0, xcr0_high = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  constexpr uint32_t kTileState = (1u << 17) | (1u << 18);
  if ((xcr0_low & kTileState) != kTileState) return false;
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

Isa Detect() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
  if (!avx2) return Isa::kScalar;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi") &&
                      __builtin_cpu_supports("avx512vnni");
  if (!avx512) return Isa::kAvx2;
  return HasAmxInt8() ? Isa::kAmx : Isa::kAvx512;
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
    case Isa::kAmx:
      return "amx";
  }
  return "unknown";
}

std::vector<Isa> AvailableIsas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    if (isa <= BestIsa()) out.push_back(isa);
  return out;
}

Isa UsableIsa(Isa isa) {
  return isa <= BestIsa() ? isa : BestIsa();
}

}  // namespace waste::kernels
