#include "tests/support/child.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <utility>

namespace waste::testing {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A copy of `binary` that any uid can execute, wherever the build is: made
// once per binary in a directory of this test process under /tmp, which
// every user can traverse, and removed when the process exits.
std::string ReachableCopy(const std::string& binary) {
  namespace fs = std::filesystem;
  struct Dir {
    fs::path path = fs::path("/tmp") / ("waste-bin-" + std::to_string(getpid()));
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static Dir dir;
  const fs::path copy = dir.path / fs::path(binary).filename();
  std::error_code ec;
  if (!fs::exists(copy, ec)) {
    fs::create_directories(dir.path, ec);
    fs::permissions(dir.path,
                    fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                        fs::perms::others_read | fs::perms::others_exec,
                    ec);
    fs::copy_file(binary, copy, ec);
    EXPECT_FALSE(ec) << "copying " << binary << " to " << copy << ": " << ec.message();
  }
  return copy.string();
}

}  // namespace

bool Connectable(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

Child Child::Run(std::vector<std::string> argv, int as_uid) {
  if (as_uid >= 0) argv[0] = ReachableCopy(argv[0]);
  int in[2], out[2];
  EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  Child c;
  c.pid_ = fork();
  if (c.pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    if (as_uid >= 0 && (setgid(as_uid) != 0 || setuid(as_uid) != 0)) _exit(126);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  c.in_ = in[1];
  c.out_ = out[0];
  return c;
}

Child& Child::operator=(Child&& o) noexcept {
  std::swap(pid_, o.pid_);
  std::swap(in_, o.in_);
  std::swap(out_, o.out_);
  std::swap(buffer_, o.buffer_);
  return *this;
}

Child::~Child() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (in_ >= 0) close(in_);
  if (out_ >= 0) close(out_);
}

std::string Child::WaitLine(const std::string& prefix, double seconds) {
  const auto t0 = Clock::now();
  for (;;) {
    size_t nl;
    while ((nl = buffer_.find('\n')) != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      all_ += line + "\n";
      if (line.rfind(prefix, 0) == 0) return line;
    }
    const double left = seconds - Since(t0);
    if (left <= 0) return "";
    pollfd p{out_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) return "";
    char buf[4096];
    const ssize_t n = read(out_, buf, sizeof buf);
    if (n <= 0) return "";
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

int Child::Wait(double seconds) {
  const auto t0 = Clock::now();
  while (Since(t0) < seconds) {
    int status;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1000;
}

void Child::Signal(int sig) const {
  kill(pid_, sig);
}

void Child::Send(const std::string& line) const {
  EXPECT_EQ(write(in_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
}

std::string Child::Output() {
  WaitLine("\x01never", 0.2);
  return all_ + buffer_;
}

}  // namespace waste::testing
