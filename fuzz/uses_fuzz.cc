// Fuzz target: wasted's saved use counts (daemon/uses.cc, ParseUses), read
// at every start from --state-dir: any bytes give the counts of this
// container or an error naming the file and the field (the daemon then
// starts cold; before, a wrong type aborted it, a restart loop under
// systemd). The container is pretended: fingerprint "fp", 6 records.
#include <cstdint>
#include <string_view>

#include "daemon/uses.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto uses = waste::daemon::ParseUses(std::string_view(reinterpret_cast<const char*>(data), size),
                                       "uses.json", "fp", 6);
  if (uses.ok() && uses->size() != 6) __builtin_trap();
  return 0;
}
