#include "protocol/running_daemons.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>

#include "base/size_text.h"

namespace waste {
namespace {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string s;
  // /proc files report size 0: read until the end, but never more than 64 KiB
  // (a status file is 1.5 KiB, a command line is bounded by ARG_MAX).
  char buf[4096];
  while (f && s.size() < (64u << 10)) {
    f.read(buf, sizeof buf);
    s.append(buf, static_cast<size_t>(f.gcount()));
  }
  return s;
}

// The number after "Name:" on its line of /proc/PID/status, in kB; nullopt
// if the line is missing or malformed.
std::optional<uint64_t> Field(std::string_view text, std::string_view name) {
  size_t at = 0;
  while ((at = text.find(name, at)) != std::string_view::npos) {
    if (at == 0 || text[at - 1] == '\n') break;
    at += name.size();
  }
  if (at == std::string_view::npos) return std::nullopt;
  size_t p = at + name.size();
  while (p < text.size() && (text[p] == ' ' || text[p] == '\t')) ++p;
  uint64_t v = 0;
  const auto r = std::from_chars(text.data() + p, text.data() + text.size(), v);
  if (r.ec != std::errc() || v > (uint64_t{1} << 50)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<ProcStatus> ParseProcStatus(std::string_view text) {
  // "Uid:\treal\teffective\tsaved\tfs"; sizes are "VmRSS:\t  1234 kB".
  const auto uid = Field(text, "Uid:");
  const auto rss = Field(text, "VmRSS:");
  if (!uid || !rss || *uid > 0xffffffffu) return std::nullopt;
  ProcStatus s;
  s.uid = static_cast<uint32_t>(*uid);
  // Pages of a hugetlb memfd are not in VmRSS (Linux counts them apart).
  s.resident_bytes = (*rss + Field(text, "HugetlbPages:").value_or(0)) * 1024;
  return s;
}

void ParseCmdline(std::string_view bytes, RunningDaemon* d) {
  d->args.clear();
  d->socket.clear();
  size_t begin = 0;
  bool first = true;
  while (begin < bytes.size()) {
    size_t end = bytes.find('\0', begin);
    if (end == std::string_view::npos) end = bytes.size();
    if (!first) d->args.emplace_back(bytes.substr(begin, end - begin));
    first = false;
    begin = end + 1;
  }
  for (size_t i = 0; i < d->args.size(); ++i) {
    const std::string& a = d->args[i];
    if (a == "--socket" && i + 1 < d->args.size()) d->socket = d->args[i + 1];
    else if (a.rfind("--socket=", 0) == 0) d->socket = a.substr(9);
  }
}

std::vector<RunningDaemon> RunningDaemons(const std::string& proc) {
  std::vector<RunningDaemon> out;
  DIR* dir = opendir(proc.c_str());
  if (!dir) return out;
  const pid_t self = getpid(), parent = getppid();
  while (const dirent* e = readdir(dir)) {
    pid_t pid = 0;
    const std::string_view name(e->d_name);
    const auto r = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (r.ec != std::errc() || r.ptr != name.data() + name.size() || pid <= 0) continue;
    if (pid == self || pid == parent) continue;
    const std::string base = proc + "/" + std::string(name);
    // A process may exit between the listing and these reads: it is skipped.
    if (ReadSmallFile(base + "/comm") != "wasted\n") continue;
    const auto st = ParseProcStatus(ReadSmallFile(base + "/status"));
    if (!st) continue;
    RunningDaemon d;
    d.pid = pid;
    d.uid = st->uid;
    d.resident_bytes = st->resident_bytes;
    ParseCmdline(ReadSmallFile(base + "/cmdline"), &d);
    out.push_back(std::move(d));
  }
  closedir(dir);
  std::sort(out.begin(), out.end(),
            [](const RunningDaemon& a, const RunningDaemon& b) { return a.pid < b.pid; });
  return out;
}

std::string Describe(const RunningDaemon& d) {
  std::string line = "wasted";
  for (const std::string& a : d.args) line += " " + a;
  if (line.size() > 160) line = line.substr(0, 157) + "...";
  return "pid " + std::to_string(d.pid) + " (uid " + std::to_string(d.uid) + ", " +
         FormatSize(d.resident_bytes) + " resident): " + line;
}

}  // namespace waste
