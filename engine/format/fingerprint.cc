#include "engine/format/fingerprint.h"

#include <cstdio>

namespace waste {

std::string ManifestFingerprint(const Manifest& m) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : m.ToJson().dump()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

}  // namespace waste
