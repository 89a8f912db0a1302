// What wastectl and the metrics page say against what a probe client did:
// `wastectl daemons`, status (both forms), clients, metrics, `drop
// --layer`, the metrics page against misbehaving peers, and `status --watch`
// driven in tmux (skipped without tmux).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

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

namespace observe {

// An HTTP GET of `path` on 127.0.0.1:`port`: the whole answer, or "" when
// nothing listens.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

// A loopback TCP port nobody listens on right now.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

}  // namespace observe

// Two daemons on one machine: `wastectl daemons` lists a running one with
// its pid, socket, budget and model, and a second wasted sees it, saying
// what it holds before choosing its own budget.
TEST_F(Daemon, WastectlListsTheDaemonsAndASecondSeesTheFirst) {
  const std::string c = Synth("tiny-kimi");
  StartDaemon(c, {"--budget", "64M"});
  json s = Status();
  const Outcome r = Shell(Bin("wastectl") + " daemons --json");
  ASSERT_EQ(r.code, 0) << r.out;
  json list = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(list.is_array()) << r.out;
  json ours;
  for (json& d : list)
    if (d["pid"] == daemon_.pid()) ours = d;
  ASSERT_FALSE(ours.is_null()) << "pid " << daemon_.pid() << " not listed: " << r.out;
  EXPECT_EQ(ours["socket"], socket_) << ours.dump();
  EXPECT_EQ(ours["budget_bytes"], s["budget"]["total"]) << ours.dump() << s.dump();
  EXPECT_EQ(ours["container"], s["container"]) << ours.dump();
  EXPECT_GT(ours["resident_bytes"].get<uint64_t>(), 1u << 20) << ours.dump();
  const Outcome text = Shell(Bin("wastectl") + " daemons");
  EXPECT_TRUE(Has(text.out, socket_) && Has(text.out, std::to_string(daemon_.pid()))) << text.out;

  const Outcome second = Shell(Bin("wasted") + " " + c + " --check --socket " + dir_ + "/b.sock");
  EXPECT_EQ(second.code, 0) << second.out;
  EXPECT_TRUE(Has(second.out, "other daemons on this machine hold") &&
              Has(second.out, "pid " + std::to_string(daemon_.pid()) + " ("))
      << second.out;
  EXPECT_EQ(daemon_.Wait(0), -1000) << "the daemon died";
}

// What wastectl reports is what a client did: a probe runs 6 "tokens", each
// demanding expert t % 2 in every layer with experts, and stays attached.
// The counts must come out exactly, in status (both forms), clients and
// metrics (from wastectl and from the daemon's own HTTP page).
TEST_F(Daemon, WastectlCountsWhatAClientDid) {
  const std::string c = Synth("tiny-kimi");
  const int port = observe::FreePort();
  StartDaemon(c, {"--budget", "64M", "--metrics-listen", "127.0.0.1:" + std::to_string(port)});
  json s = Status();
  const uint64_t moe = s["layers"].size();
  ASSERT_GT(moe, 0u) << s.dump();
  EXPECT_EQ(s["hits"], 0);
  EXPECT_EQ(s["hit_rate"], nullptr);

  Child probe = Child::Run(Probe(c, {"--tokens", "6", "--hold"}));
  ASSERT_NE(probe.WaitLine("HELD"), "") << probe.Output();
  // Hints and progress are fire and forget: wait until the daemon has them all.
  const auto t0 = Clock::now();
  for (;;) {
    s = Status();
    const bool all = s["clients"].size() == 1 && s["clients"][0]["tokens"] == 6 &&
                     s["hits"].get<uint64_t>() + s["late"].get<uint64_t>() +
                             s["misses"].get<uint64_t>() ==
                         6 * moe;
    if (all) break;
    ASSERT_LT(Since(t0), 10) << "the daemon never counted what the probe did: " << s.dump();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Tokens 0 and 1 miss in every layer; tokens 2 to 5 find experts 0 and 1
  // ready. Nothing asked ahead (no lookahead), so nothing is late.
  EXPECT_EQ(s["misses"], 2 * moe);
  EXPECT_EQ(s["late"], 0);
  EXPECT_EQ(s["hits"], 4 * moe);
  EXPECT_EQ(s["reads"], 2 * moe);
  EXPECT_EQ(s["bytes_read"], s["reads"].get<uint64_t>() * s["record_bytes"].get<uint64_t>());
  EXPECT_NEAR(s["hit_rate"].get<double>(), 4.0 / 6, 1e-9);
  EXPECT_EQ(s["slots"]["ready"], 2 * moe);
  EXPECT_EQ(s["queued"]["demand"], 0);
  EXPECT_EQ(s["in_flight"]["demand"], 0);
  EXPECT_EQ(s["lookahead"]["reads"], 0);
  const json& cl = s["clients"][0];
  EXPECT_EQ(cl["pid"], probe.pid());
  EXPECT_EQ(cl["uid"], getuid());
  EXPECT_EQ(cl["hits"], 4 * moe);
  EXPECT_EQ(cl["misses"], 2 * moe);
  EXPECT_EQ(cl["late"], 0);
  EXPECT_EQ(cl["pins"], 0);
  // The command line is the kernel's (/proc), not what the client said.
  EXPECT_EQ(cl["command_from_proc"], true) << cl.dump();
  EXPECT_TRUE(Has(cl["command"], "daemon_probe " + socket_ + " " + c + " --tokens 6 --hold"))
      << cl.dump();
  for (const json& l : s["layers"]) {
    EXPECT_EQ(l["hits"], 4) << l.dump();
    EXPECT_EQ(l["misses"], 2) << l.dump();
    EXPECT_EQ(l["late"], 0) << l.dump();
    EXPECT_EQ(l["slots_ready"], 2) << l.dump();
    EXPECT_EQ(l["resident"], json({0, 1})) << l.dump();
    ASSERT_EQ(l["hottest"].size(), 2u) << l.dump();
    EXPECT_EQ(l["hottest"][0], json({{"expert", 0}, {"uses", 3}, {"resident", true}}));
    EXPECT_EQ(l["hottest"][1], json({{"expert", 1}, {"uses", 3}, {"resident", true}}));
  }
  const std::string first_layer = std::to_string(s["layers"][0]["layer"].get<int>());

  // The same in text.
  Outcome r = Shell(Bin("wastectl") + " status --socket " + socket_);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string counts =
      std::to_string(4 * moe) + " hits, 0 late, " + std::to_string(2 * moe) + " misses";
  EXPECT_TRUE(Has(r.out, "hit rate   66.7% (" + counts)) << r.out;
  EXPECT_TRUE(Has(r.out, "   4     0       2  66.7%  0*:3 1*:3\n")) << r.out;
  EXPECT_TRUE(Has(r.out, "daemon_probe")) << r.out;
  r = Shell(Bin("wastectl") + " clients --socket " + socket_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, " " + std::to_string(probe.pid()) + " ")) << r.out;
  EXPECT_TRUE(Has(r.out, "--tokens 6 --hold")) << r.out;
  r = Shell(Bin("wastectl") + " clients --json --socket " + socket_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json::parse(r.out)[0]["tokens"], 6) << r.out;

  // Metrics, from wastectl and from the daemon's page: the same counters.
  const std::string hits_line = "\nwaste_demand_hits_total " + std::to_string(4 * moe) + "\n";
  const std::string tokens_line = "\nwaste_client_tokens_total{client=\"" +
                                  std::to_string(cl["id"].get<int>()) + "\",pid=\"" +
                                  std::to_string(probe.pid()) + "\"} 6\n";
  const std::string layer_line =
      "\nwaste_layer_demand_misses_total{layer=\"" + first_layer + "\"} 2\n";
  r = Shell(Bin("wastectl") + " metrics --socket " + socket_);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const std::string& want : {hits_line, tokens_line, layer_line})
    EXPECT_TRUE(Has(r.out, want)) << want << " in\n" << r.out;
  const std::string page = observe::HttpGet(port, "/metrics");
  EXPECT_EQ(page.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << page;
  EXPECT_TRUE(Has(page, "Content-Type: text/plain; version=0.0.4")) << page;
  for (const std::string& want : {hits_line, tokens_line, layer_line})
    EXPECT_TRUE(Has(page, want)) << want << " in\n" << page;
  EXPECT_EQ(observe::HttpGet(port, "/nope").rfind("HTTP/1.0 404", 0), 0u);

  // drop --layer empties that layer only; both forms say how many.
  r = Shell(Bin("wastectl") + " drop --json --layer " + first_layer + " --socket " + socket_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json::parse(r.out), json({{"dropped", 2}, {"layer", std::stoi(first_layer)}})) << r.out;
  s = Status();
  EXPECT_EQ(s["layers"][0]["resident"], json::array()) << s.dump();
  EXPECT_EQ(s["slots"]["ready"], 2 * moe - 2);
  if (moe > 1) {
    EXPECT_EQ(s["layers"][1]["resident"], json({0, 1})) << s.dump();
  }

  // The probe leaves: no clients, the counts stay.
  probe = Child();
  const auto t1 = Clock::now();
  while (!Status()["clients"].empty()) {
    ASSERT_LT(Since(t1), 5) << "the probe stayed listed";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r = Shell(Bin("wastectl") + " clients --socket " + socket_);
  EXPECT_EQ(r.out, "no clients attached\n");
  EXPECT_EQ(Status()["hits"], 4 * moe);
}

namespace metrics_peers {

// A loopback TCP connection to `port`; -1 if it cannot connect.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the daemon has closed `fd` (a read gives its end) within `seconds`.
bool ClosedWithin(int fd, double seconds) {
  const auto t0 = Clock::now();
  for (;;) {
    const double left = seconds - Since(t0);
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left * 1000) + 1) != 1) return false;
    char buf[512];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return true;  // an answer (403, 431) is read first; then the end
  }
}

}  // namespace metrics_peers

// The metrics page against peers that misbehave: ten that connect and say
// nothing and one whose header never ends do not keep GET /metrics from
// another; each is closed at --metrics-timeout; past 64 at once a new
// connection closes the oldest; and a uid not allowed to attach is answered
// 403, naming it (the peer's uid comes from /proc/net/tcp).
TEST_F(Daemon, MetricsPeersThatMisbehaveCannotKeepThePageFromOthers) {
  using namespace metrics_peers;
  const std::string c = Synth("tiny-kimi");
  const int port = observe::FreePort();
  StartDaemon(c, {"--metrics-listen", "127.0.0.1:" + std::to_string(port), "--metrics-timeout",
                  "3"});
  std::vector<int> silent;
  for (int i = 0; i < 10; ++i) silent.push_back(Connect(port));
  const int slow = Connect(port);
  ASSERT_GE(slow, 0);
  const std::string start = "GET /metrics HTTP/1.0\r\nX-Slow: ";
  ASSERT_EQ(write(slow, start.data(), start.size()), static_cast<ssize_t>(start.size()));
  const auto opened = Clock::now();
  for (int i = 0; i < 5; ++i) {
    std::string page = observe::HttpGet(port, "/metrics");
    EXPECT_TRUE(Has(page, "200 OK") && Has(page, "waste_cache_slots")) << page;
    ASSERT_EQ(write(slow, "a", 1), 1);  // the header goes on
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (int fd : silent) ASSERT_GE(fd, 0);
  // All closed at the timeout, not before (the page was got meanwhile).
  EXPECT_GT(Since(opened), 0.4);
  for (int fd : silent) EXPECT_TRUE(ClosedWithin(fd, 10)) << "a silent connection stayed open";
  EXPECT_TRUE(ClosedWithin(slow, 10)) << "a never-ending header kept its connection";
  EXPECT_GE(Since(opened), 2.5);
  for (int fd : silent) close(fd);
  close(slow);

  // 70 at once: the 6 oldest are closed as the last 6 arrive, and the page
  // is still served (its connection closing the 7th oldest).
  std::vector<int> many;
  for (int i = 0; i < 70; ++i) {
    many.push_back(Connect(port));
    ASSERT_GE(many.back(), 0) << i;
  }
  const auto t_many = Clock::now();
  const std::string page = observe::HttpGet(port, "/metrics");
  EXPECT_TRUE(Has(page, "200 OK")) << page;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<int> closed;
  for (int i = 0; i < 70; ++i)
    if (ClosedWithin(many[i], 0.001)) closed.push_back(i);
  ASSERT_LT(Since(t_many), 2.0) << "too slow to tell eviction from the timeout";
  EXPECT_EQ(closed, (std::vector<int>{0, 1, 2, 3, 4, 5, 6})) << "the oldest go first";
  for (int fd : many) close(fd);

  if (geteuid() == 0) {
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(126);
      const std::string got = observe::HttpGet(port, "/metrics");
      (void)!write(out[1], got.data(), got.size());
      _exit(0);
    }
    close(out[1]);
    std::string got;
    char buf[4096];
    for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
    close(out[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_TRUE(Has(got, "403 Forbidden") && Has(got, "uid 65534 may not read")) << got;
    EXPECT_FALSE(Has(got, "waste_cache_slots")) << got;
  } else {
    std::fprintf(stderr, "SKIP part: a peer of another uid needs root to become one\n");
  }
  EXPECT_TRUE(Has(observe::HttpGet(port, "/metrics"), "200 OK"));
}

// `wastectl status --watch` in a real terminal (tmux), read off the screen:
// the fields are there, the screen changes when a client runs, and q and
// Ctrl-C leave the terminal as it was.
TEST_F(Daemon, WatchRedrawsInATerminal) {
  if (Shell("tmux -V").code != 0) {
    std::fprintf(stderr, "SKIP: tmux is not installed (scripts/deps.sh installs it)\n");
    GTEST_SKIP() << "tmux is not installed (scripts/deps.sh installs it)";
  }
  const std::string c = Synth("tiny-kimi");
  StartDaemon(c, {"--budget", "64M"});
  // A private tmux server: nothing of anyone else's is touched. No user
  // configuration, and the pane's process is wastectl itself (`exec`), so
  // its exit status is the one tmux reports, whichever shell tmux uses (dash
  // does not exec the last command of `sh -c` by itself).
  const std::string tmux = "tmux -f /dev/null -S " + dir_ + "/tmux.sock ";
  const std::string watch_cmd = "'exec env LC_ALL=C " + Bin("wastectl") +
                                " status --watch --interval 0.2 --socket " + socket_ + "'";
  struct KillServer {
    std::string tmux;
    ~KillServer() { Shell(tmux + "kill-server"); }
  } kill_server{tmux};
  auto screen = [&] { return Shell(tmux + "capture-pane -p -t watch").out; };
  // Waits until the screen shows `text`; the last screen either way.
  auto wait_for = [&](const std::string& text) {
    std::string shown;
    const auto t0 = Clock::now();
    while (Since(t0) < 10) {
      shown = screen();
      if (Has(shown, text)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return shown;
  };
  Outcome r = Shell(tmux + "new-session -d -s watch -x 100 -y 40 " + watch_cmd);
  ASSERT_EQ(r.code, 0) << r.out;
  Shell(tmux + "set-option -t watch remain-on-exit on");
  std::string shown = wait_for("clients: none attached");
  for (const char* want : {"wasted ", "slots ", "hit rate - overall", "hit rate every 0.2 s |",
                           "layer |", "q or Ctrl-C quits"})
    EXPECT_TRUE(Has(shown, want)) << want << " on\n" << shown;
  EXPECT_EQ(Shell(tmux + "display -p -t watch '#{alternate_on}'").out, "1\n");

  Child probe = Child::Run(Probe(c, {"--tokens", "6", "--hold"}));
  ASSERT_NE(probe.WaitLine("HELD"), "") << probe.Output();
  const std::string row = " " + std::to_string(probe.pid()) + " ";
  shown = wait_for(row);
  EXPECT_TRUE(Has(shown, row)) << "the client's row: " << row << " on\n" << shown;
  shown = wait_for("66.7% overall");
  EXPECT_TRUE(Has(shown, "66.7% overall")) << shown;
  // Experts 0 and 1 of every layer are ready: the first cell of each row
  // (one expert a cell at this width) is full, and each row counts 2 ready.
  EXPECT_TRUE(Has(shown, "|## ")) << shown;
  EXPECT_TRUE(Has(shown, "|   2/")) << shown;
  probe = Child();

  // How the pane ended: "<dead> exit=<status> signal=<signal> alternate=<0|1>",
  // once tmux knows. Debian's tmux is built with libutempter, whose helper
  // briefly owns SIGCHLD while a pane is torn down; a child that exits then is
  // left a zombie and tmux never learns its status (tmux/tmux#311). Sending
  // the server SIGCHLD makes it reap, so a dead pane without a status gets one.
  auto ending = [&] {
    std::string dead;
    for (auto t0 = Clock::now(); Since(t0) < 5; std::this_thread::sleep_for(std::chrono::milliseconds(50))) {
      dead = Shell(tmux + "display -p -t watch '#{pane_dead} exit=#{pane_dead_status} signal=#{pane_dead_signal} alternate=#{alternate_on}'").out;
      if (dead.rfind("1 ", 0) != 0) continue;
      if (!Has(dead, "exit= signal= ")) break;
      Shell("kill -CHLD $(" + tmux + "display -p '#{pid}')");
    }
    return dead;
  };
  // q quits and gives the terminal back: no alternate screen, exit 0.
  Shell(tmux + "send-keys -t watch q");
  EXPECT_EQ(ending(), "1 exit=0 signal= alternate=0\n");

  // Ctrl-C does the same.
  r = Shell(tmux + "respawn-pane -k -t watch " + watch_cmd);
  ASSERT_EQ(r.code, 0) << r.out;
  wait_for("q or Ctrl-C quits");
  Shell(tmux + "send-keys -t watch C-c");
  EXPECT_EQ(ending(), "1 exit=0 signal= alternate=0\n");
}

}  // namespace
