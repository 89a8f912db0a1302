// daemon_probe: a small client of wasted that the multi-process tests drive
// (daemon_test.cc). It attaches the way `waste` does and then does one
// thing on purpose: pins records and holds them, loops acquiring records
// until the daemon goes away, sends out-of-range hints, or attaches with a
// wrong protocol version. It reports on stdout, one line per event:
//   ATTACHED | PINNED L:E | HELD n | OK n | REFUSAL msg | ERROR msg
//   WRITABLE|REFUSED segment (mapping a segment writable) | FAULT|WROTE segment
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "clients/waste/daemon_link.h"

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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: daemon_probe SOCKET CONTAINER [--version N] [--pin L:E,..] [--hold] "
                 "[--hint L:E] [--loop SECONDS] [--check] [--try-write]\n");
    return 2;
  }
  const std::string socket = argv[1], dir = argv[2];
  uint32_t version = waste::proto::PROTOCOL_VERSION;
  std::string pin, hint;
  bool hold = false, check = false, try_write = false;
  double loop = 0;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--version" && i + 1 < argc) version = static_cast<uint32_t>(std::stoul(argv[++i]));
    else if (a == "--pin" && i + 1 < argc) pin = argv[++i];
    else if (a == "--hint" && i + 1 < argc) hint = argv[++i];
    else if (a == "--loop" && i + 1 < argc) loop = std::stod(argv[++i]);
    else if (a == "--hold") hold = true;
    else if (a == "--check") check = true;
    else if (a == "--try-write") try_write = true;
    else return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  auto ct = waste::Container::Open(dir);
  if (!ct.ok()) return Fail(ct.status().message());
  auto client = waste::DaemonClient::Connect(socket);
  if (!client.ok()) return Fail(client.status().message());
  if (version != waste::proto::PROTOCOL_VERSION) {
    auto a = (*client)->Attach("daemon_probe", version);
    return a.ok() ? 0 : Fail(a.status().message());
  }
  auto link = waste::cli::AttachDaemon(std::move(*client), socket, *ct);
  if (!link.ok()) return Fail(link.status().message());
  std::printf("ATTACHED\n");
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
  int held = 0;
  if (!pin.empty()) {
    for (auto [L, E] : ParsePairs(pin)) {
      if (waste::Status st = acquire(L, E); !st.ok()) return Fail(st.message());
      std::printf("PINNED %d:%d\n", L, E);
      ++held;
    }
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
    while (Clock::now() < end) {
      const int L = moe[rng() % moe.size()], E = static_cast<int>(rng() % c.n_experts);
      const int e[1] = {E};
      src.Hint(L, e, waste::HintKind::kDemand);
      if (waste::Status st = acquire(L, E); !st.ok()) return Fail(st.message());
      src.Release(L, E);
      ++n;
    }
    std::printf("OK %llu\n", static_cast<unsigned long long>(n));
  }
  return 0;
}
