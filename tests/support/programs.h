// The programs the build makes, as the tests run them.
#pragma once

#include <string>

namespace waste::testing {

// The path of the built program (or preloaded library) `name` in the
// build's bin directory: "waste", "wasted", "wastectl", "daemon_probe",
// "libwaste_eio_preload.so". WASTE_BIN_DIR is set by tests/CMakeLists.txt.
inline std::string Bin(const std::string& name) {
  return std::string(WASTE_BIN_DIR) + "/" + name;
}

}  // namespace waste::testing
