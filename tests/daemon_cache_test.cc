// One trunk and one cache shared by every client of wasted: two clients
// share them (no read again, little memory each), a client of a warm daemon
// maps the trunk instead of reading it, the use counts saved at a stop warm
// the next start, and a damaged use-counts file is ignored with a warning.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/format/container.h"
#include "tests/support/daemon_fixture.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace {

using nlohmann::json;
using waste::testing::Bin;
using waste::testing::Child;
using waste::testing::Clock;
using waste::testing::Daemon;
using waste::testing::Has;
using waste::testing::Outcome;
using waste::testing::Shell;
using waste::testing::Since;

// Two clients at once: both bit-identical to a lone run, no read of what
// the first one loaded, and the daemon does not grow per client beyond its
// pin page and connection.
TEST_F(Daemon, TwoClientsShareOneTrunkAndOneCache) {
  const std::string c = Synth("tiny-kimi");
  const auto alone = Logits(c, "--local", "alone");
  StartDaemon(c, {"--budget", "64M"});
  EXPECT_EQ(Logits(c, "", "first"), alone);
  json after_first = Status();
  const uint64_t reads = after_first["reads"];
  ASSERT_GT(reads, 0u);
  EXPECT_GT(after_first["read_busy_seconds"].get<double>(), 0.0) << after_first.dump();

  std::vector<uint8_t> a, b;
  std::thread ta([&] { a = Logits(c, "", "a"); });
  std::thread tb([&] { b = Logits(c, "", "b"); });
  ta.join();
  tb.join();
  EXPECT_EQ(a, alone);
  EXPECT_EQ(b, alone);
  json after = Status();
  EXPECT_EQ(after["reads"], reads) << "the later clients read records again";
  EXPECT_GT(after["hits"].get<uint64_t>(), after_first["hits"].get<uint64_t>());

  // Memory: two more clients attached cost at most a little each.
  const uint64_t before = DaemonRss();
  Child p1 = Child::Run(Probe(c, {"--hold"}));
  Child p2 = Child::Run(Probe(c, {"--hold"}));
  ASSERT_NE(p1.WaitLine("HELD"), "") << p1.Output();
  ASSERT_NE(p2.WaitLine("HELD"), "") << p2.Output();
  const uint64_t with_two = DaemonRss();
  EXPECT_LT(with_two, before + (4ull << 20)) << before << " -> " << with_two;
  json s = Status();
  EXPECT_EQ(s["clients"].size(), 2u);
#ifdef WASTE_SANITIZE
  // A sanitizer's shadow memory and its larger code are not the daemon's
  // (under ASan the daemon sits about 0.7 MiB over a 64 MiB budget).
  std::fprintf(stderr, "SKIP part: the budget is not checked in a %s build\n", WASTE_SANITIZE);
#else
  EXPECT_LE(with_two, s["budget"]["total"].get<uint64_t>()) << "resident memory above the budget";
#endif
}

// A client started against a warm daemon maps the trunk instead of reading it.
TEST_F(Daemon, ARestartedClientReadsNoTrunk) {
  const std::string c = Synth("tiny-kimi");
  StartDaemon(c);
  auto unix_now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  auto bench = [&](const std::string& flags) {
    const double started = unix_now();
    const Outcome r =
        Shell(Bin("waste") + " bench " + c + " --prompt-tokens 4 --gen 2 --json --socket " +
              socket_ + " " + flags + " 2>/dev/null");
    const double ended = unix_now();
    EXPECT_EQ(r.code, 0) << r.out;
    json j = json::parse(r.out.substr(r.out.find('{')));
    // The first token's wall-clock time, for timing from a process's start.
    const double first = j["first_token_unix_seconds"].get<double>();
    EXPECT_GT(first, started) << j.dump();
    EXPECT_LT(first, ended) << j.dump();
    return j;
  };
  json local = bench("--local");
  json attached = bench("");
  auto ct = waste::Container::Open(c);
  ASSERT_TRUE(ct.ok());
  const uint64_t trunk = std::filesystem::file_size(c + "/trunk.bin");
  EXPECT_TRUE(Has(attached["experts_from"], "wasted")) << attached.dump();
  EXPECT_TRUE(Has(local["experts_from"], "in process")) << local.dump();
  // In process the trunk is read (less the embedding table, read per token).
  const uint64_t local_read = local["bytes_read_by_open"];
  const uint64_t attached_read = attached["bytes_read_by_open"];
  EXPECT_GT(local_read, attached_read + trunk / 4) << local_read << " vs " << attached_read;
  // Attached, bench also splits its decode's demand hints as wasted counted
  // them: one per record each generated token asks for in each MoE layer.
  const waste::ModelConfig& cfg = ct->config();
  const json& d = attached["decode_demands"];
  EXPECT_EQ(d["hits"].get<uint64_t>() + d["late"].get<uint64_t>() + d["misses"].get<uint64_t>(),
            2ull * cfg.n_moe_layers() * cfg.top_k)
      << attached.dump();
  EXPECT_FALSE(local.contains("decode_demands")) << local.dump();
}

// Warm starts: the use counts saved at stop bring the used records back at
// the next start (at the lowest priority, into free slots), so a client of
// the restarted daemon misses nothing; `wastectl drop` and `warm` do the
// same on demand; --cold skips it.
TEST_F(Daemon, WarmStartsFromSavedUseCounts) {
  const std::string c = Synth("tiny-kimi");
  StartDaemon(c, {"--budget", "64M"});
  const auto first = Logits(c, "", "first");
  const uint64_t used = Status()["reads"];
  ASSERT_GT(used, 0u);
  daemon_.Signal(SIGTERM);
  ASSERT_EQ(daemon_.Wait(), 0);

  auto settled = [&] {  // every warm-up read done
    const auto t0 = Clock::now();
    json s;
    do {
      s = Status();
      if (s["queued"]["warm"] == 0 && s["in_flight"]["warm"] == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (Since(t0) < 5);
    return s;
  };
  StartDaemon(c, {"--budget", "64M"});
  json s = settled();
  // Every record the first client demanded (lookahead reads it never used
  // have no use count and stay out).
  const uint64_t warmed = s["warm_reads"];
  EXPECT_GT(warmed, 0u) << s.dump();
  EXPECT_LE(warmed, used);
  EXPECT_EQ(s["slots"]["ready"], warmed);
  EXPECT_EQ(Logits(c, "", "second"), first);
  s = Status();
  EXPECT_EQ(s["misses"], 0) << "the client needed reads the warm-up should have done: " << s.dump();
  EXPECT_EQ(s["late"], 0) << "the client waited for reads the warm-up should have done: "
                          << s.dump();

  const uint64_t ready = s["slots"]["ready"];
  Outcome r = Shell(Bin("wastectl") + " drop --socket " + socket_);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, std::to_string(ready) + " slots emptied")) << r.out;
  EXPECT_EQ(Status()["slots"]["ready"], 0);
  r = Shell(Bin("wastectl") + " drop --layer 999 --socket " + socket_);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "layer 999")) << r.out;
  r = Shell(Bin("wastectl") + " warm --socket " + socket_);
  EXPECT_EQ(r.code, 0) << r.out;
  s = settled();
  EXPECT_GE(s["slots"]["ready"].get<uint64_t>(), warmed) << s.dump();
  daemon_.Signal(SIGTERM);
  ASSERT_EQ(daemon_.Wait(), 0);

  StartDaemon(c, {"--budget", "64M", "--cold"});
  s = settled();
  EXPECT_EQ(s["warm_reads"], 0);
  EXPECT_EQ(s["slots"]["ready"], 0);
}

// A saved use-counts file is untrusted: one of the wrong shape or with a
// field of the wrong type is logged, naming the file and the field, and
// ignored; wasted starts cold and serves (it aborted on a fingerprint that
// was not a string, which under systemd is a restart loop).
TEST_F(Daemon, BadSavedUseCountsAreIgnoredAndWastedServes) {
  const std::string c = Synth("tiny-kimi");
  StartDaemon(c, {"--budget", "64M"});
  Logits(c, "", "first");
  daemon_.Signal(SIGTERM);
  ASSERT_EQ(daemon_.Wait(), 0);
  std::string path;
  for (const auto& f : std::filesystem::directory_iterator(dir_ + "/state"))
    if (Has(f.path().string(), ".uses.json")) path = f.path().string();
  ASSERT_NE(path, "");
  json saved;
  {
    std::ifstream f(path);
    saved = json::parse(f);
  }
  json string_count = saved;
  string_count["uses"][0] = "a";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"fingerprint": 7, "uses": []})", ": fingerprint is not a string; ignored"},
      {json{{"fingerprint", saved["fingerprint"]}, {"uses", "x"}}.dump(),
       ": uses is not a list; ignored"},
      {"[1, 2]", ": not a JSON object; ignored"},
      {"{\"fingerprint\": ", ": not valid JSON; ignored"},
      {string_count.dump(), ": use count 0 is not a count; ignored"},
  };
  for (const auto& [text, want] : cases) {
    {
      std::ofstream f(path, std::ios::trunc);
      f << text;
    }
    StartDaemon(c, {"--budget", "64M"});
    const json s = Status();
    EXPECT_EQ(s["warm_reads"], 0) << text << ": " << s.dump();
    Child fine = Child::Run(Probe(c, {"--pin", "1:0", "--check"}));
    EXPECT_EQ(fine.Wait(), 0) << text << ": " << fine.Output();
    daemon_.Signal(SIGTERM);
    EXPECT_EQ(daemon_.Wait(), 0) << text;
    const std::string log = daemon_.Output();
    EXPECT_TRUE(Has(log, path + want)) << text << ": " << log;
  }
}

}  // namespace
