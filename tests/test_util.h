// Helpers shared by the tests: scratch directories, file bytes, logits
// against a reference, a container's logits on every instruction-set path.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/experts/cache.h"
#include "engine/format/container.h"
#include "engine/kernels/cpu.h"
#include "engine/model/model.h"

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

// A file's bytes as a string ("" when it cannot be read).
inline std::string ReadText(const std::string& path) {
  const std::vector<uint8_t> b = FileBytes(path);
  return {b.begin(), b.end()};
}

// Writes `text` to `path`, replacing what was there.
inline void WriteText(const std::string& path, std::string_view text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
}

// The little-endian float32 values of a fixture file.
inline std::vector<float> FileFloats(const std::string& path) {
  const std::vector<uint8_t> b = FileBytes(path);
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), f.size() * 4);
  return f;
}

// Indices of the k largest of row[0, n), largest first; ties by index.
inline std::vector<int> TopK(const float* row, int n, int k) {
  std::vector<int> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  idx.resize(k);
  return idx;
}

// One row's largest |logit| of the reference and largest |difference|.
struct RowError {
  float scale = 0, diff = 0;
};

inline RowError CompareRow(const float* got, const float* want, int vocab) {
  RowError r;
  for (int i = 0; i < vocab; ++i) {
    r.scale = std::max(r.scale, std::fabs(want[i]));
    r.diff = std::max(r.diff, std::fabs(got[i] - want[i]));
  }
  return r;
}

// Checks `got` against a reference's `want`, both [positions][vocab]: at
// every position the largest |difference| within `tolerance` of the row's
// largest |logit|, and the same top 10 (`what` names the comparison in the
// failures). Returns the worst ratio of the two.
inline double ExpectLogitsNear(const std::vector<float>& got, const std::vector<float>& want,
                               int vocab, float tolerance, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t p = 0; p < std::min(got.size(), want.size()) / vocab; ++p) {
    const float* g = got.data() + p * vocab;
    const float* w = want.data() + p * vocab;
    const auto [scale, diff] = CompareRow(g, w, vocab);
    EXPECT_LE(diff, tolerance * scale) << what << " position " << p;
    EXPECT_EQ(TopK(g, vocab, 10), TopK(w, vocab, 10)) << what << " position " << p
                                                       << ": top-10 differs";
    worst = std::max(worst, static_cast<double>(diff / scale));
  }
  return worst;
}

// The long-prompt comparison (tests/fixtures/convert/long): at every
// position of `got` against the reference's `want`, both [positions][vocab],
// the largest |difference| within `tolerance` of the row's largest |logit|,
// and the same argmax wherever the reference's top two are further apart
// than twice that (near ties may swap). `what` names the comparison in the
// failures.
struct EveryPosition {
  double worst = 0;        // the largest max|diff| / max|logit| of any row
  int worst_at = 0;        // its position
  int argmax_checked = 0;  // rows whose argmax was compared
};

inline EveryPosition ExpectEveryPositionNear(const std::vector<float>& got,
                                             const std::vector<float>& want, int vocab,
                                             float tolerance, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  EveryPosition r;
  for (size_t p = 0; p < std::min(got.size(), want.size()) / vocab; ++p) {
    const float* g = got.data() + p * vocab;
    const float* w = want.data() + p * vocab;
    const auto [scale, diff] = CompareRow(g, w, vocab);
    EXPECT_LE(diff, tolerance * scale) << what << " position " << p;
    if (diff / scale > r.worst) r.worst = diff / scale, r.worst_at = static_cast<int>(p);
    const std::vector<int> top = TopK(w, vocab, 2);
    if (w[top[0]] - w[top[1]] > 2 * tolerance * scale) {
      ++r.argmax_checked;
      EXPECT_EQ(TopK(g, vocab, 1)[0], top[0]) << what << " position " << p;
    }
  }
  return r;
}

// One instruction-set path's logits of a prompt, [positions][vocab].
struct IsaLogits {
  kernels::Isa isa;
  int vocab = 0;
  std::vector<float> logits;
};

// The model of the container in `dir` over `prompt`, in one forward pass
// from a fresh session of `context` tokens (0: the prompt's length), on
// every instruction-set path this CPU has, its experts from an in-process
// cache of `slots` records; `mo` gives the other options (its isa is each
// path's). A step that fails is a test failure, and no path after it runs.
inline std::vector<IsaLogits> LogitsOnEveryIsa(const std::string& dir,
                                               std::span<const int> prompt, int slots,
                                               ModelOptions mo = {}, int context = 0) {
  std::vector<IsaLogits> out;
  auto ct = Container::Open(dir);
  EXPECT_TRUE(ct.ok()) << ct.status().message();
  if (!ct.ok()) return out;
  CacheOptions co;
  co.slots = slots;
  auto cache = ExpertCache::Create(*ct, co);
  EXPECT_TRUE(cache.ok()) << cache.status().message();
  if (!cache.ok()) return out;
  for (kernels::Isa isa : kernels::AvailableIsas()) {
    mo.isa = isa;
    auto model = Model::Load(*ct, cache->get(), mo);
    EXPECT_TRUE(model.ok()) << model.status().message();
    if (!model.ok()) return out;
    Session s = (*model)->NewSession(context > 0 ? context : static_cast<int>(prompt.size()));
    IsaLogits r{isa, (*model)->config().vocab, {}};
    const Status st = (*model)->Forward(s, prompt, nullptr, &r.logits);
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok()) return out;
    out.push_back(std::move(r));
  }
  return out;
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
