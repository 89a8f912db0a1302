// A GGUF's tokenizer and chat format from its metadata
// (engine/tokenizer/gguf_tokenizer.h), against `tokenizers` and the gguf
// package through tests/fixtures/gguf/tokenizer/ (written by
// tools/gguf/make_tokenizer_fixtures.py as llama.cpp's converter writes
// them; Kimi's tiktoken vocabulary as its converter branch writes it): every
// corpus string of tests/fixtures/tokenizer/oracle/ and every repaired
// invalid input gives the released tokenizer's ids, texts with special
// tokens give tokenizers' (tiktoken's) ids, the special ids are the package's;
// each family's released chat template is recognised; damaged metadata is
// refused naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/gguf/gguf.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "engine/tokenizer/nfc.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using nlohmann::json;
using waste::testing::ReadText;

const std::string kDir = std::string(WASTE_FIXTURES) + "/gguf/tokenizer";
const std::string kOracle = std::string(WASTE_FIXTURES) + "/tokenizer/oracle";

json ReadJson(const std::string& path) {
  return json::parse(ReadText(path));
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

gguf::Gguf Open(const std::string& family) {
  auto g = gguf::Gguf::Open(kDir + "/" + family + ".gguf");
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? std::move(*g) : gguf::Gguf{};
}

// A family's fixture and its tokenizer, read once for every test (DeepSeek's
// 129,280 tokens take most of this suite's time).
struct Loaded {
  gguf::Gguf g;
  std::optional<GgufVocab> vocab;
  std::string error;
};
const Loaded& Load(const std::string& family) {
  static std::map<std::string, Loaded> cache;
  auto it = cache.find(family);
  if (it != cache.end()) return it->second;
  Loaded l;
  l.g = Open(family);
  if (l.g.files.empty()) {
    l.error = "no fixture";
  } else if (auto v = GgufTokenizer(l.g); v.ok()) {
    l.vocab = std::move(*v);
  } else {
    l.error = v.status().message();
  }
  return cache.emplace(family, std::move(l)).first->second;
}

std::optional<int32_t> Id(const json& v) {
  return v.is_null() ? std::nullopt : std::optional<int32_t>(v.get<int32_t>());
}

class Family : public ::testing::TestWithParam<const char*> {};

TEST_P(Family, IdsAreTheReleasedTokenizers) {
  const std::string name = GetParam();
  const Loaded& l = Load(name);
  ASSERT_TRUE(l.vocab) << l.error;
  const GgufVocab* v = &*l.vocab;
  const json want = ReadJson(kDir + "/" + name + ".json");
  EXPECT_EQ(v->pre, want["pre"]);
  EXPECT_EQ(v->n_tokens, want["n_tokens"].get<int32_t>());
  EXPECT_EQ(v->tokenizer.n_specials(), want["n_specials"].get<int32_t>());
  EXPECT_EQ(v->ids.bos, Id(want["bos"]));
  EXPECT_EQ(v->ids.eos, Id(want["eos"]));
  EXPECT_EQ(v->ids.eot, Id(want["eot"]));
  EXPECT_EQ(v->ids.pad, Id(want["pad"]));
  EXPECT_EQ(v->ids.add_bos, want["add_bos"].is_boolean() && want["add_bos"].get<bool>());
  // The padding ids (UNUSED) are no token: they decode to nothing.
  if (want["n_unused"].get<int>() > 0) {
    EXPECT_EQ(v->tokenizer.TokenBytes(v->n_tokens - 1), "");
  }

  // Content: the corpus and the invalid inputs, tokenizers' ids for the
  // tokenizer.json the GGUF was written from.
  const json corpus = ReadJson(kOracle + "/corpus.json");
  const json ids = ReadJson(kOracle + "/" + name + ".json");
  ASSERT_EQ(corpus["texts"].size(), ids["ids"].size());
  for (size_t i = 0; i < corpus["texts"].size(); ++i) {
    const std::string t = corpus["texts"][i];
    const std::vector<int32_t> got = v->tokenizer.Encode(t), expected = ids["ids"][i];
    EXPECT_EQ(got, expected) << name << ": corpus line " << i << ": " << t;
    EXPECT_EQ(v->tokenizer.Decode(got), name == "qwen3" ? tokenizer::Nfc(t) : t) << i;
  }
  ASSERT_EQ(corpus["invalid_utf8_hex"].size(), ids["invalid_ids"].size());
  for (size_t i = 0; i < ids["invalid_ids"].size(); ++i) {
    const std::vector<int32_t> expected = ids["invalid_ids"][i];
    EXPECT_EQ(v->tokenizer.Encode(FromHex(corpus["invalid_utf8_hex"][i])), expected) << i;
  }
  // Markup: the special tokens matched in the text, as tokenizers does.
  ASSERT_EQ(want["markup"].size(), want["markup_ids"].size());
  for (size_t i = 0; i < want["markup"].size(); ++i) {
    const std::string t = want["markup"][i];
    const std::vector<int32_t> expected = want["markup_ids"][i];
    EXPECT_EQ(v->tokenizer.EncodeMarkup(t), expected) << name << ": markup " << i << ": " << t;
  }
}

TEST_P(Family, TheReleasedTemplateIsRecognised) {
  const std::string name = GetParam();
  const Loaded& l = Load(name);
  ASSERT_TRUE(l.vocab) << l.error;
  const gguf::Gguf& g = l.g;
  const GgufVocab* v = &*l.vocab;
  auto chat = GgufChatFormat(g, v->tokenizer);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  const json want = ReadJson(kDir + "/" + name + ".json");
  EXPECT_EQ(chat->family, want["chat_family"]);
  // The preset itself, not a look-alike: the same markup as its definition.
  auto chosen = GgufChatFormat(g, v->tokenizer, want["chat_family"].get<std::string>());
  ASSERT_TRUE(chosen.ok()) << chosen.status().message();
  EXPECT_EQ(chat->ToJson(), chosen->ToJson());
}

INSTANTIATE_TEST_SUITE_P(Gguf, Family,
                         ::testing::Values("qwen3", "glm45", "gpt-oss", "deepseek", "kimi"),
                         [](const auto& p) {
                           std::string n = p.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// Each committed released template, alone, names its family; V3.1's and
// Kimi K2's too (no tokenizer fixture of theirs is needed for the markers).
TEST(GgufChat, EveryReleasedTemplateNamesItsFamily) {
  gguf::Gguf g = Open("qwen3");
  ASSERT_FALSE(g.files.empty());
  auto v = GgufTokenizer(g);
  ASSERT_TRUE(v.ok()) << v.status().message();
  gguf::Value* t = nullptr;
  for (gguf::KeyValue& kv : g.files.front().metadata)
    if (kv.key == "tokenizer.chat_template") t = &kv.value;
  ASSERT_NE(t, nullptr);
  const std::string chat = std::string(WASTE_FIXTURES) + "/chat/";
  for (const auto& [file, family] :
       std::vector<std::pair<std::string, std::string>>{{"qwen3.jinja", kFamilyQwen3},
                                                        {"qwen3.6.jinja", kFamilyQwen35},
                                                        {"glm-4.6.jinja", kFamilyGlm45},
                                                        {"gpt-oss.jinja", kFamilyHarmony},
                                                        {"deepseek-v3.jinja", kFamilyDeepseekV3},
                                                        {"deepseek-v3.1.jinja", kFamilyDeepseekV31},
                                                        {"kimi-k2.jinja", kFamilyKimiK2}}) {
    t->text = ReadText(chat + file);
    // Through Qwen3's tokenizer: a family whose end of turn it lacks is
    // refused for that alone, naming the family recognised.
    auto got = GgufChatFormat(g, v->tokenizer);
    if (got.ok()) {
      EXPECT_EQ(got->family, family) << file;
    } else {
      EXPECT_NE(got.status().message().find("chat format " + family + ": its end of turn"),
                std::string::npos)
          << file << ": " << got.status().message();
    }
    if (family == kFamilyQwen3) {
      ASSERT_TRUE(got.ok()) << got.status().message();
      EXPECT_TRUE(got->last_reply.has_value()) << "hybrid: the enable_thinking switch";
    }
  }
  t->text = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
  auto unknown = GgufChatFormat(g, v->tokenizer);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("tokenizer.chat_template: not the template"),
            std::string::npos);
  EXPECT_NE(unknown.status().message().find("--chat-format (kimi-k2, deepseek-v3"),
            std::string::npos)
      << unknown.status().message();
  auto chosen = GgufChatFormat(g, v->tokenizer, "qwen3");
  ASSERT_TRUE(chosen.ok()) << chosen.status().message();
  EXPECT_EQ(chosen->family, kFamilyQwen3);
  auto bad = GgufChatFormat(g, v->tokenizer, "chatml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"chatml\" is not one of"), std::string::npos);
}

// --chat-format's names (for a GGUF or a container): each known family's
// preset under its own name, or, on a vocabulary without its end of turn,
// refused for that; another name refused listing every known one.
TEST(GgufChat, AChatFormatIsChosenByFamilyName) {
  gguf::Gguf g = Open("qwen3");
  ASSERT_FALSE(g.files.empty());
  auto v = GgufTokenizer(g);
  ASSERT_TRUE(v.ok()) << v.status().message();
  const std::string names = GgufChatFamilies();
  int chosen = 0;
  for (const char* family : {kFamilyKimiK2, kFamilyDeepseekV3, kFamilyDeepseekV31, kFamilyQwen3,
                             kFamilyGlm45, kFamilyHarmony}) {
    EXPECT_NE(names.find(family), std::string::npos) << names;
    auto chat = ChatFormatOfFamily(family, v->tokenizer);
    if (chat.ok()) {
      EXPECT_EQ(chat->family, family);
      ++chosen;
    } else {
      EXPECT_NE(
          chat.status().message().find(std::string("chat format ") + family + ": its end of turn"),
          std::string::npos)
          << chat.status().message();
    }
  }
  EXPECT_GE(chosen, 1);  // Qwen3's own, at least
  EXPECT_TRUE(ChatFormatOfFamily(kFamilyQwen3, v->tokenizer).ok());
  EXPECT_FALSE(ChatFormatOfFamily(kFamilyHarmony, v->tokenizer).ok())
      << "Qwen3's vocabulary has no <|return|>";
  for (const char* bad : {"chatml", "qwen", "", "Qwen3"}) {
    auto chat = ChatFormatOfFamily(bad, v->tokenizer);
    ASSERT_FALSE(chat.ok()) << bad;
    EXPECT_EQ(chat.status().message(),
              "chat format \"" + std::string(bad) + "\" is not one of " + names);
  }
}

// ------------------------------------------------------------ hostile metadata

gguf::Value* Find(gguf::Gguf& g, const std::string& key) {
  for (gguf::KeyValue& kv : g.files.front().metadata)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

// The error GgufTokenizer gives after `damage` is done to the Qwen3 fixture.
std::string ErrorAfter(const std::function<void(gguf::Gguf&)>& damage) {
  gguf::Gguf g = Open("qwen3");
  if (g.files.empty()) return "fixture missing";
  damage(g);
  auto v = GgufTokenizer(g);
  return v.ok() ? "accepted" : v.status().message();
}

void SetInt(gguf::Value* v, uint64_t i, int32_t x) {
  std::memcpy(v->raw.data() + i * 4, &x, 4);
}

TEST(GgufTokenizerHostile, EveryDamageIsRefusedNamingTheKey) {
  const auto remove = [](const std::string& key) {
    return [key](gguf::Gguf& g) {
      auto& md = g.files.front().metadata;
      std::erase_if(md, [&](const gguf::KeyValue& kv) { return kv.key == key; });
    };
  };
  const std::vector<std::pair<std::function<void(gguf::Gguf&)>, std::string>> cases = {
      {remove("tokenizer.ggml.model"), "tokenizer.ggml.model: missing"},
      {[](gguf::Gguf& g) { Find(g, "tokenizer.ggml.model")->text = "llama"; },
       "tokenizer.ggml.model: \"llama\" is not gpt2"},
      {[](gguf::Gguf& g) { Find(g, "tokenizer.ggml.pre")->text = "falcon"; },
       "tokenizer.ggml.pre: \"falcon\" is not a pre-tokenizer waste knows (qwen2, deepseek-v3"},
      {remove("tokenizer.ggml.tokens"), "tokenizer.ggml.tokens: missing"},
      {remove("tokenizer.ggml.token_type"), "tokenizer.ggml.token_type: missing"},
      {remove("tokenizer.ggml.merges"), "tokenizer.ggml.merges: missing"},
      {[](gguf::Gguf& g) {
         auto* t = Find(g, "tokenizer.ggml.token_type");
         t->count -= 1;
         t->raw.resize(t->raw.size() - 4);
       },
       "tokenizer.ggml.token_type: not an array of 3034 integers, one per token"},
      {[](gguf::Gguf& g) { Find(g, "tokenizer.ggml.token_type")->elem = gguf::ValueType::kF32; },
       "tokenizer.ggml.token_type: not an array of 3034 integers, one per token"},
      {[](gguf::Gguf& g) { SetInt(Find(g, "tokenizer.ggml.token_type"), 7, 6); },
       "tokenizer.ggml.token_type[7]: type 6 is not normal (1)"},
      {[](gguf::Gguf& g) { SetInt(Find(g, "tokenizer.ggml.token_type"), 7, 5); },
       "tokenizer.ggml.token_type[7]: an unused token among the vocabulary's"},
      {[](gguf::Gguf& g) { Find(g, "tokenizer.ggml.tokens")->strings[9] = "\xE2\x82\xAC"; },
       "tokenizer.ggml.tokens[9]: \"\xE2\x82\xAC\" is not a token of GPT-2's byte-level alphabet"},
      {[](gguf::Gguf& g) {
         auto* t = Find(g, "tokenizer.ggml.tokens");
         t->strings[9] = t->strings[8];
       },
       "tokenizer.ggml.tokens[9]: "},
      {[](gguf::Gguf& g) { Find(g, "tokenizer.ggml.merges")->strings[3] = "nospace"; },
       "tokenizer.ggml.merges[3]: \"nospace\" is not two normal tokens joined by a space"},
      {[](gguf::Gguf& g) {
         auto* m = Find(g, "tokenizer.ggml.merges");
         m->strings[3] = m->strings[3] + "x";  // the right token is no token
       },
       "tokenizer.ggml.merges[3]: "},
      {[](gguf::Gguf& g) { Find(g, "tokenizer.ggml.merges")->strings[0] = "\xC3\xBF \xC3\xBE"; },
       "tokenizer.ggml.merges[0]: \"\xC3\xBF \xC3\xBE\" joins into no normal token"},
      {[](gguf::Gguf& g) { SetInt(Find(g, "tokenizer.ggml.eos_token_id"), 0, 3034); },
       "tokenizer.ggml.eos_token_id: 3034 is not a token id (0..3033)"},
      {[](gguf::Gguf& g) {
         gguf::Value* v = Find(g, "tokenizer.ggml.add_bos_token");
         v->raw = {1};
         auto& md = g.files.front().metadata;
         std::erase_if(
             md, [](const gguf::KeyValue& kv) { return kv.key == "tokenizer.ggml.bos_token_id"; });
       },
       "tokenizer.ggml.add_bos_token: true, but tokenizer.ggml.bos_token_id is not set"},
  };
  for (const auto& [damage, message] : cases) {
    const std::string got = ErrorAfter(damage);
    EXPECT_EQ(got.rfind(message, 0), 0u) << "expected: " << message << "\ngot: " << got;
  }
  // Undamaged, it is accepted (the cases above fail for their damage alone).
  EXPECT_EQ(ErrorAfter([](gguf::Gguf&) {}), "accepted");
}

// Kimi K2's merges are optional (llama.cpp skips them: its ids are
// tiktoken's ranks, merged by rank), but checked when present.
TEST(GgufTokenizerHostile, KimisMergesAreOptionalButChecked) {
  gguf::Gguf g = Open("kimi");
  ASSERT_FALSE(g.files.empty());
  const json want = ReadJson(kDir + "/kimi.json");
  Find(g, "tokenizer.ggml.merges")->strings[0] = "nospace";
  auto bad = GgufTokenizer(g);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("tokenizer.ggml.merges[0]: \"nospace\"", 0), 0u)
      << bad.status().message();
  std::erase_if(g.files.front().metadata,
                [](const gguf::KeyValue& kv) { return kv.key == "tokenizer.ggml.merges"; });
  auto v = GgufTokenizer(g);
  ASSERT_TRUE(v.ok()) << v.status().message();
  for (size_t i = 0; i < want["markup"].size(); ++i) {
    const std::vector<int32_t> expected = want["markup_ids"][i];
    EXPECT_EQ(v->tokenizer.EncodeMarkup(want["markup"][i].get<std::string>()), expected) << i;
  }
}

}  // namespace
}  // namespace waste
