#include "protocol/client.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
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

}  // namespace

std::string DefaultDaemonSocket() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  return runtime && *runtime ? std::string(runtime) + "/wasted.sock" : kSystemDaemonSocket;
}

std::string ClientDaemonSocket() {
  const std::string own = DefaultDaemonSocket();
  struct stat st {};
  if (own == kSystemDaemonSocket || (lstat(own.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)))
    return own;
  if (lstat(kSystemDaemonSocket, &st) == 0 && S_ISSOCK(st.st_mode)) return kSystemDaemonSocket;
  return own;
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

// kj's ErrorHandler has no virtual destructor; Impl is final and never deleted through it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-virtual-dtor"
struct DaemonClient::Impl final : public kj::TaskSet::ErrorHandler {
  Impl() : io(kj::setupAsyncIo()), tasks(*this) {}

  // Hint answers are handled where they are sent; this sees only the unexpected.
  void taskFailed(kj::Exception&& e) override { Note(e); }

  // Sorts a failure: a lost connection is remembered (and is what every later
  // call reports); anything else is an error of this call alone.
  Status Note(const kj::Exception& e) {
    if (e.getType() == kj::Exception::Type::DISCONNECTED) {
      SetLost(Describe(e));
      return Lost();
    }
    return Status::Error(Describe(e));
  }
  // Remembers the first reason the connection ended.
  void SetLost(std::string why) {
    if (lost) return;
    if (why.size() > 1 && why.back() == '.') why.pop_back();  // "Peer disconnected."
    lost = std::move(why);
  }
  Status Lost() const { return Status::Error("wasted went away: " + *lost); }

  // Runs everything that is ready, never blocking.
  void Turn() {
    try {
      io.waitScope.poll();
    } catch (const kj::Exception& e) {
      Note(e);
    }
  }

  // Destroyed in reverse: everything kj goes before the event loop (io).
  kj::AsyncIoContext io;
  kj::Own<kj::AsyncCapabilityStream> stream;
  kj::Own<capnp::TwoPartyClient> rpc;
  proto::Daemon::Client daemon = nullptr;
  kj::Maybe<proto::Session::Client> session;
  kj::TaskSet tasks;
  kj::Promise<void> watch = nullptr;  // notices the connection's end
  std::optional<std::string> lost;    // why the connection ended, once it has
  std::string last_refusal;
};
#pragma GCC diagnostic pop

DaemonClient::DaemonClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DaemonClient::~DaemonClient() {
  // Lets a write still waiting on a full socket go out; the daemon ends the
  // session when it sees the connection close.
  if (impl_ && !impl_->lost) impl_->Turn();
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

  try {
    auto impl = std::make_unique<Impl>();
    impl->stream = impl->io.lowLevelProvider->wrapUnixSocketFd(kj::mv(fd));
    impl->rpc = kj::heap<capnp::TwoPartyClient>(*impl->stream, kMaxFdsPerMessage);
    impl->daemon = impl->rpc->bootstrap().castAs<proto::Daemon>();
    Impl* raw = impl.get();
    impl->watch = impl->rpc->onDisconnect()
                      .then([raw]() { raw->SetLost("the connection closed"); },
                            [raw](kj::Exception&& e) { raw->SetLost(Describe(e)); })
                      .eagerlyEvaluate(nullptr);
    why = ConnectFailure::kNone;
    return std::unique_ptr<DaemonClient>(new DaemonClient(std::move(impl)));
  } catch (const kj::Exception& e) {
    return Status::Error(prefix + Describe(e));
  }
}

Result<Attachment> DaemonClient::Attach(const std::string& command_line, uint32_t version) {
  Impl& s = *impl_;
  if (s.lost) return s.Lost();
  try {
    auto req = s.daemon.attachRequest();
    auto info = req.initClient();
    info.setPid(static_cast<uint32_t>(::getpid()));
    info.setCommand(command_line);
    req.setVersion(version);
    auto answer = req.send().wait(s.io.waitScope);

    Attachment a;
    a.model = ModelFromProto(answer.getModel());

    const auto segs = answer.getSegments();
    struct Part {
      const char* name;
      proto::Segment::Client cap;
      uint64_t bytes;
      SegmentFd* out;
    };
    Part parts[] = {{"trunk", segs.getTrunk(), segs.getTrunkBytes(), &a.trunk},
                    {"cache", segs.getCache(), segs.getCacheBytes(), &a.cache},
                    {"table", segs.getTable(), segs.getTableBytes(), &a.table},
                    {"pins", segs.getPins(), segs.getPinBytes(), &a.pins}};
    for (Part& p : parts) {
      const std::string what = std::string("attach: the ") + p.name + " segment";
      kj::Maybe<int> received = p.cap.getFd().wait(s.io.waitScope);
      int* fd = nullptr;
      KJ_IF_MAYBE (f, received) {
        fd = f;
      }
      if (fd == nullptr) {
        // A TwoPartyVatNetwork with maxFdsPerMessage 0 drops fds from what it sends.
        return Status::Error(what +
                             " came without a file descriptor (the daemon sent none: is fd "
                             "passing on at its end?)");
      }
      // The received fd belongs to the capability, which goes with `answer`.
      p.out->fd = ::fcntl(*fd, F_DUPFD_CLOEXEC, 0);
      if (p.out->fd < 0) return Status::Error(what + ": dup: " + std::strerror(errno));
      p.out->bytes = p.bytes;
      struct stat st;
      if (::fstat(p.out->fd, &st) != 0) return Status::Error(what + ": " + std::strerror(errno));
      if (static_cast<uint64_t>(st.st_size) < p.bytes) {
        return Status::Error(what + " has " + std::to_string(st.st_size) +
                             " bytes where the daemon said " + std::to_string(p.bytes));
      }
    }
    s.session = answer.getSession();
    return a;
  } catch (const kj::Exception& e) {
    return s.Note(e);
  }
}

void DaemonClient::SendHint(int layer, std::span<const int> experts, HintKind kind) {
  Impl& s = *impl_;
  if (s.lost) return;
  proto::Session::Client* session = nullptr;
  KJ_IF_MAYBE (c, s.session) {
    session = c;
  }
  if (session == nullptr) {
    s.last_refusal = "hint for layer " + std::to_string(layer) + " before attach: dropped";
    return;
  }
  if (layer < 0) {
    s.last_refusal = "hint: layer " + std::to_string(layer) + " is negative";
    return;
  }
  size_t valid = 0;
  for (int e : experts) valid += e >= 0;
  try {
    auto req = session->hintRequest();
    req.setLayer(static_cast<uint32_t>(layer));
    req.setKind(ToProto(kind));
    auto list = req.initExperts(static_cast<unsigned>(valid));
    unsigned i = 0;
    for (int e : experts) {
      if (e >= 0) {
        list.set(i++, static_cast<uint32_t>(e));
      } else {
        s.last_refusal = "hint for layer " + std::to_string(layer) + ": expert " +
                         std::to_string(e) + " is negative";
      }
    }
    Impl* raw = &s;
    s.tasks.add(req.send().ignoreResult().catch_([raw](kj::Exception&& e) {
      if (e.getType() == kj::Exception::Type::DISCONNECTED) {
        raw->Note(e);
      } else {
        raw->last_refusal = Describe(e);
      }
    }));
  } catch (const kj::Exception& e) {
    s.Note(e);
    return;
  }
  // One non-blocking turn writes the request now rather than at the next call.
  s.Turn();
}

void DaemonClient::SendProgress(uint64_t tokens) {
  Impl& s = *impl_;
  if (s.lost) return;
  KJ_IF_MAYBE (session, s.session) {
    try {
      auto req = session->progressRequest();
      req.setTokens(tokens);
      Impl* raw = &s;
      s.tasks.add(req.send().ignoreResult().catch_([raw](kj::Exception&& e) {
        if (e.getType() == kj::Exception::Type::DISCONNECTED) raw->Note(e);
      }));
    } catch (const kj::Exception& e) {
      s.Note(e);
      return;
    }
    s.Turn();
  }
}

Status DaemonClient::Poll() {
  Impl& s = *impl_;
  if (!s.lost) s.Turn();
  return s.lost ? s.Lost() : Status::Ok();
}

Result<DaemonStatus> DaemonClient::GetStatus() {
  Impl& s = *impl_;
  if (s.lost) return s.Lost();
  try {
    auto req = s.daemon.statusRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    auto answer = req.send().wait(s.io.waitScope);
    return StatusFromProto(answer.getStatus());
  } catch (const kj::Exception& e) {
    return s.Note(e);
  }
}

Status DaemonClient::Stop() {
  Impl& s = *impl_;
  if (s.lost) return s.Lost();
  try {
    auto req = s.daemon.stopRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    req.send().wait(s.io.waitScope);
    return Status::Ok();
  } catch (const kj::Exception& e) {
    const Status status = s.Note(e);
    // A daemon that closes the connection on its way out has done what was asked.
    return e.getType() == kj::Exception::Type::DISCONNECTED ? Status::Ok() : status;
  }
}

Result<uint32_t> DaemonClient::Warm() {
  Impl& s = *impl_;
  if (s.lost) return s.Lost();
  try {
    auto req = s.daemon.warmRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    return req.send().wait(s.io.waitScope).getQueued();
  } catch (const kj::Exception& e) {
    return s.Note(e);
  }
}

Result<uint32_t> DaemonClient::Drop(int layer) {
  Impl& s = *impl_;
  if (s.lost) return s.Lost();
  try {
    auto req = s.daemon.dropRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    req.setLayer(layer);
    return req.send().wait(s.io.waitScope).getDropped();
  } catch (const kj::Exception& e) {
    return s.Note(e);
  }
}

Result<ReloadOutcome> DaemonClient::Reload() {
  Impl& s = *impl_;
  if (s.lost) return s.Lost();
  try {
    auto req = s.daemon.reloadRequest();
    req.setVersion(proto::PROTOCOL_VERSION);
    return ReloadFromProto(req.send().wait(s.io.waitScope));
  } catch (const kj::Exception& e) {
    return s.Note(e);
  }
}

bool DaemonClient::connected() const {
  return !impl_->lost;
}

const std::string& DaemonClient::last_refusal() const {
  return impl_->last_refusal;
}

}  // namespace waste
