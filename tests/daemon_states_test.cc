// Prompt states through wasted: published by one client, found by another
// connection (from the memory tier, sealed), listed and dropped by wastectl,
// written to disk at stop and kept across a restart of the daemon, seen only
// by the publisher's uid. The states here are opaque
// bytes (the daemon's view); serve's states over it are scheduler_test's.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "link/daemon_client.h"
#include "tests/support/daemon_fixture.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace {

using nlohmann::json;
using waste::testing::Bin;
using waste::testing::Child;
using waste::testing::Daemon;
using waste::testing::Has;
using waste::testing::Outcome;
using waste::testing::Shell;

constexpr uint64_t kShape = 0xfeed;

std::unique_ptr<waste::DaemonClient> Connect(const std::string& socket) {
  auto c = waste::DaemonClient::Connect(socket);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? std::move(*c) : nullptr;
}

// Publishes `bytes` after `tokens` through a memfd, as a client does.
waste::Status Publish(waste::DaemonClient& c, const std::vector<int32_t>& tokens,
                      const std::vector<uint8_t>& bytes) {
  const int fd = memfd_create("state", MFD_CLOEXEC);
  EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  waste::Status st = c.PublishState(tokens, kShape, fd, bytes.size());
  close(fd);
  return st;
}

// `wastectl states --json` run as `uid`.
json StatesAs(const std::string& socket, int uid) {
  Child c = Child::Run({Bin("wastectl"), "states", "--json", "--socket", socket}, uid);
  EXPECT_EQ(c.Wait(), 0);
  return json::parse(c.Output(), nullptr, false);
}

json Ctl(const std::string& args) {
  const Outcome r = Shell(Bin("wastectl") + " " + args);
  EXPECT_EQ(r.code, 0) << r.out;
  return json::parse(r.out, nullptr, false);
}

TEST_F(Daemon, APublishedStateIsFoundByAnotherClientAndSurvivesARestart) {
  const std::string c = Synth("tiny-kimi");
  StartDaemon(c, {"--states-budget", "1M"});
  std::vector<uint8_t> state(300000);  // past a small message, as real states are
  for (size_t i = 0; i < state.size(); ++i) state[i] = static_cast<uint8_t>(i * 31 + 7);
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9}, longer = {5, 6, 7, 8, 9, 10, 11};
  {
    auto publisher = Connect(socket_);
    ASSERT_TRUE(publisher);
    const waste::Status st = Publish(*publisher, prompt, state);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  auto finder = Connect(socket_);
  ASSERT_TRUE(finder);
  // The publish was answered once queued; a find waits for its copy.
  auto found = finder->FindState(longer, kShape);
  ASSERT_TRUE(found.ok()) << found.status().message();
  ASSERT_EQ(found->matched, 5u);
  auto bytes = found->Read();
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_EQ(*bytes, state);
  // In memory, sealed: the finder cannot change what others will map.
  EXPECT_EQ(pwrite(found->fd, "x", 1, static_cast<off_t>(found->offset)), -1);
  EXPECT_EQ(ftruncate(found->fd, 1), -1);
  auto none = finder->FindState(std::vector<int32_t>{6, 7}, kShape);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->matched, 0u);
  EXPECT_EQ(none->fd, -1);

  json list = Ctl("states --json --socket " + socket_);
  ASSERT_EQ(list["states"].size(), 1u) << list.dump();
  EXPECT_EQ(list["states"][0]["tokens"], 5);
  EXPECT_EQ(list["states"][0]["uid"], geteuid());
  EXPECT_EQ(list["budget_bytes"], 1 << 20);
  EXPECT_EQ(list["memory_budget_bytes"], 1 << 30);  // states-memory's default
  EXPECT_EQ(list["states"][0]["tier"], "memory");
  const Outcome text = Shell(Bin("wastectl") + " states --socket " + socket_);
  EXPECT_TRUE(Has(text.out, "1 prompt states") && Has(text.out, "last use") &&
              Has(text.out, "memory"))
      << text.out;

  if (geteuid() == 0) {
    // Another uid allowed to attach sees none of them.
    finder.reset();
    daemon_.Signal(SIGTERM);
    ASSERT_EQ(daemon_.Wait(), 0);
    ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
    StartDaemon(c, {"--states-budget", "1M", "--allow-uid", "65534"});
    ASSERT_EQ(chmod(socket_.c_str(), 0666), 0);
    json theirs = StatesAs(socket_, 65534);
    ASSERT_TRUE(theirs.is_object()) << theirs.dump();
    EXPECT_EQ(theirs["budget_bytes"], 1 << 20) << theirs.dump();
    EXPECT_TRUE(theirs["states"].is_array() && theirs["states"].empty()) << theirs.dump();
    EXPECT_EQ(Ctl("states --json --socket " + socket_)["states"].size(), 1u);  // the daemon's uid sees it
  } else {
    std::fprintf(stderr, "SKIP part: another uid's view needs root to become one\n");
  }

  // A restart: the state, written to disk at stop, is read back, checked,
  // and found again.
  finder.reset();
  daemon_.Signal(SIGTERM);
  ASSERT_EQ(daemon_.Wait(), 0);
  StartDaemon(c, {"--states-budget", "1M"});
  finder = Connect(socket_);
  ASSERT_TRUE(finder);
  EXPECT_EQ(Ctl("states --json --socket " + socket_)["states"][0]["tier"], "disk");
  found = finder->FindState(longer, kShape);
  ASSERT_TRUE(found.ok()) << found.status().message();
  ASSERT_EQ(found->matched, 5u);
  bytes = found->Read();
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, state);

  json dropped = Ctl("drop --states --json --socket " + socket_);
  EXPECT_EQ(dropped["dropped_states"], 1) << dropped.dump();
  found = finder->FindState(longer, kShape);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->matched, 0u);
}

TEST_F(Daemon, AStateTooLargeOrWithNoStatesKeptIsRefusedWithAMessage) {
  const std::string c = Synth("tiny-kimi");
  StartDaemon(c, {"--states-budget", "64K", "--states-memory", "64K"});
  auto client = Connect(socket_);
  ASSERT_TRUE(client);
  waste::Status st = Publish(*client, {1, 2, 3}, std::vector<uint8_t>(100000, 1));
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "states-budget")) << st.message();
  EXPECT_TRUE(client->connected());  // a refusal, not a lost connection
  client.reset();
  daemon_.Signal(SIGTERM);
  ASSERT_EQ(daemon_.Wait(), 0);

  StartDaemon(c, {"--states-budget", "0", "--states-memory", "0"});
  client = Connect(socket_);
  ASSERT_TRUE(client);
  st = Publish(*client, {1, 2, 3}, std::vector<uint8_t>(100, 1));
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Has(st.message(), "keeps no prompt states")) << st.message();
  auto found = client->FindState(std::vector<int32_t>{1, 2, 3}, kShape);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->matched, 0u);
}

// `waste run` as a user of the states: a prompt of kShareMinTokens or more
// is published once it ran, and a later run of a prompt that begins with it
// starts from that state; its logits are a full prefill's, bit for bit (a
// run in this process alone, `--local`, where nothing is shared).
TEST_F(Daemon, ASecondRunStartsFromTheFirstsStateWithAFullPrefillsLogits) {
  const std::string c = Synth("tiny-kimi");
  StartDaemon(c);
  std::string prompt;
  for (int i = 0; i < 300; ++i) prompt += (i ? "," : "") + std::to_string(1 + (i * 7) % 50);
  const std::string longer = prompt + ",3,4,5";
  // One token generated: the logits file holds the prompt's last logits.
  auto run = [&](const std::string& ids, const std::string& logits, bool local) {
    std::vector<std::string> args = {Bin("waste"), "run",     c,         "--ids",  ids,
                                     "-n",         "1",       "--threads", "1",    "--logits",
                                     dir_ + "/" + logits, "--socket", socket_};
    if (local) args.push_back("--local");
    Child r = Child::Run(args);
    EXPECT_EQ(r.Wait(120), 0) << r.Output();  // 10 s by default: too short under TSan
    return r.Output();
  };
  auto bytes = [&](const std::string& name) { return waste::testing::ReadText(dir_ + "/" + name); };
  std::string out = run(prompt, "first", false);
  EXPECT_TRUE(Has(out, "(0 from a state wasted kept)")) << out;
  out = run(longer, "second", false);
  EXPECT_TRUE(Has(out, "(300 from a state wasted kept)")) << out;
  out = run(prompt, "again", false);
  EXPECT_TRUE(Has(out, "(300 from a state wasted kept)")) << out;
  run(longer, "second-local", true);
  EXPECT_FALSE(bytes("second").empty());
  EXPECT_EQ(bytes("second"), bytes("second-local"));
  EXPECT_EQ(bytes("again"), bytes("first"));
}

// `waste chat` as a user: a turn of kShareMinTokens or more is published once
// its prompt ran, and a second chat opening with the same message starts
// from that state; its greedy reply is the one a chat in this process
// alone (`--local`) gives.
TEST_F(Daemon, ASecondChatStartsFromTheFirstsStateWithAFullPrefillsReply) {
  const std::string c = Synth("tiny-kimi");
  StartDaemon(c);
  std::string words;
  for (int i = 0; i < 300; ++i) words += "w" + std::to_string(i % 37) + " ";
  waste::testing::WriteText(dir_ + "/in", words + "\n/quit\n");
  // The reply (stdout) and the notes (stderr) of one chat.
  auto chat = [&](const std::string& flags) {
    const Outcome r = Shell("(" + Bin("waste") + " chat " + c + " --temp 0 -n 8 --threads 1 " +
                            flags + " < " + dir_ + "/in 2>" + dir_ + "/err)");
    EXPECT_EQ(r.code, 0) << r.out;
    return std::pair{r.out, waste::testing::ReadText(dir_ + "/err")};
  };
  const auto first = chat("--socket " + socket_);
  EXPECT_FALSE(Has(first.second, "from a state wasted kept")) << first.second;
  const auto second = chat("--socket " + socket_);
  EXPECT_TRUE(Has(second.second, "tokens from a state wasted kept")) << second.second;
  const auto local = chat("--local");
  EXPECT_FALSE(local.first.empty());
  EXPECT_EQ(second.first, local.first);
  EXPECT_EQ(first.first, local.first);
}

}  // namespace
