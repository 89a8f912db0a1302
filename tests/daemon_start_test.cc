// Starting and stopping wasted: a clean stop saving its state, a budget
// below the floor refused with its parts, a settings file and flags, clients
// without a daemon (in process, or --spawn), the memlock limit explained,
// and --metrics-listen refused off loopback.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/daemon_fixture.h"
#include "tests/support/detached_wasted.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace {

using nlohmann::json;
using waste::testing::Bin;
using waste::testing::Child;
using waste::testing::Clock;
using waste::testing::Connectable;
using waste::testing::Daemon;
using waste::testing::Has;
using waste::testing::Outcome;
using waste::testing::Shell;
using waste::testing::Since;

// wastectl stop (and SIGTERM) end the daemon cleanly: clients are told, the
// socket goes, the use counts are saved.
TEST_F(Daemon, StopIsCleanAndSavesState) {
  const std::string c = Synth("tiny-kimi");
  StartDaemon(c);
  Child looper = Child::Run(Probe(c, {"--loop", "30"}));
  ASSERT_NE(looper.WaitLine("ATTACHED"), "");
  const Outcome r = Shell(Bin("wastectl") + " stop --socket " + socket_);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(daemon_.Wait(5), 0) << daemon_.Output();
  EXPECT_EQ(looper.Wait(2), 3) << looper.Output();
  EXPECT_FALSE(std::filesystem::exists(socket_));
  bool saved = false;
  // The state is the daemon's alone: its directories 0700, its files 0600
  // (the prompt states' directory among them).
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir_ + "/state")) {
    saved |= Has(f.path().string(), ".uses.json");
    ASSERT_EQ(stat(f.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, S_ISDIR(st.st_mode) ? 0700u : 0600u) << f.path();
  }
  EXPECT_TRUE(saved);
  const Outcome none = Shell(Bin("wastectl") + " status --socket " + socket_);
  EXPECT_EQ(none.code, 3) << none.out;
}

// Invariant 5: below its floor the daemon refuses to start and says what
// the floor is made of.
TEST_F(Daemon, ABudgetBelowTheFloorIsRefusedWithItsParts) {
  const std::string c = Synth("tiny-kimi");
  const Outcome r = Shell(Bin("wasted") + " " + c + " --budget 1M --foreground --socket " +
                          socket_);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "below the floor") && Has(r.out, "trunk") && Has(r.out, "cache") &&
              Has(r.out, "overhead"))
      << r.out;
  EXPECT_FALSE(Connectable(socket_));
}

// A settings file takes the flags' names; a flag given too wins.
TEST_F(Daemon, ASettingsFileAndFlagsThatWin) {
  const std::string c = Synth("tiny-kimi");
  {
    std::ofstream f(dir_ + "/wasted.conf");
    f << "# wasted settings\nbudget = 64M\nio-depth = 3\nlog-level = debug\n";
  }
  StartDaemon(c, {"--config", dir_ + "/wasted.conf", "--io-depth", "5"});
  json s = Status();
  EXPECT_EQ(s["budget"]["total"], 64u << 20) << s.dump();
  EXPECT_EQ(s["io_depth"], 5) << s.dump();
  const Outcome bad = Shell(Bin("wasted") + " " + c + " --config " + dir_ + "/missing.conf");
  EXPECT_NE(bad.code, 0);
  EXPECT_TRUE(Has(bad.out, "missing.conf")) << bad.out;
}

// No daemon: the compute commands say so and run in this process; --spawn
// starts one, which serves later clients and goes away when told.
TEST_F(Daemon, WithoutADaemonClientsSaySoOrSpawnOne) {
  const std::string c = Synth("tiny-kimi");
  const auto local = Logits(c, "--local", "local");
  Outcome r = Shell(Bin("waste") + " run " + c + " --ids 1,2 -n 2 --socket " + socket_);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "no wasted is listening on " + socket_) && Has(r.out, "in this process"))
      << r.out;
  EXPECT_EQ(Logits(c, "--spawn --budget 64M", "spawned"), local);
  ASSERT_TRUE(Connectable(socket_));
  json s = Status();
  EXPECT_EQ(s["budget"]["total"], 64u << 20) << s.dump();
  EXPECT_GT(s["reads"].get<int>(), 0);
  EXPECT_EQ(Shell(Bin("wastectl") + " stop --socket " + socket_).code, 0);
  const auto t0 = Clock::now();
  while (std::filesystem::exists(socket_) && Since(t0) < 5)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(std::filesystem::exists(socket_));
}

// The memlock limit refusing the trunk is said clearly, with what to change;
// the daemon still serves, unwired. Needs root (to drop CAP_IPC_LOCK) and
// util-linux's setpriv and prlimit.
// Address- and ThreadSanitizer intercept mlock, which then always succeeds,
// so a sanitizer build has no such test.
#ifndef WASTE_SANITIZE
TEST_F(Daemon, AMemlockRefusalIsExplained) {
  if (geteuid() != 0 || Shell("command -v prlimit && setpriv --bounding-set -ipc_lock true").code != 0) {
    GTEST_SKIP() << "SKIP: needs root, prlimit and a setpriv allowed to drop CAP_IPC_LOCK";
  }
  const std::string c = Synth("tiny-kimi");
  // Detached, on socket_: --idle-exit is a backstop if the test fails early.
  waste::testing::DetachedWasted wasted;
  waste::testing::DetachedWastedOptions o;
  o.launcher = "prlimit --memlock=0:0 setpriv --bounding-set -ipc_lock --inh-caps -ipc_lock";
  const Outcome r = wasted.Start(c, dir_, o);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::vector<uint8_t> bytes = waste::testing::FileBytes(dir_ + "/wasted.log");
  const std::string text(bytes.begin(), bytes.end());
  EXPECT_TRUE(Has(text, "NOT wired") && Has(text, "LimitMEMLOCK") && Has(text, "ulimit -l"))
      << text;
  json s = Status();
  EXPECT_EQ(s["trunk_wired"], false) << s.dump();
  EXPECT_EQ(Logits(c, "", "unwired"), Logits(c, "--local", "local"));
  EXPECT_EQ(wasted.Stop().code, 0);
}
#endif

// --metrics-listen serves loopback only, and says so.
TEST_F(Daemon, MetricsListenIsLoopbackOnly) {
  const std::string c = Synth("tiny-kimi");
  Outcome r = Shell(Bin("wasted") + " " + c + " --foreground --socket " + socket_ +
                    " --metrics-listen 192.0.2.1:9464");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "loopback only")) << r.out;
  r = Shell(Bin("wasted") + " " + c + " --foreground --socket " + socket_ +
            " --metrics-listen 127.0.0.1:http");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "the port is not a number")) << r.out;
  EXPECT_FALSE(Connectable(socket_));
}

}  // namespace
