// waste replay end to end: a tiny-kimi container (5 MoE layers x 16 experts,
// top-4), a detached wasted on a socket of the test's own, and a small
// routing trace written here. A cache that holds everything serves a second
// pass without a read; one smaller than the trace's working set reads again;
// bad traces are refused with the line that is wrong, before the daemon is
// touched, and a missing daemon is an error, not a fallback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/detached_wasted.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace {

using nlohmann::json;
using waste::testing::Bin;
using waste::testing::Outcome;
using waste::testing::Shell;

constexpr int kMoeLayers = 5, kTokens = 20, kTopK = 4;
// Per layer the trace uses 8 experts: one every token, the rest in turns.
constexpr int kWorkingSet = kMoeLayers * 8;


bool Has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// Token t, MoE layer l: expert 2l (every token), one of three, one of two and
// one of two more (in turns of different lengths, so tokens repeat each
// other only in part); ids ascending, as `waste run --trace` writes them.
std::vector<int> Experts(int t, int l) {
  const int base = 2 * l;  // a different set per layer, all below 16
  return {base, base + 1 + t % 3, base + 4 + t % 2, base + 6 + (t / 2) % 2};
}

std::string TraceLine(int t) {
  json layers = json::array();
  for (int l = 0; l < kMoeLayers; ++l) layers.push_back(Experts(t, l));
  return json{{"tok", t}, {"layers", layers}}.dump();
}

class Replay : public ::testing::Test {
 protected:
  // One container for every test of this process: the daemon only reads it.
  // Named by pid because ctest runs each test as a process of its own, in
  // parallel, and one must not rewrite the container under another.
  static void SetUpTestSuite() {
    container_ = ::testing::TempDir() + "/waste-replay_test-tiny-kimi-" + std::to_string(getpid());
    const Outcome r = Shell(Bin("waste") + " synth -q --force --preset tiny-kimi " + container_);
    ASSERT_EQ(r.code, 0) << r.out;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(container_, ec);
  }

  void SetUp() override {
    dir_ = waste::testing::ScratchDir();
    socket_ = dir_ + "/wasted.sock";
    std::ofstream f(dir_ + "/trace.jsonl");
    for (int t = 0; t < kTokens; ++t) f << TraceLine(t) << "\n";
  }

  void TearDown() override {
    if (!wasted_.running()) return;
    const Outcome r = wasted_.Stop();
    EXPECT_EQ(r.code, 0) << r.out;
  }

  // Detached, on socket_: wasted returns once it listens.
  void StartDaemon(const std::string& budget) {
    waste::testing::DetachedWastedOptions o;
    o.idle_exit = 20;
    o.flags = {"--budget", budget};
    const Outcome r = wasted_.Start(container_, dir_, o);
    ASSERT_EQ(r.code, 0) << r.out;
  }

  Outcome Run(const std::string& trace, const std::string& extra = "") {
    return Shell(Bin("waste") + " replay " + container_ + " " + trace + " --socket " + socket_ +
                 " " + extra);
  }

  json RunJson(const std::string& extra = "") {
    const Outcome r = Run(dir_ + "/trace.jsonl", "--json " + extra);
    EXPECT_EQ(r.code, 0) << r.out;
    try {
      return json::parse(r.out);
    } catch (...) {
      ADD_FAILURE() << "not JSON: " << r.out;
      return json::object();
    }
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  static std::string container_;
  std::string dir_, socket_;
  waste::testing::DetachedWasted wasted_;
};

std::string Replay::container_;

TEST_F(Replay, ACacheThatHoldsEverythingServesTheSecondPassWithoutReads) {
  StartDaemon("64M");  // every one of the 80 records fits
  const json first = RunJson();
  EXPECT_EQ(first["tokens"], kTokens);
  EXPECT_EQ(first["moe_layers"], kMoeLayers);
  EXPECT_EQ(first["slots"], 80);
  EXPECT_EQ(first["acquired"], kTokens * kMoeLayers * kTopK);
  // Cold: each record of the working set is read once, and only once.
  EXPECT_EQ(first["reads"], kWorkingSet);
  EXPECT_GT(first["misses"].get<int>(), 0);
  EXPECT_GT(first["bytes_read"].get<uint64_t>(), 0u);
  EXPECT_DOUBLE_EQ(first["cache_hit_rate"].get<double>(),
                   1.0 - double(kWorkingSet) / (kTokens * kMoeLayers * kTopK));

  const json second = RunJson();
  EXPECT_EQ(second["reads"], 0);
  EXPECT_EQ(second["bytes_read"], 0);
  EXPECT_EQ(second["misses"], 0);
  EXPECT_EQ(second["hits"], second["acquired"]);
  EXPECT_EQ(second["client_hit_rate"], 1.0);
  EXPECT_EQ(second["cache_hit_rate"], 1.0);
  EXPECT_EQ(second["tokens_with_miss"], 0);
  EXPECT_EQ(second["other_clients"], 0);

  // The text form says the same.
  const Outcome text = Run(dir_ + "/trace.jsonl");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_TRUE(Has(text.out, "tokens 0:20")) << text.out;
  EXPECT_TRUE(Has(text.out, "400 records: 400 hits, 0 misses, 100.0% client hit rate")) << text.out;
  EXPECT_TRUE(Has(text.out, "reads     0 records")) << text.out;
}

TEST_F(Replay, ACacheSmallerThanTheWorkingSetReadsAgain) {
  StartDaemon("22M");  // trunk and overhead take ~21.6 MiB: 11 slots of 40 KiB
  const json first = RunJson();
  ASSERT_LT(first["slots"].get<int>(), kWorkingSet);
  EXPECT_GE(first["reads"].get<int>(), kWorkingSet);
  const json second = RunJson();
  EXPECT_GT(second["reads"].get<int>(), 0);
  EXPECT_GT(second["misses"].get<int>(), 0);
  EXPECT_LT(second["cache_hit_rate"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(second["reads_per_token"].get<double>(),
                   second["reads"].get<double>() / kTokens);
}

TEST_F(Replay, TokensSelectsARange) {
  StartDaemon("64M");
  const json j = RunJson("--tokens 5:10");
  EXPECT_EQ(j["first_token"], 5);
  EXPECT_EQ(j["end_token"], 10);
  EXPECT_EQ(j["tokens"], 5);
  EXPECT_EQ(j["acquired"], 5 * kMoeLayers * kTopK);
  EXPECT_EQ(RunJson("--tokens 15:")["tokens"], 5);
  EXPECT_EQ(RunJson("--tokens :3")["tokens"], 3);
  for (const std::string bad : {"10:5", "0:21", "7", "a:b", "3:3"}) {
    const Outcome r = Run(dir_ + "/trace.jsonl", "--tokens " + bad);
    EXPECT_EQ(r.code, 1) << bad << ": " << r.out;
    EXPECT_TRUE(Has(r.out, "--tokens " + bad + ":")) << r.out;
  }
}

TEST_F(Replay, MalformedTracesAreRefusedNamingTheLine) {
  StartDaemon("64M");
  const std::string good = TraceLine(0) + "\n" + TraceLine(1) + "\n";
  // Line 3 is bad in each; a blank line still counts as a line.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"tok\": 2, \"layers\": [[1, 2]", "line 3: not JSON"},
      {"just words", "line 3: not JSON"},
      {"[[0, 1, 2, 3]]", "line 3: not a JSON object"},
      {"{\"tok\": 2}", "line 3: no \"layers\""},
      {"{\"layers\": \"0,1,2,3\"}", "line 3: \"layers\" is not a list"},
      {"{\"layers\": [[0], [1], [2], [3]]}", "line 3: 4 layers, but the container has 5 MoE"},
      {"{\"layers\": [[0], [1], [2], [3], [4], [5]]}", "line 3: 6 layers"},
      {"{\"layers\": [[0], 1, [2], [3], [4]]}", "line 3: MoE layer 1 is not a list"},
      {"{\"layers\": [[0], [1], [-2], [3], [4]]}", "line 3: MoE layer 2: negative expert id -2"},
      {"{\"layers\": [[0], [1], [2], [3.5], [4]]}", "line 3: MoE layer 3: 3.5 is not an expert"},
      {"{\"layers\": [[0], [1], [2], [3], [\"4\"]]}", "line 3: MoE layer 4: \"4\" is not"},
      {"{\"layers\": [[0], [1], [2], [3], [16]]}",
       "line 3: MoE layer 4: expert 16, but the "
       "container has 16 experts"},
      {"{\"layers\": [[0, 0], [1], [2], [3], [4]]}", "line 3: MoE layer 0: expert 0 listed twice"},
      {"{\"tok\": -1, \"layers\": [[0], [1], [2], [3], [4]]}", "line 3: \"tok\" is not"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = WriteFile("bad" + std::to_string(i) + ".jsonl",
                                       good + cases[i].first + "\n" + TraceLine(3) + "\n");
    const Outcome r = Run(path);
    EXPECT_EQ(r.code, 1) << cases[i].first << ": " << r.out;
    EXPECT_TRUE(Has(r.out, path + ": " + cases[i].second)) << r.out;
  }
  const std::string blank = WriteFile("blank.jsonl", TraceLine(0) + "\n\n" + "{}\n");
  EXPECT_TRUE(Has(Run(blank).out, "line 3: no \"layers\""));
  EXPECT_TRUE(Has(Run(WriteFile("empty.jsonl", "\n")).out, "no tokens"));
  EXPECT_TRUE(Has(Run(dir_ + "/missing.jsonl").out, "missing.jsonl: cannot open"));

  // Refused before anything reached the daemon, which still serves.
  const json j = RunJson();
  EXPECT_EQ(j["tokens"], kTokens);
  EXPECT_EQ(j["reads"], kWorkingSet);
}

TEST_F(Replay, WithoutADaemonItIsAnError) {
  const Outcome r = Run(dir_ + "/trace.jsonl");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "no wasted is listening on " + socket_)) << r.out;
  EXPECT_TRUE(Has(r.out, "replay drives a running daemon's cache")) << r.out;
}

}  // namespace
