// HttpServer: the HTTP/1.1 server `waste serve` stands on. One libuv loop on
// a thread the server owns; requests parsed by http-parser (Debian's
// libhttp-parser, Node's parser); the answers written from any thread.
//
// The contract:
// - Start binds host:port (an IPv4 or IPv6 literal, or "localhost"; port 0
//   lets the kernel choose, port() says which it chose) on the calling
//   thread, so a bad address is an error there, then runs the loop on a
//   thread of its own. Stop (or the destructor) closes the listener and every
//   connection, cancelling what they were answering, and joins that thread.
//   Stop is called from any thread but the loop's (not from the handler),
//   and runs the OnCancel callbacks of the answers it cancels before it
//   returns: the caller must not hold a lock those callbacks take.
//   The loop's thread blocks SIGPIPE, so a write to a peer that has reset
//   fails (EPIPE) rather than ending the process; no process-wide signal
//   disposition is changed.
// - The handler is called on the loop thread, once per request, with the
//   whole request (body read and de-chunked) and a Responder. It must not
//   block: it hands the work to another thread or answers at once (one
//   that throws is answered 500 with the exception's message). On one
//   connection the next request is parsed only once the answer to the one
//   before is complete, so pipelined requests are answered in order (the
//   bytes of later requests wait in a buffer of at most max_header_bytes,
//   after which reading stops until the answer ends).
// - A Responder is used from any thread and outlives everything: after its
//   connection has closed, or the server has stopped, every call is a no-op
//   that returns false (true says the bytes are queued, not that they
//   arrived). Each call formats its bytes at once and posts them
//   to the loop (uv_async), which writes them in order without buffering
//   (TCP_NODELAY). Send answers with a whole body (Content-Length);
//   StartStream + Write... + End stream one (server-sent events: content
//   type text/event-stream), chunked for an HTTP/1.1 request, framed by the
//   connection's close for HTTP/1.0. A HEAD request is answered with the
//   head alone (Send's Content-Length is still the body's; a stream's
//   Writes send nothing). The server sets Content-Length,
//   Transfer-Encoding and Connection itself: such a header given is left
//   out, and so is one whose name or value holds CR, LF or NUL (it could
//   split the response). A status outside 200-599 becomes 500.
// - cancelled() is true, and the OnCancel callback runs once on the loop
//   thread, when the connection closes before the answer is complete: the
//   client went away (its end closed, even if only for sending, or a write
//   failed: reading is stopped only while pipelined bytes fill their buffer,
//   so a client that leaves is seen at once otherwise), it read too slowly
//   (below), or the server stopped. A generation polls cancelled() between
//   steps, or stops on the callback.
// - Back-pressure: Write never blocks. The bytes written but not yet taken
//   by the kernel are counted; a Write that finds more than max_queued_bytes
//   waiting closes the connection as a client that does not read (cancelled,
//   Write returns false). So a connection holds at most max_queued_bytes plus
//   one chunk.
// - Keep-alive as HTTP/1.1 says (HTTP/1.0 with "Connection: keep-alive"),
//   until "Connection: close". A request with Expect: 100-continue is
//   answered "100 Continue" once its headers pass the limits (other
//   expectations are ignored). Protocol upgrades and CONNECT are refused
//   (400). Limits, each an option below:
//   * max_connections open at once: a new connection past it takes the
//     place of the longest idle one (no request begun, no byte waiting to
//     be read), which is closed silently as idle_timeout would close it, so
//     idle keep-alive connections never shut a new client out; when every
//     connection is busy, the new one is answered 503 (Retry-After: 1) and
//     closed, at once, without reading its request (past as many again
//     being refused, closed without the 503);
//   * max_header_bytes (the request target and headers): 431 and close;
//   * max_body_bytes: 413 and close, before reading the body when its
//     Content-Length says so, else when the chunks pass it;
//   * header_timeout from a request's first byte to its blank line, and
//     body_timeout from there to its last byte: 408 and close (slowloris);
//   * idle_timeout with no request begun (after accepting, between
//     requests, or with an answer sent but not read) and no byte waiting
//     to be read: closed, silently.
//   No limit applies while the handler has a request: a streamed answer
//   lasts as long as it likes. A malformed request is answered 400 and the
//   connection closed. Every error answer has a body in OpenAI's error shape,
//   {"error":{"message":...,"type":...,"param":null,"code":null}}, and
//   "Connection: close"; the server then stops writing and discards what
//   the peer still sends, for at most a second (or idle_timeout if shorter),
//   so that the peer reads the answer before the close (closing with its
//   bytes unread would reset the connection and could lose the answer).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <uv.h>

#include "base/status.h"

namespace waste::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // "GET", "POST"
  std::string target;  // as sent: "/v1/models?x=1"
  std::string path;    // "/v1/models", not percent-decoded
  std::string query;   // "x=1": after the '?', empty without one
  Headers headers;     // as sent, in order (trailers of a chunked body left out)
  std::string body;    // de-chunked
  int http_minor = 1;  // HTTP/1.x
  std::string peer;    // the client's address: "127.0.0.1:54321", "[::1]:54321"

  // The value of the first header named `name` (any case); none when absent.
  std::optional<std::string_view> Header(std::string_view name) const;
};

struct HttpOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  size_t max_connections = 64;
  // The request target and the headers (names, values, ": " and CRLF):
  // 256 B to 64 KiB (the target's offsets in http-parser's URL split are
  // 16 bits).
  size_t max_header_bytes = 16 << 10;
  size_t max_body_bytes = 8 << 20;
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{30'000};
  std::chrono::milliseconds idle_timeout{60'000};
  size_t max_queued_bytes = 1 << 20;
};

// Totals since Start, read from any thread (for /metrics).
struct HttpCounters {
  uint64_t accepted = 0;   // connections served (within max_connections)
  uint64_t refused = 0;    // connections answered 503 for max_connections
  uint64_t displaced = 0;  // idle connections closed to make room at max_connections
  uint64_t requests = 0;   // requests handed to the handler
  uint64_t errors = 0;     // requests answered 400, 408, 413 or 431 by the server
  uint64_t open = 0;       // connections open now
};

class HttpServer;
namespace detail {
struct Connection;
struct Mailbox;
}  // namespace detail

class Responder : public std::enable_shared_from_this<Responder> {
 public:
  // A whole answer. False: the connection is gone, or an answer was begun.
  bool Send(int status, std::string_view content_type, std::string_view body,
            const Headers& extra = {});
  // The head of a streamed answer. False as for Send.
  bool StartStream(int status, std::string_view content_type, const Headers& extra = {});
  // Bytes of the streamed answer, sent as they are (an empty chunk is
  // nothing). False: the connection is gone (or this Write closed it for
  // back-pressure), or no stream was started, or it has ended.
  bool Write(std::string_view chunk);
  // The end of the streamed answer. False as for Write.
  bool End();

  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // `callback` runs once, on the loop thread, when the answer is cancelled
  // (see above); at once, on this thread, if it already has been. It must
  // not block. Replaces a callback set before.
  void OnCancel(std::function<void()> callback);

 private:
  friend class HttpServer;
  enum class Phase { kWaiting, kStreaming, kDone };
  Responder(std::shared_ptr<detail::Mailbox> mailbox, bool keep_alive, bool http10, bool head_only,
            size_t max_queued_bytes);
  // The status line and headers, framed by `framing` ("Content-Length: 5").
  std::string Head(int status, std::string_view content_type, const Headers& extra,
                   std::string_view framing, bool close) const;
  // Appends `bytes` to out_ if the answer is in phase `from`, moves it to
  // `to` and posts to the loop. False when gone or out of order.
  bool Queue(std::string bytes, Phase from, Phase to);
  // On the loop thread: the connection has closed.
  void Cancel();

  const std::shared_ptr<detail::Mailbox> mailbox_;
  const bool keep_alive_;  // the request allows another after this answer
  const bool http10_;      // an HTTP/1.0 request: a stream is close-framed, not chunked
  const bool head_only_;   // a HEAD request: the answer's head, never its body
  const size_t max_queued_bytes_;
  std::atomic<bool> cancelled_{false};

  mutable std::mutex mu_;  // the fields below; never held while calling out
  Phase phase_ = Phase::kWaiting;
  bool gone_ = false;         // the connection has closed
  bool overflow_ = false;     // a Write found too much queued: the loop closes
  bool posted_ = false;       // in the mailbox's list
  bool close_after_ = false;  // the connection closes once the answer is written
  std::string out_;           // formatted, not yet handed to libuv
  size_t in_flight_ = 0;      // handed to libuv, not yet written
  std::function<void()> on_cancel_;

  // Loop thread only.
  detail::Connection* connection_ = nullptr;
};

class HttpServer {
 public:
  using Handler = std::function<void(Request, std::shared_ptr<Responder>)>;

  static Result<std::unique_ptr<HttpServer>> Start(HttpOptions options, Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Stop();

  uint16_t port() const { return port_; }
  // "127.0.0.1:8080", "[::1]:8080": with the port bound.
  const std::string& address() const { return address_; }
  // True when listening on a loopback address (127.0.0.0/8, ::1).
  bool loopback() const { return loopback_; }
  HttpCounters counters() const;

 private:
  friend struct detail::Connection;
  using Connection = detail::Connection;
  HttpServer(HttpOptions options, Handler handler);
  Status Open();  // the loop and the listener
  Status Bind();
  void Accept();
  void StartReading(Connection* c);
  void OnRead(Connection* c, const char* data, size_t n);
  void Parse(Connection* c, const char* data, size_t n);
  void Dispatch(Connection* c);
  void Drain();                    // the mailbox's posts
  void Flush(Responder& r);        // a Responder's bytes to its connection
  void AnswerDone(Connection* c);  // ready for the next request
  void Write(Connection* c, std::string bytes, std::shared_ptr<Responder> r);
  void Fail(Connection* c, int status, std::string_view message);  // an error answer
  void Linger(Connection* c);  // shut down writing, discard reads, then close
  void Close(Connection* c);
  void Arm(Connection* c, std::chrono::milliseconds after, void (*fire)(uv_timer_t*));
  void ArmIdle(Connection* c);  // idle_timeout, then closed
  // The connection idle longest (see max_connections) other than
  // `newcomer`, or null when every one is busy.
  Connection* LongestIdle(const Connection* newcomer) const;
  void StopOnLoop();

  const HttpOptions options_;
  const Handler handler_;
  uv_loop_t loop_{};
  uv_tcp_t listener_{};
  uv_async_t async_{};
  std::shared_ptr<detail::Mailbox> mailbox_;
  std::thread thread_;
  bool stopped_ = false;  // Stop's, on the caller's thread
  std::string address_;
  uint16_t port_ = 0;
  bool loopback_ = false;

  // Loop thread only.
  std::vector<Connection*> open_;  // each knows its index in it
  size_t refusing_ = 0;            // connections being answered 503
  uint64_t idle_clock_ = 0;        // ticks each time a connection becomes idle
  char scratch_[64 << 10];         // each read, parsed or copied at once

  std::atomic<uint64_t> accepted_{0}, refused_{0}, displaced_{0}, requests_{0}, errors_{0},
      open_count_{0};
};

}  // namespace waste::http
