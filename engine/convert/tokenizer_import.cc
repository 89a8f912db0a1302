#include "engine/convert/tokenizer_import.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/format/container.h"
#include "engine/tokenizer/base64.h"
#include "engine/tokenizer/utf8.h"

namespace waste::convert {
namespace {

using nlohmann::json;
using tokenizer::Base64Encode;

Result<json> ReadJson(const std::string& dir, const std::string& name) {
  auto text = ReadSmallFile(dir + "/" + name, 256u << 20);
  if (!text.ok()) return text.status();
  return ParseJson(*text, name);
}

// chat.json from the family's special tokens and the checkpoint's
// chat_template (tokenizer_config.json; may be empty): Kimi's markup, or
// DeepSeek-V3's, whose released template puts every system message first
// (ns.system_prompt) where the demo model's keeps each in place; DeepSeek-
// V3.1's (is_last_user, </think> closing the reply's thinking). Another
// template with thinking markup (R1's) is named in `note`; chat.json then
// follows DeepSeek-V3's. GPT-OSS's harmony, GLM-4.5's and Qwen3's by their
// special tokens alone (whatever the model family); among ChatML templates
// Qwen3.5's by its XML tool calls (<function=) and enable_thinking switch
// (thinking off). Qwen3's hybrid layout (thinking off) when the template has the enable_thinking
// switch or there is no template, else ChatML without think blocks (Instruct-2507); a template with
// <think> but no switch is named in `note`. Kimi K3's XTML (no template: encoding_k3.py) by its
// four reserved tokens, thinking off.
std::string ChatFor(const SourceModel& m, const std::set<std::string>& specials,
                    const std::string& chat_template, std::string* note) {
  auto has = [&](const std::vector<std::string>& texts) {
    for (const std::string& t : texts)
      if (!specials.count(t)) return false;
    return true;
  };
  const auto in_template = [&](const char* s) {
    return chat_template.find(s) != std::string::npos;
  };
  if (has({kXtmlOpen, kXtmlClose, kXtmlSep, kXtmlEndOfMessage}))
    return ChatFormat::Xtml(false).ToJson().dump(1);
  const ChatFormat kimi = ChatFormat::Kimi();
  if (has({"<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>"}))
    return kimi.ToJson().dump(1);
  if (has({"<|start|>", "<|message|>", "<|channel|>", "<|end|>", "<|return|>", "<|call|>"}))
    return ChatFormat::Harmony().ToJson().dump(1);
  if (has({"[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
           "<|endoftext|>"}))
    return ChatFormat::Glm45().ToJson().dump(1);
  // dots.llm1's markup (<|userprompt|>, <|response|>, ...) is no format of
  // waste's: no chat.json, said so, rather than ChatML on its Qwen-derived
  // specials.
  if (has({"<|userprompt|>", "<|endofuserprompt|>", "<|response|>", "<|endofresponse|>"})) {
    *note = "dots.llm1's chat markup (<|userprompt|>, <|response|>) is not implemented: no chat.json";
    return "";
  }
  // Qwen3.5's and 3.6's template: ChatML with XML tool calls (<function=).
  if (has({"<|im_start|>", "<|im_end|>"}) && in_template("<function=") &&
      in_template("enable_thinking"))
    return ChatFormat::Qwen35().ToJson().dump(1);
  if (has({"<|im_start|>", "<|im_end|>"})) {
    const bool hybrid = chat_template.empty() || in_template("enable_thinking");
    if (!hybrid && in_template("<think>"))
      *note =
          "the checkpoint's chat template has thinking markup (<think>) without the "
          "enable_thinking switch: chat.json opens the reply bare (ChatML, no think block)";
    return ChatFormat::Qwen3(hybrid).ToJson().dump(1);
  }
  const bool thinking = in_template("</think>");
  const ChatFormat ds = thinking && in_template("is_last_user") && has({"</think>"})
                            ? ChatFormat::DeepseekV31()
                            : ChatFormat::Deepseek(chat_template.empty() ||
                                                   in_template("ns.system_prompt"));
  if (m.family == Family::kDeepseekV3 &&
      has({ds.bos, ds.user.prefix, "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>", ds.end_of_turn[0]})) {
    if (thinking && ds.open == ChatFormat::Deepseek(true).open)
      *note =
          "the checkpoint's chat template has thinking markup (</think>) that chat.json "
          "does not hold: chat.json follows DeepSeek-V3's template";
    return ds.ToJson().dump(1);
  }
  return "";
}

// The checkpoint's chat template: chat_template.jinja when there is one (as
// transformers saves it since 4.5x, and Qwen3.5's and 3.6's releases ship
// it; it wins over tokenizer_config.json's, as in transformers), else the
// chat_template of tokenizer_config.json, or empty (absent, or not a string).
Result<std::string> ChatTemplate(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir + "/chat_template.jinja", ec))
    return ReadSmallFile(dir + "/chat_template.jinja", 1 << 20);
  if (!std::filesystem::exists(dir + "/tokenizer_config.json", ec)) return std::string();
  auto cfg = ReadJson(dir, "tokenizer_config.json");
  if (!cfg.ok()) return cfg.status();
  const auto t = cfg->find("chat_template");
  return t != cfg->end() && t->is_string() ? t->get<std::string>() : std::string();
}

// What a normalizer does to the text, its Sequences flattened: into `nfc`
// whether it is NFC (Qwen's; NFC twice is NFC once). False for anything else
// (something the engine does not do).
bool NormalizerSteps(const json& n, bool* nfc) {
  if (n.is_null()) return true;
  if (!n.is_object() || !n.contains("type")) return false;
  if (n["type"] == "NFC") return *nfc = true;
  if (n["type"] != "Sequence" || !n.contains("normalizers") || !n["normalizers"].is_array())
    return false;
  return std::all_of(n["normalizers"].begin(), n["normalizers"].end(),
                     [nfc](const json& m) { return NormalizerSteps(m, nfc); });
}

// tokenizers' pre_tokenizer with its Sequences flattened, into `steps`.
// False (and `why`) for a step the engine does not run.
bool FlattenPreTokenizer(const json& p, json* steps, std::string* why) {
  if (p.is_null()) return true;
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
    *why = "tokenizer.json: pre_tokenizer holds a step without a type";
    return false;
  }
  const std::string type = p["type"].get<std::string>();
  if (type == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array()) {
      *why = "tokenizer.json: pre_tokenizer Sequence without pretokenizers";
      return false;
    }
    for (const json& q : p["pretokenizers"])
      if (!FlattenPreTokenizer(q, steps, why)) return false;
    return true;
  }
  if (type != "Split" && type != "Digits" && type != "Punctuation" && type != "ByteLevel") {
    *why = "tokenizer.json: the pre-tokenizer " + type.substr(0, 40) +
           " is not one the engine runs (Split, Digits, Punctuation, ByteLevel)";
    return false;
  }
  steps->push_back(p);
  return true;
}

}  // namespace

Result<TokenizerJsonParts> ImportTokenizerJson(const json& tj) {
  TokenizerJsonParts out;
  const json* vocab = nullptr;
  const json* model = nullptr;
  if (!tj.is_object()) return Status::Error("tokenizer.json: not an object");
  if (auto m = tj.find("model"); m != tj.end()) {
    if (!m->is_object()) return Status::Error("tokenizer.json: model is not an object");
    const auto type = m->find("type");
    if (type != m->end() && !type->is_string())
      return Status::Error("tokenizer.json: model.type is not a string");
    if (type != m->end() && type->get<std::string>() == "BPE" && m->contains("vocab") &&
        (*m)["vocab"].is_object()) {
      vocab = &(*m)["vocab"];
      model = &*m;
    }
  }
  if (!vocab) {
    out.note = "tokenizer.json is not a byte-level BPE model";
    return out;
  }
  // The BPE options the engine does not run.
  const auto set = [&](const char* key) {
    const auto it = model->find(key);
    if (it == model->end() || it->is_null()) return false;
    if (it->is_boolean()) return it->get<bool>();
    if (it->is_string()) return !it->get<std::string>().empty();
    if (it->is_number()) return it->get<double>() != 0;
    return true;
  };
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback",
                          "ignore_merges"})
    if (set(key)) {
      out.note = std::string("tokenizer.json: model.") + key + " is set, which the engine does not run";
      return out;
    }
  bool nfc = false;
  if (const auto n = tj.find("normalizer"); n != tj.end() && !NormalizerSteps(*n, &nfc)) {
    out.note = "tokenizer.json: the normalizer " + n->dump().substr(0, 60) + " is not run by the engine";
    return out;
  }
  if (nfc) out.normalizer_json = json{{"type", "NFC"}}.dump();
  json steps = json::array();
  if (const auto p = tj.find("pre_tokenizer"); p != tj.end())
    if (!FlattenPreTokenizer(*p, &steps, &out.note)) return out;
  // No pre-tokenizer at all (hand-made files): the engine's default, Kimi's
  // pattern, splits it, as before pretokenizer.json existed.
  if (!steps.empty()) {
    if (steps.back().value("type", "") != "ByteLevel") {
      out.note = "tokenizer.json: the pre-tokenizer does not end in ByteLevel (not a byte-level BPE)";
      return out;
    }
    out.pretokenizer_json = steps.dump(1);
  }

  // Added tokens, special or not: tokenizers matches each in the text, as
  // its flags say (`special` only decides what skip_special_tokens drops).
  std::map<int64_t, std::string> added;
  const auto at = tj.find("added_tokens");
  if (at != tj.end() && !at->is_null() && !at->is_array())
    return Status::Error("tokenizer.json: added_tokens is not a list");
  if (at != tj.end() && at->is_array()) {
    for (const json& a : *at) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() ||
          !a.contains("content") || !a["content"].is_string())
        return Status::Error("tokenizer.json: added_tokens holds " + a.dump().substr(0, 80));
      AddedToken t{a["id"].get<int64_t>(), a["content"].get<std::string>()};
      for (auto [key, flag] : {std::pair{"lstrip", &t.lstrip}, std::pair{"rstrip", &t.rstrip},
                               std::pair{"single_word", &t.single_word},
                               std::pair{"normalized", &t.normalized}}) {
        const auto f = a.find(key);
        if (f == a.end() || f->is_null()) continue;
        if (!f->is_boolean())
          return Status::Error("tokenizer.json: added_tokens id " + std::to_string(t.id) + ": " + key +
                               " is not true or false");
        *flag = f->get<bool>();
      }
      added[t.id] = t.text;
      out.added.push_back(std::move(t));
    }
  }

  std::map<int64_t, std::string> by_id;
  std::map<std::string, int64_t> id_of;  // by the token's string in tokenizer.json
  std::set<std::string> seen;
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24))
      return Status::Error("tokenizer.json: model.vocab." + token + " is not an id");
    std::string bytes;
    // An added token inside the vocabulary is its text, not byte-level.
    if (const auto a = added.find(id.get<int64_t>()); a != added.end() && a->second == token) {
      bytes = token;
    } else if (auto b = tokenizer::ByteLevelDecode(token); b && !b->empty()) {
      bytes = std::move(*b);
    } else {
      out.note = "tokenizer.json: token \"" + token + "\" is not in the byte-level alphabet";
      return out;
    }
    if (!seen.insert(bytes).second || !by_id.emplace(id.get<int64_t>(), bytes).second)
      return Status::Error("tokenizer.json: token \"" + token + "\" repeats a token or an id");
    id_of.emplace(token, id.get<int64_t>());
  }
  int64_t next = 0;
  for (const auto& [id, bytes] : by_id) {
    if (id != next++)
      return Status::Error("tokenizer.json: the vocabulary's ids do not run 0.." +
                           std::to_string(by_id.size() - 1) + " (id " + std::to_string(id) + ")");
    out.tokenizer_model += Base64Encode(bytes) + " " + std::to_string(id) + "\n";
  }

  // The merges, in their order: "a b" or ["a", "b"]. A pair listed twice
  // keeps its last rank, as tokenizers' map does.
  const auto merges = model->find("merges");
  if (merges == model->end() || !merges->is_array())
    return Status::Error("tokenizer.json: model.merges is not a list");
  std::map<std::pair<int64_t, int64_t>, size_t> rank_of;
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return Status::Error("tokenizer.json: model.merges[" + std::to_string(i) + "] is not \"a b\"");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      return Status::Error("tokenizer.json: model.merges[" + std::to_string(i) + "] is not a pair");
    }
    const auto ia = id_of.find(a), ib = id_of.find(b), iab = id_of.find(a + b);
    if (ia == id_of.end() || ib == id_of.end() || iab == id_of.end())
      return Status::Error("tokenizer.json: model.merges[" + std::to_string(i) + "] (\"" +
                           a.substr(0, 40) + "\", \"" + b.substr(0, 40) +
                           "\") names a token outside model.vocab");
    rank_of[{ia->second, ib->second}] = i;
  }
  std::vector<std::pair<size_t, std::pair<int64_t, int64_t>>> ordered;
  ordered.reserve(rank_of.size());
  for (const auto& [pair, rank] : rank_of) ordered.emplace_back(rank, pair);
  std::sort(ordered.begin(), ordered.end());
  for (const auto& [rank, pair] : ordered)
    out.merges_txt += std::to_string(pair.first) + " " + std::to_string(pair.second) + "\n";
  return out;
}

std::string SpecialsJson(const std::vector<AddedToken>& added, int64_t vocab) {
  json kept = json::array();
  std::set<std::string> texts;
  for (const AddedToken& a : added) {
    if (a.text.empty() || a.text.size() > 256 || !texts.insert(a.text).second) continue;
    // Only specials inside the model's vocabulary can be written.
    if (a.id < 0 || a.id >= vocab) continue;
    json e = {{"id", a.id}, {"text", a.text}};
    for (auto [key, flag] : {std::pair{"lstrip", a.lstrip}, std::pair{"rstrip", a.rstrip},
                             std::pair{"single_word", a.single_word},
                             std::pair{"normalized", a.normalized}})
      if (flag) e[key] = true;
    kept.push_back(std::move(e));
  }
  return kept.empty() ? "" : kept.dump(1);
}

Result<TokenizerImport> ImportTokenizer(const std::string& dir, const SourceModel& model) {
  namespace fs = std::filesystem;
  TokenizerImport t;
  std::error_code ec;
  std::vector<AddedToken> specials;
  if (fs::exists(dir + "/tiktoken.model", ec)) {
    auto bytes = ReadSmallFile(dir + "/tiktoken.model", 64u << 20);
    if (!bytes.ok()) return bytes.status();
    t.tokenizer_model = std::move(*bytes);
    t.source = "tiktoken.model";
    if (fs::exists(dir + "/tokenizer_config.json", ec)) {
      auto cfg = ReadJson(dir, "tokenizer_config.json");
      if (!cfg.ok()) return cfg.status();
      const auto d = cfg->find("added_tokens_decoder");
      if (d != cfg->end() && !d->is_null() && !d->is_object())
        return Status::Error("tokenizer_config.json: added_tokens_decoder is not an object");
      if (d != cfg->end() && d->is_object()) {
        for (const auto& [id, e] : d->items()) {
          if (!e.is_object() || !e.contains("content") || !e["content"].is_string() ||
              id.empty() || id.size() > 9 || id.find_first_not_of("0123456789") != std::string::npos)
            return Status::Error("tokenizer_config.json: added_tokens_decoder." + id +
                                 " is not {\"content\": string}");
          specials.push_back({std::stoll(id), e["content"].get<std::string>()});
        }
      }
    }
  } else if (fs::exists(dir + "/tokenizer.json", ec)) {
    auto tj = ReadJson(dir, "tokenizer.json");
    if (!tj.ok()) return tj.status();
    auto parts = ImportTokenizerJson(*tj);
    if (!parts.ok()) return parts.status();
    if (!parts->note.empty()) {
      t.note = parts->note + "; no tokenizer written";
      return t;
    }
    t.tokenizer_model = std::move(parts->tokenizer_model);
    t.merges_txt = std::move(parts->merges_txt);
    t.pretokenizer_json = std::move(parts->pretokenizer_json);
    t.normalizer_json = std::move(parts->normalizer_json);
    specials = std::move(parts->added);
    t.source = "tokenizer.json";
  } else {
    t.note = "no tiktoken.model or tokenizer.json in the checkpoint; no tokenizer written";
    return t;
  }
  t.specials_json = SpecialsJson(specials, model.shape.vocab);
  std::set<std::string> special_texts;
  for (const AddedToken& a : specials) special_texts.insert(a.text);
  auto chat_template = ChatTemplate(dir);
  if (!chat_template.ok()) return chat_template.status();
  t.chat_json = ChatFor(model, special_texts, *chat_template, &t.note);
  if (t.chat_json.empty() && t.note.empty())
    t.note = "no chat markup: the family's special tokens are missing";
  return t;
}

}  // namespace waste::convert
