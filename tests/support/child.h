// A program run as a child of the test, its output read line by line as it
// comes: a foreground wasted, `waste run` or `chat`, daemon_probe.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace waste::testing {

// Whether something listens on the Unix socket at `path`.
bool Connectable(const std::string& path);

// A child process with a pipe to its stdin and one from its stdout+stderr.
// The destructor kills it (SIGKILL) if it still runs, and reaps it.
class Child {
 public:
  // Starts argv[0] (a path) with the rest as its arguments. `as_uid`: run
  // as this uid and gid (needs root), from a copy of the program that uid
  // can reach (a checkout under /root is out of its reach); -1 to keep ours.
  static Child Run(std::vector<std::string> argv, int as_uid = -1);
  Child() = default;
  Child(Child&& o) noexcept { *this = std::move(o); }
  Child& operator=(Child&& o) noexcept;
  ~Child();

  // Reads output until a line starting with `prefix`; that line, or "" after
  // `seconds` or at end of output.
  std::string WaitLine(const std::string& prefix, double seconds = 10);
  // Waits for the exit; the exit code, or -signal, or -1000 on timeout.
  int Wait(double seconds = 10);
  void Signal(int sig) const;
  void Send(const std::string& line) const;
  pid_t pid() const { return pid_; }
  // Everything read so far plus whatever is left, once the child has exited.
  std::string Output();

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1;
  std::string buffer_, all_;
};

}  // namespace waste::testing
