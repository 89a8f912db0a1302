// The three programs as a user runs them: --help and --version, waste info /
// plan / synth on a synthetic container, wasted --check, and clear errors
// with the documented exit codes for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/test_util.h"

namespace {

using waste::testing::Outcome;
using waste::testing::Shell;

// Runs one of the project's programs: "waste info DIR".
Outcome Exec(const std::string& args) {
  return Shell(std::string(WASTE_BIN_DIR) + "/" + args);
}

bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Per process: ctest runs each test of this suite in its own process, in parallel.
    dir_ = new std::string(::testing::TempDir() + "/waste-cli-tiny-" + std::to_string(getpid()));
    const Outcome r = Exec("waste synth -q --force --preset tiny-kimi " + *dir_);
    ASSERT_EQ(r.code, 0) << r.out;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string* dir_;
};
std::string* Cli::dir_ = nullptr;

TEST_F(Cli, HelpAndVersion) {
  for (const char* prog : {"waste", "wasted", "wastectl"}) {
    Outcome r = Exec(std::string(prog) + " --help");
    EXPECT_EQ(r.code, 0) << prog;
    EXPECT_TRUE(Has(r.out, "Usage")) << r.out;
    r = Exec(std::string(prog) + " --version");
    EXPECT_EQ(r.code, 0);
    EXPECT_TRUE(Has(r.out, std::string(prog) + " 0.")) << r.out;
  }
  EXPECT_TRUE(Has(Exec("waste --help").out, "synth"));
}

TEST_F(Cli, InfoHumanAndJson) {
  Outcome r = Exec("waste info " + *dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "KimiLinearForCausalLM"));
  EXPECT_TRUE(Has(r.out, "KKKMKM"));
  EXPECT_TRUE(Has(r.out, "16 per layer, top-4"));
  r = Exec("waste info --json " + *dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layers"], 6);
  EXPECT_EQ(j["moe_layers"], 5);
  EXPECT_EQ(j["experts"]["record_bytes"], 40960);
  EXPECT_GT(j["params_total"].get<int64_t>(), j["params_active"].get<int64_t>());
}

TEST_F(Cli, PlanHumanAndJson) {
  Outcome r = Exec("waste plan " + *dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "floor"));
  EXPECT_TRUE(Has(r.out, "default budget"));
  r = Exec("waste plan --json --ctx 100 " + *dir_);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["context"], 100);
  EXPECT_EQ(j["floor"].get<uint64_t>(),
            j["trunk"].get<uint64_t>() + j["client_state"].get<uint64_t>() +
                j["scratch"].get<uint64_t>() + j["min_expert_cache"].get<uint64_t>() +
                j["daemon_overhead"].get<uint64_t>());
  r = Exec("waste plan --budget 1M " + *dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "below the floor")) << r.out;
  r = Exec("waste plan --budget lots " + *dir_);
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.out, "--budget")) << r.out;
}

TEST_F(Cli, DaemonChecksContainerAndBudget) {
  Outcome r = Exec("wasted --check " + *dir_);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "check passed")) << r.out;
  r = Exec("wasted --check --budget 1M " + *dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "below the floor")) << r.out;
  r = Exec("wasted --check /nonexistent-container");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "manifest.json")) << r.out;
}

TEST_F(Cli, RunStreamsAndSummarizes) {
  Outcome r = Exec("waste run " + *dir_ + " \"hello world\" -n 6 --temp 0.7 --seed 3 --threads 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "generated in")) << r.out;
  EXPECT_TRUE(Has(r.out, "GB read")) << r.out;
  // Same seed, same text.
  auto text = [&](int threads) {  // the generated text, without the summary line
    const std::string out =
        Exec("waste run " + *dir_ + " \"hello world\" -n 6 --temp 0.7 --seed 3 --threads " +
             std::to_string(threads))
            .out;
    return out.substr(0, out.rfind("\n["));
  };
  EXPECT_EQ(text(1), text(2));
  r = Exec("waste run " + *dir_ + " --ids 1,2,99999 -n 2");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "outside the vocabulary")) << r.out;
}

TEST_F(Cli, EvalJsonAndRawLogits) {
  const std::string logits = *dir_ + "/logits.f32";
  // --local: without it, a machine with no daemon adds a notice (on stderr,
  // which Exec merges) before the JSON.
  Outcome r =
      Exec("waste eval " + *dir_ + " --ids 376,17,101 --json --top 3 --local --logits " + logits);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"], 3);
  ASSERT_EQ(j["top"].size(), 3u);
  EXPECT_GE(j["top"][0]["logit"].get<double>(), j["top"][1]["logit"].get<double>());
  EXPECT_EQ(std::filesystem::file_size(logits), 3u * 512 * 4);  // every position, float32
}

TEST_F(Cli, TokenizeAndDetokenizeRoundTrip) {
  Outcome ids = Exec("waste tokenize " + *dir_ + " \"the cache <|im_end|> hello\"");
  ASSERT_EQ(ids.code, 0) << ids.out;
  ids.out.pop_back();  // newline
  Outcome text = Exec("waste detokenize " + *dir_ + " " + ids.out);
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_EQ(text.out, "the cache <|im_end|> hello\n");
  // Markup resolves the control token to its id; content keeps it as text.
  EXPECT_NE(Exec("waste tokenize --markup " + *dir_ + " \"<|im_end|>\"").out,
            Exec("waste tokenize " + *dir_ + " \"<|im_end|>\"").out);
}

TEST_F(Cli, ChatSavesAndLoadsState) {
  const std::string state = *dir_ + "/chat.state";
  Outcome r = Exec("waste chat " + *dir_ + " -n 4 < /dev/null");
  EXPECT_EQ(r.code, 0) << r.out;
  r = Shell("printf 'hello\\n/stats\\n/save " + state + "\\n/load " + state +
            "\\n/reset\\n/quit\\n' | " + std::string(WASTE_BIN_DIR) + "/waste chat " + *dir_ +
            " -n 4");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "position")) << r.out;
  EXPECT_TRUE(Has(r.out, "saved")) << r.out;
  EXPECT_TRUE(Has(r.out, "loaded")) << r.out;
}

TEST_F(Cli, DiskbenchReadsRecordsAtEachDepth) {
  Outcome r = Exec("waste-diskbench " + *dir_ + " --depths 1,3 --seconds 0.2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "record 40960 bytes, 5 banks")) << r.out;
  // One line per depth, each with a positive throughput.
  for (const char* depth : {"\n       1 ", "\n       3 "}) EXPECT_TRUE(Has(r.out, depth)) << r.out;
  EXPECT_EQ(Exec("waste-diskbench /nonexistent").code, 1);
}

TEST_F(Cli, BadInputGetsAClearError) {
  Outcome r = Exec("waste info /nonexistent-container");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "manifest.json: No such file")) << r.out;
  r = Exec("waste synth --preset nope " + ::testing::TempDir() + "/waste-cli-nope");
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Has(r.out, "unknown preset \"nope\"")) << r.out;
  r = Exec("waste synth -q " + *dir_);  // already a container, no --force
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Has(r.out, "already holds a container")) << r.out;
  r = Exec("waste frobnicate");
  EXPECT_NE(r.code, 0);
  r = Exec("wastectl");
  EXPECT_EQ(r.code, 2);
}

}  // namespace
