#include "http/listen.h"

#include <netinet/in.h>
#include <uv.h>

namespace waste::http {

Result<Endpoint> ResolveEndpoint(const std::string& host, uint16_t port) {
  std::string bare = host == "localhost" ? "127.0.0.1" : host;
  if (bare.size() > 2 && bare.front() == '[' && bare.back() == ']')
    bare = bare.substr(1, bare.size() - 2);
  Endpoint e;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&e.addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&e.addr);
  // libuv's parsers: an IPv6 address may carry its scope ("fe80::1%eth0").
  if (uv_ip4_addr(bare.c_str(), port, v4) == 0) {
    e.len = sizeof *v4;
    e.loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
    e.host = bare;
  } else if (uv_ip6_addr(bare.c_str(), port, v6) == 0) {
    e.len = sizeof *v6;
    e.loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
    e.host = "[" + bare + "]";
  } else {
    return Status::Error("not an IPv4 or IPv6 address, nor localhost");
  }
  return e;
}

uint16_t PortOf(const sockaddr_storage& addr) {
  return ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(addr).sin6_port
                                          : reinterpret_cast<const sockaddr_in&>(addr).sin_port);
}

}  // namespace waste::http
