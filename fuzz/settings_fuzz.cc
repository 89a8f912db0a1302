// Fuzz target: wasted's settings file (daemon/settings.cc, CLI11's config
// reader under the table of settings), as `wasted --config FILE` reads it
// at start and at every reload. Any bytes give settings or an error (exit
// code 2, the message naming the file where it gave the value), never a
// throw past ParseSettings or a crash.
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/settings.h"
#include "fuzz/scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      waste::fuzz::WriteScratch("wasted.conf", std::string_view(reinterpret_cast<const char*>(data), size));
  std::string a0 = "wasted", a1 = "--config", a2 = path;
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  waste::daemon::Settings s;
  std::string error;
  const int code = waste::daemon::ParseSettings(3, argv, &s, /*quiet=*/true, &error);
  if (code != -1 && code != 0 && code != 2) __builtin_trap();
  if (code == -1) (void)waste::daemon::DescribeSettings(s.daemon);
  return 0;
}
