#include "tests/support/daemon_fixture.h"

#include <fstream>
#include <thread>

#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace waste::testing {

void Daemon::SetUp() {
  dir_ = ScratchDir();
  socket_ = dir_ + "/wasted.sock";
}

std::string Daemon::Synth(const std::string& preset) {
  const std::string out = dir_ + "/" + preset;
  const Outcome r = Shell(Bin("waste") + " synth -q --force --preset " + preset + " " + out);
  EXPECT_EQ(r.code, 0) << r.out;
  return out;
}

void Daemon::StartDaemon(const std::string& container, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {Bin("wasted"), container, "--socket", socket_,
                                   "--foreground", "--state-dir", dir_ + "/state"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  daemon_ = Child::Run(argv);
  const auto t0 = Clock::now();
  while (!Connectable(socket_)) {
    ASSERT_LT(Since(t0), 20) << "wasted did not start listening: " << daemon_.Output();
    ASSERT_EQ(daemon_.Wait(0), -1000) << "wasted exited: " << daemon_.Output();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

nlohmann::json Daemon::Status() {
  const Outcome r = Shell(Bin("wastectl") + " status --json --socket " + socket_);
  EXPECT_EQ(r.code, 0) << r.out;
  try {
    return nlohmann::json::parse(r.out);
  } catch (...) {
    ADD_FAILURE() << "not JSON: " << r.out;
    return nlohmann::json::object();
  }
}

std::vector<uint8_t> Daemon::Logits(const std::string& container, const std::string& flags,
                                    const std::string& tag, const std::string& ids) {
  const std::string file = dir_ + "/logits-" + tag;
  const Outcome r = Shell(Bin("waste") + " eval " + container + " --ids " + ids +
                          " --threads 2 --logits " + file + " --socket " + socket_ + " " + flags);
  EXPECT_EQ(r.code, 0) << r.out;
  auto bytes = FileBytes(file);
  EXPECT_FALSE(bytes.empty()) << r.out;
  return bytes;
}

std::vector<std::string> Daemon::Probe(const std::string& container,
                                       const std::vector<std::string>& args) {
  std::vector<std::string> argv = {Bin("daemon_probe"), socket_, container};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

uint64_t Daemon::DaemonRss() {
  std::ifstream f("/proc/" + std::to_string(daemon_.pid()) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

}  // namespace waste::testing
