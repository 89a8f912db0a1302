// DaemonClient (link/daemon_client.h) against a fake wasted: a Daemon server on
// its own thread and kj event loop, listening on a Unix socket in a scratch
// directory and handing out real memfds as the segments.
#include "link/daemon_client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <capnp/rpc-twoparty.h>
#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <kj/debug.h>
#include <kj/io.h>
#include <nlohmann/json.hpp>

#include "tests/support/programs.h"
#include "test_util.h"

namespace waste {
namespace {

using Clock = std::chrono::steady_clock;

// What the fake daemon saw, shared with the test thread.
struct FakeState {
  struct Hint {
    uint32_t layer;
    std::vector<uint32_t> experts;
    proto::HintKind kind;
  };
  std::mutex mu;
  std::vector<Hint> hints;
  std::string command;
  uint32_t pid = 0;
  bool stopped = false;
  std::string status_refusal;         // when set, status() is refused with it
  std::atomic<int> hint_delay_ms{0};  // how long a hint's answer is held back

  size_t hint_count() {
    std::lock_guard<std::mutex> lock(mu);
    return hints.size();
  }
};

constexpr uint32_t kLayers = 4, kExperts = 8;

// The text each fake segment starts with, so the test can tell them apart.
std::string SegmentText(const std::string& name) {
  return "fake " + name + " segment";
}

kj::AutoCloseFd MakeMemfd(const std::string& name, uint64_t bytes) {
  kj::AutoCloseFd fd(::memfd_create(name.c_str(), MFD_CLOEXEC));
  KJ_SYSCALL(fd.get());
  KJ_SYSCALL(::ftruncate(fd.get(), static_cast<off_t>(bytes)));
  const std::string text = SegmentText(name);
  KJ_SYSCALL(::pwrite(fd.get(), text.data(), text.size(), 0));
  return fd;
}

// Cap'n Proto's Server bases have no virtual destructor; these are final and
// owned through their own type.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"

class FakeSegment final : public proto::Segment::Server {
 public:
  FakeSegment(kj::AutoCloseFd fd, uint64_t bytes) : fd_(kj::mv(fd)), bytes_(bytes) {}
  kj::Maybe<int> getFd() override { return fd_.get(); }
  kj::Promise<void> size(SizeContext context) override {
    context.getResults().setBytes(bytes_);
    return kj::READY_NOW;
  }

 private:
  kj::AutoCloseFd fd_;
  uint64_t bytes_;
};

class FakeSession final : public proto::Session::Server {
 public:
  FakeSession(FakeState& state, kj::Timer& timer) : state_(state), timer_(timer) {}

  // Records the hint at once, then answers after the configured delay. Ids out
  // of range are refused after the rest is kept, as the schema says.
  kj::Promise<void> hint(HintContext context) override {
    const auto p = context.getParams();
    FakeState::Hint h{p.getLayer(), {}, p.getKind()};
    for (uint32_t e : p.getExperts()) h.experts.push_back(e);
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      state_.hints.push_back(h);
    }
    if (h.layer >= kLayers) {
      throw kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                          kj::str("hint: layer ", h.layer, " is out of range (the model has ",
                                  kLayers, " layers)"));
    }
    for (uint32_t e : h.experts) {
      if (e >= kExperts) {
        throw kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                            kj::str("hint for layer ", h.layer, ": expert ", e,
                                    " is out of range (the model has ", kExperts, " experts)"));
      }
    }
    const int delay = state_.hint_delay_ms.load();
    if (delay == 0) return kj::READY_NOW;
    return timer_.afterDelay(delay * kj::MILLISECONDS);
  }
  kj::Promise<void> detach(DetachContext) override { return kj::READY_NOW; }

 private:
  FakeState& state_;
  kj::Timer& timer_;
};

class FakeDaemon final : public proto::Daemon::Server {
 public:
  FakeDaemon(FakeState& state, kj::Timer& timer) : state_(state), timer_(timer) {}

  kj::Promise<void> attach(AttachContext context) override {
    const auto p = context.getParams();
    if (p.getVersion() != proto::PROTOCOL_VERSION) {
      // What wasted says (daemon/rpc_server.cc): both versions, the client's first.
      throw kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                          kj::str("protocol version ", p.getVersion(),
                                  " is not supported: this wasted speaks protocol version ",
                                  proto::PROTOCOL_VERSION));
    }
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      state_.command = p.getClient().getCommand();
      state_.pid = p.getClient().getPid();
    }
    auto r = context.getResults();
    r.setSession(kj::heap<FakeSession>(state_, timer_));
    auto m = r.initModel();
    m.setContainer("/models/fake");
    m.setFingerprint("sha256:feed");
    m.setArch("kimi-linear");
    m.setLayers(kLayers);
    m.setExperts(kExperts);
    m.setTopK(2);
    m.setRecordBytes(1000);
    m.setSlots(6);
    m.setSlotStride(1024);
    auto s = r.initSegments();
    s.setTrunk(kj::heap<FakeSegment>(MakeMemfd("trunk", 4096), 4096));
    s.setCache(kj::heap<FakeSegment>(MakeMemfd("cache", 6 * 1024), 6 * 1024));
    s.setTable(kj::heap<FakeSegment>(MakeMemfd("table", 512), 512));
    s.setPins(kj::heap<FakeSegment>(MakeMemfd("pins", 4096), 4096));
    s.setTrunkBytes(4096);
    s.setCacheBytes(6 * 1024);
    s.setTableBytes(512);
    s.setPinBytes(4096);
    return kj::READY_NOW;
  }

  kj::Promise<void> status(StatusContext context) override {
    {
      std::lock_guard<std::mutex> lock(state_.mu);
      if (!state_.status_refusal.empty()) {
        throw kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                            kj::str(state_.status_refusal));
      }
    }
    DaemonStatus s;
    s.version = "0.1.0-fake";
    s.pid = 4242;
    s.uptime_seconds = 12.5;
    s.container = "/models/fake";
    s.arch = "kimi-linear";
    s.budget = 8ull << 30;
    s.trunk_bytes = 3ull << 30;
    s.cache_bytes = 4ull << 30;
    s.overhead_bytes = 1ull << 30;
    s.trunk_wired = true;
    s.page_kind = "2 MiB huge pages";
    s.slots = 100;
    s.slots_ready = 60;
    s.slots_loading = 5;
    s.slots_pinned = 7;
    s.slots_failed = 1;
    s.hits = 900;
    s.late = 60;
    s.misses = 40;
    s.reads = 150;
    s.bytes_read = 150'000'000;
    s.read_errors = 2;
    s.queued = {10, 11, 12};
    s.in_flight = {20, 21, 22};
    ClientStatusInfo c;
    c.id = 3;
    c.pid = 777;
    c.uid = 1000;
    c.command = "waste run /models/fake hello";
    c.attached_seconds = 4.0;
    c.hits = 80;
    c.late = 5;
    c.misses = 15;
    c.pins = 2;
    c.tokens = 12;
    s.clients = {c};
    s.io_depth = 16;
    s.experts = 16;
    s.record_bytes = 3ull << 20;
    s.read_busy_seconds = 0.5;
    s.lookahead_reads = 40;
    s.lookahead_used = 30;
    s.demand_hinted = 500;
    LayerStatusInfo first;
    first.layer = 1;
    first.hits = 450;
    first.late = 30;
    first.misses = 20;
    first.slots_ready = 3;
    first.resident = {0x03, 0x02};  // experts 0, 1 and 9
    first.hottest = {{9, 300, true}, {4, 120, false}, {0, 90, true}};
    LayerStatusInfo second;
    second.layer = 2;
    second.hits = 450;
    second.misses = 50;
    s.layers = {first, second};
    StatusToProto(s, context.getResults().initStatus());
    return kj::READY_NOW;
  }

  kj::Promise<void> stop(StopContext) override {
    std::lock_guard<std::mutex> lock(state_.mu);
    state_.stopped = true;
    return kj::READY_NOW;
  }

 private:
  FakeState& state_;
  kj::Timer& timer_;
};

#pragma GCC diagnostic pop

// A listening Unix socket at `path`, mode 0600 as wasted makes it.
int Listen(const std::string& path, bool listen = true) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  KJ_SYSCALL(fd);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  KJ_SYSCALL(::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)));
  KJ_SYSCALL(::chmod(path.c_str(), 0600));
  if (listen) {
    KJ_SYSCALL(::listen(fd, 8));
  }
  return fd;
}

// The fake wasted on its own thread. Everything kj it owns lives and dies on
// that thread; the test steers it with executeSync.
class FakeServer {
 public:
  explicit FakeServer(const std::string& path) {
    const int fd = Listen(path);
    std::promise<void> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, fd, &ready] { Run(fd, ready); });
    started.wait();
  }
  ~FakeServer() { Exit(); }

  // Drops the RPC server and with it the connection; the thread stays.
  void CloseConnections() {
    executor_->executeSync([this] {
      listening_ = nullptr;
      server_ = nullptr;
    });
  }
  // Ends the thread, closing everything it had.
  void Exit() {
    if (!thread_.joinable()) return;
    exit_->fulfill();
    thread_.join();
  }

  FakeState state;

 private:
  void Run(int fd, std::promise<void>& ready) {
    auto io = kj::setupAsyncIo();
    auto listener =
        io.lowLevelProvider->wrapListenSocketFd(fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    server_ = kj::heap<capnp::TwoPartyServer>(kj::heap<FakeDaemon>(state, io.provider->getTimer()));
    listening_ = server_->listenCapStreamReceiver(*listener, 8);
    auto exit = kj::newPromiseAndCrossThreadFulfiller<void>();
    exit_ = kj::mv(exit.fulfiller);
    executor_ = &kj::getCurrentThreadExecutor();
    ready.set_value();
    exit.promise.wait(io.waitScope);
    listening_ = nullptr;
    server_ = nullptr;
  }

  std::thread thread_;
  const kj::Executor* executor_ = nullptr;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> exit_;
  kj::Own<capnp::TwoPartyServer> server_;  // server thread only
  kj::Promise<void> listening_ = nullptr;  // server thread only
};

std::unique_ptr<DaemonClient> MustConnect(const std::string& path) {
  auto c = DaemonClient::Connect(path);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? std::move(*c) : nullptr;
}

std::string ReadSegment(const SegmentFd& s, size_t n) {
  std::string text(n, '\0');
  EXPECT_EQ(::pread(s.fd, text.data(), n, 0), static_cast<ssize_t>(n));
  return text;
}

// Polls every few milliseconds until `done` or `seconds` pass; true if done.
template <class F>
bool PollUntil(DaemonClient& client, F done, double seconds = 2.0) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    (void)client.Poll();
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return done();
}

TEST(DaemonClient, AttachGivesTheModelAndFourReadableSegments) {
  const std::string sock = testing::ScratchDir() + "/wasted.sock";
  FakeServer server(sock);
  auto client = MustConnect(sock);
  ASSERT_TRUE(client);
  EXPECT_TRUE(client->connected());

  auto a = client->Attach("waste run model hi");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->model.container, "/models/fake");
  EXPECT_EQ(a->model.fingerprint, "sha256:feed");
  EXPECT_EQ(a->model.arch, "kimi-linear");
  EXPECT_EQ(a->model.layers, kLayers);
  EXPECT_EQ(a->model.experts, kExperts);
  EXPECT_EQ(a->model.top_k, 2u);
  EXPECT_EQ(a->model.slots, 6u);
  EXPECT_EQ(a->model.record_bytes, 1000u);
  EXPECT_EQ(a->model.slot_stride, 1024u);
  EXPECT_EQ(a->trunk.bytes, 4096u);
  EXPECT_EQ(a->cache.bytes, 6u * 1024);
  EXPECT_EQ(a->table.bytes, 512u);
  EXPECT_EQ(a->pins.bytes, 4096u);
  for (auto [seg, name] : {std::pair{&a->trunk, "trunk"}, std::pair{&a->cache, "cache"},
                           std::pair{&a->table, "table"}, std::pair{&a->pins, "pins"}}) {
    ASSERT_GE(seg->fd, 0) << name;
    EXPECT_EQ(ReadSegment(*seg, SegmentText(name).size()), SegmentText(name)) << name;
    EXPECT_TRUE(::fcntl(seg->fd, F_GETFD) & FD_CLOEXEC) << name;
    // mmap works too, which is what clients do with them.
    void* p = ::mmap(nullptr, seg->bytes, PROT_READ, MAP_SHARED, seg->fd, 0);
    ASSERT_NE(p, MAP_FAILED) << name;
    EXPECT_EQ(std::string(static_cast<const char*>(p), SegmentText(name).size()),
              SegmentText(name));
    ::munmap(p, seg->bytes);
  }
  {
    std::lock_guard<std::mutex> lock(server.state.mu);
    EXPECT_EQ(server.state.command, "waste run model hi");
    EXPECT_EQ(server.state.pid, static_cast<uint32_t>(::getpid()));
  }

  // Moving hands the fds over; destruction closes them.
  const int trunk_fd = a->trunk.fd;
  Attachment moved = std::move(*a);
  EXPECT_EQ(a->trunk.fd, -1);
  EXPECT_EQ(moved.trunk.fd, trunk_fd);
  moved.Close();
  EXPECT_EQ(::fcntl(trunk_fd, F_GETFD), -1);
  EXPECT_TRUE(client->Poll().ok());
}

TEST(DaemonClient, VersionMismatchNamesBothVersions) {
  const std::string sock = testing::ScratchDir() + "/wasted.sock";
  FakeServer server(sock);
  auto client = MustConnect(sock);
  ASSERT_TRUE(client);
  auto a = client->Attach("waste run", proto::PROTOCOL_VERSION + 1);
  ASSERT_FALSE(a.ok());
  const std::string& m = a.status().message();
  EXPECT_EQ(m, "protocol version " + std::to_string(proto::PROTOCOL_VERSION + 1) +
                   " is not supported: this wasted speaks protocol version " +
                   std::to_string(proto::PROTOCOL_VERSION));
  // A refusal is an answer, not a lost connection.
  EXPECT_TRUE(client->connected());
  EXPECT_TRUE(client->Poll().ok());
  EXPECT_TRUE(client->Attach("waste run").ok());
}

TEST(DaemonClient, HintsArriveInOrderWithoutWaitingForAnswers) {
  const std::string sock = testing::ScratchDir() + "/wasted.sock";
  FakeServer server(sock);
  auto client = MustConnect(sock);
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->Attach("waste run").ok());
  server.state.hint_delay_ms = 10'000;  // the answers come long after the test ends

  constexpr int kHints = 200;
  const auto t0 = Clock::now();
  for (int i = 0; i < kHints; ++i) {
    const int experts[] = {i % 8, (i + 1) % 8};
    client->SendHint(i % 4, experts, i % 3 == 0 ? HintKind::kDemand : HintKind::kLookahead);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(seconds, 1.0) << "SendHint waited for answers";
  // Every hint was written at SendHint time: they arrive without another Poll.
  const auto end = Clock::now() + std::chrono::seconds(2);
  while (server.state.hint_count() < kHints && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::lock_guard<std::mutex> lock(server.state.mu);
  ASSERT_EQ(server.state.hints.size(), static_cast<size_t>(kHints));
  for (int i = 0; i < kHints; ++i) {
    const auto& h = server.state.hints[i];
    EXPECT_EQ(h.layer, static_cast<uint32_t>(i % 4)) << i;
    EXPECT_EQ(h.experts, (std::vector<uint32_t>{uint32_t(i % 8), uint32_t((i + 1) % 8)})) << i;
    EXPECT_EQ(h.kind, i % 3 == 0 ? proto::HintKind::DEMAND : proto::HintKind::LOOKAHEAD) << i;
  }
}

// The link thread queues what any thread sends: two threads hint at once
// while a third asks for the status; every hint arrives, each thread's in
// its own order.
TEST(DaemonClient, HintsFromTwoThreadsAtOnce) {
  const std::string sock = testing::ScratchDir() + "/wasted.sock";
  FakeServer server(sock);
  auto client = MustConnect(sock);
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->Attach("waste run").ok());

  constexpr int kHints = 64;  // per thread; i is sent as experts {i / 8, i % 8}
  std::vector<std::thread> senders;
  for (int layer = 0; layer < 2; ++layer) {
    senders.emplace_back([&client, layer] {
      for (int i = 0; i < kHints; ++i) {
        const int experts[] = {i / 8, i % 8};
        client->SendHint(layer, experts, HintKind::kDemand);
      }
    });
  }
  int statuses = 0;
  for (int i = 0; i < 5; ++i) statuses += client->GetStatus().ok();
  for (std::thread& t : senders) t.join();
  EXPECT_EQ(statuses, 5);
  const auto end = Clock::now() + std::chrono::seconds(5);
  while (server.state.hint_count() < 2 * kHints && Clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  std::lock_guard<std::mutex> lock(server.state.mu);
  ASSERT_EQ(server.state.hints.size(), static_cast<size_t>(2 * kHints));
  int next[2] = {0, 0};
  for (const auto& h : server.state.hints) {
    ASSERT_LT(h.layer, 2u);
    const int i = next[h.layer]++;
    EXPECT_EQ(h.experts, (std::vector<uint32_t>{uint32_t(i / 8), uint32_t(i % 8)}))
        << "layer " << h.layer << " hint " << i;
  }
  EXPECT_EQ(next[0], kHints);
  EXPECT_EQ(next[1], kHints);
  EXPECT_TRUE(client->connected());
}

TEST(DaemonClient, HintRefusalsAreKeptAndDoNotEndTheClient) {
  const std::string sock = testing::ScratchDir() + "/wasted.sock";
  FakeServer server(sock);
  auto client = MustConnect(sock);
  ASSERT_TRUE(client);
  const int experts[] = {1, 2};
  client->SendHint(0, experts, HintKind::kDemand);  // before attach: dropped here
  EXPECT_NE(client->last_refusal().find("before attach"), std::string::npos);
  ASSERT_TRUE(client->Attach("waste run").ok());

  const int bad[] = {3, 99, 5};
  client->SendHint(1, bad, HintKind::kWarm);
  ASSERT_TRUE(PollUntil(*client, [&] {
    return client->last_refusal().find("99") != std::string::npos;
  })) << client->last_refusal();
  EXPECT_EQ(client->last_refusal(),
            "hint for layer 1: expert 99 is out of range (the model has 8 experts)");
  EXPECT_TRUE(client->Poll().ok());
  EXPECT_TRUE(client->connected());

  const int negative[] = {4, -1};
  client->SendHint(2, negative, HintKind::kDemand);
  EXPECT_NE(client->last_refusal().find("-1"), std::string::npos);
  ASSERT_TRUE(PollUntil(*client, [&] { return server.state.hint_count() == 2; }));
  std::lock_guard<std::mutex> lock(server.state.mu);
  EXPECT_EQ(server.state.hints[0].kind, proto::HintKind::WARM);
  EXPECT_EQ(server.state.hints[1].experts, std::vector<uint32_t>{4});
}

TEST(DaemonClient, StatusCarriesEveryField) {
  const std::string sock = testing::ScratchDir() + "/wasted.sock";
  FakeServer server(sock);
  auto client = MustConnect(sock);
  ASSERT_TRUE(client);
  auto s = client->GetStatus();
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->version, "0.1.0-fake");
  EXPECT_EQ(s->pid, 4242u);
  EXPECT_DOUBLE_EQ(s->uptime_seconds, 12.5);
  EXPECT_EQ(s->container, "/models/fake");
  EXPECT_EQ(s->arch, "kimi-linear");
  EXPECT_EQ(s->budget, 8ull << 30);
  EXPECT_EQ(s->trunk_bytes, 3ull << 30);
  EXPECT_EQ(s->cache_bytes, 4ull << 30);
  EXPECT_EQ(s->overhead_bytes, 1ull << 30);
  EXPECT_TRUE(s->trunk_wired);
  EXPECT_EQ(s->page_kind, "2 MiB huge pages");
  EXPECT_EQ(s->slots, 100u);
  EXPECT_EQ(s->slots_ready, 60u);
  EXPECT_EQ(s->slots_loading, 5u);
  EXPECT_EQ(s->slots_pinned, 7u);
  EXPECT_EQ(s->slots_failed, 1u);
  EXPECT_EQ(s->slots_used(), 66u);
  EXPECT_EQ(s->slots_free(), 34u);
  EXPECT_EQ(s->hits, 900u);
  EXPECT_EQ(s->late, 60u);
  EXPECT_EQ(s->misses, 40u);
  EXPECT_EQ(s->demands(), 1000u);
  EXPECT_EQ(s->reads, 150u);
  EXPECT_EQ(s->bytes_read, 150'000'000u);
  EXPECT_EQ(s->read_errors, 2u);
  EXPECT_EQ(s->queued, (std::vector<uint32_t>{10, 11, 12}));
  EXPECT_EQ(s->in_flight, (std::vector<uint32_t>{20, 21, 22}));
  EXPECT_EQ(s->io_depth, 16u);
  ASSERT_EQ(s->clients.size(), 1u);
  const ClientStatusInfo& c = s->clients[0];
  EXPECT_EQ(c.id, 3u);
  EXPECT_EQ(c.pid, 777u);
  EXPECT_EQ(c.uid, 1000u);
  EXPECT_EQ(c.command, "waste run /models/fake hello");
  EXPECT_DOUBLE_EQ(c.attached_seconds, 4.0);
  EXPECT_EQ(c.hits, 80u);
  EXPECT_EQ(c.late, 5u);
  EXPECT_EQ(c.misses, 15u);
  EXPECT_EQ(c.pins, 2u);

  EXPECT_TRUE(client->Stop().ok());
  std::lock_guard<std::mutex> lock(server.state.mu);
  EXPECT_TRUE(server.state.stopped);
}

// Both ways the daemon can vanish: its connection dropped, or the whole thread gone.
void ExpectLossNoticedWithinASecond(bool exit_thread) {
  const std::string sock = testing::ScratchDir() + "/wasted.sock";
  FakeServer server(sock);
  auto client = MustConnect(sock);
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->Attach("waste run").ok());
  server.state.hint_delay_ms = 10'000;
  const int experts[] = {1};
  client->SendHint(0, experts, HintKind::kDemand);  // an answer still owed
  ASSERT_TRUE(client->Poll().ok());

  if (exit_thread) {
    server.Exit();
  } else {
    server.CloseConnections();
  }
  const auto t0 = Clock::now();
  Status st;
  while (Clock::now() - t0 < std::chrono::seconds(1)) {
    st = client->Poll();
    if (!st.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_FALSE(st.ok()) << "Poll did not notice the daemon leave within 1 s";
  EXPECT_EQ(st.message().rfind("wasted went away: ", 0), 0u) << st.message();
  EXPECT_EQ(st.message().find("::"), std::string::npos) << st.message();  // no syscall noise
  EXPECT_FALSE(client->connected());
  // Everything after reports the same.
  EXPECT_EQ(client->Poll().message(), st.message());
  auto s = client->GetStatus();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), st.message());
  client->SendHint(0, experts, HintKind::kDemand);  // dropped quietly
}

TEST(DaemonClient, PollFailsSoonAfterTheConnectionCloses) {
  ExpectLossNoticedWithinASecond(false);
}

TEST(DaemonClient, PollFailsSoonAfterTheDaemonExits) {
  ExpectLossNoticedWithinASecond(true);
}

TEST(DaemonClient, NothingListeningIsReportedAsSuch) {
  const std::string dir = testing::ScratchDir();
  ConnectFailure why = ConnectFailure::kNone;
  auto c = DaemonClient::Connect(dir + "/absent.sock", &why);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(why, ConnectFailure::kNotListening);
  EXPECT_NE(c.status().message().find(dir + "/absent.sock"), std::string::npos);

  // A socket file with no one listening (a daemon that died): ECONNREFUSED.
  const int fd = Listen(dir + "/stale.sock", /*listen=*/false);
  c = DaemonClient::Connect(dir + "/stale.sock", &why);
  ::close(fd);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(why, ConnectFailure::kNotListening);
  EXPECT_NE(c.status().message().find(dir + "/stale.sock"), std::string::npos);
}

TEST(DaemonClient, DefaultSocketFollowsXdgRuntimeDir) {
  const char* old = std::getenv("XDG_RUNTIME_DIR");
  const std::string saved = old ? old : "";
  ::setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
  EXPECT_EQ(DefaultDaemonSocket(), "/run/user/1000/wasted.sock");
  ::setenv("XDG_RUNTIME_DIR", "", 1);
  EXPECT_EQ(DefaultDaemonSocket(), "/run/wasted/wasted.sock");
  ::unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(DefaultDaemonSocket(), "/run/wasted/wasted.sock");
  if (old) ::setenv("XDG_RUNTIME_DIR", saved.c_str(), 1);
}

TEST(DaemonClient, AnotherUsersSocketIsAPermissionFailure) {
  // The socket is 0600 and root's; a process of another uid is refused by the
  // kernel. Root itself passes any mode, so the check runs in a child that
  // drops to nobody (only root can), with no other thread in this process.
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to become another user";
  const std::string dir = testing::ScratchDir();
  ::chmod(dir.c_str(), 0755);
  const std::string sock = dir + "/wasted.sock";
  const int fd = Listen(sock);
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    ConnectFailure why = ConnectFailure::kNone;
    auto c = DaemonClient::Connect(sock, &why);
    const bool named = !c.ok() &&
                       c.status().message().find("Permission denied") != std::string::npos &&
                       c.status().message().find(sock) != std::string::npos;
    ::_exit(why == ConnectFailure::kPermissionDenied && named ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  ::close(fd);
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 3) GTEST_SKIP() << "cannot become nobody";
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "status " << wstatus;
}

// ---- wastectl, run as a user runs it, against the fake ----

struct Outcome {
  int code;
  std::string out;
};

// Runs `wastectl ARGS`; stdout only, or stdout and stderr together.
Outcome Wastectl(const std::string& args, bool with_stderr = false) {
  const std::string cmd =
      testing::Bin("wastectl") + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = ::popen(cmd.c_str(), "r");
  Outcome r{-1, ""};
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(Wastectl, StatusAsJsonAndText) {
  const std::string sock = testing::ScratchDir() + "/wasted.sock";
  FakeServer server(sock);
  Outcome r = Wastectl("status --json --socket " + sock);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["socket"], sock);
  EXPECT_EQ(j["version"], "0.1.0-fake");
  EXPECT_EQ(j["pid"], 4242);
  EXPECT_EQ(j["container"], "/models/fake");
  EXPECT_EQ(j["budget"]["total"], 8ull << 30);
  EXPECT_EQ(j["budget"]["overhead"], 1ull << 30);
  EXPECT_EQ(j["trunk_wired"], true);
  EXPECT_EQ(j["page_kind"], "2 MiB huge pages");
  EXPECT_EQ(j["slots"]["used"], 66);
  EXPECT_EQ(j["slots"]["pinned"], 7);
  EXPECT_EQ(j["slots"]["free"], 34);
  EXPECT_DOUBLE_EQ(j["hit_rate"].get<double>(), 0.9);  // late is not a hit
  EXPECT_EQ(j["late"], 60);
  EXPECT_EQ(j["misses"], 40);
  EXPECT_DOUBLE_EQ(j["late_rate"].get<double>(), 0.06);
  EXPECT_EQ(j["bytes_read"], 150000000);
  EXPECT_EQ(j["queued"]["lookahead"], 11);
  EXPECT_EQ(j["in_flight"]["warm"], 22);
  EXPECT_EQ(j["io_depth"], 16);
  ASSERT_EQ(j["clients"].size(), 1u);
  EXPECT_EQ(j["clients"][0]["command"], "waste run /models/fake hello");
  EXPECT_EQ(j["clients"][0]["uid"], 1000);

  EXPECT_EQ(j["clients"][0]["tokens"], 12);
  EXPECT_DOUBLE_EQ(j["clients"][0]["hit_rate"].get<double>(), 0.8);
  EXPECT_EQ(j["clients"][0]["late"], 5);
  EXPECT_DOUBLE_EQ(j["clients"][0]["late_rate"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(j["read_bytes_per_second"].get<double>(), 3e8);
  EXPECT_DOUBLE_EQ(j["lookahead"]["precision"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["lookahead"]["recall"].get<double>(), 0.5);
  ASSERT_EQ(j["layers"].size(), 2u);
  EXPECT_EQ(j["layers"][0]["layer"], 1);
  EXPECT_EQ(j["layers"][0]["resident"], nlohmann::json({0, 1, 9}));
  EXPECT_DOUBLE_EQ(j["layers"][0]["hit_rate"].get<double>(), 0.9);
  EXPECT_EQ(j["layers"][0]["late"], 30);
  EXPECT_EQ(j["layers"][1]["late"], 0);
  EXPECT_EQ(j["layers"][0]["hottest"][0]["expert"], 9);
  EXPECT_EQ(j["layers"][0]["hottest"][0]["uses"], 300);
  EXPECT_EQ(j["layers"][0]["hottest"][1]["resident"], false);
  EXPECT_EQ(j["layers"][1]["resident"], nlohmann::json::array());

  r = Wastectl("status --socket " + sock);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const std::string& want : std::vector<std::string>{
       "model      kimi-linear: 2 layers with 16 experts, records of 3.00 MiB",
        "container  /models/fake", "pid 4242",
        "8.00 GiB: trunk 3.00 GiB + cache 4.00 GiB + overhead 1.00 GiB",
        "wired (mlock); pages: 2 MiB huge pages", "66 used (60 ready, 5 loading, 1 failed)",
        "7 pinned, 34 free", "90.0% (900 hits, 60 late, 40 misses of demand hints)",
        "late       6.0% of demands (asked for ahead, still queued or being read)\n",
        "150 records, 143.05 MiB, 286.10 MiB/s while reading, 2 errors",
        "queued     demand 10, lookahead 11, warm 12",
        "in flight  demand 20, lookahead 21, warm 22 (io depth 16)",
        "lookahead  precision 75.0%, recall 50.0%; 40 reads, 30 used\n"
        "           0 B read and evicted unused, 0 reads dropped as stale (layer passed)\n",
        "socket     " + sock.substr(0, 66)}) {
    EXPECT_TRUE(Has(r.out, want)) << want << " in\n" << r.out;
  }
  // The client's row and the layers' rows, columns as printed.
  // The command is cut to fit 80 columns here; `clients` shows it whole.
  // (the hit rate is left out here to leave room for the command).
  EXPECT_TRUE(Has(r.out, "   3  777  1000     4.0 s      12    80     5      15     2  waste run /model...\n")) << r.out;
  EXPECT_TRUE(Has(r.out, "      1   3/16   450    30      20  90.0%  9*:300 4:120 0*:90\n")) << r.out;
  EXPECT_TRUE(Has(r.out, "      2   0/16   450     0      50  90.0%  \n")) << r.out;
  size_t at = 0;
  for (size_t nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1)
    EXPECT_LE(nl - at, 80u) << "wider than 80 columns: " << r.out.substr(at, nl - at);

  // clients: the same client, whole, in both forms.
  r = Wastectl("clients --socket " + sock);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "id  pid   uid  attached  tokens  hits  late  misses   hit%  pins  command")) << r.out;
  EXPECT_TRUE(Has(r.out, "777  1000     4.0 s      12    80     5      15  80.0%     2  waste run /models/fake hello")) << r.out;
  r = Wastectl("clients --json --socket " + sock);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto cj = nlohmann::json::parse(r.out);
  ASSERT_EQ(cj.size(), 1u);
  EXPECT_EQ(cj[0]["pid"], 777);
  EXPECT_EQ(cj[0]["tokens"], 12);
  EXPECT_EQ(cj[0]["pins"], 2);
  EXPECT_EQ(cj[0]["command_from_proc"], false);  // the fake does not say it read /proc

  // metrics: the Prometheus text, and the same samples as JSON.
  r = Wastectl("metrics --socket " + sock);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* want :
       {"# TYPE waste_demand_hits_total counter\nwaste_demand_hits_total 900\n",
        "# HELP waste_demand_misses_total ", "waste_demand_misses_total 40\n",
        "# TYPE waste_demand_late_total counter\nwaste_demand_late_total 60\n",
        "waste_layer_demand_late_total{layer=\"1\"} 30\n",
        "waste_client_demand_late_total{client=\"3\",pid=\"777\"} 5\n",
        "waste_budget_bytes{part=\"trunk\"} 3221225472\n", "waste_trunk_wired 1\n",
        "waste_cache_slots{state=\"free\"} 34\n", "waste_cache_slots_pinned 7\n",
        "waste_reads_in_flight{priority=\"lookahead\"} 21\n",
        "waste_reads_queued{priority=\"warm\"} 12\n", "waste_read_bytes_total 150000000\n",
        "waste_read_busy_seconds_total 0.5\n", "waste_layer_demand_hits_total{layer=\"2\"} 450\n",
        "waste_layer_slots_ready{layer=\"1\"} 3\n",
        "waste_client_tokens_total{client=\"3\",pid=\"777\"} 12\n",
        "waste_client_pins{client=\"3\",pid=\"777\"} 2\n", "waste_clients 1\n",
        "waste_info{version=\"0.1.0-fake\",arch=\"kimi-linear\",container=\"/models/fake\""}) {
    EXPECT_TRUE(Has(r.out, want)) << want << " in\n" << r.out;
  }
  // Every line is a comment or `name{labels} value`; every family has HELP and TYPE.
  at = 0;
  for (size_t nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1) {
    const std::string line = r.out.substr(at, nl - at);
    if (line.rfind("# HELP waste_", 0) == 0 || line.rfind("# TYPE waste_", 0) == 0) continue;
    EXPECT_EQ(line.rfind("waste_", 0), 0u) << line;
    const std::string value = line.substr(line.rfind(' ') + 1);
    EXPECT_EQ(value.find_first_not_of("0123456789.e+-"), std::string::npos) << line;
  }
  r = Wastectl("metrics --json --socket " + sock);
  ASSERT_EQ(r.code, 0) << r.out;
  bool found = false;
  for (const auto& f : nlohmann::json::parse(r.out)) {
    if (f["name"] != "waste_demand_hits_total") continue;
    found = true;
    EXPECT_EQ(f["type"], "counter");
    EXPECT_EQ(f["samples"][0]["value"], 900);
  }
  EXPECT_TRUE(found) << r.out;
}

TEST(Wastectl, StopAndExitCodes) {
  const std::string dir = testing::ScratchDir();
  const std::string sock = dir + "/wasted.sock";
  FakeServer server(sock);
  Outcome r = Wastectl("stop --socket " + sock, true);
  EXPECT_EQ(r.code, 0) << r.out;
  {
    std::lock_guard<std::mutex> lock(server.state.mu);
    EXPECT_TRUE(server.state.stopped);
    server.state.status_refusal = "the cache is on fire";
  }
  r = Wastectl("status --socket " + sock, true);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out, "wastectl: the cache is on fire\n");
  {
    std::lock_guard<std::mutex> lock(server.state.mu);
    server.state.status_refusal =
        "uid 65534 may not use this wasted (it allows root, its own uid 0 and the uids or group "
        "in its settings)";
  }
  r = Wastectl("status --json --socket " + sock, true);
  EXPECT_EQ(r.code, 4) << r.out;
  r = Wastectl("status --socket " + dir + "/absent.sock", true);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_TRUE(Has(r.out, dir + "/absent.sock")) << r.out;
  r = Wastectl("stop --socket " + dir + "/absent.sock", true);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_EQ(Wastectl("status --frobnicate", true).code, 2);
  EXPECT_EQ(Wastectl("status --watch --json --socket " + sock, true).code, 2);
  for (const char* cmd : {"clients --json", "metrics", "warm --json", "drop --layer 1",
                          "status --watch"}) {
    r = Wastectl(std::string(cmd) + " --socket " + dir + "/absent.sock", true);
    EXPECT_EQ(r.code, 3) << cmd << ": " << r.out;
    EXPECT_TRUE(Has(r.out, "wastectl: ") && Has(r.out, dir + "/absent.sock")) << cmd << ": " << r.out;
  }
  EXPECT_EQ(Wastectl("", true).code, 2);
  r = Wastectl("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(Has(r.out, "4  refused for permissions")) << r.out;
}

}  // namespace
}  // namespace waste
