// An interposed read path for the daemon tests (LD_PRELOAD, never linked into
// a program): pread on a file whose path ends with $WASTE_EIO_FILE fails with
// EIO when the range read covers byte $WASTE_EIO_OFFSET, as a bad sector of
// the device would. Everything else goes to the real pread.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using PreadFn = ssize_t (*)(int, void*, size_t, off_t);

bool Fails(int fd, size_t count, off_t offset) {
  const char* file = std::getenv("WASTE_EIO_FILE");
  const char* at = std::getenv("WASTE_EIO_OFFSET");
  if (!file || !at || !*file) return false;
  const long long bad = std::atoll(at);
  if (bad < offset || bad >= offset + static_cast<long long>(count)) return false;
  char link[64], path[4096];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return false;
  path[n] = '\0';
  const size_t len = std::strlen(file), plen = static_cast<size_t>(n);
  return plen >= len && std::strcmp(path + plen - len, file) == 0;
}

ssize_t Pread(const char* name, int fd, void* buf, size_t count, off_t offset) {
  if (Fails(fd, count, offset)) {
    errno = EIO;
    return -1;
  }
  static PreadFn real = reinterpret_cast<PreadFn>(dlsym(RTLD_NEXT, name));
  return real(fd, buf, count, offset);
}

}  // namespace

extern "C" ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
  return Pread("pread", fd, buf, count, offset);
}

extern "C" ssize_t pread64(int fd, void* buf, size_t count, off_t offset) {
  return Pread("pread64", fd, buf, count, offset);
}
