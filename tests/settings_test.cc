// wasted's table of settings (daemon/settings.h) and the texts made from it
// or written beside it: the committed example settings file is what the
// table writes (`wasted --print-config`), and the man page and ops/README
// name the settings a reload applies.
#include "daemon/settings.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/test_util.h"

namespace {

using waste::testing::ReadText;

const std::set<std::string> kReloadable = {"log-level", "allow-uid", "allow-group", "idle-exit",
                                           "save-interval"};

TEST(Settings, TheExampleFileIsWhatTheTableWrites) {
  const std::string committed = ReadText(std::string(WASTE_SOURCE_DIR) + "/ops/wasted.conf.example");
  ASSERT_FALSE(committed.empty());
  EXPECT_EQ(committed, waste::daemon::ExampleSettingsFile())
      << "ops/wasted.conf.example is not what daemon/settings.cc writes; write it again with "
         "`build/bin/wasted --print-config > ops/wasted.conf.example`";
}

TEST(Settings, DescribedInTheOrderOfTheFlagsAndReloadableByTheTable) {
  waste::daemon::DaemonOptions o;
  o.container = "/nonexistent";
  std::vector<std::string> names;
  for (const auto& [name, value] : waste::daemon::DescribeSettings(o)) names.push_back(name);
  const std::vector<std::string> want = {
      "container",       "socket",        "budget",   "io-depth",  "verify-crc",
      "allow-uid",       "allow-group",   "max-clients", "idle-exit", "state-dir",
      "save-interval",   "cold",          "states-budget", "states-memory", "states-shared",
      "policy",
      "metrics-listen",  "metrics-timeout",
      "no-huge-pages",   "no-wire",       "log-file", "log-level"};
  EXPECT_EQ(names, want);
  std::set<std::string> reloadable;
  for (const std::string& n : names)
    if (waste::daemon::ReloadableSetting(n)) reloadable.insert(n);
  EXPECT_EQ(reloadable, kReloadable);
  EXPECT_FALSE(waste::daemon::ReloadableSetting("foreground"));
  EXPECT_FALSE(waste::daemon::ReloadableSetting("no-such-setting"));

  waste::daemon::DaemonOptions next = o;
  next.log_level = "debug";
  next.budget = 1 << 30;
  EXPECT_TRUE(waste::daemon::TakeReloaded("log-level", next, &o));
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_FALSE(waste::daemon::TakeReloaded("budget", next, &o));
  EXPECT_EQ(o.budget, 0u);
}

// The texts written by hand that list the reloadable settings name each of
// the table's.
TEST(Settings, TheManPageAndTheReadmeNameTheReloadableSettings) {
  const std::string src = WASTE_SOURCE_DIR;
  for (const std::string file : {"/ops/man/wasted.h2m", "/ops/README.md"}) {
    const std::string text = ReadText(src + file);
    ASSERT_FALSE(text.empty()) << file;
    for (const std::string& name : kReloadable) {
      std::string escaped;  // troff writes a hyphen as \-
      for (char c : name) escaped += c == '-' ? std::string("\\-") : std::string(1, c);
      EXPECT_TRUE(text.find(name) != std::string::npos || text.find(escaped) != std::string::npos)
          << file << " does not name " << name;
    }
  }
}

// The settings file is untrusted: a value of the wrong type or out of range
// is an error naming the file and the setting (a gid too large for stoul
// aborted wasted); the same value on the command line is not blamed on the
// file.
TEST(Settings, BadValuesInTheFileNameTheFileAndTheSetting) {
  const std::string conf = ::testing::TempDir() + "/settings_test.conf";
  const auto parse = [&](const std::string& text, std::vector<std::string> extra) {
    std::ofstream(conf) << text;
    std::vector<std::string> args = {"wasted", "/nonexistent", "--config", conf};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    waste::daemon::Settings s;
    std::string error;
    const int code = waste::daemon::ParseSettings(static_cast<int>(argv.size()), argv.data(), &s,
                                                  true, &error);
    return std::make_pair(code, error);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"io-depth = abc\n", "--io-depth"},
      {"io-depth = 1000\n", "--io-depth"},
      {"idle-exit = soon\n", "--idle-exit"},
      {"verify-crc = maybe\n", "--verify-crc"},
      {"allow-uid = -5\n", "--allow-uid"},
      {"policy = 5\n", "--policy"},
      {"budget = lots\n", "--budget: size \"lots\""},
      {"allow-group = 99999999999999999999\n",
       "--allow-group: 99999999999999999999 is not a group id"},
      {"allow-group = 4294967295\n", "--allow-group: 4294967295 is not a group id"},
      {"max-clients = 0\n", "--max-clients"},
      {"max-clients = 1025\n", "--max-clients"},
      {"metrics-timeout = 0\n", "--metrics-timeout"},
  };
  for (const auto& [text, want] : cases) {
    const auto [code, error] = parse(text, {});
    EXPECT_EQ(code, 2) << text;
    EXPECT_EQ(error.rfind("--config " + conf + ": ", 0), 0u) << text << ": " << error;
    EXPECT_NE(error.find(want), std::string::npos) << text << ": " << error;
  }
  const auto [code, error] = parse("io-depth = 3\n", {"--io-depth", "abc"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(error.find("--io-depth"), std::string::npos) << error;
  EXPECT_EQ(error.find("--config"), std::string::npos) << error;
  EXPECT_EQ(parse("io-depth = 3\nallow-group = 0\n", {}).first, -1);
}

// A settings file is read whole by CLI11: one that is not a regular file or
// is larger than a settings file could be is refused before it is read.
TEST(Settings, AnUnboundedSettingsFileIsRefusedUnread) {
  const auto parse = [](const std::string& conf) {
    std::vector<std::string> args = {"wasted", "/nonexistent", "--config", conf};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    waste::daemon::Settings s;
    std::string error;
    const int code = waste::daemon::ParseSettings(static_cast<int>(argv.size()), argv.data(), &s,
                                                  true, &error);
    return std::make_pair(code, error);
  };
  auto [code, error] = parse("/dev/zero");
  EXPECT_EQ(code, 2);
  EXPECT_EQ(error, "--config /dev/zero: not a regular file");
  const std::string big = ::testing::TempDir() + "/settings_test_big.conf";
  {
    std::ofstream f(big);
    f << "max-clients = 4\n" << std::string(2 << 20, '#') << "\n";
  }
  std::tie(code, error) = parse(big);
  EXPECT_EQ(code, 2);
  EXPECT_NE(error.find("more than the 1048576 a settings file may have"), std::string::npos)
      << error;
  {
    std::ofstream f(big);
    f << "max-clients = 4\nmetrics-timeout = 0.25\n";
  }
  waste::daemon::Settings s;
  std::vector<std::string> args = {"wasted", "/nonexistent", "--config", big};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::string err;
  ASSERT_EQ(waste::daemon::ParseSettings(4, argv.data(), &s, true, &err), -1) << err;
  EXPECT_EQ(s.daemon.max_clients, 4u);
  EXPECT_EQ(s.daemon.metrics_timeout_seconds, 0.25);
}

}  // namespace
