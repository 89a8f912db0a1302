#include "protocol/socket_path.h"

#include <sys/stat.h>

#include <cstdlib>

namespace waste {

std::string DefaultDaemonSocket() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  return runtime && *runtime ? std::string(runtime) + "/wasted.sock" : kSystemDaemonSocket;
}

std::string ClientDaemonSocket() {
  const std::string own = DefaultDaemonSocket();
  struct stat st {};
  if (own == kSystemDaemonSocket || (lstat(own.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)))
    return own;
  if (lstat(kSystemDaemonSocket, &st) == 0 && S_ISSOCK(st.st_mode)) return kSystemDaemonSocket;
  return own;
}

}  // namespace waste
