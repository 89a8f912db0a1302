#include "daemon/notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/daemon.h"

namespace waste::daemon {

Status NotifyServiceManager(const std::string& state) {
  const char* where = std::getenv("NOTIFY_SOCKET");
  if (!where || !*where) return Status::Ok();
  const std::string path = where;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if ((path[0] != '/' && path[0] != '@') || path.size() >= sizeof addr.sun_path)
    return Status::Error("NOTIFY_SOCKET \"" + path + "\" is not a usable socket path");
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace: no terminating NUL counts
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() +
                                               (path[0] == '@' ? 0 : 1));
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Error(std::string("NOTIFY_SOCKET: socket: ") + std::strerror(errno));
  const ssize_t n = sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                           reinterpret_cast<const sockaddr*>(&addr), len);
  const int err = errno;
  close(fd);
  if (n < 0 || static_cast<size_t>(n) != state.size())
    return Status::Error("telling the service manager at " + path + ": " +
                         (n < 0 ? std::strerror(err) : "short write"));
  return Status::Ok();
}

void Daemon::NotifyManager(const std::string& state) const {
  if (Status st = NotifyServiceManager(state); !st.ok()) spdlog::warn("{}", st.message());
}

std::string Daemon::ManagerStatus() const {
  return "STATUS=serving " + ct_->dir() + " on " + opt_.socket + ", " +
         std::to_string(clients_.size()) + (clients_.size() == 1 ? " client" : " clients");
}

}  // namespace waste::daemon
