#include "tests/support/detached_wasted.h"

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/programs.h"

namespace waste::testing {
namespace {

// Whether process `pid` is gone: no such process, or a zombie its parent
// (not us: wasted detached from the command that started it) has yet to reap.
bool Gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');  // the state follows the command's name
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

}  // namespace

DetachedWasted::~DetachedWasted() {
  Stop();
}

Outcome DetachedWasted::Start(const std::string& container, const std::string& dir,
                              const DetachedWastedOptions& o) {
  Stop();
  socket_ = o.socket.empty() ? dir + "/wasted.sock" : o.socket;
  const std::string log = o.log_file.empty() ? dir + "/wasted.log" : o.log_file;
  std::string line = (o.launcher.empty() ? "" : o.launcher + " ") + Bin("wasted") + " " +
                     container + " --socket " + socket_ + " --state-dir " + dir +
                     "/state --log-file " + log + " --idle-exit " + std::to_string(o.idle_exit);
  for (const std::string& flag : o.flags) line += " " + flag;
  const Outcome started = Shell(line);
  if (started.code != 0) return started;
  running_ = true;
  // Its pid, so that Stop can wait for it to be gone. wastectl's stderr
  // is in the output too: the JSON starts at the first brace.
  const Outcome status = Shell(Bin("wastectl") + " status --json --socket " + socket_);
  const size_t brace = status.out.find('{');
  if (status.code == 0 && brace != std::string::npos) {
    const nlohmann::json s = nlohmann::json::parse(status.out.substr(brace), nullptr, false);
    if (s.is_object() && s.contains("pid") && s["pid"].is_number_integer())
      pid_ = s["pid"].get<pid_t>();
  }
  return started;
}

Outcome DetachedWasted::Stop() {
  if (!running_) return {};
  running_ = false;
  const Outcome stopped = Shell(Bin("wastectl") + " stop --socket " + socket_);
  const auto t0 = std::chrono::steady_clock::now();
  while (pid_ > 0 && !Gone(pid_) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  pid_ = -1;
  return stopped;
}

}  // namespace waste::testing
