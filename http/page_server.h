// PageServer: one page served over HTTP/1.0 on a loopback TCP address, on
// a libuv loop its owner turns (wasted's metrics page, --metrics-listen, on
// the daemon's loop, where the status it shows is gathered). GET of the
// page's path (or /) answers 200 with the page; any other path 404, any
// other method 405; the connection closes after each answer. A request is
// read up to its blank line, at most 8 KiB (longer ones get 431). Loopback
// only: the page may name what only local users should see (the metrics
// name the container and the clients' pids).
//
// A peer that misbehaves cannot keep the page from the others:
// - at most kMaxConnections are open at once; a new one past that closes
//   the oldest (an honest scraper sends its request the moment it connects
//   and is answered at once, so the oldest is the one holding a place);
// - a connection still open `timeout` seconds after it was accepted is
//   closed, whatever it is doing (sending nothing, a header that never
//   ends, not reading the answer).
// And only the uids the owner allows may read it. A TCP socket carries no
// uid of its peer, but on loopback the peer's socket is this machine's: its
// owner is in /proc/net/tcp (tcp6), on the line whose local address is the
// peer's end and whose remote address is ours, which is how identd answers
// the same question (LoopbackPeerUid). A peer whose uid is refused, or
// cannot be found (it has gone), is answered 403 with the reason.
//
// HttpServer (server.h) is the other server of this library: HTTP/1.1 on a
// thread of its own, for an API.
#pragma once

#include <uv.h>

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/status.h"

namespace waste::http {

// The uid owning the other end of `fd`, a TCP connection accepted on a
// loopback address, from /proc/net/tcp or /proc/net/tcp6; an error when no
// such socket is listed (the peer has closed it, or it is not on loopback).
Result<uid_t> LoopbackPeerUid(int fd);

struct PageOptions {
  std::string name;          // what the page holds, in logs and answers: "metrics"
  std::string path;          // where it is served (and at "/"): "/metrics"
  std::string content_type;  // of the page
};

class PageServer {
 public:
  static constexpr size_t kMaxConnections = 64;

  // Binds and listens on `address`: "127.0.0.1:PORT", "localhost:PORT" or
  // "[::1]:PORT" (any 127.x.y.z too); PORT 0 lets the kernel choose. Refuses
  // a malformed or non-loopback address, saying why (the caller names it).
  static Result<std::unique_ptr<PageServer>> Bind(const std::string& address, PageOptions options);
  ~PageServer();

  // Serves on `loop`; `page` makes each answer's body and `refusal` says
  // why a peer's uid may not have it ("" when it may), both on the loop
  // thread. A connection is closed `timeout_seconds` after it was accepted.
  Status Start(uv_loop_t* loop, std::function<std::string()> page,
               std::function<std::string(uid_t)> refusal, double timeout_seconds);
  // Closes the listener and every open connection; the loop finishes them.
  void Close();

  // "127.0.0.1:9464", with the port the kernel chose for port 0.
  const std::string& address() const { return address_; }

 private:
  struct Connection;
  explicit PageServer(PageOptions options) : options_(std::move(options)) {}
  void Accept();
  void Answer(Connection* c);
  void Drop(Connection* c);

  const PageOptions options_;
  int fd_ = -1;  // the bound socket until Start hands it to libuv
  std::string address_;
  uv_tcp_t server_{};
  bool started_ = false, closed_ = false;
  std::function<std::string()> page_;
  std::function<std::string(uid_t)> refusal_;
  uint64_t timeout_ms_ = 0;
  uint64_t accepted_ = 0;                 // connections so far: the key of the next
  std::map<uint64_t, Connection*> open_;  // by when accepted, oldest first
  bool full_logged_ = false;              // since open_ was last below the cap
};

}  // namespace waste::http
