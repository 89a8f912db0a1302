// waste info on a GGUF file: what it holds, from its metadata and tensor
// infos (engine/gguf), the model waste maps it to (engine/gguf/gguf_model.h)
// or why not, and that waste does not run it yet.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/size_text.h"
#include "clients/waste/commands.h"
#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_model.h"
#include "engine/kernels/gguf_dequant.h"
#include "engine/tokenizer/gguf_tokenizer.h"

namespace waste::cli {
namespace {

// The mapped model: its config, and one expert record's bytes for each
// combination of the three matrices' types (llama.cpp's quantizations mix
// types by layer), with the layers that have it.
nlohmann::json MappedJson(const gguf::Gguf& g) {
  auto m = gguf::MapModel(g);
  if (!m.ok()) return {{"error", m.status().message()}};
  const ModelConfig& c = m->config;
  nlohmann::json j = {{"architecture", m->architecture}, {"model_type", c.model_type},
                      {"config", m->config_json}, {"layers", c.n_layers},
                      {"moe_layers", c.n_moe_layers()}, {"skipped", m->skipped}};
  std::map<std::string, nlohmann::json> records;
  for (int L = 0; L < c.n_layers; ++L) {
    if (!c.is_moe_layer(L)) continue;
    std::string key;
    nlohmann::json parts = nlohmann::json::array();
    for (int k = 0; k < 3; ++k) {
      const gguf::ExpertSlice s = m->Slice(L, 0, k);
      key += gguf::TypeName(s.type) + (k < 2 ? "/" : "");
      parts.push_back({{"type", gguf::TypeName(s.type)}, {"bytes", s.bytes}});
    }
    auto& r = records[key];
    if (r.is_null()) r = {{"matrices", parts}, {"bytes", m->ExpertBytes(L)}, {"layers", 0}};
    r["layers"] = r["layers"].get<int>() + 1;
  }
  for (auto& [types, r] : records) {
    r["types"] = types;
    j["expert_records"].push_back(r);
  }
  return j;
}

}  // namespace

int RunGgufInfo(const std::string& path, bool as_json, const std::string& chat_format) {
  auto g = gguf::Gguf::Open(path);
  if (!g.ok()) {
    std::fprintf(stderr, "waste: %s\n", g.status().message().c_str());
    return 1;
  }
  nlohmann::json j;
  j["format"] = "gguf";
  j["files"] = g->files.size();
  j["version"] = g->files.front().version;
  uint64_t file_bytes = 0, tensor_bytes = 0;
  for (const gguf::GgufFile& f : g->files) file_bytes += f.file_size;
  std::map<uint32_t, uint64_t> bytes_by_type;
  std::map<uint32_t, int> tensors_by_type;
  for (const gguf::TensorInfo& t : g->tensors) {
    bytes_by_type[t.type] += t.bytes;
    ++tensors_by_type[t.type];
    tensor_bytes += t.bytes;
  }
  j["bytes"] = file_bytes;
  j["tensors"] = g->tensors.size();
  auto text = [&](const std::string& key) -> std::string {
    const gguf::Value* v = g->Find(key);
    return v && v->type == gguf::ValueType::kString ? v->text : "";
  };
  auto number = [&](const std::string& key) -> nlohmann::json {
    const gguf::Value* v = g->Find(key);
    const auto n = v && !v->is_array() ? v->Int() : std::nullopt;
    return n ? nlohmann::json(*n) : nlohmann::json();
  };
  const std::string arch = text("general.architecture");
  j["architecture"] = arch;
  j["name"] = text("general.name");
  for (const char* k : {"context_length", "block_count", "embedding_length", "expert_count",
                        "expert_used_count", "expert_shared_count"})
    j[k] = number(arch + "." + k);
  j["tokenizer"] = {{"model", text("tokenizer.ggml.model")}, {"pre", text("tokenizer.ggml.pre")}};
  if (const gguf::Value* tokens = g->Find("tokenizer.ggml.tokens"))
    j["tokenizer"]["tokens"] = tokens->count;
  j["tokenizer"]["chat_template"] = g->Find("tokenizer.chat_template") != nullptr;
  // What waste makes of them: the tokenizer, and the chat family of its template.
  if (auto vocab = GgufTokenizer(*g); !vocab.ok()) {
    j["tokenizer"]["error"] = vocab.status().message();
  } else {
    j["tokenizer"]["specials"] = vocab->tokenizer.n_specials();
    auto chat = GgufChatFormat(*g, vocab->tokenizer, chat_format);
    if (!chat.ok() && !chat_format.empty()) {  // the user's choice is refused, not described
      std::fprintf(stderr, "waste: --chat-format: %s\n", chat.status().message().c_str());
      return 2;
    }
    if (chat.ok())
      j["chat"] = {{"family", chat->family}};
    else
      j["chat"] = {{"error", chat.status().message()}};
  }
  std::vector<std::pair<uint32_t, uint64_t>> types(bytes_by_type.begin(), bytes_by_type.end());
  std::sort(types.begin(), types.end(), [](auto& a, auto& b) { return a.second > b.second; });
  for (const auto& [type, bytes] : types)
    j["types"].push_back({{"type", gguf::TypeName(type)},
                          {"dequantized", kernels::GgufDequantizes(type)},
                          {"tensors", tensors_by_type[type]},
                          {"bytes", bytes},
                          {"share", tensor_bytes ? double(bytes) / double(tensor_bytes) : 0.0}});
  j["mapped"] = MappedJson(*g);
  j["runs"] = false;
  if (as_json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  auto or_dash = [](const nlohmann::json& v) { return v.is_null() ? std::string("-") : v.dump(); };
  std::printf("gguf        %s (%s, %zu file%s, GGUF v%u)\n", path.c_str(),
              FormatSize(file_bytes).c_str(), g->files.size(), g->files.size() == 1 ? "" : "s",
              g->files.front().version);
  std::printf("model       %s (%s)\n", j["name"].get<std::string>().c_str(),
              arch.empty() ? "no general.architecture" : arch.c_str());
  std::printf("layers      %s, hidden %s, context %s\n", or_dash(j["block_count"]).c_str(),
              or_dash(j["embedding_length"]).c_str(), or_dash(j["context_length"]).c_str());
  if (!j["expert_count"].is_null())
    std::printf("experts     %s per layer, top-%s, %s shared\n", or_dash(j["expert_count"]).c_str(),
                or_dash(j["expert_used_count"]).c_str(), or_dash(j["expert_shared_count"]).c_str());
  const nlohmann::json& tok = j["tokenizer"];
  std::printf("tokenizer   %s (pre %s), %s tokens, %s\n", tok["model"].get<std::string>().c_str(),
              tok["pre"].get<std::string>().empty() ? "-" : tok["pre"].get<std::string>().c_str(),
              tok.contains("tokens") ? tok["tokens"].dump().c_str() : "no",
              tok["chat_template"].get<bool>() ? "a chat template" : "no chat template");
  if (tok.contains("error"))
    std::printf("            not read: %s\n", tok["error"].get<std::string>().c_str());
  else
    std::printf("            read: %d specials\n", tok["specials"].get<int>());
  if (j.contains("chat"))
    std::printf("chat        %s\n",
                j["chat"].contains("family")
                    ? j["chat"]["family"].get<std::string>().c_str()
                    : ("not recognised: " + j["chat"]["error"].get<std::string>()).c_str());
  std::printf("tensors     %zu, %s\n", g->tensors.size(), FormatSize(tensor_bytes).c_str());
  for (const auto& [type, bytes] : types)
    std::printf("  %-8s %5.1f%%  %s in %d tensors%s\n", gguf::TypeName(type).c_str(),
                tensor_bytes ? 100.0 * double(bytes) / double(tensor_bytes) : 0.0,
                FormatSize(bytes).c_str(), tensors_by_type[type],
                kernels::GgufDequantizes(type) ? "" : " (not dequantized by waste yet)");
  const nlohmann::json& mp = j["mapped"];
  if (mp.contains("error")) {
    std::printf("mapped      refused: %s\n", mp["error"].get<std::string>().c_str());
  } else {
    std::printf("mapped      %s: %d layers (%d MoE), config as waste reads it:\n            %s\n",
                mp["model_type"].get<std::string>().c_str(), mp["layers"].get<int>(),
                mp["moe_layers"].get<int>(), mp["config"].dump().c_str());
    for (const nlohmann::json& r : mp["expert_records"]) {
      static const char* kNames[] = {"gate", "up", "down"};
      std::string parts;
      for (int k = 0; k < 3; ++k) {
        const nlohmann::json& p = r["matrices"][k];
        parts += std::string(k ? ", " : "") + kNames[k] + " " + p["type"].get<std::string>() +
                 " " + FormatSize(p["bytes"].get<uint64_t>());
      }
      std::printf("expert      %s a record (%s) in %d layer%s\n",
                  FormatSize(r["bytes"].get<uint64_t>()).c_str(), parts.c_str(),
                  r["layers"].get<int>(), r["layers"].get<int>() == 1 ? "" : "s");
    }
  }
  std::printf(
      "running     not supported yet: waste reads and checks GGUF files, but run, chat, "
      "serve, eval, bench, plan and wasted need a container (issue 44)\n");
  return 0;
}

}  // namespace waste::cli
