#include "link/daemon_client.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <utility>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/debug.h>
#include <kj/io.h>

namespace waste {
namespace {

// Enough for an attach answer (four segments) with room to grow; the daemon
// sends nothing else with fds.
constexpr unsigned kMaxFdsPerMessage = 8;

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// The message of a kj exception without kj's decoration: the RPC layer's
// "remote exception: ", a leading "file:line: " if one slipped in, and the
// call of a failed system call ("::recvmsg(fd, &msg, 0): Connection reset by
// peer" says "Connection reset by peer").
std::string Describe(const kj::Exception& e) {
  std::string_view d = e.getDescription().cStr();
  for (bool again = true; again;) {
    again = false;
    if (StartsWith(d, "::")) {
      const size_t close = d.find("): ");
      if (close != std::string_view::npos) {
        d.remove_prefix(close + 3);
        again = true;
      }
    }
    if (StartsWith(d, "remote exception: ")) {
      d.remove_prefix(18);
      again = true;
    }
    // "some/file.c++:123: " (a file name, a colon, digits, a colon, a space).
    const size_t colon = d.find(':');
    if (colon != std::string_view::npos && colon > 0 && d.substr(0, colon).find(' ') == d.npos) {
      size_t i = colon + 1;
      while (i < d.size() && d[i] >= '0' && d[i] <= '9') ++i;
      if (i > colon + 1 && d.substr(i, 2) == ": ") {
        d.remove_prefix(i + 2);
        again = true;
      }
    }
  }
  return d.empty() ? std::string("unknown error") : std::string(d);
}

proto::HintKind ToProto(HintKind kind) {
  switch (kind) {
    case HintKind::kDemand:
      return proto::HintKind::DEMAND;
    case HintKind::kLookahead:
      return proto::HintKind::LOOKAHEAD;
    case HintKind::kWarm:
      return proto::HintKind::WARM;
  }
  return proto::HintKind::WARM;
}

void CloseFd(SegmentFd& s) {
  if (s.fd >= 0) ::close(s.fd);
  s.fd = -1;
}

// A prompt state being published: the caller's descriptor, sent with the call.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"
class StateBlob final : public proto::Segment::Server {
 public:
  StateBlob(int fd, uint64_t bytes) : fd_(fd), bytes_(bytes) {}
  kj::Maybe<int> getFd() override { return fd_; }
  kj::Promise<void> size(SizeContext ctx) override {
    ctx.getResults().setBytes(bytes_);
    return kj::READY_NOW;
  }

 private:
  int fd_;
  uint64_t bytes_;
};
#pragma GCC diagnostic pop

}  // namespace

// ---- FoundState ----

FoundState::FoundState(FoundState&& other) noexcept {
  *this = std::move(other);
}

FoundState& FoundState::operator=(FoundState&& other) noexcept {
  if (this != &other) {
    if (fd >= 0) ::close(fd);
    matched = std::exchange(other.matched, 0);
    fd = std::exchange(other.fd, -1);
    offset = std::exchange(other.offset, 0);
    bytes = std::exchange(other.bytes, 0);
  }
  return *this;
}

FoundState::~FoundState() {
  if (fd >= 0) ::close(fd);
}

Result<std::vector<uint8_t>> FoundState::Read() const {
  if (fd < 0) return Status::Error("no prompt state was found");
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < offset ||
      static_cast<uint64_t>(st.st_size) - offset < bytes)
    return Status::Error("the prompt state's file is shorter than the daemon said");
  std::vector<uint8_t> out(bytes);
  for (uint64_t done = 0; done < bytes;) {
    const ssize_t n = ::pread(fd, out.data() + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Error(std::string("reading the prompt state: ") +
                                     (n < 0 ? std::strerror(errno) : "end of file"));
    done += static_cast<uint64_t>(n);
  }
  return out;
}

// ---- Attachment ----

Attachment::Attachment(Attachment&& other) noexcept {
  *this = std::move(other);
}

Attachment& Attachment::operator=(Attachment&& other) noexcept {
  if (this != &other) {
    Close();
    model = std::move(other.model);
    trunk = std::exchange(other.trunk, {});
    cache = std::exchange(other.cache, {});
    table = std::exchange(other.table, {});
    pins = std::exchange(other.pins, {});
  }
  return *this;
}

Attachment::~Attachment() {
  Close();
}

void Attachment::Close() {
  CloseFd(trunk);
  CloseFd(cache);
  CloseFd(table);
  CloseFd(pins);
}

// ---- DaemonClient ----

// What the link thread owns: the event loop and everything made on it, which
// must be used and destroyed on that thread alone.
struct LinkLoop {
  LinkLoop(kj::AsyncIoContext& io_, kj::AutoCloseFd fd, kj::TaskSet::ErrorHandler& errors)
      : io(io_),
        stream(io.lowLevelProvider->wrapUnixSocketFd(kj::mv(fd))),
        rpc(kj::heap<capnp::TwoPartyClient>(*stream, kMaxFdsPerMessage)),
        daemon(rpc->bootstrap().castAs<proto::Daemon>()),
        tasks(errors) {}

  kj::AsyncIoContext& io;
  // Destroyed in reverse: the calls in flight, then the capabilities, then
  // the connection.
  kj::Own<kj::AsyncCapabilityStream> stream;
  kj::Own<capnp::TwoPartyClient> rpc;
  proto::Daemon::Client daemon;
  kj::Maybe<proto::Session::Client> session;
  kj::Promise<void> watch = nullptr;  // notices the connection's end
  kj::TaskSet tasks;                  // hints and progress awaiting their answers
};

// kj's ErrorHandler has no virtual destructor; Impl is final and never deleted through it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"
struct DaemonClient::Impl final : public kj::TaskSet::ErrorHandler {
  // Work for the link thread, run there in the order posted: a hint, a
  // progress report or a call. Given nullptr when the loop is gone.
  using Job = std::function<void(LinkLoop*)>;

  // Hint answers are handled where they are sent; this sees only the unexpected.
  void taskFailed(kj::Exception&& e) override { Note(e); }

  // Sorts a failure (link thread): a lost connection is remembered (and is
  // what every later call reports); anything else is an error of this call alone.
  Status Note(const kj::Exception& e) {
    if (e.getType() == kj::Exception::Type::DISCONNECTED) {
      SetLost(Describe(e));
      return Lost();
    }
    return Status::Error(Describe(e));
  }
  // Remembers the first reason the connection ended.
  void SetLost(std::string why) {
    // kj's values of a failed call ("Broken pipe; iovTotal = 136") say nothing to a user.
    const size_t values = why.find("; ");
    if (values != std::string::npos && why.find(" = ", values) != std::string::npos)
      why.resize(values);
    if (why.size() > 1 && why.back() == '.') why.pop_back();  // "Peer disconnected."
    std::lock_guard<std::mutex> lock(mu);
    if (lost.load(std::memory_order_relaxed)) return;
    lost_reason = std::move(why);
    lost.store(true, std::memory_order_release);
  }
  Status Lost() const {
    std::lock_guard<std::mutex> lock(mu);
    return Status::Error("wasted went away: " + lost_reason);
  }
  void Refuse(std::string why) {
    std::lock_guard<std::mutex> lock(mu);
    last_refusal = std::move(why);
  }

  // Any thread: queues `job` for the link thread and wakes it if it sleeps;
  // runs it here with nullptr once the link thread has stopped.
  void Post(Job job) {
    kj::Own<kj::CrossThreadPromiseFulfiller<void>> woken;
    bool gone;
    {
      std::lock_guard<std::mutex> lock(mu);
      gone = stopped;
      if (!gone) {
        outbox.push_back(std::move(job));
        woken = kj::mv(wake);
      }
    }
    if (gone) job(nullptr);
    if (woken) woken->fulfill();
  }

  // Any thread but the link thread: runs `call(loop)` on the link thread
  // after everything posted before it, and blocks until the promise it
  // returns is resolved. `call` returns a promise of R (a Status or a Result).
  template <typename R, typename F>
  R Call(F call) {
    if (lost.load(std::memory_order_acquire)) return Lost();
    auto done = std::make_shared<std::promise<R>>();
    std::future<R> answer = done->get_future();
    Post([this, done, &call](LinkLoop* l) {
      if (l == nullptr) {
        done->set_value(Lost());
        return;
      }
      l->tasks.add(kj::evalNow([&] { return call(*l); })
                       .then([done](R r) { done->set_value(std::move(r)); },
                             [this, done](kj::Exception&& e) { done->set_value(Note(e)); }));
    });
    return answer.get();
  }

  // The link thread's body: connects the RPC system over `fd`, reports
  // (through `started`) that calls may come, then runs what is posted until
  // the destructor asks it to finish.
  void Run(kj::AutoCloseFd fd, std::promise<std::string>& started) {
    bool signaled = false;  // after that, `started` belongs to a returned Connect
    try {
      kj::AsyncIoContext io = kj::setupAsyncIo();
      LinkLoop l(io, kj::mv(fd), *this);
      l.watch = l.rpc->onDisconnect()
                    .then([this]() { SetLost("the connection closed"); },
                          [this](kj::Exception&& e) { SetLost(Describe(e)); })
                    .eagerlyEvaluate(nullptr);
      started.set_value("");
      signaled = true;
      for (bool finish = false; !finish;) {
        auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
        bool sleep;
        {
          std::lock_guard<std::mutex> lock(mu);
          finish = closing;
          sleep = outbox.empty() && !closing;
          if (sleep) wake = kj::mv(paf.fulfiller);
        }
        // Runs the loop (answers, the watch, calls under way) until woken.
        if (sleep) paf.promise.wait(io.waitScope);
        Drain(l);
      }
      // Lets a write still waiting on a full socket go out; the daemon ends
      // the session when it sees the connection close.
      io.waitScope.poll();
      Stopped();
    } catch (const kj::Exception& e) {
      if (!signaled) started.set_value(Describe(e));
      SetLost(Describe(e));
      Stopped();
    }
  }

  // Link thread: runs everything posted so far, in order.
  void Drain(LinkLoop& l) {
    std::vector<Job> batch;
    {
      std::lock_guard<std::mutex> lock(mu);
      batch.swap(outbox);
    }
    for (Job& job : batch) job(&l);
  }

  // Link thread, leaving: from now on Post runs its job at once, and what
  // is still queued learns that the loop is gone.
  void Stopped() {
    std::vector<Job> left;
    {
      std::lock_guard<std::mutex> lock(mu);
      stopped = true;
      left.swap(outbox);
      wake = nullptr;  // made on this loop: dropped before it goes
    }
    for (Job& job : left) job(nullptr);
  }

  // Link thread: sends a hint or a progress report on the session; its
  // answer comes back later (a refusal is kept, a loss is noted).
  void Send(LinkLoop& l, int layer, const std::vector<uint32_t>& experts, HintKind kind) {
    proto::Session::Client* session = nullptr;
    KJ_IF_MAYBE (c, l.session) {
      session = c;
    }
    if (session == nullptr || lost.load(std::memory_order_acquire)) return;
    try {
      auto req = session->hintRequest();
      req.setLayer(static_cast<uint32_t>(layer));
      req.setKind(ToProto(kind));
      auto list = req.initExperts(static_cast<unsigned>(experts.size()));
      for (unsigned i = 0; i < experts.size(); ++i) list.set(i, experts[i]);
      l.tasks.add(req.send().ignoreResult().catch_([this](kj::Exception&& e) {
        if (e.getType() == kj::Exception::Type::DISCONNECTED) {
          Note(e);
        } else {
          Refuse(Describe(e));
        }
      }));
    } catch (const kj::Exception& e) {
      Note(e);
    }
  }
  void SendProgress(LinkLoop& l, uint64_t tokens) {
    proto::Session::Client* session = nullptr;
    KJ_IF_MAYBE (c, l.session) {
      session = c;
    }
    if (session == nullptr || lost.load(std::memory_order_acquire)) return;
    try {
      auto req = session->progressRequest();
      req.setTokens(tokens);
      l.tasks.add(req.send().ignoreResult().catch_([this](kj::Exception&& e) {
        if (e.getType() == kj::Exception::Type::DISCONNECTED) Note(e);
      }));
    } catch (const kj::Exception& e) {
      Note(e);
    }
  }

  // Shared by the link thread and the callers; guarded by mu unless atomic.
  mutable std::mutex mu;
  std::vector<Job> outbox;                              // posted, not yet run
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> wake;  // set while the link thread sleeps
  bool closing = false;                                 // the destructor is waiting
  bool stopped = false;                                 // the link thread has left its loop
  std::atomic<bool> lost{false};                        // the connection has ended
  std::string lost_reason;                              // why; set once, before `lost`
  std::atomic<bool> attached{false};                    // a session exists
  std::string last_refusal;
  std::thread thread;
};
#pragma GCC diagnostic pop

DaemonClient::DaemonClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DaemonClient::~DaemonClient() {
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> woken;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->closing = true;
    woken = kj::mv(impl_->wake);
  }
  if (woken) woken->fulfill();
  woken = nullptr;
  impl_->thread.join();
}

Result<std::unique_ptr<DaemonClient>> DaemonClient::Connect(const std::string& path,
                                                            ConnectFailure* failure) {
  ConnectFailure ignored;
  ConnectFailure& why = failure ? *failure : ignored;
  why = ConnectFailure::kOther;
  const std::string prefix = "cannot connect to " + path + ": ";

  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Status::Error(prefix + "a socket path must have 1 to " +
                         std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  kj::AutoCloseFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return Status::Error(prefix + std::strerror(errno));
  // A Unix socket connects at once (or fails), so blocking here costs nothing.
  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EISCONN) {
    const int err = errno;
    std::string message = prefix + std::strerror(err);
    if (err == ENOENT || err == ECONNREFUSED) {
      why = ConnectFailure::kNotListening;
      message += " (no wasted is listening there)";
    } else if (err == EACCES || err == EPERM) {
      why = ConnectFailure::kPermissionDenied;
      message += " (the socket is 0600; are you the daemon's user?)";
    }
    return Status::Error(std::move(message));
  }

  auto impl = std::make_unique<Impl>();
  // Shared: the link thread may still be inside set_value when Connect returns.
  auto started = std::make_shared<std::promise<std::string>>();
  std::future<std::string> started_future = started->get_future();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw, started, socket = fd.release()] {
    raw->Run(kj::AutoCloseFd(socket), *started);
  });
  const std::string err = started_future.get();
  if (!err.empty()) {
    impl->thread.join();
    return Status::Error(prefix + err);
  }
  why = ConnectFailure::kNone;
  return std::unique_ptr<DaemonClient>(new DaemonClient(std::move(impl)));
}

Result<Attachment> DaemonClient::Attach(const std::string& command_line, uint32_t version) {
  Impl& s = *impl_;
  return s.Call<Result<Attachment>>([&](LinkLoop& l) {
    auto req = l.daemon.attachRequest();
    auto info = req.initClient();
    info.setPid(static_cast<uint32_t>(::getpid()));
    info.setCommand(command_line);
    req.setVersion(version);
    return req.send().then([&s, &l](capnp::Response<proto::Daemon::AttachResults>&& answer) {
      const auto segs = answer.getSegments();
      auto fds = kj::heapArrayBuilder<kj::Promise<kj::Maybe<int>>>(4);
      fds.add(segs.getTrunk().getFd());
      fds.add(segs.getCache().getFd());
      fds.add(segs.getTable().getFd());
      fds.add(segs.getPins().getFd());
      return kj::joinPromises(fds.finish())
          .then([&s, &l, answer = kj::mv(answer)](
                    kj::Array<kj::Maybe<int>> received) mutable -> Result<Attachment> {
            Attachment a;
            a.model = ModelFromProto(answer.getModel());

            const auto sizes = answer.getSegments();
            struct Part {
              const char* name;
              uint64_t bytes;
              SegmentFd* out;
            };
            const Part parts[] = {{"trunk", sizes.getTrunkBytes(), &a.trunk},
                                  {"cache", sizes.getCacheBytes(), &a.cache},
                                  {"table", sizes.getTableBytes(), &a.table},
                                  {"pins", sizes.getPinBytes(), &a.pins}};
            for (size_t i = 0; i < 4; ++i) {
              const Part& p = parts[i];
              const std::string what = std::string("attach: the ") + p.name + " segment";
              int* fd = nullptr;
              KJ_IF_MAYBE (f, received[i]) {
                fd = f;
              }
              if (fd == nullptr) {
                // A TwoPartyVatNetwork with maxFdsPerMessage 0 drops fds from what it sends.
                return Status::Error(what +
                                     " came without a file descriptor (the daemon sent none: is "
                                     "fd passing on at its end?)");
              }
              // The received fd belongs to the capability, which goes with `answer`.
              p.out->fd = ::fcntl(*fd, F_DUPFD_CLOEXEC, 0);
              if (p.out->fd < 0) return Status::Error(what + ": dup: " + std::strerror(errno));
              p.out->bytes = p.bytes;
              struct stat st;
              if (::fstat(p.out->fd, &st) != 0)
                return Status::Error(what + ": " + std::strerror(errno));
              if (static_cast<uint64_t>(st.st_size) < p.bytes) {
                return Status::Error(what + " has " + std::to_string(st.st_size) +
                                     " bytes where the daemon said " + std::to_string(p.bytes));
              }
            }
            l.session = answer.getSession();
            s.attached.store(true, std::memory_order_release);
            return a;
          });
    });
  });
}

void DaemonClient::SendHint(int layer, std::span<const int> experts, HintKind kind) {
  Impl& s = *impl_;
  if (s.lost.load(std::memory_order_acquire)) return;
  if (!s.attached.load(std::memory_order_acquire)) {
    s.Refuse("hint for layer " + std::to_string(layer) + " before attach: dropped");
    return;
  }
  if (layer < 0) {
    s.Refuse("hint: layer " + std::to_string(layer) + " is negative");
    return;
  }
  std::vector<uint32_t> list;
  list.reserve(experts.size());
  for (int e : experts) {
    if (e >= 0) {
      list.push_back(static_cast<uint32_t>(e));
    } else {
      s.Refuse("hint for layer " + std::to_string(layer) + ": expert " + std::to_string(e) +
               " is negative");
    }
  }
  s.Post([&s, layer, kind, list = std::move(list)](LinkLoop* l) {
    if (l) s.Send(*l, layer, list, kind);
  });
}

void DaemonClient::SendProgress(uint64_t tokens) {
  Impl& s = *impl_;
  if (s.lost.load(std::memory_order_acquire) || !s.attached.load(std::memory_order_acquire))
    return;
  s.Post([&s, tokens](LinkLoop* l) {
    if (l) s.SendProgress(*l, tokens);
  });
}

Status DaemonClient::Poll() const {
  return impl_->lost.load(std::memory_order_acquire) ? impl_->Lost() : Status::Ok();
}

Result<DaemonStatus> DaemonClient::GetStatus() {
  return impl_->Call<Result<DaemonStatus>>([](LinkLoop& l) {
    auto req = l.daemon.statusRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    return req.send().then([](capnp::Response<proto::Daemon::StatusResults>&& answer) {
      return Result<DaemonStatus>(StatusFromProto(answer.getStatus()));
    });
  });
}

Status DaemonClient::Stop() {
  Impl& s = *impl_;
  return s.Call<Status>([&s](LinkLoop& l) {
    auto req = l.daemon.stopRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    return req.send().then([](capnp::Response<proto::Daemon::StopResults>&&) { return Status::Ok(); },
                           [&s](kj::Exception&& e) {
      const Status status = s.Note(e);
      // A daemon that closes the connection on its way out has done what was asked.
      return e.getType() == kj::Exception::Type::DISCONNECTED ? Status::Ok() : status;
    });
  });
}

Result<uint32_t> DaemonClient::Warm() {
  return impl_->Call<Result<uint32_t>>([](LinkLoop& l) {
    auto req = l.daemon.warmRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    return req.send().then([](capnp::Response<proto::Daemon::WarmResults>&& answer) {
      return Result<uint32_t>(answer.getQueued());
    });
  });
}

Result<uint32_t> DaemonClient::Drop(int layer) {
  return impl_->Call<Result<uint32_t>>([layer](LinkLoop& l) {
    auto req = l.daemon.dropRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    req.setLayer(layer);
    return req.send().then([](capnp::Response<proto::Daemon::DropResults>&& answer) {
      return Result<uint32_t>(answer.getDropped());
    });
  });
}

Result<ReloadOutcome> DaemonClient::Reload() {
  return impl_->Call<Result<ReloadOutcome>>([](LinkLoop& l) {
    auto req = l.daemon.reloadRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    return req.send().then([](capnp::Response<proto::Daemon::ReloadResults>&& r) {
      return Result<ReloadOutcome>(ReloadFromProto(r));
    });
  });
}

Status DaemonClient::PublishState(std::span<const int32_t> tokens, uint64_t fingerprint, int fd,
                                  uint64_t bytes) {
  return impl_->Call<Status>([&](LinkLoop& l) {
    auto req = l.daemon.publishStateRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    auto list = req.initTokens(static_cast<unsigned>(tokens.size()));
    for (unsigned i = 0; i < tokens.size(); ++i) list.set(i, tokens[i]);
    req.setFingerprint(fingerprint);
    req.setState(kj::heap<StateBlob>(fd, bytes));
    req.setBytes(bytes);
    return req.send().then(
        [](capnp::Response<proto::Daemon::PublishStateResults>&&) { return Status::Ok(); });
  });
}

Result<FoundState> DaemonClient::FindState(std::span<const int32_t> tokens, uint64_t fingerprint) {
  return impl_->Call<Result<FoundState>>([&](LinkLoop& l) {
    auto req = l.daemon.findStateRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    auto list = req.initTokens(static_cast<unsigned>(tokens.size()));
    for (unsigned i = 0; i < tokens.size(); ++i) list.set(i, tokens[i]);
    req.setFingerprint(fingerprint);
    const size_t asked = tokens.size();
    return req.send().then([asked](capnp::Response<proto::Daemon::FindStateResults>&& answer)
                               -> kj::Promise<Result<FoundState>> {
      if (answer.getMatched() == 0) return Result<FoundState>(FoundState());
      if (answer.getMatched() > asked)
        return Result<FoundState>(Status::Error("findState: the daemon matched more tokens than asked"));
      auto fd = answer.getState().getFd();
      return fd.then([answer = kj::mv(answer)](kj::Maybe<int> got) mutable -> Result<FoundState> {
        int* f = nullptr;
        KJ_IF_MAYBE (x, got) {
          f = x;
        }
        if (f == nullptr) return Status::Error("findState: the state came without a file descriptor");
        FoundState found;
        // The received descriptor belongs to the capability, which goes with `answer`.
        found.fd = ::fcntl(*f, F_DUPFD_CLOEXEC, 0);
        if (found.fd < 0) return Status::Error(std::string("findState: dup: ") + std::strerror(errno));
        found.matched = answer.getMatched();
        found.offset = answer.getOffset();
        found.bytes = answer.getBytes();
        return found;
      });
    });
  });
}

Result<StatesList> DaemonClient::ListStates() {
  return impl_->Call<Result<StatesList>>([](LinkLoop& l) {
    auto req = l.daemon.listStatesRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    return req.send().then([](capnp::Response<proto::Daemon::ListStatesResults>&& r) {
      StatesList out;
      out.budget = r.getBudget();
      out.memory_budget = r.getMemoryBudget();
      for (auto s : r.getStates()) out.states.push_back(PromptStateFromProto(s));
      return Result<StatesList>(std::move(out));
    });
  });
}

Result<uint32_t> DaemonClient::DropStates() {
  return impl_->Call<Result<uint32_t>>([](LinkLoop& l) {
    auto req = l.daemon.dropStatesRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    return req.send().then([](capnp::Response<proto::Daemon::DropStatesResults>&& r) {
      return Result<uint32_t>(r.getDropped());
    });
  });
}

bool DaemonClient::connected() const {
  return !impl_->lost.load(std::memory_order_acquire);
}

std::string DaemonClient::last_refusal() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->last_refusal;
}

}  // namespace waste
