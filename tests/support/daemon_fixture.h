// The fixture of the daemon suites (tests/daemon_*_test.cc): wasted with
// real clients, as separate processes. Each test starts its own daemon in
// the foreground, as a child, on a socket in its own scratch directory.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/child.h"

namespace waste::testing {

using Clock = std::chrono::steady_clock;

// Seconds since `t`.
inline double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

inline bool Has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

class Daemon : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override { daemon_ = Child(); }

  // `waste synth --preset PRESET` into the scratch directory; its path.
  std::string Synth(const std::string& preset);

  // Starts wasted in the foreground on socket_ (state in dir_/state) and
  // waits until it listens; a test failure if it exits or takes 20 s.
  void StartDaemon(const std::string& container, const std::vector<std::string>& extra = {});

  // `wastectl status --json`. On a failure the object is empty: keep the
  // result non-const, since nlohmann's const operator[] on a missing key is
  // undefined behaviour (a read of freed memory under ThreadSanitizer),
  // where the non-const one gives null and a clean test failure.
  nlohmann::json Status();

  // The logits of `waste eval` over fixed ids, through the daemon or not
  // (`flags`), written to dir_/logits-TAG.
  std::vector<uint8_t> Logits(const std::string& container, const std::string& flags,
                              const std::string& tag,
                              const std::string& ids = "3,14,15,92,65,35,89,79,32,38,46");

  // daemon_probe's command line against socket_ and `container`.
  std::vector<std::string> Probe(const std::string& container,
                                 const std::vector<std::string>& args);

  // The daemon's resident set in bytes (0 when it cannot be read).
  uint64_t DaemonRss();

  std::string dir_, socket_;
  Child daemon_;
};

}  // namespace waste::testing
