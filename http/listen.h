// Where an HTTP server listens: a host and a port resolved to a socket
// address, and whether it is loopback. Both servers of this library
// (HttpServer and PageServer) resolve their address here.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "base/status.h"

namespace waste::http {

struct Endpoint {
  sockaddr_storage addr{};  // AF_INET or AF_INET6, with the port
  socklen_t len = 0;        // of addr's family
  bool loopback = false;    // 127.0.0.0/8 or ::1
  std::string host;         // as an address names it: "127.0.0.1", "[::1]"
};

// `host` is an IPv4 literal, an IPv6 literal (bracketed or not) or
// "localhost" (127.0.0.1); anything else is an error.
Result<Endpoint> ResolveEndpoint(const std::string& host, uint16_t port);

// The port of a bound socket's address (getsockname's).
uint16_t PortOf(const sockaddr_storage& addr);

}  // namespace waste::http
