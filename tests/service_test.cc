// wasted as a system service: what `cmake --install` puts where, the systemd
// units (systemd-analyze verify where it is installed), the readiness
// protocol (a datagram socket in the test stands in for systemd's
// NOTIFY_SOCKET), journal priorities on stderr, reloading the settings
// (wastectl reload and SIGHUP), the settings file against the flags, and the
// default socket a client looks for. Each test starts its own daemon on a
// tiny synthetic container.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "link/daemon_client.h"
#include "tests/support/child.h"
#include "tests/support/detached_wasted.h"
#include "tests/support/programs.h"
#include "tests/test_util.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using waste::testing::Bin;
using waste::testing::Connectable;
using waste::testing::ReadText;
using waste::testing::WriteText;
using waste::testing::Outcome;
using waste::testing::Shell;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool Has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// wasted in the foreground as a child, its stdout and stderr into a pipe,
// with extra environment variables. `journal`: set JOURNAL_STREAM to the
// pipe's device and inode, as systemd does for a service's stderr.
class Wasted {
 public:
  // `launcher`: a program that runs wasted (e.g. strace and its flags).
  Wasted(const std::vector<std::string>& args, const std::vector<std::string>& env,
         bool journal = false, const std::vector<std::string>& launcher = {}) {
    int out[2];
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    std::vector<std::string> environment = env;
    if (journal) {
      struct stat st {};
      fstat(out[1], &st);
      environment.push_back("JOURNAL_STREAM=" + std::to_string(st.st_dev) + ":" +
                            std::to_string(st.st_ino));
    }
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(out[1], 2);
      for (const std::string& e : environment) putenv(const_cast<char*>(e.c_str()));
      const std::string bin = Bin("wasted");
      std::vector<char*> argv;
      for (const auto& a : launcher) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(const_cast<char*>(launcher.empty() ? "wasted" : bin.c_str()));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(launcher.empty() ? bin.c_str() : launcher[0].c_str(), argv.data());
      _exit(127);
    }
    close(out[1]);
    out_ = out[0];
  }
  ~Wasted() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }
  void Signal(int sig) const { kill(pid_, sig); }
  // The exit code, -signal, or -1000 after `seconds`.
  int Wait(double seconds) {
    const auto t0 = Clock::now();
    do {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (Since(t0) < seconds);
    return -1000;
  }
  // What it wrote so far (reads what is in the pipe without blocking).
  std::string Output() {
    char buf[4096];
    for (;;) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) break;
      const ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) break;
      output_.append(buf, static_cast<size_t>(n));
    }
    return output_;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string output_;
};

// A datagram socket standing in for systemd's notification socket.
class NotifySocket {
 public:
  // `path` may start with '@': a socket in the abstract namespace, as
  // systemd allows for NOTIFY_SOCKET.
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path, path.data(), std::min(path.size(), sizeof a.sun_path - 1));
    socklen_t len = sizeof a;
    if (path[0] == '@') {
      a.sun_path[0] = '\0';
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size());
    } else {
      unlink(path.c_str());
    }
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), len), 0) << std::strerror(errno);
  }
  ~NotifySocket() {
    close(fd_);
    if (path_[0] != '@') unlink(path_.c_str());
  }
  // The next datagram that contains `what`, or "" after `seconds`; every
  // datagram read on the way is kept in seen().
  std::string Await(const std::string& what, double seconds = 30) {
    const auto t0 = Clock::now();
    while (Since(t0) < seconds) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) continue;
      std::string message(buf, static_cast<size_t>(n));
      seen_ += message + "\n--\n";
      if (Has(message, what)) return message;
    }
    return "";
  }
  const std::string& seen() const { return seen_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::string seen_;
};

class Service : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = waste::testing::ScratchDir();
    socket_ = dir_ + "/wasted.sock";
  }

  std::string Synth() {
    const std::string out = dir_ + "/tiny-kimi";
    const Outcome r = Shell(Bin("waste") + " synth -q --force --preset tiny-kimi " + out);
    EXPECT_EQ(r.code, 0) << r.out;
    return out;
  }

  // Waits for the daemon's socket; false (with a failure) if it never came.
  bool AwaitListening(Wasted& d) {
    const auto t0 = Clock::now();
    while (!Connectable(socket_)) {
      if (Since(t0) > 30 || d.Wait(0) != -1000) {
        ADD_FAILURE() << "wasted did not start listening: " << d.Output();
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  Outcome Ctl(const std::string& args) {
    return Shell(Bin("wastectl") + " " + args + " --socket " + socket_);
  }

  std::string dir_, socket_;
};

// ---- Installation ----

// One `cmake --install` into a scratch prefix, shared by the tests below.
class Installed : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One per process: ctest runs each test of this suite as a process of its own.
    prefix_ = new std::string(fs::path(::testing::TempDir()) /
                              ("waste-install-" + std::to_string(getpid())));
    fs::remove_all(*prefix_);
    install_ = new Outcome(
        Shell("cmake --install " + std::string(WASTE_BUILD_DIR) + " --prefix " + *prefix_));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*prefix_);
    delete prefix_;
    delete install_;
  }
  void SetUp() override { ASSERT_EQ(install_->code, 0) << install_->out; }
  static std::string At(const std::string& rel) { return *prefix_ + "/" + rel; }

  static std::string* prefix_;
  static Outcome* install_;
};
std::string* Installed::prefix_ = nullptr;
Outcome* Installed::install_ = nullptr;

TEST_F(Installed, ProgramsUnitsAccountAndExampleAreWhereDebianLooks) {
  for (const char* prog : {"bin/waste", "bin/wastectl", "bin/wasted", "bin/waste-diskbench"}) {
    EXPECT_EQ(access(At(prog).c_str(), X_OK), 0) << prog << " missing or not executable";
  }
  const Outcome v = Shell(At("bin/wasted") + " --version");
  EXPECT_EQ(v.code, 0);
  EXPECT_TRUE(Has(v.out, "wasted ")) << v.out;

  // The units name the installed programs by absolute path.
  const std::string unit = ReadText(At("lib/systemd/system/wasted.service"));
  EXPECT_TRUE(Has(unit, "ExecStart=" + At("bin/wasted") + " --foreground --config "
                            "/etc/wasted/wasted.conf --socket /run/wasted/wasted.sock"))
      << unit;
  EXPECT_TRUE(Has(unit, "ExecReload=" + At("bin/wastectl") + " reload --socket "
                            "/run/wasted/wasted.sock"))
      << unit;
  for (const char* line : {"Type=notify", "LimitMEMLOCK=infinity", "User=wasted",
                           "RuntimeDirectory=wasted", "StateDirectory=wasted"})
    EXPECT_TRUE(Has(unit, std::string("\n") + line + "\n")) << line;
  EXPECT_FALSE(Has(unit, "@WASTED_")) << "a placeholder was left: " << unit;
  const std::string tmpl = ReadText(At("lib/systemd/system/wasted@.service"));
  EXPECT_TRUE(Has(tmpl, "--config /etc/wasted/%i.conf --socket /run/wasted/%i.sock")) << tmpl;
  EXPECT_TRUE(Has(tmpl, "ExecReload=" + At("bin/wastectl") + " reload --socket "
                            "/run/wasted/%i.sock"))
      << tmpl;

  EXPECT_TRUE(Has(ReadText(At("lib/sysusers.d/wasted.conf")), "\nu wasted "));
  const std::string example = ReadText(At("share/doc/waste/wasted.conf.example"));
  EXPECT_TRUE(Has(example, "#budget = ")) << "the example settings are not installed";
}

// A Debian package stages with DESTDIR: the files land under it, and the
// units name the programs where they will be once installed, not the stage.
TEST(Install, DestdirStagesWithoutLeakingIntoTheUnits) {
  const std::string stage = waste::testing::ScratchDir();
  const Outcome r = Shell("DESTDIR=" + stage + " cmake --install " +
                          std::string(WASTE_BUILD_DIR) + " --prefix /usr");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(access((stage + "/usr/bin/wasted").c_str(), X_OK), 0);
  const std::string unit = ReadText(stage + "/usr/lib/systemd/system/wasted.service");
  EXPECT_TRUE(Has(unit, "\nExecStart=/usr/bin/wasted --foreground ")) << unit;
  EXPECT_TRUE(Has(unit, "\nExecReload=/usr/bin/wastectl reload ")) << unit;
  EXPECT_FALSE(Has(unit, stage)) << unit;
  EXPECT_TRUE(fs::exists(stage + "/usr/lib/sysusers.d/wasted.conf"));
  EXPECT_TRUE(fs::exists(stage + "/usr/share/doc/waste/wasted.conf.example"));
  fs::remove_all(stage);
}

TEST_F(Installed, ManPagesRenderWithTheFlags) {
#ifndef WASTE_HAVE_MAN_PAGES
  GTEST_SKIP() << "SKIP: help2man was not found when configuring; no man pages were built";
#else
  for (const char* page : {"share/man/man1/waste.1", "share/man/man1/wastectl.1",
                           "share/man/man8/wasted.8", "share/man/man5/wasted.conf.5"}) {
    const std::string text = ReadText(At(page));
    EXPECT_TRUE(Has(text, ".TH ")) << page << " is missing or not a man page";
  }
  const std::string wasted = ReadText(At("share/man/man8/wasted.8"));
  for (const char* part : {"\\-\\-budget", "\\-\\-config", "SIGHUP", "/run/wasted/NAME.sock",
                           "READY=1"})
    EXPECT_TRUE(Has(wasted, part)) << part << " not in wasted(8)";
  if (Shell("command -v groff").code != 0)  // scripts/deps.sh installs groff-base
    GTEST_SKIP() << "SKIP: groff is not installed; wasted(8) was checked but not rendered";
  const Outcome r = Shell("groff -man -Tutf8 -ww -P-cbou " + At("share/man/man8/wasted.8"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "warning")) << r.out;
  EXPECT_TRUE(Has(r.out, "--io-depth")) << r.out;
#endif
}

// wasted.conf(5) is written from the example settings: every setting in it.
TEST_F(Installed, TheSettingsManPageIsTheExample) {
  const std::string page = ReadText(At("share/man/man5/wasted.conf.5"));
  ASSERT_TRUE(Has(page, ".TH WASTED.CONF 5")) << page;
  for (const char* entry : {"\\fBio\\-depth = 2\\fR", "\\fBpolicy = lfru\\fR",
                            "\\fBbudget = \"\"\\fR", "\\fBallow\\-uid = 1000\\fR"})
    EXPECT_TRUE(Has(page, entry)) << entry << " not in wasted.conf(5):\n" << page;
  if (Shell("command -v groff").code != 0)
    GTEST_SKIP() << "SKIP: groff is not installed; wasted.conf(5) was checked but not rendered";
  const Outcome r = Shell("groff -man -Tutf8 -ww -P-cbou " + At("share/man/man5/wasted.conf.5"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "warning")) << r.out;
  EXPECT_TRUE(Has(r.out, "save-interval = 300")) << r.out;
  EXPECT_TRUE(Has(r.out, "Seconds between saves of the use counts")) << r.out;
}

TEST_F(Installed, UnitsPassSystemdAnalyzeVerify) {
  if (Shell("command -v systemd-analyze").code != 0)
    GTEST_SKIP() << "SKIP: systemd-analyze is not installed; the units were not verified";
  // The template is verified as an instance, wasted@demo.service.
  const std::string units = At("verify");
  fs::create_directories(units);
  fs::copy_file(At("lib/systemd/system/wasted.service"), units + "/wasted.service",
                fs::copy_options::overwrite_existing);
  fs::copy_file(At("lib/systemd/system/wasted@.service"), units + "/wasted@.service",
                fs::copy_options::overwrite_existing);
  fs::copy_file(At("lib/systemd/system/waste-serve@.service"), units + "/waste-serve@.service",
                fs::copy_options::overwrite_existing);
  for (const char* unit : {"wasted.service", "wasted@demo.service", "waste-serve@demo.service"}) {
    const Outcome r = Shell("cd " + units + " && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify "
                            "--man=no ./" + unit);
    EXPECT_EQ(r.code, 0) << unit << ":\n" << r.out;
    EXPECT_EQ(r.out, "") << unit << " drew complaints:\n" << r.out;
  }
  // systemd's own score of the sandbox (0 best, 10 worst): the hardening
  // options are there and recognized.
  const Outcome sec = Shell("cd " + units + " && systemd-analyze security --offline=yes "
                            "--no-pager ./wasted.service");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(sec.out, m, std::regex("Overall exposure level for "
                                                       "wasted.service: ([0-9.]+)")))
      << sec.out;
  EXPECT_LE(std::stod(m[1]), 2.0) << sec.out;
}

// ---- Readiness and journal ----

// READY=1 arrives once the socket accepts connections; SIGHUP brings
// RELOADING=1, the file applied, then READY=1; SIGTERM brings STOPPING=1
// and a clean exit.
TEST_F(Service, TellsSystemdWhenReadyReloadingAndStopping) {
  const std::string c = Synth();
  const std::string conf = dir_ + "/wasted.conf";
  WriteText(conf, "log-level = info\n");
  NotifySocket notify(dir_ + "/notify.sock");
  Wasted d({c, "--config", conf, "--socket", socket_, "--foreground", "--state-dir",
            dir_ + "/state"},
           {"NOTIFY_SOCKET=" + dir_ + "/notify.sock"});
  const std::string ready = notify.Await("READY=1");
  ASSERT_NE(ready, "") << "no READY=1; datagrams: " << notify.seen() << "\nwasted: " << d.Output();
  EXPECT_TRUE(Connectable(socket_)) << "READY=1 came before the socket listened";
  EXPECT_TRUE(Has(ready, "STATUS=serving " + fs::canonical(c).string() + " on " + socket_ +
                             ", 0 clients"))
      << ready;

  // The status line follows the clients.
  const Outcome run = Shell(Bin("waste") + " run " + c + " --ids 1,2 -n 1 --socket " + socket_);
  EXPECT_EQ(run.code, 0) << run.out;
  EXPECT_NE(notify.Await(", 1 client"), "") << notify.seen();
  EXPECT_NE(notify.Await(", 0 clients"), "") << notify.seen();

  WriteText(conf, "log-level = debug\n");
  d.Signal(SIGHUP);
  EXPECT_NE(notify.Await("RELOADING=1"), "") << notify.seen();
  EXPECT_NE(notify.Await("READY=1"), "") << notify.seen();
  EXPECT_TRUE(Has(d.Output(), "reloaded settings (SIGHUP): applied log-level: info -> debug"))
      << d.Output();
  EXPECT_EQ(Ctl("status").code, 0) << "not serving after the reload";

  d.Signal(SIGTERM);
  const std::string stopping = notify.Await("STOPPING=1");
  EXPECT_TRUE(Has(stopping, "STATUS=stopping: signal")) << notify.seen();
  EXPECT_EQ(d.Wait(20), 0) << d.Output();
}

// systemd may name an abstract socket ("@...") in NOTIFY_SOCKET.
TEST_F(Service, TellsSystemdThroughAnAbstractSocket) {
  const std::string c = Synth();
  const std::string name = "@waste-service-test-" + std::to_string(getpid());
  NotifySocket notify(name);
  Wasted d({c, "--socket", socket_, "--foreground", "--state-dir", dir_ + "/state"},
           {"NOTIFY_SOCKET=" + name});
  EXPECT_NE(notify.Await("READY=1"), "") << notify.seen() << "\nwasted: " << d.Output();
  d.Signal(SIGTERM);
  EXPECT_NE(notify.Await("STOPPING=1"), "") << notify.seen();
  EXPECT_EQ(d.Wait(20), 0) << d.Output();
}

// What the unit gives wasted, without systemd: a user of its own, no
// capabilities, no new privileges, a memlock limit above the trunk (the unit
// says infinity; here the limit this process has, which it cannot raise
// without CAP_SYS_RESOURCE). The trunk is wired and records are read
// (O_DIRECT) and served. Needs root and setpriv.
TEST_F(Service, AsTheUnitRunsItUnprivilegedTheTrunkIsWired) {
  if (geteuid() != 0 || Shell("command -v setpriv").code != 0)
    GTEST_SKIP() << "SKIP: needs root and setpriv to run wasted as uid 65534";
  rlimit memlock{};
  getrlimit(RLIMIT_MEMLOCK, &memlock);
  if (memlock.rlim_cur != RLIM_INFINITY && memlock.rlim_cur < (4u << 20))
    GTEST_SKIP() << "SKIP: the memlock limit (" << memlock.rlim_cur
                 << " bytes) is below the tiny trunk's 1.6 MiB and a bit";
  const std::string c = Synth();
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  const std::string run = dir_ + "/run", state = dir_ + "/state";
  for (const std::string& d : {run, state}) {
    fs::create_directories(d);
    ASSERT_EQ(chown(d.c_str(), 65534, 65534), 0);
  }
  socket_ = run + "/wasted.sock";
  const std::string log = run + "/wasted.log";
  waste::testing::DetachedWasted wasted;
  waste::testing::DetachedWastedOptions o;
  o.socket = socket_;
  o.log_file = log;
  o.launcher = "setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs "
               "--bounding-set -all --inh-caps -all";
  const Outcome r = wasted.Start(c, dir_, o);  // its state in dir_/state
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string eval = Bin("waste") + " eval " + c + " --ids 3,14,15,92 --threads 2 --logits ";
  Outcome through = Shell(eval + dir_ + "/served --socket " + socket_);
  EXPECT_EQ(through.code, 0) << through.out;
  Outcome local = Shell(eval + dir_ + "/local --local");
  EXPECT_EQ(local.code, 0) << local.out;
  EXPECT_EQ(waste::testing::FileBytes(dir_ + "/served"), waste::testing::FileBytes(dir_ + "/local"));
  const json s = json::parse(Ctl("status --json").out);
  EXPECT_EQ(s["trunk_wired"], true) << s.dump();
  EXPECT_GT(s["reads"].get<int>(), 0) << s.dump();
  EXPECT_EQ(s["read_errors"], 0) << s.dump();
  EXPECT_EQ(wasted.Stop().code, 0);
  const std::string text = ReadText(log);
  EXPECT_TRUE(Has(text, "uid 65534")) << text;
  EXPECT_FALSE(Has(text, "NOT wired")) << text;
}

// ProtectSystem=strict without systemd: in a mount namespace of its own
// every filesystem is read-only but the runtime and state directories, and
// wasted runs there as uid 65534 without capabilities. It serves, saves its
// use counts and stops cleanly: it writes nowhere else. Needs root and
// unshare (util-linux) allowed to make a mount namespace.
TEST_F(Service, UnderAReadOnlySystemItWritesOnlyItsOwnDirectories) {
  if (geteuid() != 0 || Shell("unshare -m --propagation private true && command -v setpriv").code != 0)
    GTEST_SKIP() << "SKIP: needs root, setpriv and unshare allowed to make a mount namespace";
  const std::string c = Synth();
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  const std::string run = dir_ + "/run", state = dir_ + "/state";
  for (const std::string& d : {run, state}) {
    fs::create_directories(d);
    ASSERT_EQ(chown(d.c_str(), 65534, 65534), 0);
  }
  socket_ = run + "/wasted.sock";
  const std::string script = dir_ + "/sandbox.sh";
  WriteText(script, "set -u\n"
            "R=" + run + "; S=" + state + "\n"
            "mount --bind $R $R && mount --bind $S $S || exit 9\n"
            // every mount read-only, as ProtectSystem=strict; /proc, /sys, /dev as they are
            "awk '$3 !~ /^(proc|sysfs|devtmpfs|devpts|mqueue|cgroup2?|tmpfs)$/ {print $2}' "
            "/proc/self/mounts | while read m; do mount -o remount,bind,ro \"$m\"; done\n"
            "mount -o remount,bind,rw $R && mount -o remount,bind,rw $S || exit 8\n"
            "touch " + dir_ + "/writable 2>/dev/null && echo NOT-READ-ONLY\n"
            "setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs --bounding-set -all "
            "--inh-caps -all " + Bin("wasted") + " " + c + " --socket $R/wasted.sock --state-dir $S "
            "--log-file $R/wasted.log --save-interval 1 --idle-exit 30 || exit 7\n" +
            Bin("waste") + " eval " + c + " --ids 3,14,15 --threads 2 --socket $R/wasted.sock "
            ">/dev/null; echo eval=$?\n"
            "sleep 1.2\n" +  // a periodic save
            Bin("wastectl") + " reload --socket $R/wasted.sock >/dev/null; echo reload=$?\n" +
            Bin("wastectl") + " stop --socket $R/wasted.sock >/dev/null; echo stop=$?\n"
            "for i in $(seq 100); do [ -e $R/wasted.sock ] || break; sleep 0.05; done\n");
  const Outcome r = Shell("unshare -m --propagation private sh " + script);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(Has(r.out, "NOT-READ-ONLY")) << "the sandbox was not read-only: " << r.out;
  EXPECT_TRUE(Has(r.out, "eval=0\nreload=0\nstop=0\n")) << r.out;
  const std::string log = ReadText(run + "/wasted.log");
  EXPECT_TRUE(Has(log, "uid 65534") && Has(log, "wired") && Has(log, "client 1 attached") &&
              Has(log, "use counts saved to " + state + "/") && Has(log, "stopped"))
      << log;
  EXPECT_FALSE(Has(log, "error") || Has(log, "warning")) << log;
  EXPECT_FALSE(fs::exists(socket_)) << "the socket was left behind";
}

#ifndef WASTE_SANITIZE
// The system calls named by a systemd syscall-filter set, nested sets expanded.
std::set<std::string> SyscallSet(const std::string& set) {
  std::set<std::string> out;
  const Outcome r = Shell("systemd-analyze syscall-filter " + set);
  std::istringstream lines(r.out);
  std::string line;
  std::getline(lines, line);  // the set's own name
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string name;
    if (!(words >> name) || name[0] == '#') continue;
    if (name[0] == '@') {
      const std::set<std::string> nested = SyscallSet(name);
      out.insert(nested.begin(), nested.end());
    } else {
      out.insert(name);
    }
  }
  return out;
}

// Every system call wasted makes (start, a client's reads, a reload by
// SIGHUP and by call with a group to check, periodic saves, stop) is in the
// unit's SystemCallFilter=@system-service: the seccomp filter cannot kill it.
// And none maps memory writable and executable (MemoryDenyWriteExecute).
//
// A sanitizer build has no such test: the trace would be of the sanitizer's
// runtime as much as of wasted (its mlock is intercepted, never made), and
// LeakSanitizer aborts under ptrace.
TEST_F(Service, EverySystemCallIsInTheUnitsFilter) {
  if (Shell("command -v systemd-analyze && strace -f -qq -o /dev/null true").code != 0)
    GTEST_SKIP() << "SKIP: needs systemd-analyze and a strace allowed to trace, to compare "
                    "wasted's system calls with the unit's filter";
  const std::set<std::string> allowed = SyscallSet("@system-service");
  ASSERT_GT(allowed.size(), 100u) << "systemd-analyze did not list @system-service";
  const std::string c = Synth();
  const std::string conf = dir_ + "/wasted.conf", trace = dir_ + "/strace.txt";
  WriteText(conf, "save-interval = 1\n");
  NotifySocket notify(dir_ + "/notify.sock");
  Wasted d({c, "--config", conf, "--socket", socket_, "--foreground", "--state-dir",
            dir_ + "/state"},
           {"NOTIFY_SOCKET=" + dir_ + "/notify.sock"}, /*journal=*/false,
           {"/usr/bin/env", "strace", "-f", "-qq", "-o", trace});
  ASSERT_NE(notify.Await("READY=1", 60), "") << d.Output();
  const Outcome eval = Shell(Bin("waste") + " eval " + c + " --ids 3,14,15,92 --threads 2 --socket " +
                             socket_);
  EXPECT_EQ(eval.code, 0) << eval.out;
  WriteText(conf, "save-interval = 1\nallow-group = 0\nallow-uid = 65534\n");
  EXPECT_EQ(Ctl("reload").code, 0);
  const json s = json::parse(Ctl("status --json").out);
  WriteText(conf, "save-interval = 1\nlog-level = debug\n");
  kill(s["pid"].get<pid_t>(), SIGHUP);
  EXPECT_NE(notify.Await("RELOADING=1"), "") << notify.seen();
  EXPECT_NE(notify.Await("READY=1"), "") << notify.seen();
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // a periodic save
  EXPECT_EQ(Ctl("stop").code, 0);
  EXPECT_EQ(d.Wait(30), 0) << d.Output();

  std::set<std::string> used;
  std::istringstream lines(ReadText(trace));
  const std::regex call(R"(^\d+\s+(?:<\.\.\. )?([a-z_0-9]+)[( ])");
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, call)) used.insert(m[1]);
    // MemoryDenyWriteExecute=yes: no writable and executable mapping, and
    // nothing made executable after the fact (the loader maps libraries
    // read+exec from their files, which it allows).
    const bool exec = Has(line, "PROT_EXEC");
    EXPECT_FALSE(exec && (Has(line, "PROT_WRITE") || Has(line, "mprotect(") ||
                          Has(line, "pkey_mprotect(")))
        << "MemoryDenyWriteExecute would refuse: " << line;
  }
  for (const char* needed : {"mlock", "memfd_create", "pread64", "bind", "sendmsg", "chown"})
    EXPECT_TRUE(used.count(needed)) << needed << " not seen: is the trace complete?";
  std::string outside;
  for (const std::string& u : used)
    if (!allowed.count(u)) outside += " " + u;
  EXPECT_EQ(outside, "") << "system calls outside @system-service:" << outside;
}
#endif

// Under systemd ($JOURNAL_STREAM names stderr) each line starts with its
// syslog priority, which the journal takes as its level.
TEST_F(Service, LogLinesCarryJournalPriorities) {
  const std::string c = Synth();
  Wasted d({c, "--socket", socket_, "--foreground", "--state-dir", dir_ + "/state"}, {}, true);
  ASSERT_TRUE(AwaitListening(d));
  const Outcome r = Shell(Bin("waste") + " run " + c + " --ids 1,2 -n 1 --socket " + socket_);
  EXPECT_EQ(r.code, 0) << r.out;
  // The daemon sees the client's connection end a moment after it exits.
  const auto t0 = Clock::now();
  while (!json::parse(Ctl("status --json").out)["clients"].empty() && Since(t0) < 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  d.Signal(SIGTERM);
  EXPECT_EQ(d.Wait(20), 0);
  const std::string out = d.Output();
  EXPECT_TRUE(Has(out, "<6>info: wasted ")) << out;
  EXPECT_TRUE(Has(out, "<6>info: client 1 attached: pid ")) << out;
  EXPECT_TRUE(Has(out, "<6>info: client 1 detached (pid ")) << out;
  EXPECT_TRUE(Has(out, "<6>info: stopped")) << out;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    EXPECT_TRUE(std::regex_search(line, std::regex("^<[0-7]>"))) << "no priority: " << line;
}

// ---- Reload ----

// `wastectl reload` applies log-level and idle-exit at once, reports a budget
// change as needing a restart, and refuses a broken file keeping everything.
TEST_F(Service, ReloadAppliesWhatItCanAndNamesWhatNeedsARestart) {
  const std::string c = Synth();
  const std::string conf = dir_ + "/wasted.conf";
  const std::string log = dir_ + "/wasted.log";
  WriteText(conf, "log-level = error\nbudget = 64M\n");
  Wasted d({c, "--config", conf, "--socket", socket_, "--foreground", "--state-dir",
            dir_ + "/state", "--log-file", log},
           {});
  ASSERT_TRUE(AwaitListening(d));
  EXPECT_FALSE(Has(ReadText(log), "serving")) << "info lines logged at log-level error";

  WriteText(conf, "log-level = info\nbudget = 128M\n");
  Outcome r = Ctl("reload");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "applied   log-level: error -> info")) << r.out;
  EXPECT_TRUE(Has(r.out, "takes effect at restart   budget: 64.00 MiB -> 128.00 MiB")) << r.out;
  std::string text = ReadText(log);
  EXPECT_TRUE(Has(text, "applied log-level: error -> info")) << text;
  EXPECT_TRUE(Has(text, "NOT applied until wasted restarts: budget: 64.00 MiB -> 128.00 MiB")) << text;
  EXPECT_EQ(Ctl("status --json").out.find("\"total\": 67108864") != std::string::npos, true)
      << "the budget changed while running";

  // Reloading the same file again changes nothing but still names the budget.
  r = Ctl("reload --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["applied"].size(), 0u) << r.out;
  EXPECT_EQ(j["need_restart"].size(), 1u) << r.out;

  // A file that does not parse: refused, with the name, and nothing changes.
  WriteText(conf, "log-level = debug\nbugdet = 1G\n");
  r = Ctl("reload");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "bugdet") && Has(r.out, "running settings are kept")) << r.out;
  EXPECT_TRUE(Has(ReadText(log), "bugdet")) << ReadText(log);
  EXPECT_EQ(Ctl("status").code, 0);

  // idle-exit, applied while running: with no clients the daemon leaves.
  WriteText(conf, "log-level = info\nbudget = 64M\nidle-exit = 1\n");
  r = Ctl("reload");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "idle-exit: 0 -> 1")) << r.out;
  EXPECT_EQ(d.Wait(15), 0) << "idle-exit from a reload did not take: " << d.Output();
  EXPECT_TRUE(Has(ReadText(log), "stopping: no clients for 1 s")) << ReadText(log);
}

// allow-uid, reloaded: a uid refused before the reload is let in after it,
// and the socket's mode follows allow-group. Needs root (to be another uid).
TEST_F(Service, ReloadChangesWhoMayAttach) {
  if (geteuid() != 0 || Shell("command -v setpriv").code != 0)
    GTEST_SKIP() << "SKIP: needs root and util-linux's setpriv to run wastectl as uid 65534";
  const std::string c = Synth();
  const std::string conf = dir_ + "/wasted.conf";
  WriteText(conf, "budget = 64M\n");
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  Wasted d({c, "--config", conf, "--socket", socket_, "--foreground", "--state-dir",
            dir_ + "/state"},
           {});
  ASSERT_TRUE(AwaitListening(d));
  ASSERT_EQ(chmod(socket_.c_str(), 0666), 0);  // so that the daemon's uid check decides
  const std::string as_nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups " +
                                Bin("wastectl") + " status --socket " + socket_;
  Outcome r = Shell(as_nobody);
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_TRUE(Has(r.out, "uid 65534 may not use this wasted")) << r.out;

  WriteText(conf, "budget = 64M\nallow-uid = 65534\n");
  r = Ctl("reload");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "applied   allow-uid: none -> 65534")) << r.out;
  r = Shell(as_nobody);
  EXPECT_EQ(r.code, 0) << r.out;

  WriteText(conf, "budget = 64M\nallow-uid = 65534\nallow-group = 0\n");
  r = Ctl("reload");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "applied   allow-group: none -> ")) << r.out;
  struct stat st {};
  ASSERT_EQ(stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, 0u);

  WriteText(conf, "budget = 64M\n");
  ASSERT_EQ(Ctl("reload").code, 0);
  ASSERT_EQ(stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(chmod(socket_.c_str(), 0666), 0);
  EXPECT_EQ(Shell(as_nobody).code, 4) << "a uid taken out by a reload still gets in";
}

// ---- Settings file and flags ----

// The example settings name every flag of wasted --help, and with every line
// uncommented it is accepted as it stands (the names exist, the values parse).
TEST_F(Service, TheExampleSettingsNameEveryFlagAndParse) {
  const std::string example = ReadText(std::string(WASTE_SOURCE_DIR) + "/ops/wasted.conf.example");
  ASSERT_FALSE(example.empty());
  const Outcome help = Shell(Bin("wasted") + " --help");
  ASSERT_EQ(help.code, 0) << help.out;
  std::set<std::string> flags;
  const std::regex flag("--([a-z][a-z-]+)");
  for (auto it = std::sregex_iterator(help.out.begin(), help.out.end(), flag);
       it != std::sregex_iterator(); ++it)
    flags.insert((*it)[1]);
  for (const char* not_a_setting : {"help", "version", "config"}) flags.erase(not_a_setting);
  ASSERT_GT(flags.size(), 10u) << help.out;
  std::string uncommented;
  std::istringstream lines(example);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > 1 && line[0] == '#' && std::isalpha(static_cast<unsigned char>(line[1])))
      line.erase(0, 1);
    uncommented += line + "\n";
  }
  for (const std::string& f : flags)
    EXPECT_TRUE(Has(uncommented, "\n" + f + " = ")) << "--" << f << " is not in the example";
  const std::string c = Synth();
  WriteText(dir_ + "/all.conf", uncommented);
  const Outcome r =
      Shell(Bin("wasted") + " " + c + " --check --config " + dir_ + "/all.conf");
  EXPECT_EQ(r.code, 0) << r.out;
}

// The file may name the container; a flag or the argument wins over the
// file; a misspelt name is refused (exit 2) naming it, not ignored.
TEST_F(Service, FlagsWinOverTheSettingsFile) {
  const std::string c = Synth();
  const std::string conf = dir_ + "/wasted.conf";
  WriteText(conf, "container = " + c + "\nsocket = " + socket_ +
                      "\nbudget = 64M\nio-depth = 3\npolicy = lru\n");
  {
    Wasted d({"--config", conf, "--foreground", "--state-dir", dir_ + "/state"}, {});
    ASSERT_TRUE(AwaitListening(d));
    const json s = json::parse(Ctl("status --json").out);
    EXPECT_EQ(s["budget"]["total"], 64u << 20) << s.dump();
    EXPECT_EQ(s["io_depth"], 3) << s.dump();
    EXPECT_EQ(s["policy"], "lru") << s.dump();
    d.Signal(SIGTERM);
    ASSERT_EQ(d.Wait(20), 0);
  }
  {
    Wasted d({"--config", conf, "--foreground", "--state-dir", dir_ + "/state", "--io-depth",
              "4", "--budget", "96M", "--policy", "lfru"},
             {});
    ASSERT_TRUE(AwaitListening(d));
    const json s = json::parse(Ctl("status --json").out);
    EXPECT_EQ(s["budget"]["total"], 96u << 20) << s.dump();
    EXPECT_EQ(s["io_depth"], 4) << s.dump();
    EXPECT_EQ(s["policy"], "lfru") << s.dump();
    d.Signal(SIGTERM);
    ASSERT_EQ(d.Wait(20), 0);
  }
  WriteText(conf, "container = " + c + "\nio-dpeth = 3\n");
  const Outcome bad = Shell(Bin("wasted") + " --check --config " + conf);
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_TRUE(Has(bad.out, "io-dpeth") && Has(bad.out, "--config")) << bad.out;
}

// ---- The default socket ----

// A logged-in user ($XDG_RUNTIME_DIR set) reaches their own daemon when it
// is there, else the system service's socket; with neither they are told
// about (and --spawn starts at) their own path.
TEST(DefaultSocket, ClientsFindTheirOwnDaemonOrTheSystemOne) {
  const std::string dir = waste::testing::ScratchDir();
  const char* saved = std::getenv("XDG_RUNTIME_DIR");
  const std::string restore = saved ? saved : "";
  setenv("XDG_RUNTIME_DIR", dir.c_str(), 1);
  const std::string own = dir + "/wasted.sock";
  EXPECT_EQ(waste::DefaultDaemonSocket(), own);
  struct stat st {};
  const bool system_there = lstat(waste::kSystemDaemonSocket, &st) == 0 && S_ISSOCK(st.st_mode);
  EXPECT_EQ(waste::ClientDaemonSocket(), system_there ? waste::kSystemDaemonSocket : own);
  {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", own.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(waste::ClientDaemonSocket(), own);
    close(fd);
    unlink(own.c_str());
  }
  unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(waste::DefaultDaemonSocket(), waste::kSystemDaemonSocket);
  EXPECT_EQ(waste::ClientDaemonSocket(), waste::kSystemDaemonSocket);
  if (!restore.empty()) setenv("XDG_RUNTIME_DIR", restore.c_str(), 1);
}

}  // namespace
