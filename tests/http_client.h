// A raw HTTP/1.1 client for the tests of serve/: one TCP connection read
// with deadlines, so that every byte of an answer's framing can be checked.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace waste::testing {

class HttpClient {
 public:
  using ms = std::chrono::milliseconds;

  explicit HttpClient(uint16_t port, int receive_buffer = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (receive_buffer > 0)
      setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~HttpClient() { Close(); }
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  bool connected() const { return connected_; }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  void Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }

  // Reads until `n` bytes are buffered, the peer closes or `timeout` passes;
  // returns the first n (fewer if they did not come) and keeps the rest.
  std::string Read(size_t n, ms timeout = ms(2000)) {
    Fill([&] { return buf_.size() >= n; }, timeout);
    return Take(std::min(n, buf_.size()));
  }
  // Up to and including `marker`; empty if it did not come.
  std::string ReadUntil(std::string_view marker, ms timeout = ms(2000)) {
    Fill([&] { return buf_.find(marker) != std::string::npos; }, timeout);
    const size_t at = buf_.find(marker);
    return at == std::string::npos ? "" : Take(at + marker.size());
  }
  // A whole answer framed by Content-Length.
  std::string ReadAnswer(ms timeout = ms(2000)) {
    std::string head = ReadUntil("\r\n\r\n", timeout);
    const size_t at = head.find("Content-Length: ");
    if (at == std::string::npos) return head;
    return head + Read(std::stoul(head.substr(at + 16)), timeout);
  }
  // Everything until the peer closes; eof() says whether it did in time.
  std::string ReadToEof(ms timeout = ms(2000)) {
    Fill([] { return false; }, timeout);
    return Take(buf_.size());
  }
  bool eof() const { return eof_; }

 private:
  void Fill(const std::function<bool()>& done, ms timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done() && !eof_) {
      const auto left =
          std::chrono::duration_cast<ms>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
      char chunk[65536];
      const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) {
        eof_ = true;
        return;
      }
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }
  std::string Take(size_t n) {
    std::string out = buf_.substr(0, n);
    buf_.erase(0, n);
    return out;
  }

  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buf_;
};

// The body of a chunked answer's chunks, joined; `ok` false when the
// framing is not "HEX\r\nBYTES\r\n" ... "0\r\n\r\n".
inline std::string Dechunk(std::string_view s, bool* ok) {
  std::string out;
  *ok = false;
  for (;;) {
    const size_t eol = s.find("\r\n");
    if (eol == std::string_view::npos || eol == 0) return out;
    size_t n = 0;
    for (char c : s.substr(0, eol)) {
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return out;
      n = n * 16 + static_cast<size_t>(d);
    }
    s.remove_prefix(eol + 2);
    if (s.size() < n + 2 || s.substr(n, 2) != "\r\n") return out;
    if (n == 0) {
      *ok = s.size() == 2;
      return out;
    }
    out.append(s.substr(0, n));
    s.remove_prefix(n + 2);
  }
}

}  // namespace waste::testing
