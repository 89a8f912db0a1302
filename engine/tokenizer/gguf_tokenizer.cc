#include "engine/tokenizer/gguf_tokenizer.h"

#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/base64.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace waste {
namespace {

using gguf::Value;
using gguf::ValueType;
using nlohmann::json;

// llama.cpp's token types (llama_token_type / gguf.TokenType).
enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// A family's released pre-tokenizer, for the pre name llama.cpp's converter
// writes for it: the Split regexes (each Isolated, as the released
// tokenizer.json's Sequence holds them, then ByteLevel without its regex),
// and whether the released normalizer is NFC. No regexes: Kimi's tiktoken
// pattern, merged by rank (engine/tokenizer/pretokenizer.h).
struct PreFamily {
  const char* pre;
  std::vector<std::string> splits;
  bool nfc;
};

const std::vector<PreFamily>& PreFamilies() {
  static const std::vector<PreFamily> kFamilies = {
      // Qwen2's pattern (Qwen3, Qwen3-MoE, Qwen3-Next): one digit a piece.
      {"qwen2",
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       true},
      // DeepSeek-V3's three Splits (its third class holds a raw CR and LF,
      // as the released file does).
      {"deepseek-v3",
       {R"(\p{N}{1,3})", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}"
        "\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
       false},
      // GLM-4's (GLM-4.5, 4.6): digits in threes.
      {"glm4",
       {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       false},
      // o200k's (GPT-OSS's o200k_harmony).
      {"gpt-4o",
       {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"},
       false},
      {"kimi-k2", {}, false},
  };
  return kFamilies;
}

// The array of strings at `key`, or an error naming it.
Result<const std::vector<std::string>*> Strings(const gguf::Gguf& g, const std::string& key) {
  const Value* v = g.Find(key);
  if (!v) return Status::Error(key + ": missing");
  if (!v->is_array() || v->elem != ValueType::kString)
    return Status::Error(key + ": not an array of strings (" + v->Describe() + ")");
  return &v->strings;
}

// An optional token id at `key`: absent, or an integer in 0..n-1.
Status OptionalId(const gguf::Gguf& g, const std::string& key, int32_t n,
                  std::optional<int32_t>* out) {
  const Value* v = g.Find(key);
  if (!v) return Status::Ok();
  const auto id = v->is_array() || v->type == ValueType::kBool ? std::nullopt : v->Int();
  if (!id || *id < 0 || *id >= n)
    return Status::Error(key + ": " + v->Describe() + " is not a token id (0.." +
                         std::to_string(n - 1) + ")");
  *out = static_cast<int32_t>(*id);
  return Status::Ok();
}

Status OptionalBool(const gguf::Gguf& g, const std::string& key, bool* out) {
  const Value* v = g.Find(key);
  if (!v) return Status::Ok();
  if (v->is_array() || v->type != ValueType::kBool)
    return Status::Error(key + ": " + v->Describe() + " is not a bool");
  *out = *v->Int() != 0;
  return Status::Ok();
}

std::string Index(const std::string& key, size_t i) {
  return key + "[" + std::to_string(i) + "]";
}

// The family's chat format by its template's markers; empty when none matches.
std::optional<ChatFormat> RecognisedChat(const std::string& t) {
  const auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
  if (has("<|im_system|>") && has("<|im_middle|>")) return ChatFormat::Kimi();
  if (has("<|channel|>") && has("<|start|>") && has("<|message|>")) return ChatFormat::Harmony();
  if (has("[gMASK]") && has("<|assistant|>")) return ChatFormat::Glm45();
  if (has("<|im_start|>") && has("<|im_end|>") && has("<function=") && has("enable_thinking"))
    return ChatFormat::Qwen35();
  if (has("<|im_start|>") && has("<|im_end|>"))
    return ChatFormat::Qwen3(/*hybrid=*/has("enable_thinking"));
  if (has("<\xEF\xBD\x9C"
          "Assistant\xEF\xBD\x9C>")) {
    // V3.1's template closes the reply's thinking where the last turn is a
    // user's; V3's (and R1's) puts every system message first.
    if (has("is_last_user") && has("</think>")) return ChatFormat::DeepseekV31();
    return ChatFormat::Deepseek(/*system_first=*/has("ns.system_prompt"));
  }
  return std::nullopt;
}

// The preset of a family name (the user's choice).
std::optional<ChatFormat> ChatOfFamily(std::string_view f) {
  if (f == kFamilyKimiK2) return ChatFormat::Kimi();
  if (f == kFamilyDeepseekV3) return ChatFormat::Deepseek(true);
  if (f == kFamilyDeepseekV31) return ChatFormat::DeepseekV31();
  if (f == kFamilyQwen3) return ChatFormat::Qwen3(true);
  if (f == kFamilyQwen35) return ChatFormat::Qwen35();
  if (f == kFamilyGlm45) return ChatFormat::Glm45();
  if (f == kFamilyHarmony) return ChatFormat::Harmony();
  return std::nullopt;
}

}  // namespace

std::string GgufPreNames() {
  std::string names;
  for (const PreFamily& f : PreFamilies())
    names += (names.empty() ? "" : ", ") + std::string(f.pre);
  return names;
}

std::string GgufChatFamilies() {
  return std::string(kFamilyKimiK2) + ", " + kFamilyDeepseekV3 + ", " + kFamilyDeepseekV31 + ", " +
         kFamilyQwen3 + ", " + kFamilyQwen35 + ", " + kFamilyGlm45 + ", " + kFamilyHarmony;
}

Result<GgufVocab> GgufTokenizer(const gguf::Gguf& g) {
  const auto text = [&](const std::string& key) -> Result<std::string> {
    const Value* v = g.Find(key);
    if (!v) return Status::Error(key + ": missing");
    if (v->type != ValueType::kString) return Status::Error(key + ": not a string");
    return v->text;
  };
  auto model = text("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (*model != "gpt2")
    return Status::Error("tokenizer.ggml.model: \"" + model->substr(0, 40) +
                         "\" is not gpt2 (byte-level BPE), the one waste reads from a GGUF");
  GgufVocab::Ids ids;
  auto pre = text("tokenizer.ggml.pre");
  if (!pre.ok()) return pre.status();
  const PreFamily* family = nullptr;
  for (const PreFamily& f : PreFamilies())
    if (*pre == f.pre) family = &f;
  if (!family)
    return Status::Error("tokenizer.ggml.pre: \"" + pre->substr(0, 40) +
                         "\" is not a pre-tokenizer waste knows (" + GgufPreNames() + ")");

  auto tokens = Strings(g, "tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  const std::vector<std::string>& tok = **tokens;
  const size_t n = tok.size();
  if (n == 0 || n > (size_t{1} << 24))
    return Status::Error("tokenizer.ggml.tokens: " + std::to_string(n) +
                         " tokens (1..16777216 expected)");
  const std::string types_key = "tokenizer.ggml.token_type";
  const Value* types = g.Find(types_key);
  if (!types) return Status::Error(types_key + ": missing");
  if (!types->is_array() || types->count != n || !types->Int(0))
    return Status::Error(types_key + ": not an array of " + std::to_string(n) +
                         " integers, one per token (" + types->Describe() + ")");

  // The ranks run from 0 to the last normal token; controls and user-defined
  // tokens among them (DeepSeek's 0..2) are their text, the others specials.
  size_t n_ranks = 0;
  std::vector<int64_t> type(n);
  for (size_t i = 0; i < n; ++i) {
    type[i] = types->Int(i).value_or(-1);  // a u64 past int64's range: no type
    if (type[i] == kNormal) n_ranks = i + 1;
  }
  Tokenizer::Files files;
  json specials = json::array();
  std::unordered_map<std::string_view, int32_t> id_of;  // by the token's GGUF string
  id_of.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string where = Index("tokenizer.ggml.tokens", i);
    const auto t = type[i];
    if (t != kNormal && t != kControl && t != kUserDefined && t != kUnused)
      return Status::Error(Index(types_key, i) + ": type " + std::to_string(t) +
                           " is not normal (1), control (3), user-defined (4) or unused (5)");
    if (t == kUnused) {
      if (i < n_ranks)
        return Status::Error(Index(types_key, i) +
                             ": an unused token among the vocabulary's (before the last "
                             "normal token, " +
                             std::to_string(n_ranks - 1) + ")");
      continue;
    }
    if (!id_of.emplace(tok[i], static_cast<int32_t>(i)).second)
      return Status::Error(where + ": \"" + tok[i].substr(0, 40) + "\" is also token " +
                           std::to_string(id_of[tok[i]]));
    if (t == kNormal) {
      const auto bytes = tokenizer::ByteLevelDecode(tok[i]);
      if (!bytes || bytes->empty())
        return Status::Error(where + ": \"" + tok[i].substr(0, 40) +
                             "\" is not a token of GPT-2's byte-level alphabet");
      files.tokenizer_model += tokenizer::Base64Encode(*bytes) + " " + std::to_string(i) + "\n";
      continue;
    }
    if (tok[i].empty() || tok[i].size() > 256 || !tokenizer::IsValidUtf8(tok[i]))
      return Status::Error(where + ": a special token's text must be 1-256 bytes of UTF-8");
    if (i < n_ranks)
      files.tokenizer_model += tokenizer::Base64Encode(tok[i]) + " " + std::to_string(i) + "\n";
    specials.push_back({{"id", i}, {"text", tok[i]}});
  }
  if (n_ranks == 0) return Status::Error(types_key + ": no normal token");
  files.specials_json = specials.dump();

  // The merges, "a b" (split at the first space after the first byte, as
  // llama.cpp does), as id pairs in their order.
  const std::string merges_key = "tokenizer.ggml.merges";
  const bool kimi = family->splits.empty();
  if (g.Find(merges_key) || !kimi) {
    auto merges = Strings(g, merges_key);
    if (!merges.ok()) return merges.status();
    std::string txt, joined_text;
    for (size_t i = 0; i < (*merges)->size(); ++i) {
      const std::string_view m = (**merges)[i];
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
      const auto left = sp == m.npos ? id_of.end() : id_of.find(m.substr(0, sp));
      const auto right = sp == m.npos ? id_of.end() : id_of.find(m.substr(sp + 1));
      if (left == id_of.end() || right == id_of.end() || type[left->second] != kNormal ||
          type[right->second] != kNormal)
        return Status::Error(Index(merges_key, i) + ": \"" + std::string(m.substr(0, 40)) +
                             "\" is not two normal tokens joined by a space");
      joined_text.assign(m.substr(0, sp)).append(m.substr(sp + 1));
      const auto joined = id_of.find(joined_text);
      if (joined == id_of.end() || type[joined->second] != kNormal)
        return Status::Error(Index(merges_key, i) + ": \"" + std::string(m.substr(0, 40)) +
                             "\" joins into no normal token");
      txt += std::to_string(left->second) + " " + std::to_string(right->second) + "\n";
    }
    // Kimi's ids are tiktoken's ranks, which merge by rank: its merges are
    // checked, not used.
    if (!kimi) files.merges_txt = std::move(txt);
  }
  if (!kimi) {
    json steps = json::array();
    for (const std::string& re : family->splits)
      steps.push_back({{"type", "Split"},
                       {"pattern", {{"Regex", re}}},
                       {"behavior", "Isolated"},
                       {"invert", false}});
    steps.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}});
    files.pretokenizer_json = steps.dump();
  }
  if (family->nfc) files.normalizer_json = R"({"type": "NFC"})";

  for (auto [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", &ids.bos},
                         std::pair{"tokenizer.ggml.eos_token_id", &ids.eos},
                         std::pair{"tokenizer.ggml.eot_token_id", &ids.eot},
                         std::pair{"tokenizer.ggml.padding_token_id", &ids.pad}})
    WASTE_RETURN_IF_ERROR(OptionalId(g, key, static_cast<int32_t>(n), id));
  WASTE_RETURN_IF_ERROR(OptionalBool(g, "tokenizer.ggml.add_bos_token", &ids.add_bos));
  WASTE_RETURN_IF_ERROR(OptionalBool(g, "tokenizer.ggml.add_eos_token", &ids.add_eos));
  if (ids.add_bos && !ids.bos)
    return Status::Error(
        "tokenizer.ggml.add_bos_token: true, but tokenizer.ggml.bos_token_id "
        "is not set");

  auto t = Tokenizer::FromFiles(files);
  if (!t.ok()) return Status::Error("the tokenizer of tokenizer.ggml.*: " + t.status().message());
  return GgufVocab{std::move(*t), *pre, static_cast<int32_t>(n), ids};
}

namespace {

// `chat` when each of its end-of-turn texts is a special of `vocab`.
Result<ChatFormat> EndsAreSpecials(ChatFormat chat, const Tokenizer& vocab) {
  for (const std::string& end : chat.end_of_turn)
    if (!vocab.SpecialId(end))
      return Status::Error("chat format " + chat.family + ": its end of turn \"" + end +
                           "\" is not a special token of the tokenizer");
  return chat;
}

}  // namespace

Result<ChatFormat> ChatFormatOfFamily(std::string_view family, const Tokenizer& vocab) {
  std::optional<ChatFormat> chat = ChatOfFamily(family);
  if (!chat)
    return Status::Error("chat format \"" + std::string(family.substr(0, 40)) +
                         "\" is not one of " + GgufChatFamilies());
  return EndsAreSpecials(std::move(*chat), vocab);
}

Result<ChatFormat> GgufChatFormat(const gguf::Gguf& g, const Tokenizer& vocab,
                                  std::string_view family) {
  if (!family.empty()) return ChatFormatOfFamily(family, vocab);
  const std::string remedy = "; choose the family with --chat-format (" + GgufChatFamilies() + ")";
  const Value* v = g.Find("tokenizer.chat_template");
  if (!v) return Status::Error("tokenizer.chat_template: missing" + remedy);
  if (v->type != ValueType::kString)
    return Status::Error("tokenizer.chat_template: not a string" + remedy);
  std::optional<ChatFormat> chat = RecognisedChat(v->text);
  if (!chat)
    return Status::Error(
        "tokenizer.chat_template: not the template of a family waste renders (no family's "
        "markers found)" +
        remedy);
  return EndsAreSpecials(std::move(*chat), vocab);
}

}  // namespace waste
