// Fuzz target: wasted's request handling (daemon/rpc_server.h), the real
// server on a real Unix socket, with a stand-in for the event loop that
// aborts if anything out of range gets past the server's checks. The first
// byte picks how the rest is sent:
//   raw     the bytes as they are (framing, segment tables, garbage);
//   framed  the bytes as the one segment of a well-framed Cap'n Proto
//           message, so the RPC layer decodes them (bootstrap, calls to any
//           interface and method, capability tables);
//   calls   well-formed calls with fuzzed arguments: attach with any
//           version, hints with any layer, experts and kind, status, drop
//           with any layer, reload, a detach, in any order.
// Every connection must end (or be answered) without crashing or hanging
// the server; a second connection must still be served afterwards.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include "daemon/rpc_server.h"
#include "fuzz/input.h"
#include "wasted.capnp.h"

namespace {

using namespace waste;
using namespace waste::daemon;
using waste::fuzz::Input;

constexpr uint32_t kLayers = 6, kExperts = 16;

void Check(bool ok) {
  if (!ok) std::abort();
}

// The event loop's side, checking what the server lets through.
class CheckingLoop final : public LoopApi {
 public:
  void AddClient(ClientRecord c) override { Check(c.pins && c.pins->mapping.size() >= 4096); }
  void RemoveClient(uint32_t) override {}
  void Progress(uint32_t, uint64_t) override {}
  void Hint(uint32_t, int layer, std::vector<uint32_t> experts, HintKind kind) override {
    Check(layer >= 0 && static_cast<uint32_t>(layer) < kLayers && layer != 0);  // 0 has no bank
    Check(static_cast<int>(kind) >= 0 && static_cast<int>(kind) <= 2);
    for (uint32_t e : experts) Check(e < kExperts);
  }
  void GetStatus(std::function<void(DaemonStatus)> reply) override { reply(DaemonStatus{}); }
  void RequestStop(std::string) override {}  // the fuzzer's daemon does not stop
  void Warm(std::function<void(uint32_t)> reply) override { reply(0); }
  void Drop(int layer, std::function<void(uint32_t)> reply) override {
    Check(layer >= -1 && layer < static_cast<int>(kLayers));
    reply(0);
  }
  void Reload(std::string, std::function<void(Result<ReloadOutcome>)> reply) override {
    reply(ReloadOutcome{});  // nothing to re-read here
  }
};

struct Server {
  std::string dir, path;
  int listen_fd = -1;
  ServedModel model;
  AccessPolicy access;
  CheckingLoop loop;
  std::unique_ptr<RpcServer> rpc;

  Server() {
    dir = (std::filesystem::temp_directory_path() / ("waste-rpc-fuzz-" + std::to_string(getpid())))
              .string();
    std::filesystem::create_directories(dir);
    path = dir + "/wasted.sock";
    unlink(path.c_str());
    listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    Check(bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    Check(listen(listen_fd, 64) == 0);
    model.container = dir;
    model.fingerprint = "fuzz";
    model.arch = "fuzz";
    model.layers = kLayers;
    model.experts = kExperts;
    model.top_k = 2;
    model.slots = 4;
    model.record_bytes = 4096;
    model.slot_stride = 4096;
    model.has_bank = {false, true, true, true, true, true};
    for (int* fd : {&model.trunk_fd, &model.cache_fd, &model.table_fd}) {
      *fd = memfd_create("fuzz", MFD_CLOEXEC);
      Check(*fd >= 0 && ftruncate(*fd, 4096) == 0);
    }
    model.trunk_bytes = model.cache_bytes = model.table_bytes = 4096;
    auto r = RpcServer::Start(listen_fd, model, access, /*max_clients=*/4, &loop);
    Check(r.ok());
    rpc = std::move(*r);
  }
  ~Server() {
    rpc.reset();
    close(listen_fd);
    for (int fd : {model.trunk_fd, model.cache_fd, model.table_fd}) close(fd);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  static Server& Get() {
    static Server s;
    return s;
  }
};

kj::AsyncIoContext& Io() {
  static kj::AsyncIoContext io = kj::setupAsyncIo();
  return io;
}

kj::Own<kj::AsyncIoStream> Connect() {
  auto& io = Io();
  auto addr = io.provider->getNetwork().parseAddress("unix:" + Server::Get().path).wait(io.waitScope);
  return addr->connect().wait(io.waitScope);
}

// Reads until the server closes the connection; false if it did not within 5 s.
// A reset (the server hung up on garbage) counts as closed.
bool DrainUntilClosed(kj::AsyncIoStream& s) {
  auto& io = Io();
  char buf[4096];
  try {
    for (;;) {
      // tryRead may throw at once (a reset), not only through the promise.
      auto got = s.tryRead(buf, 1, sizeof buf)
                     .then([](size_t n) { return kj::Maybe<size_t>(n); })
                     .exclusiveJoin(io.provider->getTimer().afterDelay(5 * kj::SECONDS).then(
                         []() { return kj::Maybe<size_t>(nullptr); }));
      const kj::Maybe<size_t> read = got.wait(io.waitScope);
      KJ_IF_MAYBE (n, read) {
        if (*n == 0) return true;
      } else {
        return false;
      }
    }
  } catch (const kj::Exception&) {
    return true;
  }
}

void SendBytes(kj::ArrayPtr<const kj::byte> bytes) {
  auto s = Connect();
  auto& io = Io();
  try {
    s->write(bytes.begin(), bytes.size()).wait(io.waitScope);
    s->shutdownWrite();
  } catch (const kj::Exception&) {
    return;  // the server hung up first
  }
  Check(DrainUntilClosed(*s));
}

template <typename T>
void Await(kj::Promise<T>&& p) {
  auto& io = Io();
  try {
    auto r = p.then([](auto&&) { return true; })
                 .exclusiveJoin(io.provider->getTimer().afterDelay(5 * kj::SECONDS).then(
                     []() { return false; }));
    Check(r.wait(io.waitScope));  // answered (or refused) in time
  } catch (const kj::Exception&) {
    // a refusal: what the server does with bad arguments
  }
}

void Calls(Input& in) {
  auto s = Connect();
  auto& io = Io();
  capnp::TwoPartyClient client(*s);
  auto daemon = client.bootstrap().castAs<proto::Daemon>();
  kj::Maybe<proto::Session::Client> session;
  for (int steps = 0; in.n > 0 && steps < 32; ++steps) {
    const uint8_t op = in.Byte();
    const uint32_t version = (op & 0x80) ? in.Word() : proto::PROTOCOL_VERSION;
    switch (op % 6) {
      case 0: {
        auto req = daemon.attachRequest();
        req.setVersion(version);
        std::string cmd(in.Byte(), 'x');
        req.initClient().setCommand(cmd);
        auto p = req.send();
        session = p.getSession();
        Await(kj::mv(p));
        break;
      }
      case 1: {
        KJ_IF_MAYBE (sess, session) {
          auto req = sess->hintRequest();
          req.setLayer(in.Byte() & 1 ? in.Word() : in.Byte() % (kLayers + 2));
          req.setKind(static_cast<proto::HintKind>(in.Byte() & 1 ? in.Word() & 0xffff
                                                                 : in.Byte() % 4));
          auto list = req.initExperts(in.Byte() % 40);
          for (unsigned i = 0; i < list.size(); ++i)
            list.set(i, in.Byte() & 1 ? in.Word() : in.Byte() % (kExperts + 2));
          Await(req.send());
        }
        break;
      }
      case 2: {
        auto req = daemon.statusRequest();
        req.setVersion(version);
        Await(req.send());
        break;
      }
      case 3: {
        auto req = daemon.dropRequest();
        req.setVersion(version);
        req.setLayer(static_cast<int32_t>(in.Word()));
        Await(req.send());
        break;
      }
      case 4:
        KJ_IF_MAYBE (sess, session) {
          Await(sess->detachRequest().send());
        }
        break;
      case 5: {
        auto req = daemon.reloadRequest();
        req.setVersion(version);
        Await(req.send());
        break;
      }
    }
  }
  (void)io;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server::Get();
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 3;
  ++data;
  --size;
  if (mode == 0) {
    SendBytes(kj::arrayPtr(data, size));
  } else if (mode == 1) {
    // One segment of ceil(size / 8) words: the RPC layer decodes the bytes.
    const uint32_t words = static_cast<uint32_t>((size + 7) / 8);
    std::vector<kj::byte> framed(8 + size_t{words} * 8, 0);
    const uint32_t header[2] = {0, words};
    std::memcpy(framed.data(), header, sizeof header);
    std::memcpy(framed.data() + 8, data, size);
    SendBytes(kj::arrayPtr(framed.data(), framed.size()));
  } else {
    Input in{data, size};
    try {
      Calls(in);
    } catch (const kj::Exception&) {
      // the connection failed under a call: the server hung up, which is allowed
    }
  }
  // Whatever that did, the next client is served.
  auto s = Connect();
  capnp::TwoPartyClient client(*s);
  auto req = client.bootstrap().castAs<proto::Daemon>().statusRequest();
  req.setVersion(proto::PROTOCOL_VERSION);
  Check(req.send().wait(Io().waitScope).hasStatus());
  return 0;
}
