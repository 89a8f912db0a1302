#include "link/spawn.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace waste {

Status SpawnDaemon(const std::string& container, const std::string& socket, double idle_exit,
                   const std::vector<std::string>& extra) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::string wasted = "wasted";
  if (!ec && std::filesystem::exists(self.parent_path() / "wasted"))
    wasted = (self.parent_path() / "wasted").string();
  std::vector<std::string> args = {wasted,      container, "--socket", socket, "--idle-exit",
                                   std::to_string(idle_exit)};
  args.insert(args.end(), extra.begin(), extra.end());
  const pid_t pid = fork();
  if (pid < 0) return Status::Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  // wasted detaches itself and exits 0 once it listens (1 when it cannot start).
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return Status::Error("waiting for wasted failed");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status::Ok();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    return Status::Error("cannot run " + wasted + " (is it installed?)");
  return Status::Error("wasted did not start (its message is above)");
}

}  // namespace waste
