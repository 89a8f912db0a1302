// Fuzz target: waste serve's HTTP server (http/server.h), the real
// server on a real loopback socket, with small limits and short timeouts.
// The input is the bytes of one connection, sent in pieces cut at each 0xff
// byte (so that a request arrives across reads), followed by a request
// that closes the connection. The handler answers by path: /stream streams
// two chunks and ends, /big writes past the queue bound (so the server
// closes the connection as a client that does not read), anything else is
// answered with its body. The connection must end (answered, or
// refused, or timed out) well within the deadline, and a fresh connection
// must then be answered; ASan and LSan watch the rest.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "http/server.h"

namespace {

using namespace std::chrono_literals;
using waste::http::HttpOptions;
using waste::http::HttpServer;
using waste::http::Request;
using waste::http::Responder;

void Check(bool ok) {
  if (!ok) std::abort();
}

HttpServer& Server() {
  static const std::unique_ptr<HttpServer> server = [] {
    HttpOptions o;
    o.port = 0;
    o.max_connections = 256;  // connections of earlier inputs may still be closing
    o.max_header_bytes = 1024;
    o.max_body_bytes = 4096;
    o.header_timeout = o.body_timeout = 20ms;  // a request the input leaves unfinished
    o.max_queued_bytes = 1024;
    auto s = HttpServer::Start(o, [](Request r, std::shared_ptr<Responder> responder) {
      if (r.path == "/stream") {
        responder->StartStream(200, "text/event-stream");
        responder->Write("data: " + r.query + "\n\n");
        responder->Write(r.body);
        responder->End();
      } else if (r.path == "/big") {
        responder->StartStream(200, "text/event-stream");
        for (int i = 0; i < 3; ++i) responder->Write(std::string(2048, 'x') + r.body);
      } else {
        responder->Send(200, r.Header("content-type").value_or("text/plain"), r.body,
                        {{std::string(r.Header("x-name").value_or("X-Echo")), r.target}});
      }
    });
    Check(s.ok());
    return std::move(*s);
  }();
  return *server;
}

// Sends `bytes` on a new connection (in pieces cut at 0xff if `split`) and
// reads until the server closes it: what was read. Aborts past the deadline
// (a connection the server never ends).
std::string Exchange(std::string_view bytes, bool split) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  Check(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(Server().port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Check(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  while (!bytes.empty()) {
    const size_t cut = split ? bytes.find('\xff') : std::string_view::npos;
    std::string_view piece = bytes.substr(0, cut);
    bytes.remove_prefix(cut == std::string_view::npos ? bytes.size() : cut + 1);
    while (!piece.empty()) {
      const ssize_t n = send(fd, piece.data(), piece.size(), MSG_NOSIGNAL);
      if (n <= 0) break;  // the server has closed: it may have answered already
      piece.remove_prefix(static_cast<size_t>(n));
    }
  }
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    Check(left.count() > 0);
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  // A reset, not a FIN: the server closed first, and would otherwise keep
  // each connection in TIME_WAIT until the ephemeral ports ran out.
  const linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  close(fd);
  return got;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  Exchange(input + "GET /end HTTP/1.1\r\nConnection: close\r\n\r\n", true);
  const std::string after = Exchange("GET /after HTTP/1.1\r\nConnection: close\r\n\r\n", false);
  Check(after.rfind("HTTP/1.1 ", 0) == 0);
  return 0;
}
