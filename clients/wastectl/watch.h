// `wastectl status --watch`: a live view that redraws in place, the way top
// does, with plain ANSI escapes (no curses): the alternate screen, a hidden
// cursor and the terminal's own modes are restored on exit, on q, on Ctrl-C
// and on SIGTERM or SIGHUP.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "link/daemon_client.h"

namespace waste::ctl {

// What the view remembers between refreshes.
struct WatchHistory {
  std::optional<DaemonStatus> last;            // the previous refresh's status
  std::deque<std::optional<double>> hit_rate;  // per interval, newest last; empty: no demand
  double read_rate = 0;                        // bytes per second over the last interval
  std::optional<double> hit_rate_now;          // over the last interval
  size_t keep = 200;                           // intervals kept

  // Takes in a new status (`seconds` after the previous one).
  void Add(const DaemonStatus& s, double seconds);
};

// One screen, as lines of at most `width` columns and at most `height`
// lines. `utf8`: shades and bars from Unicode blocks, else ASCII.
std::vector<std::string> WatchFrame(const DaemonStatus& s, const WatchHistory& h,
                                    const std::string& socket, double interval, size_t width,
                                    size_t height, bool utf8);

// Runs the view over `client` until asked to stop; the process's exit code
// (0 on q or a signal, 1 when the daemon fails or goes away, with a message
// printed after the terminal is restored).
int RunWatch(DaemonClient& client, const std::string& socket, double interval);

}  // namespace waste::ctl
