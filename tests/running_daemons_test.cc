// protocol/running_daemons.h: wasted processes found in a procfs tree (a
// made-up one, laid out as Linux lays out /proc, and the real one).
#include "protocol/running_daemons.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;

constexpr const char* kStatus =
    "Name:\twasted\nUmask:\t0022\nState:\tS (sleeping)\nPid:\t812\nUid:\t1000\t1000\t1000\t1000\n"
    "Gid:\t1000\t1000\t1000\t1000\nVmPeak:\t 9000000 kB\nVmRSS:\t 4194304 kB\nRssAnon:\t  10000 kB\n"
    "HugetlbPages:\t 2097152 kB\nThreads:\t5\n";

TEST(RunningDaemons, StatusGivesTheRealUidAndResidentBytesHugePagesIncluded) {
  const auto s = ParseProcStatus(kStatus);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->uid, 1000u);
  EXPECT_EQ(s->resident_bytes, (4194304ull + 2097152ull) * 1024);
  // Without hugetlb pages, VmRSS alone; "RssAnon" is not taken for "VmRSS".
  const auto t = ParseProcStatus("Uid:\t0\t0\t0\t0\nRssAnon:\t7 kB\nVmRSS:\t5 kB\n");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->resident_bytes, 5u * 1024);
}

TEST(RunningDaemons, MalformedStatusIsNotADaemon) {
  EXPECT_FALSE(ParseProcStatus("").has_value());
  EXPECT_FALSE(ParseProcStatus("Uid:\t0\t0\t0\t0\n").has_value());           // no VmRSS
  EXPECT_FALSE(ParseProcStatus("VmRSS:\t5 kB\n").has_value());               // no Uid
  EXPECT_FALSE(ParseProcStatus("Uid:\tx\nVmRSS:\t5 kB\n").has_value());      // not a number
  EXPECT_FALSE(ParseProcStatus("Uid:\t0\nVmRSS:\t99999999999999999999 kB\n").has_value());
  EXPECT_FALSE(ParseProcStatus("Uid:\t4294967296\nVmRSS:\t5 kB\n").has_value());
  EXPECT_FALSE(ParseProcStatus("XUid:\t0\nXVmRSS:\t5 kB\n").has_value());    // not at a line start
}

TEST(RunningDaemons, CmdlineGivesTheArgumentsAndTheSocket) {
  RunningDaemon d;
  const std::string both("wasted\0/models/k2\0--socket\0/run/wasted/k2.sock\0", 46);
  ParseCmdline(both, &d);
  EXPECT_EQ(d.args, (std::vector<std::string>{"/models/k2", "--socket", "/run/wasted/k2.sock"}));
  EXPECT_EQ(d.socket, "/run/wasted/k2.sock");
  ParseCmdline(std::string("wasted\0--socket=/s\0m", 20), &d);
  EXPECT_EQ(d.args, (std::vector<std::string>{"--socket=/s", "m"}));
  EXPECT_EQ(d.socket, "/s");
  ParseCmdline(std::string("wasted\0--socket\0", 16), &d);  // no value
  EXPECT_EQ(d.socket, "");
  ParseCmdline("", &d);
  EXPECT_TRUE(d.args.empty());
  EXPECT_EQ(Describe({812, 0, 3ull << 30, {"/m", "--budget", "2G"}, ""}),
            "pid 812 (uid 0, 3.00 GiB resident): wasted /m --budget 2G");
}

void Write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

TEST(RunningDaemons, OnlyProcessesNamedWastedWithAStatusAreListedInPidOrder) {
  const fs::path proc = waste::testing::ScratchDir();
  Write(proc / "900/comm", "wasted\n");
  Write(proc / "900/status", kStatus);
  Write(proc / "900/cmdline", std::string("wasted\0/m\0", 10));
  Write(proc / "31/comm", "wasted\n");
  Write(proc / "31/status", "Uid:\t0\t0\t0\t0\nVmRSS:\t1024 kB\n");
  Write(proc / "31/cmdline", std::string("wasted\0--socket\0/s\0", 20));
  Write(proc / "32/comm", "waste\n");      // a client
  Write(proc / "32/status", kStatus);
  Write(proc / "33/comm", "wasted\n");     // gone between the listing and its status
  Write(proc / "self/comm", "wasted\n");   // not a pid
  Write(proc / "34x/comm", "wasted\n");
  const auto list = RunningDaemons(proc.string());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].pid, 31);
  EXPECT_EQ(list[0].socket, "/s");
  EXPECT_EQ(list[0].resident_bytes, 1024u * 1024);
  EXPECT_EQ(list[1].pid, 900);
  EXPECT_EQ(list[1].uid, 1000u);
  EXPECT_EQ(list[1].args, std::vector<std::string>{"/m"});
  EXPECT_TRUE(RunningDaemons((proc / "missing").string()).empty());
}

}  // namespace
}  // namespace waste
