#include "clients/wastectl/watch.h"

#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "base/size_text.h"
#include "clients/wastectl/status_view.h"

namespace waste::ctl {
namespace {

// Shades from empty to full, one column each.
const char* const kShadesUtf8[] = {" ", "░", "▒", "▓", "█"};
const char* const kShadesAscii[] = {" ", ".", ":", "+", "#"};
const char* const kBarsUtf8[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
const char* const kBarsAscii[] = {"_", ".", ",", "-", "~", "=", "*", "#"};

std::string U(uint64_t v) {
  return std::to_string(v);
}

// Picks one of `n` symbols for a fraction in [0, 1]; a non-zero fraction
// never shows as the first (empty) one when there is more than one.
const char* Shade(double f, const char* const* symbols, int n, bool zero_is_blank) {
  f = std::clamp(f, 0.0, 1.0);
  if (zero_is_blank) {
    if (f <= 0) return symbols[0];
    return symbols[1 + std::min(n - 2, static_cast<int>(f * (n - 1)))];
  }
  return symbols[std::min(n - 1, static_cast<int>(f * n))];
}

volatile std::sig_atomic_t g_quit = 0;
volatile std::sig_atomic_t g_resized = 0;

class Terminal {
 public:
  Terminal() {
    raw_ = isatty(0) && tcgetattr(0, &saved_) == 0;
    if (raw_) {
      termios t = saved_;
      t.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));  // keys one at a time, unseen
      t.c_cc[VMIN] = 0;
      t.c_cc[VTIME] = 0;
      tcsetattr(0, TCSANOW, &t);
    }
    Write("\x1b[?1049h\x1b[?25l");  // the alternate screen, no cursor
  }
  ~Terminal() {
    Write("\x1b[?25h\x1b[?1049l");
    if (raw_) tcsetattr(0, TCSANOW, &saved_);
  }
  bool keys() const { return raw_; }
  static void Write(const std::string& s) {
    size_t at = 0;
    while (at < s.size()) {
      const ssize_t n = write(1, s.data() + at, s.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      at += static_cast<size_t>(n);
    }
  }
  static void Size(size_t* width, size_t* height) {
    winsize ws{};
    if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
      *width = ws.ws_col;
      *height = ws.ws_row;
    } else {
      *width = 80;
      *height = 24;
    }
  }

 private:
  bool raw_ = false;
  termios saved_{};
};

}  // namespace

void WatchHistory::Add(const DaemonStatus& s, double seconds) {
  if (last) {
    const uint64_t dh = s.hits - std::min(s.hits, last->hits);
    const uint64_t dl = s.late - std::min(s.late, last->late);
    const uint64_t dm = s.misses - std::min(s.misses, last->misses);
    hit_rate_now = HitRate(dh, dl, dm);
    hit_rate.push_back(hit_rate_now);
    const uint64_t db = s.bytes_read - std::min(s.bytes_read, last->bytes_read);
    read_rate = seconds > 0 ? static_cast<double>(db) / seconds : 0;
    while (hit_rate.size() > keep) hit_rate.pop_front();
  }
  last = s;
}

std::vector<std::string> WatchFrame(const DaemonStatus& s, const WatchHistory& h,
                                    const std::string& socket, double interval, size_t width,
                                    size_t height, bool utf8) {
  std::vector<std::string> out;
  char buf[256];
  auto add = [&](const std::string& ascii_line) { out.push_back(Fit(ascii_line, width)); };

  add("wasted " + s.version + ", pid " + U(s.pid) + ", up " + Duration(s.uptime_seconds) + ", " +
      s.arch + " at " + socket);
  add("container " + s.container);
  std::snprintf(buf, sizeof buf,
                "slots %u: %u ready, %u loading, %u failed, %u pinned, %u free; budget %s",
                s.slots, s.slots_ready, s.slots_loading, s.slots_failed, s.slots_pinned,
                s.slots_free(), FormatSize(s.budget).c_str());
  add(buf);
  std::snprintf(buf, sizeof buf, "hit rate %s overall, %s now; %llu hits, %llu late, %llu misses",
                Percent(HitRate(s.hits, s.late, s.misses)).c_str(),
                Percent(h.hit_rate_now).c_str(), static_cast<unsigned long long>(s.hits),
                static_cast<unsigned long long>(s.late),
                static_cast<unsigned long long>(s.misses));
  add(buf);
  std::string flying;
  for (size_t k = 0; k < s.in_flight.size(); ++k)
    flying += (k ? " " : "") + PriorityName(k) + " " + U(s.in_flight[k]);
  add("reads " + U(s.reads) + ", " + FormatSize(s.bytes_read) + ", " +
      FormatSize(static_cast<uint64_t>(h.read_rate)) + "/s now; in flight: " + flying);
  std::snprintf(buf, sizeof buf, "lookahead precision %s, recall %s; clients: %zu",
                Percent(s.lookahead_reads ? std::optional<double>(double(s.lookahead_used) /
                                                                   double(s.lookahead_reads))
                                          : std::nullopt)
                    .c_str(),
                Percent(s.demands() ? std::optional<double>(double(s.demand_hinted) /
                                                             double(s.demands()))
                                    : std::nullopt)
                    .c_str(),
                s.clients.size());
  add(buf);

  // Hit rate per interval, newest at the right.
  {
    std::snprintf(buf, sizeof buf, "hit rate every %.1f s |", interval);
    std::string line = buf;
    const size_t room = width > line.size() + 1 ? width - line.size() - 1 : 0;
    const size_t n = std::min(room, h.hit_rate.size());
    for (size_t i = h.hit_rate.size() - n; i < h.hit_rate.size(); ++i) {
      const auto& r = h.hit_rate[i];
      line += r ? Shade(*r, utf8 ? kBarsUtf8 : kBarsAscii, 8, false) : " ";
    }
    out.push_back(line + "|");
  }

  out.push_back("");
  if (s.clients.empty()) {
    out.push_back("clients: none attached");
  } else {
    for (std::string& l : Table(ClientRows(s, /*compact=*/true), width))
      out.push_back(std::move(l));
  }

  // Occupancy: a row per layer, a cell per bucket of experts, shaded by the
  // share of the bucket's experts whose records are ready.
  const size_t suffix = 16;  // "| 123/256 100.0%"
  const size_t prefix = 6;   // "   12 "
  size_t cells = width > prefix + suffix + 1 ? width - prefix - suffix - 1 : 1;
  const size_t experts = std::max<uint32_t>(s.experts, 1);
  cells = std::min(cells, experts);
  const size_t bucket = (experts + cells - 1) / cells;
  cells = (experts + bucket - 1) / bucket;
  out.push_back("");
  std::snprintf(buf, sizeof buf, "layer |%zu expert%s a cell; shade: share ready|  ready  hit%%",
                bucket, bucket == 1 ? "" : "s");
  add(buf);
  const size_t left = height > out.size() ? height - out.size() : 0;
  const size_t shown = s.layers.size() <= left ? s.layers.size() : (left > 0 ? left - 1 : 0);
  for (size_t i = 0; i < shown; ++i) {
    const LayerStatusInfo& l = s.layers[i];
    std::snprintf(buf, sizeof buf, "%5u |", l.layer);
    std::string line = buf;
    uint32_t ready = 0;
    for (size_t c = 0; c < cells; ++c) {
      uint32_t in = 0, n = 0;
      for (size_t e = c * bucket; e < std::min(experts, (c + 1) * bucket); ++e, ++n)
        in += l.is_resident(static_cast<uint32_t>(e));
      ready += in;
      line += Shade(n ? double(in) / n : 0, utf8 ? kShadesUtf8 : kShadesAscii, 5, true);
    }
    std::snprintf(buf, sizeof buf, "| %3u/%-3u %6s", ready, s.experts,
                  Percent(HitRate(l.hits, l.late, l.misses)).c_str());
    out.push_back(line + buf);
  }
  if (shown < s.layers.size())
    add("  ... " + U(s.layers.size() - shown) + " more layers (a taller terminal shows them)");
  if (out.size() > height) out.resize(height);
  return out;
}

int RunWatch(DaemonClient& client, const std::string& socket, double interval) {
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_quit = 1; };
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: the wait below wakes
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  struct sigaction wsa {};
  wsa.sa_handler = [](int) { g_resized = 1; };
  sigemptyset(&wsa.sa_mask);
  sigaction(SIGWINCH, &wsa, nullptr);

  const char* lang = std::getenv("LC_ALL");
  if (!lang || !*lang) lang = std::getenv("LC_CTYPE");
  if (!lang || !*lang) lang = std::getenv("LANG");
  const std::string locale = lang ? lang : "";
  const bool utf8 = locale.find("UTF-8") != std::string::npos ||
                    locale.find("utf8") != std::string::npos ||
                    locale.find("UTF8") != std::string::npos ||
                    locale.find("utf-8") != std::string::npos;

  WatchHistory history;
  std::string failure;
  {
    Terminal term;
    auto previous = std::chrono::steady_clock::now();
    while (!g_quit) {
      auto status = client.GetStatus();
      if (!status.ok()) {
        failure = status.status().message();
        break;
      }
      const auto now = std::chrono::steady_clock::now();
      history.Add(*status, std::chrono::duration<double>(now - previous).count());
      previous = now;
      size_t width, height;
      Terminal::Size(&width, &height);
      std::vector<std::string> lines =
          WatchFrame(*status, history, socket, interval, width, height - 1, utf8);
      std::time_t t = std::time(nullptr);
      char clock[32];
      std::strftime(clock, sizeof clock, "%H:%M:%S", std::localtime(&t));
      lines.push_back(Fit(std::string(clock) + "  q or Ctrl-C quits", width));
      std::string frame = "\x1b[H";
      for (size_t i = 0; i < lines.size(); ++i)
        frame += lines[i] + "\x1b[K" + (i + 1 < lines.size() ? "\r\n" : "");
      frame += "\x1b[J";
      Terminal::Write(frame);

      // Wait for the next refresh, a key, a resize or a signal.
      const auto until = now + std::chrono::duration<double>(interval);
      while (!g_quit && !g_resized) {
        const double left =
            std::chrono::duration<double>(until - std::chrono::steady_clock::now()).count();
        if (left <= 0) break;
        pollfd p{0, POLLIN, 0};
        const int n = poll(&p, term.keys() ? 1 : 0, static_cast<int>(left * 1000) + 1);
        if (n > 0 && (p.revents & POLLIN)) {
          char key = 0;
          if (read(0, &key, 1) == 1 && (key == 'q' || key == 'Q')) g_quit = 1;
        }
      }
      g_resized = 0;
    }
  }  // the terminal is restored here
  if (!failure.empty()) {
    std::fprintf(stderr, "wastectl: %s\n", failure.c_str());
    return 1;
  }
  return 0;
}

}  // namespace waste::ctl
