// MetricsHttp: wasted's optional metrics page (--metrics-listen), a minimal
// HTTP/1.0 server on a loopback TCP address, turned by the daemon's libuv
// loop. GET /metrics (or /) answers 200 with the Prometheus text that
// `wastectl metrics` prints; any other path 404, any other method 405; the
// connection closes after each answer. A request is read up to its blank
// line, at most 8 KiB (longer ones get 431). Loopback only: the page names
// the container and the clients' pids, and it has no authentication.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <set>
#include <string>

#include "base/status.h"

namespace waste::daemon {

class MetricsHttp {
 public:
  // Binds and listens on `address`: "127.0.0.1:PORT", "localhost:PORT" or
  // "[::1]:PORT" (any 127.x.y.z too); PORT 0 lets the kernel choose. Refuses
  // a malformed or non-loopback address, naming it.
  static Result<std::unique_ptr<MetricsHttp>> Bind(const std::string& address);
  ~MetricsHttp();

  // Serves on `loop`; `page` makes each answer's body, on the loop thread.
  Status Start(uv_loop_t* loop, std::function<std::string()> page);
  // Closes the listener and every open connection; the loop finishes them.
  void Close();

  // "127.0.0.1:9464", with the port the kernel chose for port 0.
  const std::string& address() const { return address_; }

 private:
  struct Connection;
  MetricsHttp() = default;
  void Accept();
  void Answer(Connection* c);
  void Drop(Connection* c);

  int fd_ = -1;  // the bound socket until Start hands it to libuv
  std::string address_;
  uv_tcp_t server_{};
  bool started_ = false, closed_ = false;
  std::function<std::string()> page_;
  std::set<Connection*> open_;
};

}  // namespace waste::daemon
