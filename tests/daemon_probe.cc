// daemon_probe: a small client of wasted that the multi-process tests drive
// (daemon_test.cc). It attaches the way `waste` does and then does one
// thing on purpose: pins records and holds them, loops acquiring records
// until the daemon goes away, runs a fixed pattern of "tokens" (--tokens),
// sends out-of-range hints, attaches with a
// wrong protocol version, asks for everything at once and floods (--greedy),
// forks clients and kills them at random points (--chaos), or checks every
// ready slot against the container (--verify). It reports on stdout, one
// line per event:
//   ATTACHED (then, with --go, waits for a line on stdin) | PINNED L:E | TOKENS n | HELD n | OK n | REFUSAL msg | ERROR msg
//   WRITABLE|REFUSED segment (mapping a segment writable) | FAULT|WROTE segment
//   ACQUIRED n MS ms | GREEDY n (pins it got) | CHAOS cycles killed exited
//   VERIFIED n (ready slots byte-identical to the container)
//   LATENCY pin|demand idx:count ... (--loop: a histogram of Acquire times,
//   bucket idx holding times around 1.02^idx ns; pin = found ready, demand =
//   had to wait for a read)
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/model.h"
#include "engine/model/trunk.h"
#include "link/attach.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::pair<int, int>> ParsePairs(const std::string& s) {
  std::vector<std::pair<int, int>> out;
  size_t at = 0;
  while (at < s.size()) {
    size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    const std::string one = s.substr(at, comma - at);
    const size_t colon = one.find(':');
    out.push_back({std::stoi(one.substr(0, colon)), std::stoi(one.substr(colon + 1))});
    at = comma + 1;
  }
  return out;
}

int Fail(const std::string& msg) {
  std::printf("ERROR %s\n", msg.c_str());
  std::fflush(stdout);
  return 3;
}

std::vector<int> MoeLayers(const waste::Container& ct) {
  std::vector<int> moe;
  for (int L = 0; L < ct.config().n_layers; ++L)
    if (ct.manifest().Bank(L)) moe.push_back(L);
  return moe;
}

// What a chaos child does until it is killed; returns only on an error
// (exit code 3) or, for kAttach, once attached (exit code 0).
enum class Activity { kAttach, kPin, kWait, kForward };

int RunActivity(Activity what, const std::string& socket, const waste::Container& ct,
                unsigned seed) {
  auto client = waste::DaemonClient::Connect(socket);
  if (!client.ok()) return 3;
  auto link = waste::AttachDaemon(std::move(*client), socket, ct);
  if (!link.ok()) {
    std::fprintf(stderr, "chaos child: %s\n", link.status().message().c_str());
    return 3;
  }
  if (what == Activity::kAttach) return 0;
  waste::SharedExpertSource& src = *(*link)->source;
  const std::vector<int> moe = MoeLayers(ct);
  const int experts = ct.config().n_experts;
  std::mt19937 rng(seed);
  if (what == Activity::kForward) {
    auto trunk = waste::Trunk::Over(ct, (*link)->trunk.data(), (*link)->trunk.size());
    if (!trunk.ok()) return 3;
    waste::ModelOptions mo;
    mo.threads = 1;
    auto model = waste::Model::Load(ct, &src, mo, std::move(*trunk));
    if (!model.ok()) return 3;
    std::vector<float> logits(static_cast<size_t>(ct.config().vocab));
    for (;;) {
      waste::Session s = (*model)->NewSession(64);
      std::vector<int> ids(8);
      for (int& id : ids) id = static_cast<int>(rng() % static_cast<unsigned>(ct.config().vocab));
      if (waste::Status st = (*model)->Forward(s, ids, logits.data()); !st.ok()) {
        std::fprintf(stderr, "chaos child: %s\n", st.message().c_str());
        return 3;
      }
    }
  }
  // kPin holds up to three records at once; kWait asks for records one at a
  // time without hinting ahead, so with a small cache most of its time is
  // spent on a futex waiting for a read.
  std::vector<std::pair<int, int>> held;
  for (;;) {
    const int L = moe[rng() % moe.size()], E = static_cast<int>(rng() % experts);
    if (what == Activity::kPin) {
      const int e[1] = {E};
      src.Hint(L, e, waste::HintKind::kDemand);
    }
    auto rec = src.Acquire(L, E);
    if (!rec.ok()) {
      std::fprintf(stderr, "chaos child: %s\n", rec.status().message().c_str());
      return 3;
    }
    held.push_back({L, E});
    if (held.size() > (what == Activity::kPin ? 3u : 0u)) {
      src.Release(held.front().first, held.front().second);
      held.erase(held.begin());
    }
  }
}

// Forks `cycles` clients, two at a time, each doing one activity until it is
// killed with SIGKILL after a random delay (so at a random point of its
// attach, pin loop, futex wait or forward pass). A child that fails (exit
// code 3) is an error: a live daemon must serve every client it accepted.
int Chaos(const std::string& socket, const waste::Container& ct, int cycles, unsigned seed) {
  std::mt19937 rng(seed);
  struct Running {
    pid_t pid;
    Clock::time_point kill_at;
  };
  std::vector<Running> running;
  int started = 0, killed = 0, exited = 0, failed = 0;
  // Delays: attach takes a few ms, the rest run until killed.
  const int max_delay_us[4] = {4000, 15000, 15000, 40000};
  while (started < cycles || !running.empty()) {
    while (started < cycles && running.size() < 2) {
      const auto what = static_cast<Activity>(rng() % 4);
      const unsigned child_seed = static_cast<unsigned>(rng());
      const int delay = static_cast<int>(rng() % static_cast<unsigned>(max_delay_us[int(what)]));
      const pid_t pid = fork();
      if (pid < 0) return Fail("fork failed");
      if (pid == 0) _exit(RunActivity(what, socket, ct, child_seed));
      running.push_back({pid, Clock::now() + std::chrono::microseconds(delay)});
      ++started;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    for (size_t i = 0; i < running.size();) {
      int status = 0;
      pid_t r = waitpid(running[i].pid, &status, WNOHANG);
      if (r == 0 && Clock::now() >= running[i].kill_at) {
        kill(running[i].pid, SIGKILL);
        r = waitpid(running[i].pid, &status, 0);
      }
      if (r == 0) {
        ++i;
        continue;
      }
      if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ++killed;
      else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) ++exited;
      else ++failed;
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  std::printf("CHAOS %d %d %d\n", started, killed, exited);
  if (failed) return Fail(std::to_string(failed) + " chaos clients failed");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: daemon_probe SOCKET CONTAINER [--version N] [--pin L:E,..] [--hold] "
                 "[--hint L:E] [--loop SECONDS] [--tokens N] [--check] [--try-write] [--greedy] "
                 "[--chaos CYCLES] [--verify] [--go]\n");
    return 2;
  }
  const std::string socket = argv[1], dir = argv[2];
  uint32_t version = waste::proto::PROTOCOL_VERSION;
  std::string pin, hint;
  bool hold = false, check = false, try_write = false, greedy = false, verify = false;
  bool go = false;  // wait for a line on stdin after attaching
  double loop = 0;
  int chaos = 0;
  int tokens = 0;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--version" && i + 1 < argc) version = static_cast<uint32_t>(std::stoul(argv[++i]));
    else if (a == "--pin" && i + 1 < argc) pin = argv[++i];
    else if (a == "--hint" && i + 1 < argc) hint = argv[++i];
    else if (a == "--loop" && i + 1 < argc) loop = std::stod(argv[++i]);
    else if (a == "--tokens" && i + 1 < argc) tokens = std::stoi(argv[++i]);
    else if (a == "--hold") hold = true;
    else if (a == "--check") check = true;
    else if (a == "--try-write") try_write = true;
    else if (a == "--greedy") greedy = true;
    else if (a == "--go") go = true;
    else if (a == "--verify") verify = true;
    else if (a == "--chaos" && i + 1 < argc) chaos = std::stoi(argv[++i]);
    else return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  auto ct = waste::Container::Open(dir);
  if (!ct.ok()) return Fail(ct.status().message());
  // Before this process attaches: the children must not share its connection.
  if (chaos > 0) return Chaos(socket, *ct, chaos, static_cast<unsigned>(getpid()));
  auto client = waste::DaemonClient::Connect(socket);
  if (!client.ok()) return Fail(client.status().message());
  if (version != waste::proto::PROTOCOL_VERSION) {
    auto a = (*client)->Attach("daemon_probe", version);
    return a.ok() ? 0 : Fail(a.status().message());
  }
  auto link = waste::AttachDaemon(std::move(*client), socket, *ct);
  if (!link.ok()) return Fail(link.status().message());
  std::printf("ATTACHED\n");
  if (go) {  // the test changes something under the daemon first
    char c = 0;
    while (read(0, &c, 1) == 1 && c != '\n') {
    }
  }
  waste::SharedExpertSource& src = *(*link)->source;
  std::vector<uint8_t> expect(ct->record_bytes());

  auto acquire = [&](int L, int E) -> waste::Status {
    auto rec = src.Acquire(L, E);
    if (!rec.ok()) return rec.status();
    if (check) {  // the shared slot holds exactly the record on disk
      WASTE_RETURN_IF_ERROR(ct->ReadRecord(L, E, expect.data(), false));
      if (std::memcmp(*rec, expect.data(), expect.size()) != 0)
        return waste::Status::Error("layer " + std::to_string(L) + " expert " +
                                    std::to_string(E) + ": shared bytes differ from the disk");
    }
    return waste::Status::Ok();
  };

  if (try_write) {  // invariant 2: the shared segments are read-only here
    const waste::Attachment& at = (*link)->attachment;
    const std::pair<const char*, waste::SegmentFd> fds[] = {
        {"trunk", at.trunk}, {"cache", at.cache}, {"table", at.table}};
    for (const auto& [name, seg] : fds) {
      void* p = mmap(nullptr, seg.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, seg.fd, 0);
      std::printf("%s %s\n", p == MAP_FAILED ? "REFUSED" : "WRITABLE", name);
      if (p != MAP_FAILED) munmap(p, seg.bytes);
    }
    const std::pair<const char*, uint8_t*> maps[] = {{"trunk", (*link)->trunk.data()},
                                                     {"cache", (*link)->cache.data()},
                                                     {"table", (*link)->table.data()}};
    for (const auto& [name, addr] : maps) {
      const pid_t pid = fork();
      if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);  // a sanitizer's handler would turn the fault into an exit
        *static_cast<volatile uint8_t*>(addr) = 1;  // through the client's own mapping
        _exit(0);
      }
      int status = 0;
      waitpid(pid, &status, 0);
      const bool fault = WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
      std::printf("%s %s\n", fault ? "FAULT" : "WROTE", name);
    }
  }
  if (!hint.empty()) {
    for (auto [L, E] : ParsePairs(hint)) {
      const int e[1] = {E};
      (*link)->client->SendHint(L, e, waste::HintKind::kDemand);
    }
    for (int i = 0; i < 20 && (*link)->client->last_refusal().empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (waste::Status st = (*link)->client->Poll(); !st.ok()) return Fail(st.message());
    }
    std::printf("REFUSAL %s\n", (*link)->client->last_refusal().c_str());
  }
  if (tokens > 0) {
    // Token t demands expert t % 2 in every layer with experts, in order, and
    // reports each token: N tokens make N x layers demand hints, the first
    // two tokens' misses and the rest hits when the cache holds them all.
    const waste::ModelConfig& c = ct->config();
    for (int t = 0; t < tokens; ++t) {
      for (int L = 0; L < c.n_layers; ++L) {
        if (!ct->manifest().Bank(L)) continue;
        const int e[1] = {t % 2};
        src.Hint(L, e, waste::HintKind::kDemand);
        if (waste::Status st = acquire(L, e[0]); !st.ok()) return Fail(st.message());
        src.Release(L, e[0]);
      }
      src.TokensDone(1);
    }
    std::printf("TOKENS %d\n", tokens);
  }
  int held = 0;
  if (!pin.empty()) {
    const auto t0 = Clock::now();
    for (auto [L, E] : ParsePairs(pin)) {
      if (waste::Status st = acquire(L, E); !st.ok()) return Fail(st.message());
      std::printf("PINNED %d:%d\n", L, E);
      ++held;
    }
    std::printf("ACQUIRED %d in %.0f ms\n", held,
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  if (verify) {
    // Every ready slot against the container: pinned through the table (so
    // that it cannot change while compared), then byte for byte.
    auto table = waste::shm::SlotTable::Attach(
        (*link)->table.data(), (*link)->table.size(), static_cast<uint32_t>(ct->config().n_layers),
        static_cast<uint32_t>(ct->config().n_experts), ct->record_bytes());
    if (!table.ok()) return Fail(table.status().message());
    const waste::shm::SlotTable& t = *table;
    check = true;
    int ready = 0;
    for (int L : MoeLayers(*ct)) {
      for (int E = 0; E < ct->config().n_experts; ++E) {
        const uint32_t s = t.index(L, E).load();
        if (s == waste::shm::kNoSlot || s >= t.slots() ||
            waste::shm::StateOf(t.slot(s).word.load()) != waste::shm::SlotState::kReady)
          continue;
        if (waste::Status st = acquire(L, E); !st.ok()) return Fail(st.message());
        src.Release(L, E);
        ++ready;
      }
    }
    std::printf("VERIFIED %d\n", ready);
  }
  if (greedy) {
    // Everything at once: every record demanded, as many pinned as the
    // daemon lets us, then the same demands again and again until stdin
    // closes.
    const std::vector<int> moe = MoeLayers(*ct);
    std::vector<int> all(static_cast<size_t>(ct->config().n_experts));
    for (size_t e = 0; e < all.size(); ++e) all[e] = static_cast<int>(e);
    for (int L : moe) src.Hint(L, all, waste::HintKind::kDemand);
    const int got = [&] {
      int n = 0;
      for (int L : moe)
        for (int E : all) {
          if (!src.Acquire(L, E).ok()) return n;  // the pin cap (or an error): stop there
          ++n;
        }
      return n;
    }();
    std::printf("GREEDY %d\n", got);
    for (;;) {
      pollfd p{0, POLLIN, 0};
      if (poll(&p, 1, 5) > 0) {
        char c;
        if (read(0, &c, 1) <= 0) break;
      }
      for (int L : moe) src.Hint(L, all, waste::HintKind::kDemand);
    }
    return 0;
  }
  if (hold) {
    std::printf("HELD %d\n", held);
    char c;
    while (read(0, &c, 1) > 0) {
    }  // until stdin closes, or a signal ends us
    return 0;
  }
  if (loop > 0) {
    const waste::ModelConfig& c = ct->config();
    std::vector<int> moe;
    for (int L = 0; L < c.n_layers; ++L)
      if (ct->manifest().Bank(L)) moe.push_back(L);
    std::mt19937 rng(static_cast<unsigned>(getpid()));
    const auto end = Clock::now() + std::chrono::duration<double>(loop);
    uint64_t n = 0;
    std::map<int, uint64_t> hist[2];  // pin, demand
    while (Clock::now() < end) {
      const int L = moe[rng() % moe.size()], E = static_cast<int>(rng() % c.n_experts);
      const int e[1] = {E};
      src.Hint(L, e, waste::HintKind::kDemand);
      const uint64_t misses = src.stats().misses;
      const auto t0 = Clock::now();
      if (waste::Status st = acquire(L, E); !st.ok()) return Fail(st.message());
      const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      ++hist[src.stats().misses > misses ? 1 : 0][static_cast<int>(
          std::lround(std::log(std::max(ns, 1.0)) / std::log(1.02)))];
      src.Release(L, E);
      ++n;
    }
    for (int k = 0; k < 2; ++k) {
      std::string line = k == 0 ? "LATENCY pin" : "LATENCY demand";
      for (const auto& [idx, count] : hist[k])
        line += " " + std::to_string(idx) + ":" + std::to_string(count);
      std::printf("%s\n", line.c_str());
    }
    std::printf("OK %llu\n", static_cast<unsigned long long>(n));
  }
  return 0;
}
