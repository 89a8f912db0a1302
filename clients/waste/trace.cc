#include "clients/waste/trace.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/format/container.h"  // ParseJson

namespace waste::cli {

using nlohmann::json;

std::string ParseTraceLine(std::string_view text, int moe_layers, int experts, TraceToken* out) {
  if (text.size() > kMaxTraceLine)
    return "longer than " + std::to_string(kMaxTraceLine) + " bytes";
  auto doc = ParseJson(text, "line");
  if (!doc.ok()) return "not JSON";
  const json& j = *doc;
  if (!j.is_object()) return "not a JSON object";
  // "tok" is not needed (tokens are replayed in file order) but a wrong
  // type says the line is not what we think it is.
  if (j.contains("tok") && !j["tok"].is_number_unsigned()) return "\"tok\" is not a token index";
  if (!j.contains("layers")) return "no \"layers\"";
  const json& layers = j["layers"];
  if (!layers.is_array()) return "\"layers\" is not a list";
  if (layers.size() != static_cast<size_t>(moe_layers))
    return std::to_string(layers.size()) + " layers, but the container has " +
           std::to_string(moe_layers) + " MoE layers (a trace lists the MoE layers only)";
  out->layers.assign(layers.size(), {});
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string where = "MoE layer " + std::to_string(i);
    if (!layers[i].is_array()) return where + " is not a list of experts";
    std::vector<int>& ids = out->layers[i];
    for (const json& e : layers[i]) {
      // The parser keeps non-negative integers unsigned, so a signed one is
      // negative; floats, strings and the rest are not ids at all.
      if (!e.is_number_integer()) return where + ": " + e.dump() + " is not an expert id";
      if (!e.is_number_unsigned()) return where + ": negative expert id " + e.dump();
      const uint64_t v = e.get<uint64_t>();
      if (v >= static_cast<uint64_t>(experts))
        return where + ": expert " + std::to_string(v) + ", but the container has " +
               std::to_string(experts) + " experts per layer";
      ids.push_back(static_cast<int>(v));
    }
    std::sort(ids.begin(), ids.end());
    // A router never picks an expert twice; a trace that does is damaged.
    if (auto d = std::adjacent_find(ids.begin(), ids.end()); d != ids.end())
      return where + ": expert " + std::to_string(*d) + " listed twice";
  }
  return "";
}

Result<std::vector<TraceToken>> ReadTrace(const std::string& path, int moe_layers, int experts) {
  std::ifstream f(path);
  if (!f) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  std::vector<TraceToken> tokens;
  std::string text;
  for (int line = 1;; ++line) {
    // Read up to the line's end, or refuse at kMaxTraceLine: a file without
    // line ends is not read whole into memory.
    text.clear();
    int c;
    while ((c = f.get()) != std::char_traits<char>::eof() && c != '\n') {
      if (text.size() == kMaxTraceLine)
        return Status::Error(path + ": line " + std::to_string(line) + ": longer than " +
                             std::to_string(kMaxTraceLine) + " bytes");
      text.push_back(static_cast<char>(c));
    }
    if (text.find_first_not_of(" \t\r") != std::string::npos) {
      TraceToken t;
      t.line = line;
      const std::string why = ParseTraceLine(text, moe_layers, experts, &t);
      if (!why.empty()) return Status::Error(path + ": line " + std::to_string(line) + ": " + why);
      tokens.push_back(std::move(t));
    }
    if (c == std::char_traits<char>::eof()) break;
  }
  if (f.bad()) return Status::Error(path + ": read failed");
  if (tokens.empty()) return Status::Error(path + ": no tokens");
  return tokens;
}

}  // namespace waste::cli
