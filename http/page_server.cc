#include "http/page_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "http/answer.h"
#include "http/listen.h"

namespace waste::http {

namespace {

constexpr size_t kMaxRequest = 8192;

std::string Response(int code, const std::string& type, const std::string& body) {
  return detail::StatusLine(code, "HTTP/1.0") + "Content-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

// The lines of /proc/net/tcp (tcp6) hold "sl local rem st queues tr
// retrnsmt uid ...", addresses as the kernel's 32-bit words in hex and the
// port in hex: "0100007F:1F90" is 127.0.0.1:8080 on a little-endian machine.
std::string ProcAddress(const sockaddr_storage& ss) {
  char buf[64];
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    uint32_t w[4];
    std::memcpy(w, &a->sin6_addr, sizeof w);
    std::snprintf(buf, sizeof buf, "%08X%08X%08X%08X:%04X", w[0], w[1], w[2], w[3],
                  ntohs(a->sin6_port));
  } else {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    std::snprintf(buf, sizeof buf, "%08X:%04X", a->sin_addr.s_addr, ntohs(a->sin_port));
  }
  return buf;
}

}  // namespace

Result<uid_t> LoopbackPeerUid(int fd) {
  sockaddr_storage ours{}, theirs{};
  socklen_t ours_len = sizeof ours, theirs_len = sizeof theirs;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ours), &ours_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &theirs_len) != 0)
    return Status::Error(std::string("the peer's address: ") + std::strerror(errno));
  const std::string local = ProcAddress(theirs), remote = ProcAddress(ours);
  const char* table = ours.ss_family == AF_INET6 ? "/proc/net/tcp6" : "/proc/net/tcp";
  std::ifstream f(table);
  std::string line;
  std::getline(f, line);  // the column names
  while (std::getline(f, line)) {
    std::istringstream fields(line);
    std::string sl, l, r, st, queues, tr, retrnsmt;
    uint64_t uid = 0;
    if (fields >> sl >> l >> r >> st >> queues >> tr >> retrnsmt >> uid && l == local &&
        r == remote)
      return static_cast<uid_t>(uid);
  }
  return Status::Error("the peer's socket " + local + " is not in " + table);
}

struct PageServer::Connection {
  uv_tcp_t tcp{};
  uv_timer_t timer{};  // closes the connection at the timeout
  uv_write_t write{};
  PageServer* server = nullptr;
  uint64_t key = 0;  // in server->open_
  int handles = 0;   // open libuv handles; deleted when the last closes
  std::string request, response;
  std::string forbidden;  // why the peer may not read the page; empty: it may
  bool answered = false;
};

Result<std::unique_ptr<PageServer>> PageServer::Bind(const std::string& address,
                                                     PageOptions options) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 >= address.size())
    return Status::Error("expected HOST:PORT, e.g. 127.0.0.1:9464");
  const std::string host = address.substr(0, colon);
  const std::string port_text = address.substr(colon + 1);
  if (port_text.find_first_not_of("0123456789") != std::string::npos || port_text.size() > 5 ||
      std::stoul(port_text) > 65535)
    return Status::Error("the port is not a number from 0 to 65535");
  // An IPv6 address only in brackets, which keep its colons from the port's.
  const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
  const char* not_an_address =
      bracketed ? "not an IPv6 address" : "not an IPv4 address, [IPv6] address or localhost";
  if (!bracketed && host.find(':') != std::string::npos) return Status::Error(not_an_address);
  const Result<Endpoint> e = ResolveEndpoint(host, static_cast<uint16_t>(std::stoul(port_text)));
  if (!e.ok() || bracketed != (e->addr.ss_family == AF_INET6)) return Status::Error(not_an_address);
  if (!e->loopback)
    return Status::Error(options.name +
                         " are served on loopback only (127.0.0.0/8, [::1], "
                         "localhost): a peer's uid is known only from its loopback socket");
  std::unique_ptr<PageServer> m(new PageServer(std::move(options)));
  m->fd_ = socket(e->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (m->fd_ < 0) return Status::Error(std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(m->fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(m->fd_, reinterpret_cast<const sockaddr*>(&e->addr), e->len) != 0)
    return Status::Error(std::string("bind: ") + std::strerror(errno));
  if (listen(m->fd_, 128) != 0)
    return Status::Error(std::string("listen: ") + std::strerror(errno));
  sockaddr_storage got{};
  socklen_t got_len = sizeof got;
  getsockname(m->fd_, reinterpret_cast<sockaddr*>(&got), &got_len);
  m->address_ = e->host + ":" + std::to_string(PortOf(got));
  return m;
}

PageServer::~PageServer() {
  if (fd_ >= 0) close(fd_);
}

Status PageServer::Start(uv_loop_t* loop, std::function<std::string()> page,
                         std::function<std::string(uid_t)> refusal, double timeout_seconds) {
  page_ = std::move(page);
  refusal_ = std::move(refusal);
  timeout_ms_ = static_cast<uint64_t>(timeout_seconds * 1000 + 0.5);
  uv_tcp_init(loop, &server_);
  server_.data = this;
  started_ = true;
  if (int rc = uv_tcp_open(&server_, fd_); rc != 0)
    return Status::Error(options_.name + " listener: " + std::string(uv_strerror(rc)));
  fd_ = -1;  // libuv's now
  const int rc =
      uv_listen(reinterpret_cast<uv_stream_t*>(&server_), 128, [](uv_stream_t* s, int status) {
        if (status == 0) static_cast<PageServer*>(s->data)->Accept();
      });
  if (rc != 0) return Status::Error(options_.name + " listener: " + std::string(uv_strerror(rc)));
  spdlog::info("{} on http://{}{}", options_.name, address_, options_.path);
  return Status::Ok();
}

void PageServer::Accept() {
  if (open_.size() >= kMaxConnections) {
    if (!full_logged_)
      spdlog::warn(
          "{}: {} connections open, the most served at once: each new one closes "
          "the oldest",
          options_.name, open_.size());
    full_logged_ = true;
    Drop(open_.begin()->second);
  }
  auto* c = new Connection();
  c->server = this;
  c->key = accepted_++;
  uv_tcp_init(server_.loop, &c->tcp);
  uv_timer_init(server_.loop, &c->timer);
  c->handles = 2;
  c->tcp.data = c;
  c->timer.data = c;
  open_.emplace(c->key, c);
  if (uv_accept(reinterpret_cast<uv_stream_t*>(&server_),
                reinterpret_cast<uv_stream_t*>(&c->tcp)) != 0) {
    Drop(c);
    return;
  }
  uv_timer_start(
      &c->timer,
      [](uv_timer_t* t) {
        auto* conn = static_cast<Connection*>(t->data);
        spdlog::debug("{}: a connection still open after {} ms closed", conn->server->options_.name,
                      conn->server->timeout_ms_);
        conn->server->Drop(conn);
      },
      timeout_ms_, 0);
  uv_os_fd_t fd = -1;
  uv_fileno(reinterpret_cast<uv_handle_t*>(&c->tcp), &fd);
  if (auto uid = LoopbackPeerUid(fd); !uid.ok()) {
    c->forbidden = uid.status().message();
  } else {
    c->forbidden = refusal_(*uid);
  }
  uv_read_start(
      reinterpret_cast<uv_stream_t*>(&c->tcp),
      [](uv_handle_t*, size_t, uv_buf_t* buf) {
        static char scratch[4096];  // the loop thread's alone; copied out at once
        *buf = uv_buf_init(scratch, sizeof scratch);
      },
      [](uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
        auto* conn = static_cast<Connection*>(s->data);
        if (n < 0) {
          conn->server->Drop(conn);
          return;
        }
        if (conn->answered) return;
        conn->request.append(buf->base, static_cast<size_t>(n));
        if (conn->request.find("\r\n\r\n") != std::string::npos ||
            conn->request.find("\n\n") != std::string::npos || conn->request.size() > kMaxRequest)
          conn->server->Answer(conn);
      });
}

void PageServer::Answer(Connection* c) {
  c->answered = true;
  uv_read_stop(reinterpret_cast<uv_stream_t*>(&c->tcp));
  const std::string line = c->request.substr(0, c->request.find_first_of("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  const std::string method = line.substr(0, sp1);
  const std::string path =
      sp1 == std::string::npos
          ? ""
          : line.substr(sp1 + 1, sp2 == std::string::npos ? sp2 : sp2 - sp1 - 1);
  if (!c->forbidden.empty()) {
    c->response = Response(403, "text/plain", c->forbidden + "\n");
  } else if (c->request.size() > kMaxRequest) {
    c->response = Response(431, "text/plain", "request too long\n");
  } else if (method != "GET") {
    c->response = Response(405, "text/plain", "only GET is served\n");
  } else if (path != options_.path && path != "/") {
    c->response =
        Response(404, "text/plain", "the " + options_.name + " are at " + options_.path + "\n");
  } else {
    c->response = Response(200, options_.content_type, page_());
  }
  c->write.data = c;
  uv_buf_t buf = uv_buf_init(c->response.data(), static_cast<unsigned>(c->response.size()));
  const int rc =
      uv_write(&c->write, reinterpret_cast<uv_stream_t*>(&c->tcp), &buf, 1, [](uv_write_t* w, int) {
        auto* conn = static_cast<Connection*>(w->data);
        conn->server->Drop(conn);
      });
  if (rc != 0) Drop(c);
}

void PageServer::Drop(Connection* c) {
  if (!open_.erase(c->key)) return;  // already closing
  if (open_.size() < kMaxConnections) full_logged_ = false;
  const auto closed = [](uv_handle_t* h) {
    auto* conn = static_cast<Connection*>(h->data);
    if (--conn->handles == 0) delete conn;
  };
  uv_close(reinterpret_cast<uv_handle_t*>(&c->timer), closed);
  uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), closed);
}

void PageServer::Close() {
  if (closed_) return;
  closed_ = true;
  while (!open_.empty()) Drop(open_.begin()->second);
  if (started_) uv_close(reinterpret_cast<uv_handle_t*>(&server_), nullptr);
}

}  // namespace waste::http
