// Helpers shared by the tests: scratch directories and file bytes.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
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

// What a shell command line did: its exit code (-1 when it did not exit
// normally) and its standard output and error, together.
struct Outcome {
  int code = -1;
  std::string out;
};

inline Outcome Shell(const std::string& line) {
  Outcome r;
  FILE* p = popen((line + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace waste::testing
