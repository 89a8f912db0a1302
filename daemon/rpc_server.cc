#include "daemon/rpc_server.h"

// Cap'n Proto's generated Server classes and KJ's ErrorHandler are
// interfaces with non-virtual destructors by design (owned through kj::Own).
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <mutex>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <kj/io.h>
#include <spdlog/spdlog.h>

#include "shm/table.h"
#include "wasted.capnp.h"

namespace waste::daemon {
namespace {

// Incoming messages are small (hints, status requests); anything larger is
// refused by the reader before it is decoded.
constexpr uint64_t kMaxMessageWords = 1 << 20;  // 8 MiB

[[noreturn]] void Refuse(const std::string& why) {
  throw kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str(why.c_str()));
}

std::string Who(const ucred& cred) {
  return "pid " + std::to_string(cred.pid) + " uid " + std::to_string(cred.uid);
}

// A shared-memory segment; its descriptor travels with the capability.
class SegmentServer final : public proto::Segment::Server {
 public:
  SegmentServer(int fd, uint64_t bytes, std::shared_ptr<void> keep = nullptr)
      : fd_(fd), bytes_(bytes), keep_(std::move(keep)) {}
  kj::Maybe<int> getFd() override { return fd_; }
  kj::Promise<void> size(SizeContext ctx) override {
    ctx.getResults().setBytes(bytes_);
    return kj::READY_NOW;
  }

 private:
  int fd_;
  uint64_t bytes_;
  std::shared_ptr<void> keep_;  // what owns fd_, when it is not the daemon
};

}  // namespace

std::string ProcessCommandLine(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string raw(4096, '\0');
  f.read(raw.data(), static_cast<std::streamsize>(raw.size()));
  raw.resize(static_cast<size_t>(f.gcount()));
  while (!raw.empty() && raw.back() == '\0') raw.pop_back();
  for (char& ch : raw)
    if (ch == '\0') ch = ' ';
  return PrintableCommand(raw);
}

std::string PrintableCommand(std::string text) {
  // A terminal escape in someone's argv must not reach the terminal of
  // whoever runs wastectl.
  for (char& ch : text)
    if ((ch >= 0 && ch < 0x20) || ch == 0x7f) ch = '?';
  return text;
}

void RaiseDescriptorLimit(uint32_t max_clients) {
  const uint64_t need = 2ull * max_clients + kSpareConnections + 256;
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= need) return;
  r.rlim_cur = std::min<rlim_t>(need, r.rlim_max);
  setrlimit(RLIMIT_NOFILE, &r);
  getrlimit(RLIMIT_NOFILE, &r);
  if (r.rlim_cur < need)
    spdlog::warn("{} open files allowed (the hard limit), where max-clients {} needs {}: about {} "
                 "clients can attach (raise LimitNOFILE, or lower max-clients)",
                 static_cast<uint64_t>(r.rlim_cur), max_clients, need,
                 (static_cast<uint64_t>(r.rlim_cur) > kSpareConnections + 256
                      ? (static_cast<uint64_t>(r.rlim_cur) - kSpareConnections - 256) / 2
                      : 0));
}

bool AccessPolicy::Allows(uid_t uid) const {
  if (uid == 0 || uid == geteuid()) return true;
  for (uid_t u : uids)
    if (u == uid) return true;
  if (group == static_cast<gid_t>(-1)) return false;
  // Membership by primary or supplementary group of the peer's account.
  passwd pw{}, *found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || !found) return false;
  if (pw.pw_gid == group) return true;
  int n = 64;
  std::vector<gid_t> groups(n);
  if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) {
    groups.resize(n);
    if (getgrouplist(pw.pw_name, pw.pw_gid, groups.data(), &n) < 0) return false;
  }
  for (int i = 0; i < n; ++i)
    if (groups[i] == group) return true;
  return false;
}

struct RpcServer::Impl {
  Impl(const ServedModel& m, const AccessPolicy& a, uint32_t max, LoopApi* l, int fd,
       PromptStates* st)
      : model(m), access(a), max_clients(max), loop(l), listen_fd(fd), states(st) {}
  const ServedModel& model;
  std::mutex access_mu;  // a reload replaces `access` from the loop thread
  AccessPolicy access;
  const uint32_t max_clients;
  // Sessions not yet ended, and whether the refusal at the cap was logged
  // since the count was last below it (one line per episode, not one per
  // refused attach). RPC thread only.
  uint32_t sessions = 0;
  bool full_logged = false;
  LoopApi* loop;
  int listen_fd;
  PromptStates* states;  // null: none kept
  std::atomic<uint32_t> next_id{1};
  const kj::Executor* executor = nullptr;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> stop;

  void CheckPeer(const ucred& cred, bool* logged) {
    AccessPolicy now;
    {
      std::lock_guard<std::mutex> lock(access_mu);
      now = access;
    }
    if (now.Allows(cred.uid)) return;
    const std::string why = "uid " + std::to_string(cred.uid) +
                            " may not use this wasted (it allows root, its own uid " +
                            std::to_string(geteuid()) + " and the uids or group in its settings)";
    if (!*logged) spdlog::warn("refused {}: {}", Who(cred), why);
    *logged = true;
    Refuse(why);
  }
  static void CheckVersion(uint32_t version) {
    if (version != proto::PROTOCOL_VERSION)
      Refuse("protocol version " + std::to_string(version) +
             " is not supported: this wasted speaks protocol version " +
             std::to_string(proto::PROTOCOL_VERSION));
  }
};

namespace {

class SessionServer final : public proto::Session::Server {
 public:
  SessionServer(RpcServer::Impl* s, uint32_t id, ucred cred) : s_(s), id_(id), cred_(cred) {
    ++s_->sessions;
  }
  ~SessionServer() { End(); }

  kj::Promise<void> hint(HintContext ctx) override {
    if (ended_) Refuse("this session has detached");
    auto p = ctx.getParams();
    const ServedModel& m = s_->model;
    const uint32_t layer = p.getLayer();
    const auto kind = static_cast<uint16_t>(p.getKind());
    std::string bad;
    if (kind > static_cast<uint16_t>(proto::HintKind::WARM)) {
      bad = "unknown hint kind " + std::to_string(kind);
    } else if (layer >= m.layers || !m.has_bank[layer]) {
      bad = "layer " + std::to_string(layer) + " has no experts (the model has " +
            std::to_string(m.layers) + " layers)";
    }
    std::vector<uint32_t> experts;
    if (bad.empty()) {
      auto list = p.getExperts();
      experts.reserve(list.size());
      for (uint32_t e : list) {
        if (e < m.experts) {
          experts.push_back(e);
        } else if (bad.empty()) {
          bad = "expert " + std::to_string(e) + " of layer " + std::to_string(layer) +
                " does not exist (the model has " + std::to_string(m.experts) + " experts)";
        }
      }
      if (!experts.empty())
        s_->loop->Hint(id_, static_cast<int>(layer), std::move(experts),
                       static_cast<HintKind>(kind));
    }
    if (!bad.empty()) {
      if (!refusal_logged_) spdlog::warn("client {} ({}): refused a hint: {}", id_, Who(cred_), bad);
      refusal_logged_ = true;
      Refuse(bad);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> progress(ProgressContext ctx) override {
    if (ended_) Refuse("this session has detached");
    s_->loop->Progress(id_, ctx.getParams().getTokens());
    return kj::READY_NOW;
  }

  kj::Promise<void> detach(DetachContext) override {
    End();
    return kj::READY_NOW;
  }

 private:
  void End() {
    if (ended_) return;
    ended_ = true;
    --s_->sessions;
    s_->full_logged = false;
    s_->loop->RemoveClient(id_);
  }
  RpcServer::Impl* s_;
  uint32_t id_;
  ucred cred_;
  bool ended_ = false;
  bool refusal_logged_ = false;
};

class DaemonServer final : public proto::Daemon::Server {
 public:
  DaemonServer(RpcServer::Impl* s, ucred cred) : s_(s), cred_(cred) {}

  kj::Promise<void> attach(AttachContext ctx) override {
    s_->CheckPeer(cred_, &refusal_logged_);
    auto p = ctx.getParams();
    RpcServer::Impl::CheckVersion(p.getVersion());
    const ServedModel& m = s_->model;
    if (s_->sessions >= s_->max_clients) {
      const std::string why = "wasted serves at most " + std::to_string(s_->max_clients) +
                              " clients at once (its max-clients setting) and has " +
                              std::to_string(s_->sessions) +
                              ": try again when one detaches, or raise max-clients";
      if (!s_->full_logged) spdlog::warn("refused an attach from {}: {}", Who(cred_), why);
      s_->full_logged = true;
      Refuse(why);
    }

    ClientRecord rec;
    rec.id = s_->next_id++;
    rec.pid = cred_.pid;
    rec.uid = cred_.uid;
    // The kernel's word on who the peer is, not the client's; what the
    // client says is kept only when /proc will not tell (hidepid, a race).
    rec.command = ProcessCommandLine(cred_.pid);
    rec.command_from_proc = !rec.command.empty();
    if (rec.command.empty())
      rec.command = PrintableCommand(std::string(p.getClient().getCommand().cStr()).substr(0, 4096));
    // The pin page: writable by the client, read-only here, and sealed so
    // the client cannot shrink it under the daemon's mapping.
    auto seg = shm::Segment::Create("wasted-pins", sizeof(shm::PinPage), false);
    if (!seg.ok()) Refuse("cannot create a pin page: " + seg.status().message());
    if (Status st = seg->SealSize(); !st.ok()) Refuse(st.message());
    auto map = shm::Mapping::Map(seg->fd(), seg->size(), false, true);
    if (!map.ok()) Refuse("cannot map a pin page: " + map.status().message());
    rec.pins = std::make_shared<ClientRecord::PinPage>(
        ClientRecord::PinPage{std::move(*seg), std::move(*map)});
    const int pin_fd = rec.pins->segment.fd();
    const uint64_t pin_bytes = rec.pins->segment.size();
    auto keep = rec.pins;
    const uint32_t id = rec.id;
    spdlog::info("client {} attached: {} {}", id, Who(cred_), rec.command);
    s_->loop->AddClient(std::move(rec));

    auto r = ctx.getResults();
    r.setSession(kj::heap<SessionServer>(s_, id, cred_));
    ModelToProto(m, r.initModel());
    auto g = r.initSegments();
    g.setTrunk(kj::heap<SegmentServer>(m.trunk_fd, m.trunk_bytes));
    g.setCache(kj::heap<SegmentServer>(m.cache_fd, m.cache_bytes));
    g.setTable(kj::heap<SegmentServer>(m.table_fd, m.table_bytes));
    g.setPins(kj::heap<SegmentServer>(pin_fd, pin_bytes, std::move(keep)));
    g.setTrunkBytes(m.trunk_bytes);
    g.setCacheBytes(m.cache_bytes);
    g.setTableBytes(m.table_bytes);
    g.setPinBytes(pin_bytes);
    return kj::READY_NOW;
  }

  kj::Promise<void> status(StatusContext ctx) override {
    s_->CheckPeer(cred_, &refusal_logged_);
    RpcServer::Impl::CheckVersion(ctx.getParams().getVersion());
    // kj::Own, not the value: GCC 12 warns falsely on a std::vector inside kj::Maybe.
    using Snap = kj::Own<DaemonStatus>;
    auto paf = kj::newPromiseAndCrossThreadFulfiller<Snap>();
    auto f = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<Snap>>>(
        kj::mv(paf.fulfiller));
    s_->loop->GetStatus([f](DaemonStatus snap) {
      (*f)->fulfill(kj::heap<DaemonStatus>(std::move(snap)));
    });
    return paf.promise.then([ctx](Snap snap) mutable {
      StatusToProto(*snap, ctx.getResults().initStatus());
    });
  }

  kj::Promise<void> warm(WarmContext ctx) override {
    s_->CheckPeer(cred_, &refusal_logged_);
    RpcServer::Impl::CheckVersion(ctx.getParams().getVersion());
    return Ask([this](auto reply) { s_->loop->Warm(std::move(reply)); })
        .then([ctx](uint32_t n) mutable { ctx.getResults().setQueued(n); });
  }

  kj::Promise<void> drop(DropContext ctx) override {
    s_->CheckPeer(cred_, &refusal_logged_);
    auto p = ctx.getParams();
    RpcServer::Impl::CheckVersion(p.getVersion());
    const int layer = p.getLayer();
    if (layer < -1 || layer >= static_cast<int>(s_->model.layers))
      Refuse("layer " + std::to_string(layer) + " does not exist (the model has " +
             std::to_string(s_->model.layers) + " layers; -1 means all)");
    return Ask([this, layer](auto reply) { s_->loop->Drop(layer, std::move(reply)); })
        .then([ctx](uint32_t n) mutable { ctx.getResults().setDropped(n); });
  }

  kj::Promise<void> reload(ReloadContext ctx) override {
    s_->CheckPeer(cred_, &refusal_logged_);
    RpcServer::Impl::CheckVersion(ctx.getParams().getVersion());
    using Outcome = kj::Own<Result<ReloadOutcome>>;
    auto paf = kj::newPromiseAndCrossThreadFulfiller<Outcome>();
    auto f = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<Outcome>>>(
        kj::mv(paf.fulfiller));
    s_->loop->Reload("reload asked for by " + Who(cred_), [f](Result<ReloadOutcome> r) {
      (*f)->fulfill(kj::heap<Result<ReloadOutcome>>(std::move(r)));
    });
    return paf.promise.then([ctx](Outcome r) mutable {
      if (!r->ok()) Refuse(r->status().message());
      ReloadToProto(**r, ctx.getResults());
    });
  }

  // Prompt states: called on this thread; a publish is answered once it is
  // queued, its copy and write are PromptStates' worker's.
  // A state in memory is handed out as its sealed memfd, one on disk as its
  // file opened read-only: either way no client can change another's.
  kj::Promise<void> publishState(PublishStateContext ctx) override {
    s_->CheckPeer(cred_, &refusal_logged_);
    auto p = ctx.getParams();
    RpcServer::Impl::CheckVersion(p.getVersion());
    if (!s_->states)
      Refuse("this wasted keeps no prompt states (it has no state-dir, or states-budget and "
             "states-memory are 0)");
    std::vector<int32_t> tokens = Tokens(p.getTokens());
    proto::Segment::Client state = p.getState();
    auto fd = state.getFd();
    return fd.then([this, state = kj::mv(state), tokens = std::move(tokens),
                    fingerprint = p.getFingerprint(), bytes = p.getBytes()](kj::Maybe<int> got) {
      int* f = nullptr;
      KJ_IF_MAYBE (x, got) {
        f = x;
      }
      if (f == nullptr) Refuse("the prompt state came without a file descriptor");
      if (Status st = s_->states->Publish(cred_.uid, fingerprint, tokens, *f, bytes); !st.ok())
        Refuse(st.message());
    });
  }

  kj::Promise<void> findState(FindStateContext ctx) override {
    s_->CheckPeer(cred_, &refusal_logged_);
    auto p = ctx.getParams();
    RpcServer::Impl::CheckVersion(p.getVersion());
    if (!s_->states) return kj::READY_NOW;  // matched 0
    const std::vector<int32_t> tokens = Tokens(p.getTokens());
    const PromptStates::Found found = s_->states->Find(cred_.uid, p.getFingerprint(), tokens);
    if (found.fd < 0) return kj::READY_NOW;
    auto r = ctx.getResults();
    r.setMatched(found.matched);
    r.setOffset(found.offset);
    r.setBytes(found.bytes);
    // The file's descriptor lives as long as the capability the client holds.
    r.setState(kj::heap<SegmentServer>(found.fd, found.offset + found.bytes,
                                       std::make_shared<kj::AutoCloseFd>(found.fd)));
    return kj::READY_NOW;
  }

  kj::Promise<void> listStates(ListStatesContext ctx) override {
    s_->CheckPeer(cred_, &refusal_logged_);
    RpcServer::Impl::CheckVersion(ctx.getParams().getVersion());
    if (!s_->states) return kj::READY_NOW;
    const std::vector<PromptStateInfo> list = s_->states->List(cred_.uid);
    auto r = ctx.getResults();
    r.setBudget(s_->states->budget());
    r.setMemoryBudget(s_->states->memory_budget());
    auto out = r.initStates(static_cast<unsigned>(list.size()));
    for (unsigned i = 0; i < list.size(); ++i) PromptStateToProto(list[i], out[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> dropStates(DropStatesContext ctx) override {
    s_->CheckPeer(cred_, &refusal_logged_);
    RpcServer::Impl::CheckVersion(ctx.getParams().getVersion());
    ctx.getResults().setDropped(s_->states ? s_->states->Drop(cred_.uid) : 0);
    return kj::READY_NOW;
  }

  kj::Promise<void> stop(StopContext ctx) override {
    s_->CheckPeer(cred_, &refusal_logged_);
    RpcServer::Impl::CheckVersion(ctx.getParams().getVersion());
    s_->loop->RequestStop("asked to stop by " + Who(cred_));
    return kj::READY_NOW;
  }

 private:
  // Runs `ask` (which hands a reply callback to the loop) and resolves with
  // the count the loop replies on its own thread.
  template <typename F>
  static kj::Promise<uint32_t> Ask(F ask) {
    auto paf = kj::newPromiseAndCrossThreadFulfiller<uint32_t>();
    auto f = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<uint32_t>>>(
        kj::mv(paf.fulfiller));
    ask(std::function<void(uint32_t)>([f](uint32_t n) { (*f)->fulfill(kj::mv(n)); }));
    return kj::mv(paf.promise);
  }

  // A state's tokens, refused past kMaxStateTokens before they are copied.
  static std::vector<int32_t> Tokens(capnp::List<int32_t>::Reader list) {
    if (list.size() == 0 || list.size() > kMaxStateTokens)
      Refuse("a prompt state is filed under 1 to " + std::to_string(kMaxStateTokens) +
             " tokens, not " + std::to_string(list.size()));
    std::vector<int32_t> out;
    out.reserve(list.size());
    for (int32_t t : list) out.push_back(t);
    return out;
  }

  RpcServer::Impl* s_;
  ucred cred_;
  bool refusal_logged_ = false;
};

// One client connection: the stream, the two-party network over it and the
// RPC system; destroyed in reverse order when the peer goes away. Clients
// have no reason to send descriptors, but with a limit of 0 the network
// would not send any either, so the limit is 1 (and extra ones are closed).
struct Connection {
  Connection(kj::Own<kj::AsyncCapabilityStream> s, capnp::Capability::Client bootstrap)
      : stream(kj::mv(s)),
        network(*stream, /*maxFdsPerMessage=*/1, capnp::rpc::twoparty::Side::SERVER,
                Options()),
        rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
  static capnp::ReaderOptions Options() {
    capnp::ReaderOptions o;
    o.traversalLimitInWords = kMaxMessageWords;
    o.nestingLimit = 16;
    return o;
  }
  kj::Own<kj::AsyncCapabilityStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

class Acceptor final : public kj::TaskSet::ErrorHandler {
 public:
  Acceptor(RpcServer::Impl* s, kj::AsyncIoContext& io)
      : s_(s),
        io_(io),
        observer_(io.unixEventPort, s->listen_fd, kj::UnixEventPort::FdObserver::OBSERVE_READ),
        tasks_(*this) {}

  kj::Promise<void> Loop() {
    return observer_.whenBecomesReadable().then([this]() {
      for (;;) {  // the observer is edge triggered: take every pending connection
        const int fd = accept4(s_->listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
          if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            spdlog::warn("accept: {}", std::strerror(errno));
          break;
        }
        Serve(fd);
      }
      return Loop();
    });
  }

  void taskFailed(kj::Exception&& e) override {
    spdlog::debug("connection ended: {}", e.getDescription().cStr());
  }

 private:
  void Serve(int fd) {
    if (open_ >= Cap()) {
      if (!refusal_logged_)
        spdlog::warn("{} connections open, the most wasted keeps (max-clients + {}): closing new "
                     "ones until one ends",
                     open_, kSpareConnections);
      refusal_logged_ = true;
      close(fd);
      return;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      spdlog::warn("SO_PEERCRED: {}; connection dropped", std::strerror(errno));
      close(fd);
      return;
    }
    auto stream = io_.lowLevelProvider->wrapUnixSocketFd(
        fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP |
                kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK |
                kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC);
    auto conn = kj::heap<Connection>(kj::mv(stream), kj::heap<DaemonServer>(s_, cred));
    auto done = conn->network.onDisconnect();
    ++open_;
    tasks_.add(done.attach(kj::mv(conn), kj::defer([this] {
      if (--open_ < Cap()) refusal_logged_ = false;
    })));
  }
  uint32_t Cap() const { return s_->max_clients + kSpareConnections; }

  RpcServer::Impl* s_;
  kj::AsyncIoContext& io_;
  kj::UnixEventPort::FdObserver observer_;
  uint32_t open_ = 0;  // connections served now
  bool refusal_logged_ = false;
  kj::TaskSet tasks_;
};

}  // namespace

Result<std::unique_ptr<RpcServer>> RpcServer::Start(int listen_fd, const ServedModel& model,
                                                    const AccessPolicy& access,
                                                    uint32_t max_clients, LoopApi* loop,
                                                    PromptStates* states) {
  std::unique_ptr<RpcServer> server(new RpcServer());
  server->impl_ = std::make_unique<Impl>(model, access, max_clients, loop, listen_fd, states);
  Impl* impl = server->impl_.get();
  std::promise<std::string> started;
  auto started_future = started.get_future();
  server->thread_ = std::thread([impl, &started] {
    bool signaled = false;  // after that, `started` belongs to a returned call
    try {
      kj::AsyncIoContext io = kj::setupAsyncIo();
      auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
      impl->stop = kj::mv(paf.fulfiller);
      Acceptor acceptor(impl, io);
      auto accepting = acceptor.Loop().eagerlyEvaluate([](kj::Exception&& e) {
        spdlog::error("accepting connections failed: {}", e.getDescription().cStr());
      });
      started.set_value("");
      signaled = true;
      paf.promise.wait(io.waitScope);
      // Leaving this scope destroys the acceptor and with it every
      // connection: clients see their connection end.
    } catch (const kj::Exception& e) {
      if (!signaled)
        started.set_value(e.getDescription().cStr());
      else
        spdlog::error("RPC thread: {}", e.getDescription().cStr());
    }
  });
  const std::string err = started_future.get();
  if (!err.empty()) {
    server->thread_.join();
    return Status::Error("starting the RPC server: " + err);
  }
  return server;
}

void RpcServer::Stop() {
  if (!thread_.joinable()) return;
  impl_->stop->fulfill();
  thread_.join();
}

void RpcServer::SetAccess(const AccessPolicy& access) {
  std::lock_guard<std::mutex> lock(impl_->access_mu);
  impl_->access = access;
}

RpcServer::~RpcServer() {
  Stop();
}

}  // namespace waste::daemon
