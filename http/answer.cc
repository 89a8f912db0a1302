#include "http/answer.h"

#include <http_parser.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "http/server.h"

namespace waste::http {

namespace detail {

namespace {

char Lower(char ch) {
  return ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch;
}

std::string JsonEscaped(std::string_view s) {
  std::string out;
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

bool EqualNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return Lower(x) == Lower(y); });
}

bool SafeText(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == s.npos;
}

bool SafeName(std::string_view s) {
  return !s.empty() && SafeText(s) && s.find_first_of(": \t") == s.npos;
}

bool Reserved(std::string_view name) {
  return EqualNoCase(name, "content-length") || EqualNoCase(name, "transfer-encoding") ||
         EqualNoCase(name, "connection");
}

std::string StatusLine(int status, std::string_view version) {
  const char* reason = http_status_str(static_cast<http_status>(status));
  return std::string(version) + " " + std::to_string(status) + " " +
         (std::strcmp(reason, "<unknown>") == 0 ? "" : reason) + "\r\n";
}

std::string ErrorBody(int status, std::string_view message) {
  return std::string(R"({"error":{"message":")") + JsonEscaped(message) + R"(","type":")" +
         (status >= 500 ? "server_error" : "invalid_request_error") +
         R"(","param":null,"code":null}})";
}

void Mailbox::Post(std::shared_ptr<Responder> r) {
  std::lock_guard lock(mu);
  if (closed) return;
  posted.push_back(std::move(r));
  uv_async_send(async);
}

}  // namespace detail

using detail::Reserved;
using detail::SafeName;
using detail::SafeText;
using detail::StatusLine;

std::optional<std::string_view> Request::Header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (detail::EqualNoCase(n, name)) return std::string_view(v);
  return std::nullopt;
}

// --- Responder: any thread ---

Responder::Responder(std::shared_ptr<detail::Mailbox> mailbox, bool keep_alive, bool http10,
                     bool head_only, size_t max_queued_bytes)
    : mailbox_(std::move(mailbox)),
      keep_alive_(keep_alive),
      http10_(http10),
      head_only_(head_only),
      max_queued_bytes_(max_queued_bytes) {}

std::string Responder::Head(int status, std::string_view content_type, const Headers& extra,
                            std::string_view framing, bool close) const {
  std::string head = StatusLine(status);
  if (!content_type.empty() && SafeText(content_type))
    head.append("Content-Type: ").append(content_type).append("\r\n");
  for (const auto& [name, value] : extra)
    if (SafeName(name) && SafeText(value) && !Reserved(name))
      head.append(name).append(": ").append(value).append("\r\n");
  head += framing;
  if (close)
    head += "Connection: close\r\n";
  else if (http10_)
    head += "Connection: keep-alive\r\n";
  return head + "\r\n";
}

bool Responder::Send(int status, std::string_view content_type, std::string_view body,
                     const Headers& extra) {
  if (status < 200 || status > 599) status = 500;
  const bool bodiless = status == 204 || status == 304;
  std::string bytes =
      Head(status, content_type, extra,
           bodiless ? "" : "Content-Length: " + std::to_string(body.size()) + "\r\n", !keep_alive_);
  if (!bodiless && !head_only_) bytes += body;
  return Queue(std::move(bytes), Phase::kWaiting, Phase::kDone);
}

bool Responder::StartStream(int status, std::string_view content_type, const Headers& extra) {
  if (status < 200 || status > 599) status = 500;
  const bool close = http10_ || !keep_alive_;
  std::string bytes =
      Head(status, content_type, extra, http10_ ? "" : "Transfer-Encoding: chunked\r\n", close);
  if (http10_) {
    std::lock_guard lock(mu_);
    close_after_ = true;
  }
  return Queue(std::move(bytes), Phase::kWaiting, Phase::kStreaming);
}

bool Responder::Write(std::string_view chunk) {
  if (chunk.empty()) {
    std::lock_guard lock(mu_);
    return !gone_ && phase_ == Phase::kStreaming;
  }
  std::string bytes;
  if (head_only_) {
    // the head is all a HEAD request is answered
  } else if (http10_) {
    bytes = chunk;
  } else {
    char size[20];
    std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
    bytes.append(size).append(chunk).append("\r\n");
  }
  return Queue(std::move(bytes), Phase::kStreaming, Phase::kStreaming);
}

bool Responder::End() {
  return Queue(http10_ || head_only_ ? "" : "0\r\n\r\n", Phase::kStreaming, Phase::kDone);
}

bool Responder::Queue(std::string bytes, Phase from, Phase to) {
  bool post = false, ok = true;
  {
    std::lock_guard lock(mu_);
    if (gone_ || phase_ != from) return false;
    if (from == Phase::kStreaming && out_.size() + in_flight_ > max_queued_bytes_) {
      overflow_ = gone_ = true;
      cancelled_.store(true, std::memory_order_release);
      ok = false;
    } else {
      out_ += bytes;
      phase_ = to;
    }
    post = !posted_;
    posted_ = true;
  }
  if (post) mailbox_->Post(shared_from_this());
  return ok;
}

void Responder::OnCancel(std::function<void()> callback) {
  {
    std::lock_guard lock(mu_);
    if (!cancelled_.load(std::memory_order_relaxed)) {
      on_cancel_ = std::move(callback);
      return;
    }
  }
  callback();
}

void Responder::Cancel() {
  std::function<void()> callback;
  {
    std::lock_guard lock(mu_);
    gone_ = true;
    if (phase_ != Phase::kDone) {
      cancelled_.store(true, std::memory_order_release);
      callback = std::move(on_cancel_);
    }
  }
  if (callback) callback();
}

}  // namespace waste::http
