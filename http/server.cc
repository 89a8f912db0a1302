#include "http/server.h"

#include <http_parser.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <exception>

#include "http/answer.h"
#include "http/listen.h"

namespace waste::http {

using detail::EqualNoCase;
using detail::ErrorBody;
using detail::StatusLine;

namespace {

// How long an error answer's connection reads and discards before closing.
constexpr std::chrono::milliseconds kLinger{1000};
// The request target's offsets in http_parser_url are 16 bits.
constexpr size_t kMaxHeaderLimit = 64 << 10;

// An answer of the server's own (a limit, a malformed request), which closes
// the connection.
std::string ErrorAnswer(int status, std::string_view message, std::string_view extra = {}) {
  const std::string body = ErrorBody(status, message);
  return StatusLine(status) + "Content-Type: application/json\r\n" + std::string(extra) +
         "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// "127.0.0.1:54321", "[::1]:54321"; empty if unknown.
std::string PeerText(uv_tcp_t* tcp) {
  sockaddr_storage ss{};
  int len = sizeof ss;
  char name[INET6_ADDRSTRLEN] = "";
  if (uv_tcp_getpeername(tcp, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    uv_ip6_name(a, name, sizeof name);
    return "[" + std::string(name) + "]:" + std::to_string(ntohs(a->sin6_port));
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  uv_ip4_name(a, name, sizeof name);
  return std::string(name) + ":" + std::to_string(ntohs(a->sin_port));
}

// True when the peer has sent bytes not yet read: libuv runs timers before
// it polls, so after a stall of the loop a connection can look idle with
// its request already waiting.
bool BytesWaiting(uv_tcp_t* tcp) {
  uv_os_fd_t fd = -1;
  char byte;
  return uv_fileno(reinterpret_cast<uv_handle_t*>(tcp), &fd) == 0 &&
         recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

}  // namespace

namespace detail {

// One accepted connection, on the loop thread. Deleted when both of its
// handles have closed.
struct Connection {
  enum class State { kReading, kAnswering, kLingering, kClosed };
  enum class Last { kNone, kField, kValue };  // the header callback before

  explicit Connection(HttpServer* s) : server(s) {}

  HttpServer* server;
  uv_tcp_t tcp{};
  uv_timer_t timer{};
  uv_shutdown_t shutdown{};
  int handles = 0;
  size_t index = 0;         // in server->open_
  bool refused = false;     // past max_connections: answered 503
  uint64_t idle_since = 0;  // HttpServer::idle_clock_ when it last became idle
  State state = State::kReading;
  bool reading = true;  // uv_read_start is in effect
  std::string peer;     // Request::peer

  http_parser parser{};
  bool begun = false;  // a request's first byte has come
  bool ready = false;  // a whole request is parsed; the parser is paused
  bool keep_alive = false;
  Last last = Last::kNone;
  size_t header_bytes = 0;
  std::string url;
  Request request;
  int error = 0;  // the answer a callback chose to fail with
  std::string error_message;
  std::string pending;  // bytes read while the handler has the request
  std::shared_ptr<Responder> responder;

  static Connection* Of(http_parser* p) { return static_cast<Connection*>(p->data); }
  int Refuse(int status, std::string message) {
    error = status;
    error_message = std::move(message);
    return -1;
  }
  int CountHeader(size_t n) {
    header_bytes += n;
    if (header_bytes > server->options_.max_header_bytes)
      return Refuse(431, "the request's headers are longer than " +
                             std::to_string(server->options_.max_header_bytes) + " bytes");
    return 0;
  }

  static int OnMessageBegin(http_parser* p);
  static int OnUrl(http_parser* p, const char* at, size_t n);
  static int OnHeaderField(http_parser* p, const char* at, size_t n);
  static int OnHeaderValue(http_parser* p, const char* at, size_t n);
  static int OnHeadersComplete(http_parser* p);
  static int OnBody(http_parser* p, const char* at, size_t n);
  static int OnMessageComplete(http_parser* p);
  static const http_parser_settings kSettings;
};

int Connection::OnMessageBegin(http_parser* p) {
  Connection* c = Of(p);
  c->begun = true;
  c->request = Request{};
  c->request.peer = c->peer;
  c->url.clear();
  c->last = Last::kNone;
  c->header_bytes = 0;
  c->server->Arm(c, c->server->options_.header_timeout, [](uv_timer_t* t) {
    auto* conn = static_cast<Connection*>(t->data);
    conn->server->Fail(conn, 408, "the request's headers did not arrive in time");
  });
  return 0;
}

int Connection::OnUrl(http_parser* p, const char* at, size_t n) {
  Connection* c = Of(p);
  c->url.append(at, n);
  return c->CountHeader(n);
}

int Connection::OnHeaderField(http_parser* p, const char* at, size_t n) {
  Connection* c = Of(p);
  const bool trailer = (p->flags & F_TRAILING) != 0;
  if (c->last != Last::kField && !trailer) c->request.headers.emplace_back();
  if (!trailer) c->request.headers.back().first.append(at, n);
  const size_t line = c->last != Last::kField ? 4 : 0;  // ": " and CRLF
  c->last = Last::kField;
  return c->CountHeader(n + line);
}

int Connection::OnHeaderValue(http_parser* p, const char* at, size_t n) {
  Connection* c = Of(p);
  if ((p->flags & F_TRAILING) == 0 && !c->request.headers.empty())
    c->request.headers.back().second.append(at, n);
  c->last = Last::kValue;
  return c->CountHeader(n);
}

int Connection::OnHeadersComplete(http_parser* p) {
  Connection* c = Of(p);
  c->last = Last::kNone;
  const HttpOptions& o = c->server->options_;
  if (p->upgrade) return c->Refuse(400, "protocol upgrades and CONNECT are not served");
  if ((p->flags & F_CONTENTLENGTH) && p->content_length > o.max_body_bytes)
    return c->Refuse(
        413, "the request's body is longer than " + std::to_string(o.max_body_bytes) + " bytes");
  http_parser_url u;
  http_parser_url_init(&u);
  if (http_parser_parse_url(c->url.data(), c->url.size(), 0, &u) != 0)
    return c->Refuse(400, "the request's target is not a path");
  Request& r = c->request;
  for (auto& header : r.headers)  // http-parser keeps the whitespace before the line's end
    while (!header.second.empty() && (header.second.back() == ' ' || header.second.back() == '\t'))
      header.second.pop_back();
  r.method = http_method_str(static_cast<http_method>(p->method));
  r.http_minor = p->http_minor;
  r.target = c->url;
  r.path = (u.field_set & (1 << UF_PATH))
               ? c->url.substr(u.field_data[UF_PATH].off, u.field_data[UF_PATH].len)
               : "/";
  if (u.field_set & (1 << UF_QUERY))
    r.query = c->url.substr(u.field_data[UF_QUERY].off, u.field_data[UF_QUERY].len);
  if (const auto expect = r.Header("expect");
      expect && EqualNoCase(*expect, "100-continue") && p->http_major == 1 && p->http_minor >= 1)
    c->server->Write(c, "HTTP/1.1 100 Continue\r\n\r\n", nullptr);
  c->server->Arm(c, o.body_timeout, [](uv_timer_t* t) {
    auto* conn = static_cast<Connection*>(t->data);
    conn->server->Fail(conn, 408, "the request's body did not arrive in time");
  });
  return 0;
}

int Connection::OnBody(http_parser* p, const char* at, size_t n) {
  Connection* c = Of(p);
  const size_t max = c->server->options_.max_body_bytes;
  if (c->request.body.size() + n > max)
    return c->Refuse(413, "the request's body is longer than " + std::to_string(max) + " bytes");
  c->request.body.append(at, n);
  return 0;
}

int Connection::OnMessageComplete(http_parser* p) {
  Connection* c = Of(p);
  c->ready = true;
  c->keep_alive = http_should_keep_alive(p) != 0;
  http_parser_pause(p, 1);  // the next request waits for this one's answer
  return 0;
}

const http_parser_settings Connection::kSettings = {
    .on_message_begin = OnMessageBegin,
    .on_url = OnUrl,
    .on_status = nullptr,
    .on_header_field = OnHeaderField,
    .on_header_value = OnHeaderValue,
    .on_headers_complete = OnHeadersComplete,
    .on_body = OnBody,
    .on_message_complete = OnMessageComplete,
    .on_chunk_header = nullptr,
    .on_chunk_complete = nullptr,
};

}  // namespace detail

// --- HttpServer: Start and Stop on the caller's thread ---

HttpServer::HttpServer(HttpOptions options, Handler handler)
    : options_(std::move(options)),
      handler_(std::move(handler)),
      mailbox_(std::make_shared<detail::Mailbox>()) {}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(HttpOptions options, Handler handler) {
  if (options.max_connections == 0) return Status::Error("max_connections must be at least 1");
  if (options.max_header_bytes < 256 || options.max_header_bytes > kMaxHeaderLimit)
    return Status::Error("max_header_bytes must be from 256 to " + std::to_string(kMaxHeaderLimit));
  if (options.header_timeout.count() <= 0 || options.body_timeout.count() <= 0 ||
      options.idle_timeout.count() <= 0)
    return Status::Error("the timeouts must be positive");
  if (!handler) return Status::Error("no handler");
  std::unique_ptr<HttpServer> s(new HttpServer(std::move(options), std::move(handler)));
  WASTE_RETURN_IF_ERROR(s->Open());
  s->thread_ = std::thread([server = s.get()] {
    // libuv writes to sockets without MSG_NOSIGNAL: a peer that has reset
    // raises SIGPIPE in this thread. Blocked here, the write fails with
    // EPIPE instead, and the process's dispositions stay its owner's.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    uv_run(&server->loop_, UV_RUN_DEFAULT);
  });
  return s;
}

Status HttpServer::Open() {
  stopped_ = true;  // until the thread runs, nothing for Stop to do
  if (int rc = uv_loop_init(&loop_); rc != 0)
    return Status::Error(std::string("uv_loop_init: ") + uv_strerror(rc));
  uv_async_init(&loop_, &async_, [](uv_async_t* a) { static_cast<HttpServer*>(a->data)->Drain(); });
  async_.data = this;
  mailbox_->async = &async_;
  uv_tcp_init(&loop_, &listener_);
  listener_.data = this;
  const Status bound = Bind();
  if (!bound.ok()) {
    uv_close(reinterpret_cast<uv_handle_t*>(&listener_), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
    uv_run(&loop_, UV_RUN_DEFAULT);
    uv_loop_close(&loop_);
    return bound.Prefixed("listen on " + options_.host + ":" + std::to_string(options_.port));
  }
  stopped_ = false;
  return Status::Ok();
}

Status HttpServer::Bind() {
  const Result<Endpoint> e = ResolveEndpoint(options_.host, options_.port);
  if (!e.ok()) return e.status();
  loopback_ = e->loopback;
  if (int rc = uv_tcp_bind(&listener_, reinterpret_cast<const sockaddr*>(&e->addr), 0); rc != 0)
    return Status::Error(uv_strerror(rc));
  const int rc = uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), SOMAXCONN,
                           [](uv_stream_t* l, int status) {
                             if (status == 0) static_cast<HttpServer*>(l->data)->Accept();
                           });
  if (rc != 0) return Status::Error(uv_strerror(rc));
  sockaddr_storage got{};
  int len = sizeof got;
  uv_tcp_getsockname(&listener_, reinterpret_cast<sockaddr*>(&got), &len);
  port_ = PortOf(got);
  address_ = e->host + ":" + std::to_string(port_);
  return Status::Ok();
}

HttpServer::~HttpServer() {
  Stop();
}

void HttpServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  {
    std::lock_guard lock(mailbox_->mu);
    mailbox_->stop = true;
    uv_async_send(&async_);
  }
  thread_.join();
  uv_loop_close(&loop_);
}

HttpCounters HttpServer::counters() const {
  return {.accepted = accepted_.load(),
          .refused = refused_.load(),
          .displaced = displaced_.load(),
          .requests = requests_.load(),
          .errors = errors_.load(),
          .open = open_count_.load()};
}

// --- the loop thread ---

void HttpServer::Drain() {
  std::vector<std::shared_ptr<Responder>> posted;
  bool stop;
  {
    std::lock_guard lock(mailbox_->mu);
    posted.swap(mailbox_->posted);
    stop = mailbox_->stop;
  }
  for (const auto& r : posted) Flush(*r);
  if (stop) StopOnLoop();
}

void HttpServer::StopOnLoop() {
  {
    std::lock_guard lock(mailbox_->mu);
    mailbox_->closed = true;
    mailbox_->posted.clear();
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&listener_), nullptr);
  while (!open_.empty()) Close(open_.back());
  uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
}

void HttpServer::Flush(Responder& r) {
  Connection* c = r.connection_;  // none: closed, or its answer is complete
  std::string bytes;
  bool done, overflow, close_after;
  {
    std::lock_guard lock(r.mu_);
    r.posted_ = false;
    bytes.swap(r.out_);
    if (c != nullptr) r.in_flight_ += bytes.size();
    done = r.phase_ == Responder::Phase::kDone;
    overflow = r.overflow_;
    close_after = r.close_after_ || !r.keep_alive_;
  }
  if (c == nullptr) return;
  if (overflow) {
    Close(c);
    return;
  }
  if (!bytes.empty()) Write(c, std::move(bytes), r.shared_from_this());
  if (!done || c->state == Connection::State::kClosed) return;  // the write failed
  c->responder.reset();
  r.connection_ = nullptr;
  if (close_after) {
    Linger(c);
    return;
  }
  AnswerDone(c);
}

void HttpServer::AnswerDone(Connection* c) {
  c->state = Connection::State::kReading;
  c->idle_since = ++idle_clock_;
  ArmIdle(c);
  if (!c->reading) StartReading(c);
  if (!c->pending.empty()) {
    const std::string pending = std::move(c->pending);
    c->pending.clear();
    Parse(c, pending.data(), pending.size());
  }
}

void HttpServer::Accept() {
  auto* c = new Connection(this);
  uv_tcp_init(&loop_, &c->tcp);
  uv_timer_init(&loop_, &c->timer);
  c->handles = 2;
  c->tcp.data = c->timer.data = c;
  c->index = open_.size();
  open_.push_back(c);
  if (uv_accept(reinterpret_cast<uv_stream_t*>(&listener_),
                reinterpret_cast<uv_stream_t*>(&c->tcp)) != 0) {
    Close(c);
    return;
  }
  bool full = open_.size() - 1 - refusing_ >= options_.max_connections;
  if (full) {
    if (Connection* idle = LongestIdle(c)) {  // gives its place to the new one
      displaced_++;
      Close(idle);
      full = false;
    }
  }
  if (full) {
    refused_++;
    c->refused = true;
    refusing_++;
    if (refusing_ > options_.max_connections) {  // a flood: not even a 503
      Close(c);
      return;
    }
    StartReading(c);
    Write(c,
          ErrorAnswer(503,
                      "the server has " + std::to_string(options_.max_connections) +
                          " connections open, the most it serves at once",
                      "Retry-After: 1\r\n"),
          nullptr);
    Linger(c);
    return;
  }
  accepted_++;
  open_count_ = open_.size() - refusing_;
  uv_tcp_nodelay(&c->tcp, 1);
  c->idle_since = ++idle_clock_;
  c->peer = PeerText(&c->tcp);
  http_parser_init(&c->parser, HTTP_REQUEST);
  c->parser.data = c;
  ArmIdle(c);
  StartReading(c);
}

void HttpServer::StartReading(Connection* c) {
  c->reading = true;
  uv_read_start(
      reinterpret_cast<uv_stream_t*>(&c->tcp),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        HttpServer* s = static_cast<Connection*>(h->data)->server;
        *buf = uv_buf_init(s->scratch_, sizeof s->scratch_);
      },
      [](uv_stream_t* st, ssize_t n, const uv_buf_t* buf) {
        auto* conn = static_cast<Connection*>(st->data);
        if (n < 0) {
          conn->server->Close(conn);  // its end closed, or the connection broke
        } else if (n > 0) {
          conn->server->OnRead(conn, buf->base, static_cast<size_t>(n));
        }
      });
}

void HttpServer::OnRead(Connection* c, const char* data, size_t n) {
  switch (c->state) {
    case Connection::State::kReading:
      Parse(c, data, n);
      return;
    case Connection::State::kAnswering:
      c->pending.append(data, n);
      if (c->pending.size() >= options_.max_header_bytes) {
        uv_read_stop(reinterpret_cast<uv_stream_t*>(&c->tcp));
        c->reading = false;
      }
      return;
    case Connection::State::kLingering:
    case Connection::State::kClosed:
      return;  // discarded
  }
}

void HttpServer::Parse(Connection* c, const char* data, size_t n) {
  const size_t used = http_parser_execute(&c->parser, &Connection::kSettings, data, n);
  if (c->state == Connection::State::kClosed) return;  // writing 100 Continue failed
  if (c->ready) {
    c->pending.assign(data + used, n - used);
    http_parser_pause(&c->parser, 0);
    Dispatch(c);
    return;
  }
  if (c->error != 0) {
    Fail(c, c->error, c->error_message);
  } else if (const auto e = HTTP_PARSER_ERRNO(&c->parser); e != HPE_OK) {
    if (e == HPE_HEADER_OVERFLOW)
      Fail(c, 431, "the request's headers are too long");
    else
      Fail(c, 400, std::string("malformed request: ") + http_errno_description(e));
  }
}

void HttpServer::Dispatch(Connection* c) {
  c->ready = c->begun = false;
  c->state = Connection::State::kAnswering;
  uv_timer_stop(&c->timer);
  auto r = std::shared_ptr<Responder>(
      new Responder(mailbox_, c->keep_alive, c->request.http_minor == 0,
                    c->request.method == "HEAD", options_.max_queued_bytes));
  r->connection_ = c;
  c->responder = r;
  requests_++;
  try {
    handler_(std::move(c->request), r);
  } catch (const std::exception& e) {
    r->Send(500, "application/json", ErrorBody(500, e.what()));
  }
}

void HttpServer::Write(Connection* c, std::string bytes, std::shared_ptr<Responder> r) {
  struct Req {
    uv_write_t req;
    std::string bytes;
    std::shared_ptr<Responder> responder;
    Connection* c;
  };
  auto* w = new Req{{}, std::move(bytes), std::move(r), c};
  w->req.data = w;
  uv_buf_t buf = uv_buf_init(w->bytes.data(), static_cast<unsigned>(w->bytes.size()));
  const auto written = [](uv_write_t* req, int status) {
    auto* done = static_cast<Req*>(req->data);
    if (done->responder) {
      std::lock_guard lock(done->responder->mu_);
      done->responder->in_flight_ -= done->bytes.size();
    }
    if (status < 0) done->c->server->Close(done->c);  // a no-op once closing
    delete done;
  };
  if (uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&c->tcp), &buf, 1, written) != 0) {
    written(&w->req, -1);
  }
}

void HttpServer::Fail(Connection* c, int status, std::string_view message) {
  errors_++;
  Write(c, ErrorAnswer(status, message), nullptr);
  Linger(c);
}

void HttpServer::Linger(Connection* c) {
  if (c->state == Connection::State::kClosed || c->state == Connection::State::kLingering) return;
  c->state = Connection::State::kLingering;
  if (!c->reading) StartReading(c);
  c->shutdown.data = c;
  const int rc = uv_shutdown(&c->shutdown, reinterpret_cast<uv_stream_t*>(&c->tcp),
                             [](uv_shutdown_t* s, int status) {
                               if (status < 0) {
                                 auto* conn = static_cast<Connection*>(s->data);
                                 conn->server->Close(conn);
                               }
                             });
  if (rc != 0) {
    Close(c);
    return;
  }
  Arm(c, std::min(options_.idle_timeout, kLinger), [](uv_timer_t* t) {
    auto* conn = static_cast<Connection*>(t->data);
    conn->server->Close(conn);
  });
}

void HttpServer::Close(Connection* c) {
  if (c->state == Connection::State::kClosed) return;
  c->state = Connection::State::kClosed;
  if (auto r = std::move(c->responder)) {
    r->connection_ = nullptr;
    r->Cancel();
  }
  open_[c->index] = open_.back();
  open_[c->index]->index = c->index;
  open_.pop_back();
  if (c->refused) refusing_--;
  open_count_ = open_.size() - refusing_;
  const auto closed = [](uv_handle_t* h) {
    auto* conn = static_cast<Connection*>(h->data);
    if (--conn->handles == 0) delete conn;
  };
  uv_close(reinterpret_cast<uv_handle_t*>(&c->timer), closed);
  uv_close(reinterpret_cast<uv_handle_t*>(&c->tcp), closed);
}

void HttpServer::ArmIdle(Connection* c) {
  Arm(c, options_.idle_timeout, [](uv_timer_t* t) {
    auto* conn = static_cast<Connection*>(t->data);
    // A request waiting unread: the peer was not idle; the read about to
    // come re-arms the timer.
    if (BytesWaiting(&conn->tcp)) {
      conn->server->ArmIdle(conn);
      return;
    }
    conn->server->Close(conn);
  });
}

HttpServer::Connection* HttpServer::LongestIdle(const Connection* newcomer) const {
  // A linear pass: it runs only for a connection at the cap, over at most
  // max_connections plus those being refused.
  Connection* idle = nullptr;
  for (Connection* c : open_)
    if (c != newcomer && !c->refused && c->state == Connection::State::kReading && !c->begun &&
        (idle == nullptr || c->idle_since < idle->idle_since) && !BytesWaiting(&c->tcp))
      idle = c;
  return idle;
}

void HttpServer::Arm(Connection* c, std::chrono::milliseconds after, void (*fire)(uv_timer_t*)) {
  uv_timer_start(&c->timer, fire, static_cast<uint64_t>(after.count()), 0);
}

}  // namespace waste::http
