// Clients that outlive their daemon: `waste run`, `chat` and `serve`
// reattach to a restarted wasted and go on bit for bit as an uninterrupted
// run; another container or no daemon in time stops them with a message,
// what they printed intact.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "daemon/budget.h"
#include "engine/format/container.h"
#include "tests/http_client.h"
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

// A client outlives its daemon (issue 18): `waste run` generating through a
// wasted whose cache is at its floor plus 8 records (so the forward pass
// waits for reads), the daemon killed once the client has run 10 tokens,
// then (unless `then` says otherwise) a new wasted on the same container
// and socket. What the client printed (stdout to a file) and every row of
// logits it sampled from (--logits) against the same run never interrupted.
class Reattach : public Daemon {
 protected:
  static constexpr int kTokens = 60;

  void SetUp() override {
    Daemon::SetUp();
    c_ = Synth("tiny-kimi");
    auto ct = waste::Container::Open(c_);
    ASSERT_TRUE(ct.ok());
    const uint64_t stride = (ct->record_bytes() + 4095) / 4096 * 4096;
    const uint64_t floor = waste::daemon::PlanFor(ct->manifest(), /*huge_pages=*/true).floor();
    small_ = {"--budget", std::to_string(floor + 8 * stride), "--no-huge-pages"};
    row_ = static_cast<size_t>(ct->config().vocab) * 4;
    StartDaemon(c_, small_);
  }

  // The run never interrupted: ref.txt and ref.bin.
  void Reference() {
    const Outcome r = Shell("(" + RunLine("ref") + ")");  // stderr not in ref.txt
    ASSERT_EQ(r.code, 0) << r.out;
    ref_text_ = waste::testing::FileBytes(dir_ + "/ref.txt");
    ref_logits_ = waste::testing::FileBytes(dir_ + "/ref.bin");
    ASSERT_EQ(ref_logits_.size(), kTokens * row_);
  }

  // The run, greedy, its stdout into TAG.txt and its logits into TAG.bin.
  std::string RunLine(const std::string& tag, const std::string& flags = "") {
    return "exec " + Bin("waste") + " run " + c_ + " --ids 1,2,3 -n " +
           std::to_string(kTokens) + " --ctx 512 --threads 1 --ignore-eos --socket " +
           socket_ + " --logits " + dir_ + "/" + tag + ".bin " + flags + " > " + dir_ + "/" +
           tag + ".txt";
  }

  // Starts the run, kills wasted once 10 rows of logits are out (the run
  // still going), and calls `then`; the run's exit code (its stderr in *err).
  int Interrupted(const std::string& flags, const std::function<void()>& then,
                  std::string* err) {
    Child run = Child::Run({"/bin/sh", "-c", RunLine("got", flags)});
    const std::string bin = dir_ + "/got.bin";
    const auto t0 = Clock::now();
    std::error_code ec;
    while (std::filesystem::file_size(bin, ec) < 10 * row_ || ec) {
      if (Since(t0) > 120 || run.Wait(0) != -1000) {
        ADD_FAILURE() << "the run did not get 10 tokens in: " << run.Output();
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    daemon_.Signal(SIGKILL);
    EXPECT_EQ(daemon_.Wait(), -SIGKILL);
    EXPECT_EQ(run.Wait(0), -1000) << "the run ended before wasted was killed: " << run.Output();
    then();
    const int code = run.Wait(180);
    *err = run.Output();
    return code;
  }

  // What the interrupted run wrote is the uninterrupted run's, or its start.
  void ExpectAPrefixOfTheReference(bool whole) {
    const auto text = waste::testing::FileBytes(dir_ + "/got.txt");
    const auto logits = waste::testing::FileBytes(dir_ + "/got.bin");
    if (whole) {
      EXPECT_EQ(text, ref_text_);
      EXPECT_EQ(logits, ref_logits_);
      return;
    }
    EXPECT_GE(logits.size(), 10 * row_);
    EXPECT_LT(logits.size(), ref_logits_.size());
    EXPECT_EQ(logits.size() % row_, 0u);
    ASSERT_LE(text.size(), ref_text_.size());
    ASSERT_LE(logits.size(), ref_logits_.size());
    EXPECT_TRUE(std::equal(text.begin(), text.end(), ref_text_.begin()));
    EXPECT_TRUE(std::equal(logits.begin(), logits.end(), ref_logits_.begin()));
  }

  std::string c_;
  std::vector<std::string> small_;
  size_t row_ = 0;
  std::vector<uint8_t> ref_text_, ref_logits_;
};

TEST_F(Reattach, TheSameContainerAgainIsInvisibleInTheOutput) {
  Reference();
  std::string err;
  const int code = Interrupted("", [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the client is waiting
    StartDaemon(c_, small_);
  }, &err);
  EXPECT_EQ(code, 0) << err;
  EXPECT_TRUE(Has(err, "wasted went away") && Has(err, "attached to wasted at " + socket_ + " again"))
      << err;
  ExpectAPrefixOfTheReference(/*whole=*/true);
}

TEST_F(Reattach, AnotherContainerStopsTheClientNamingBoth) {
  Reference();
  const std::string other = Synth("tiny-deepseek");
  std::string err;
  const int code = Interrupted("", [&] { StartDaemon(other); }, &err);
  EXPECT_EQ(code, 1) << err;
  EXPECT_TRUE(Has(err, "serves " + other + " (fingerprint ") &&
              Has(err, "a different model from " + c_ + " (fingerprint ") &&
              Has(err, "not continuing"))
      << err;
  ExpectAPrefixOfTheReference(/*whole=*/false);
}

TEST_F(Reattach, NoDaemonInTimeStopsTheClientSayingSo) {
  Reference();
  std::string err;
  const auto t0 = Clock::now();
  const int code = Interrupted("--reattach-wait 1", [] {}, &err);
  EXPECT_EQ(code, 1) << err;
  EXPECT_LT(Since(t0), 60);
  EXPECT_TRUE(Has(err, "no wasted served " + c_ + " at " + socket_ + " again within 1 s") &&
              Has(err, "--reattach-wait"))
      << err;
  ExpectAPrefixOfTheReference(/*whole=*/false);
}

// `waste chat` keeps its conversation across a restart between two turns:
// the second reply is the one an uninterrupted chat gives.
TEST_F(Reattach, AChatGoesOnAfterARestart) {
  // The replies (stdout, to a file) of a greedy chat of two turns; `restart`
  // kills wasted and starts another after the first.
  const auto chat = [&](const std::string& tag, bool restart) {
    const std::string out = dir_ + "/chat-" + tag + ".txt";
    Child c = Child::Run({"/bin/sh", "-c",
                          "exec " + Bin("waste") + " chat " + c_ +
                              " -n 24 --temp 0 --threads 1 --ctx 512 --socket " + socket_ +
                              " > " + out});
    c.Send("hello there\n");
    // The reply ends with a newline on stdout; the next prompt follows it.
    const auto t0 = Clock::now();
    std::error_code ec;
    while (std::filesystem::file_size(out, ec) == 0 || ec) {
      if (Since(t0) > 60 || c.Wait(0) != -1000) {
        ADD_FAILURE() << "no first reply: " << c.Output();
        return std::string();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (std::string text; text.empty() || text.back() != '\n';
         std::this_thread::sleep_for(std::chrono::milliseconds(5))) {
      const auto b = waste::testing::FileBytes(out);
      text.assign(b.begin(), b.end());
      if (Since(t0) > 60) break;
    }
    if (restart) {
      daemon_.Signal(SIGKILL);
      EXPECT_EQ(daemon_.Wait(), -SIGKILL);
      StartDaemon(c_, small_);
    }
    c.Send("and again\n/quit\n");
    EXPECT_EQ(c.Wait(120), 0) << c.Output();
    if (restart) {
      EXPECT_TRUE(Has(c.Output(), "attached to wasted at " + socket_ + " again")) << c.Output();
    }
    const auto b = waste::testing::FileBytes(out);
    return std::string(b.begin(), b.end());
  };
  const std::string ref = chat("ref", false);
  EXPECT_EQ(std::count(ref.begin(), ref.end(), '\n'), 2) << "two replies: " << ref;
  EXPECT_EQ(chat("got", true), ref);
}

// `waste serve` outlives a restart of wasted: a streamed reply in flight
// when the daemon is killed goes on once another serves, token for token
// the reply of an uninterrupted request, and the server keeps serving.
TEST_F(Reattach, WasteServeGoesOnThroughARestart) {
  Child serve = Child::Run({Bin("waste"), "serve", c_, "--socket", socket_, "--listen",
                            "127.0.0.1:0", "--threads", "1", "--ctx", "512", "--keep-states", "0"});
  const std::string line = serve.WaitLine("waste serve: ", 60);
  const size_t at = line.find("http://127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << line << serve.Output();
  const uint16_t port = static_cast<uint16_t>(std::stoi(line.substr(at + 17)));
  const std::string body =
      R"({"prompt":"hello there","max_tokens":40,"temperature":0,"stream":true})";
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  // The text of a streamed completion, from its events; `mid` runs after the first.
  auto stream = [&](const std::function<void()>& mid) {
    waste::testing::HttpClient c(port);
    c.Send(request);
    std::string events = c.ReadUntil("}\n\n", std::chrono::milliseconds(60000));  // the first event
    EXPECT_NE(events.find("data: {"), std::string::npos) << events;
    mid();
    // Each event is one chunk of the chunked answer, so the framing lines
    // between them hold no "text".
    events += c.ReadUntil("data: [DONE]\n\n", std::chrono::milliseconds(120000));
    std::string text;
    for (size_t i = events.find("\"text\":\""); i != std::string::npos;
         i = events.find("\"text\":\"", i + 1)) {
      const size_t end = events.find('"', i + 8);
      text += events.substr(i + 8, end - i - 8);
    }
    EXPECT_NE(events.find("data: [DONE]"), std::string::npos) << events;
    return text;
  };
  const std::string ref = stream([] {});
  ASSERT_FALSE(ref.empty());
  const std::string got = stream([&] {
    daemon_.Signal(SIGKILL);
    EXPECT_EQ(daemon_.Wait(), -SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    StartDaemon(c_, small_);
  });
  EXPECT_EQ(got, ref);
  EXPECT_EQ(serve.Wait(0), -1000) << "waste serve ended: " << serve.Output();
  EXPECT_FALSE(serve.WaitLine("waste: attached to wasted at " + socket_ + " again", 10).empty())
      << "the reply ended before wasted was killed: " << serve.Output();
  waste::testing::HttpClient h(port);
  h.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(h.ReadAnswer().find("200 OK"), std::string::npos);
}

}  // namespace
