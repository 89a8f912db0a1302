// Byte counts as people read them ("1.25 GiB"), shared by the engine's
// plans and by wastectl, which links no engine: header only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace waste {

// Binary units: "512 B", "40.00 KiB", "1.25 GiB".
inline std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, kUnits[u]);
  return buf;
}

}  // namespace waste
