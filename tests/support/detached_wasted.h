// A wasted started the way a user starts it: detached (the command returns
// once the daemon listens, or with its reason for not starting), on a
// socket in a directory of the test's own, so that tests running in
// parallel never meet each other's daemon.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tests/test_util.h"

namespace waste::testing {

struct DetachedWastedOptions {
  std::string socket;              // "": DIR/wasted.sock
  std::string log_file;            // "": DIR/wasted.log
  std::vector<std::string> flags;  // more of wasted's flags, e.g. {"--budget", "64M"}
  // Seconds without clients after which wasted leaves by itself: the
  // backstop should the test end before it stops the daemon (a crash).
  int idle_exit = 30;
  // A command line wasted runs under (e.g. "prlimit --memlock=0:0"); "" none.
  std::string launcher;
};

class DetachedWasted {
 public:
  DetachedWasted() = default;
  // Stops the daemon if it still runs, and waits for it to be gone.
  ~DetachedWasted();
  DetachedWasted(const DetachedWasted&) = delete;
  DetachedWasted& operator=(const DetachedWasted&) = delete;

  // Runs `[launcher] wasted CONTAINER --socket S --state-dir DIR/state
  // --log-file L --idle-exit N FLAGS...`: what the command did (exit code 0
  // once wasted listens). On success the daemon is this object's to stop;
  // one it still runs from an earlier Start is stopped first.
  Outcome Start(const std::string& container, const std::string& dir,
                const DetachedWastedOptions& o = {});
  // `wastectl stop`: what it did; then waits (10 s at the most) for the
  // daemon to be gone. When it was not started (or is stopped
  // already) nothing is run and the outcome is the empty one (code -1).
  Outcome Stop();

  // Whether it was started and is not stopped yet.
  bool running() const { return running_; }
  const std::string& socket() const { return socket_; }
  // The daemon's pid (from `wastectl status`), -1 when it is not running.
  pid_t pid() const { return pid_; }

 private:
  std::string socket_;
  pid_t pid_ = -1;
  bool running_ = false;
};

}  // namespace waste::testing
