// The design brief's first invariant end to end: placement never changes
// logits. The same logits through wasted (a cache that holds everything, and
// one at its floor that evicts all the time) as in one process, for
// synthetic containers, `waste convert`'s lossless containers (BF16R, and
// Kimi K2.5's INT4) against their reference, and the demo model's greedy
// text against PyTorch's.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "daemon/budget.h"
#include "engine/format/container.h"
#include "engine/kernels/cpu.h"
#include "tests/support/daemon_fixture.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace {

using nlohmann::json;
using waste::testing::Bin;
using waste::testing::Daemon;
using waste::testing::Outcome;
using waste::testing::Shell;

// Invariant 1, on both architectures: the same logits through the daemon
// (a cache that holds everything, and one at its floor that evicts all the
// time) as in one process.
TEST_F(Daemon, LogitsAreBitIdenticalThroughTheDaemon) {
  for (const std::string preset : {"tiny-kimi", "tiny-deepseek"}) {
    SCOPED_TRACE(preset);
    const std::string c = Synth(preset);
    const auto local = Logits(c, "--local", preset + "-local");
    auto ct = waste::Container::Open(c);
    ASSERT_TRUE(ct.ok());
    const uint64_t floor = waste::daemon::PlanFor(ct->manifest(), /*huge_pages=*/true).floor();
    for (const uint64_t budget : std::vector<uint64_t>{floor, floor + (64ull << 20)}) {
      StartDaemon(c, {"--budget", std::to_string(budget)});
      const auto through = Logits(c, "", preset + "-daemon-" + std::to_string(budget));
      EXPECT_EQ(through, local) << "budget " << budget;
      // The lookahead only changes when bytes move (invariant 1).
      EXPECT_EQ(Logits(c, "--lookahead 0", preset + "-nola-" + std::to_string(budget)), local);
      EXPECT_EQ(Logits(c, "--lookahead 64", preset + "-la64-" + std::to_string(budget)), local);
      json s = Status();
      EXPECT_GT(s.value("reads", 0), 0) << s.dump();
      const json& la = s["lookahead"];
      EXPECT_GT(la["reads"].get<uint64_t>(), 0u) << s.dump();
      EXPECT_LE(la["used"].get<uint64_t>(), la["reads"].get<uint64_t>());
      daemon_.Signal(SIGTERM);
      EXPECT_EQ(daemon_.Wait(), 0);
    }
  }
}

// A container written by `waste convert` with the lossless expert format
// (BF16R, fmt 9, and a BF16 trunk), served by wasted: through the daemon
// (a cache at its floor that evicts all the time, with every record's crc32
// checked, and one that holds everything) the logits are bit-identical to
// the same container run in one process, and both match the logits the
// fixture's reference produced (tests/fixtures/convert, the tolerance of
// convert_test: argmax and top-10 identical, max |difference| within 1e-3
// of the position's largest logit).
TEST_F(Daemon, LosslessConvertedContainersServeTheReferenceLogits) {
  const std::string fixtures = std::string(WASTE_FIXTURES) + "/convert/";
  std::ifstream fx_file(fixtures + "fixtures.json");
  const json fixtures_json = json::parse(fx_file);
  for (const std::string name : {"deepseek-v3", "kimi-linear"}) {
    SCOPED_TRACE(name);
    const json& fx = fixtures_json[name];
    const std::string c = dir_ + "/" + name;
    const Outcome conv =
        Shell(Bin("waste") + " convert " + fixtures + name + " " + c + " --expert-format bf16");
    ASSERT_EQ(conv.code, 0) << conv.out;
    auto ct = waste::Container::Open(c);
    ASSERT_TRUE(ct.ok()) << ct.status().message();
    ASSERT_TRUE(ct->manifest().quant.lossless());
    std::string ids;
    for (int id : fx["prompt_ids"].get<std::vector<int>>())
      ids += (ids.empty() ? "" : ",") + std::to_string(id);
    const std::vector<uint8_t> local = Logits(c, "--local", name + "-local", ids);

    // Against the reference, position by position.
    const std::vector<float> want =
        waste::testing::FileFloats(fixtures + fx["logits"]["file"].get<std::string>());
    const int V = fx["logits"]["shape"][1].get<int>();
    ASSERT_EQ(local.size(), want.size() * 4);
    std::vector<float> got(want.size());
    std::memcpy(got.data(), local.data(), local.size());
    waste::testing::ExpectLogitsNear(got, want, V, 1e-3f, name);

    const uint64_t floor = waste::daemon::PlanFor(ct->manifest(), /*huge_pages=*/true).floor();
    for (const uint64_t budget : std::vector<uint64_t>{floor, floor + (64ull << 20)}) {
      SCOPED_TRACE("budget " + std::to_string(budget));
      std::vector<std::string> flags = {"--budget", std::to_string(budget)};
      if (budget == floor) flags.push_back("--verify-crc");
      StartDaemon(c, flags);
      EXPECT_EQ(Logits(c, "", name + "-daemon-" + std::to_string(budget), ids), local);
      EXPECT_EQ(Logits(c, "--lookahead 0", name + "-nola-" + std::to_string(budget), ids), local);
      const json s = Status();
      EXPECT_GT(s.value("reads", 0), 0) << s.dump();
      EXPECT_EQ(s["slots"].value("failed", -1), 0) << s.dump();
      EXPECT_EQ(s.value("read_errors", -1), 0) << s.dump();
      EXPECT_EQ(s.value("record_bytes", 0u), ct->record_bytes()) << s.dump();
      daemon_.Signal(SIGTERM);
      EXPECT_EQ(daemon_.Wait(), 0);
    }
  }
}

// Kimi K2.5's INT4 experts (fmt 12, tests/fixtures/convert/kimi-k25-int4)
// converted bit for bit and served by wasted from a cache at its floor with
// every record's crc32 checked: the logits are those of the container in one
// process, bit for bit, and transformers' within 1e-5 of each position's
// largest with the same top 10.
TEST_F(Daemon, Int4ConvertedContainerServesTheReferenceLogits) {
  const std::string fixtures = std::string(WASTE_FIXTURES) + "/convert/";
  const std::string c = dir_ + "/kimi-k25-int4";
  const Outcome conv = Shell(Bin("waste") + " convert " + fixtures + "kimi-k25-int4 " + c +
                             " --expert-format int4");
  ASSERT_EQ(conv.code, 0) << conv.out;
  auto ct = waste::Container::Open(c);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  ASSERT_EQ(ct->manifest().quant.fmt, waste::format::Fmt::kINT4);
  std::ifstream meta_file(fixtures + "kimi-k25-int4.json");
  const json meta = json::parse(meta_file);
  std::string ids;
  for (int id : meta["prompt"].get<std::vector<int>>())
    ids += (ids.empty() ? "" : ",") + std::to_string(id);
  const std::vector<uint8_t> local = Logits(c, "--local", "int4-local", ids);
  const std::vector<float> want =
      waste::testing::FileFloats(fixtures + "kimi-k25-int4.logits.bin");
  ASSERT_EQ(local.size(), want.size() * 4);
  std::vector<float> got(want.size());
  std::memcpy(got.data(), local.data(), local.size());
  waste::testing::ExpectLogitsNear(got, want, meta["vocab"].get<int>(), 1e-5f, "kimi-k25-int4");

  const uint64_t floor = waste::daemon::PlanFor(ct->manifest(), /*huge_pages=*/true).floor();
  StartDaemon(c, {"--budget", std::to_string(floor), "--verify-crc"});
  EXPECT_EQ(Logits(c, "", "int4-daemon", ids), local);
  const json s = Status();
  EXPECT_GT(s.value("reads", 0), 0) << s.dump();
  EXPECT_EQ(s["slots"].value("failed", -1), 0) << s.dump();
  EXPECT_EQ(s.value("read_errors", -1), 0) << s.dump();
  daemon_.Signal(SIGTERM);
  EXPECT_EQ(daemon_.Wait(), 0);
}

// The README's main job: the trained demo model (models/demo-moe), converted
// losslessly and served by wasted, continues a text prompt greedily with the
// text PyTorch's greedy decoding gives (tests/fixtures/demo/demo.json), and
// wastectl shows the routing it did.
TEST_F(Daemon, DemoModelServedByWastedWritesPyTorchsGreedyText) {
  std::ifstream fx_file(std::string(WASTE_FIXTURES) + "/demo/demo.json");
  const json fx = json::parse(fx_file);
  const std::string c = dir_ + "/demo";
  const Outcome conv = Shell(Bin("waste") + " convert " + std::string(WASTE_MODELS) +
                             "/demo-moe " + c + " --expert-format bf16 --quiet");
  ASSERT_EQ(conv.code, 0) << conv.out;
  StartDaemon(c);
  // waste run adds no BOS of its own: the prompt names it, as markup.
  const std::string prompt =
      "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>" +
      fx["greedy"]["prompt"].get<std::string>();
  const int n = static_cast<int>(fx["greedy"]["continuation_ids"].size());
  // On every instruction-set path this CPU has.
  for (waste::kernels::Isa isa : waste::kernels::AvailableIsas()) {
    const Outcome run = Shell(Bin("waste") + " run " + c + " '" + prompt + "' -n " +
                              std::to_string(n) + " --temp 0 --ignore-eos --threads 2 --isa " +
                              waste::kernels::IsaName(isa) + " --socket " + socket_);
    ASSERT_EQ(run.code, 0) << run.out;
    const std::string want = fx["greedy"]["continuation_text"];
    EXPECT_NE(run.out.find(want), std::string::npos)
        << waste::kernels::IsaName(isa) << ": " << run.out << "\nwanted: " << want;
  }
  json s = Status();
  EXPECT_GT(s.value("reads", 0), 0) << s.dump();
  EXPECT_EQ(s.value("read_errors", -1), 0) << s.dump();
  daemon_.Signal(SIGTERM);
  EXPECT_EQ(daemon_.Wait(), 0);
}

}  // namespace
