// What the servers (server.cc, page_server.cc) and the Responder (answer.cc)
// share, private to waste_http: the text of answers (status lines, which
// headers may be sent, the error body) and the mailbox a Responder posts
// through.
#pragma once

#include <uv.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace waste::http {

class Responder;

namespace detail {

bool EqualNoCase(std::string_view a, std::string_view b);  // ASCII letters
// No CR, LF or NUL: nothing that could end a header line early.
bool SafeText(std::string_view s);
// A header name: SafeText, not empty, no ':' or whitespace.
bool SafeName(std::string_view s);
// The server's own headers (framing and the connection): Content-Length,
// Transfer-Encoding, Connection.
bool Reserved(std::string_view name);

// "HTTP/1.1 404 Not Found\r\n" (`version` "HTTP/1.0": "HTTP/1.0 404 ...");
// a status http-parser has no reason for gets an empty one.
std::string StatusLine(int status, std::string_view version = "HTTP/1.1");
// OpenAI's error shape: {"error":{"message":...,"type":...,"param":null,
// "code":null}}, the type "server_error" for 5xx, else "invalid_request_error".
std::string ErrorBody(int status, std::string_view message);

// Responders post to the loop through this; it outlives the server while
// any Responder holds it.
struct Mailbox {
  std::mutex mu;
  bool closed = false;  // the loop takes no more posts; async is closing
  bool stop = false;    // Stop has asked the loop to finish
  uv_async_t* async = nullptr;
  std::vector<std::shared_ptr<Responder>> posted;

  // Queues `r` for the loop and wakes it; nothing once closed.
  void Post(std::shared_ptr<Responder> r);
};

}  // namespace detail
}  // namespace waste::http
