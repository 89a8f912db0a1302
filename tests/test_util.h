// Helpers shared by the tests: scratch directories and file bytes.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace waste::testing {

// A fresh, empty directory under the test temp dir, named after the test.
inline std::string ScratchDir(const std::string& tag = "") {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info ? info->test_suite_name() : "suite") + "." +
                     (info ? info->name() : "test") + tag;
  for (char& ch : name)
    if (ch == '/') ch = '_';
  const std::filesystem::path p = std::filesystem::path(::testing::TempDir()) / ("waste-" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

inline std::vector<uint8_t> FileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace waste::testing
