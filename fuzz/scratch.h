// For targets whose parser reads files: a directory of this process's own
// (created on first use under the temp directory, removed at exit), and
// the fuzz input written into it, or cut at marker lines into several files.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>

namespace waste::fuzz {

inline const std::string& ScratchDir() {
  struct Dir {
    std::string path;
    Dir() {
      path = (std::filesystem::temp_directory_path() / ("waste-fuzz-" + std::to_string(getpid())))
                 .string();
      std::error_code ec;
      std::filesystem::create_directories(path, ec);
      if (ec) std::abort();
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir;
  return dir.path;
}

// Writes `bytes` to ScratchDir()/name (replacing it); its path.
inline std::string WriteScratch(const std::string& name, std::string_view bytes) {
  const std::string path = ScratchDir() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) std::abort();
  return path;
}

// The input cut at marker lines "--- NAME ---": what follows each marker
// (up to the next one) under NAME, what precedes the first under "". Seeds
// stay readable files:
//   tokenizer.model lines
//   --- specials.json ---
//   [...]
inline std::map<std::string, std::string_view> Sections(std::string_view text) {
  std::map<std::string, std::string_view> out;
  std::string name;
  size_t begin = 0;
  for (size_t at = 0; at <= text.size();) {
    size_t nl = text.find('\n', at);
    const size_t end = nl == std::string_view::npos ? text.size() : nl + 1;
    const std::string_view line = text.substr(at, nl == std::string_view::npos ? end - at : nl - at);
    if (line.size() > 8 && line.substr(0, 4) == "--- " && line.substr(line.size() - 4) == " ---") {
      out.emplace(name, text.substr(begin, at - begin));
      name = std::string(line.substr(4, line.size() - 8));
      begin = end;
    }
    if (nl == std::string_view::npos) break;
    at = end;
  }
  out.emplace(name, text.substr(begin));
  return out;
}

}  // namespace waste::fuzz
