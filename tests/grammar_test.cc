// engine/grammar: the schema compiler and matcher against jsonschema's
// verdicts (tests/fixtures/json_schema, made by
// tools/json_schema/make_fixtures.py), the token mask against checking every
// token alone, and random-logit generation under the mask.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/convert/tokenizer_import.h"
#include "engine/grammar/json_matcher.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/token_mask.h"
#include "tests/test_util.h"

namespace waste::grammar {
namespace {

using json = nlohmann::json;

const json& Corpus() {
  static const json c = [] {
    std::ifstream f(std::string(WASTE_FIXTURES) + "/json_schema/corpus.json");
    std::stringstream ss;
    ss << f.rdbuf();
    return json::parse(ss.str());
  }();
  return c;
}

std::shared_ptr<const JsonGrammar> Compile(const json& schema, bool strict = false) {
  auto g = CompileJsonSchema(schema, {strict});
  EXPECT_TRUE(g.ok()) << g.status().message();
  return g.ok() ? *g : nullptr;
}

bool Accepts(const std::shared_ptr<const JsonGrammar>& g, std::string_view text) {
  JsonMatcher m(g);
  return m.Advance(text) && m.complete();
}

// DeepSeek's released vocabulary (128,000 ranks, 1,283 specials).
const Tokenizer& DeepSeek() {
  static const Tokenizer tok = [] {
    std::ifstream f(std::string(WASTE_FIXTURES) + "/tokenizer/deepseek/tokenizer.json");
    std::stringstream ss;
    ss << f.rdbuf();
    auto parts = convert::ImportTokenizerJson(json::parse(ss.str()));
    // A directory of this test's own: ctest runs the cases as processes side by side.
    const std::string dir = waste::testing::ScratchDir("-deepseek");
    std::ofstream(dir + "/tokenizer.model") << parts->tokenizer_model;
    std::ofstream(dir + "/merges.txt") << parts->merges_txt;
    std::ofstream(dir + "/pretokenizer.json") << parts->pretokenizer_json;
    std::ofstream(dir + "/specials.json") << convert::SpecialsJson(parts->added, int64_t{1} << 24);
    auto t = Tokenizer::Load(dir);
    EXPECT_TRUE(t.ok()) << t.status().message();
    return *t;
  }();
  return tok;
}

TEST(JsonSchemaCorpus, MatcherAgreesWithJsonschema) {
  int total = 0, valid = 0;
  for (const json& s : Corpus()["schemas"]) {
    const auto g = Compile(s["schema"], s["strict"].get<bool>());
    ASSERT_TRUE(g) << s["name"];
    for (const json& inst : s["instances"]) {
      const std::string text = inst["text"];
      EXPECT_EQ(Accepts(g, text), inst["valid"].get<bool>()) << s["name"] << ": " << text;
      ++total;
      valid += inst["valid"].get<bool>();
    }
  }
  EXPECT_GT(total, 1000);
  EXPECT_GT(valid, 300);
}

TEST(JsonSchemaCorpus, RefusedByName) {
  for (const json& s : Corpus()["refused"]) {
    auto g = CompileJsonSchema(s["schema"], {s["strict"].get<bool>()});
    ASSERT_FALSE(g.ok()) << s["name"];
    EXPECT_NE(g.status().message().find(s["names"].get<std::string>()), std::string::npos)
        << s["name"] << ": " << g.status().message();
    EXPECT_NE(g.status().message().find(" at #"), std::string::npos) << g.status().message();
  }
}

TEST(JsonSchema, ErrorsSayWhere) {
  auto g = CompileJsonSchema(json::parse(R"({"type":"object","properties":{"a":{"type":"array",
      "items":{"type":"string","pattern":"x"}}}})"));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().message(), "unsupported keyword 'pattern' at #/properties/a/items");
}

TEST(JsonMatcher, WhitespaceIsBounded) {
  const auto g = AnyJsonObject();
  EXPECT_TRUE(Accepts(g, "{\"a\":" + std::string(kMaxWhitespace, ' ') + "1}"));
  EXPECT_FALSE(Accepts(g, "{\"a\":" + std::string(kMaxWhitespace + 1, ' ') + "1}"));
  EXPECT_FALSE(Accepts(g, "[1]"));  // json_object: an object
  EXPECT_TRUE(Accepts(g, "{\"k\": [1, {\"x\": null}], \"b\": \"\\u00e9\\n\"}"));
  EXPECT_FALSE(Accepts(g, "{\"k\": \"\\ud800\"}"));   // a lone surrogate
  EXPECT_FALSE(Accepts(g, "{\"k\": \"\xC0\xAF\"}"));  // an overlong form
}

TEST(JsonMatcher, EveryNumberIsAFiniteDouble) {
  // Strict parsers refuse a number past the double range (nlohmann: "number
  // overflow"), so exponents stop at two digits: 32 digits times 10^99 is
  // at most 10^131. The fuzzer's find: the closing bytes ended 2.5e888.
  const auto g = AnyJsonObject();
  EXPECT_TRUE(Accepts(g, "{\"a\": [1, 2.5e99]}"));
  EXPECT_FALSE(Accepts(g, "{\"a\": [1, 2.5e888]}"));
  EXPECT_FALSE(Accepts(g, "{\"a\": 1E+308}"));
  const std::string big = "{\"a\": " + std::string(32, '9') + ".5e99}";
  EXPECT_TRUE(Accepts(g, big));
  EXPECT_TRUE(json::accept(big));
  JsonMatcher m(g);
  ASSERT_TRUE(m.Advance("{\"a\": [1, 2.5e88"));
  const auto close = m.Closing(4096);
  ASSERT_TRUE(close.has_value());
  EXPECT_TRUE(json::accept("{\"a\": [1, 2.5e88" + *close));
}

TEST(JsonMatcher, BoundedNumbersNeverWalkIntoADeadEnd) {
  const auto g = Compile(json::parse(R"({"type":"integer","minimum":-5,"maximum":150})"));
  JsonMatcher m(g);
  EXPECT_TRUE(m.Advance("15"));
  JsonMatcher over = m;
  EXPECT_FALSE(over.Advance("1"));  // 151
  EXPECT_TRUE(m.Advance("0"));      // 150
  EXPECT_TRUE(m.complete());
  JsonMatcher neg(g);
  EXPECT_TRUE(neg.Advance("-"));
  JsonMatcher six = neg;
  EXPECT_FALSE(six.Advance("6"));
  const auto r = Compile(json::parse(R"({"type":"number","exclusiveMinimum":0.5,"maximum":0.75})"));
  JsonMatcher x(r);
  EXPECT_TRUE(x.Advance("0."));
  JsonMatcher four = x;
  EXPECT_FALSE(four.Advance("4"));  // [0.4, 0.5) is all below
  EXPECT_TRUE(x.Advance("5"));      // 0.5 itself is out, 0.5x is in
  EXPECT_FALSE(x.complete());
  EXPECT_TRUE(x.Advance("1"));
  EXPECT_TRUE(x.complete());
}

TEST(JsonMatcher, FinishedOnceNothingButSpaceMayFollow) {
  const auto g = Compile(json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}},
      "required":["a"],"additionalProperties":false})"));
  JsonMatcher m(g);
  EXPECT_TRUE(m.Advance("{\"a\": 12"));
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.Advance("}"));
  EXPECT_TRUE(m.finished());
  const auto n = Compile(json::parse(R"({"type":"integer"})"));
  JsonMatcher k(n);
  EXPECT_TRUE(k.Advance("12"));
  EXPECT_TRUE(k.complete());
  EXPECT_FALSE(k.finished());  // more digits may come
}

// The mask against each token checked alone, in states of every kind.
TEST(TokenMask, EqualsCheckingEveryToken) {
  const Tokenizer& tok = DeepSeek();
  const int vocab = tok.max_id() + 1;
  const auto index = std::make_shared<const VocabIndex>(tok, vocab);
  const auto nested = Compile(Corpus()["schemas"][2]["schema"]);
  const auto tags = Compile(Corpus()["schemas"][3]["schema"]);  // strings of at most 5
  const std::pair<std::shared_ptr<const JsonGrammar>, const char*> states[] = {
      {nested, ""},
      {nested, "{"},
      {nested, "{\"or"},  // a declared key, or an extra one
      {nested, "{\"order\": {\"id\": -1"},
      {nested, "{\"order\": {\"id\": 3, \"lines\": [{\"sku\": \"ab"},
      {nested, "{\"order\": {\"id\": 3, \"lines\": [{\"sku\": \"\xE6\x97"},  // mid-character
      {nested, "{\"order\": {\"id\": 3, \"lines\": [{\"s"},                  // declared keys only
      {nested, "{\"zz"},
      {nested, "{\"zz\": [tr"},
      {tags, "[\"ab"},
      {tags, "[\"abcd"},
      {tags, "[\"a\\"},
  };
  for (const auto& [g, prefix] : states) {
    JsonMatcher m(g);
    ASSERT_TRUE(m.Advance(prefix)) << prefix;
    std::vector<uint64_t> bits;
    const size_t n = index->Allowed(m, &bits);
    size_t expected = 0;
    for (int32_t id = 0; id < vocab; ++id) {
      JsonMatcher one = m;
      const std::string_view b = index->bytes(id);
      const bool ok = !b.empty() && one.Advance(b);
      expected += ok;
      ASSERT_EQ(ok, ((bits[static_cast<size_t>(id) / 64] >> (id % 64)) & 1) != 0)
          << "after '" << prefix << "' token " << id << " '" << b << "'";
    }
    EXPECT_EQ(n, expected) << prefix;
    EXPECT_GT(n, 0u) << prefix;
  }
}

TEST(TokenMask, SpecialsNeverAndEndOnlyByTheCaller) {
  const Tokenizer& tok = DeepSeek();
  const auto index = std::make_shared<const VocabIndex>(tok, tok.max_id() + 1);
  JsonTokenConstraint c(AnyJsonObject(), index);
  std::vector<float> logits(static_cast<size_t>(tok.max_id()) + 10, 0.f);
  EXPECT_GT(c.Mask(logits), 0u);
  for (int32_t id = 0; id < static_cast<int32_t>(logits.size()); ++id) {
    if (id > tok.max_id() || tok.IsSpecial(id)) {
      EXPECT_EQ(logits[static_cast<size_t>(id)], -INFINITY) << id;
    }
  }
  EXPECT_EQ(logits[static_cast<size_t>(tok.Encode("{").at(0))], 0.f);
  EXPECT_EQ(logits[static_cast<size_t>(tok.Encode("[").at(0))], -INFINITY);
}

// Random logits, masked, sampled: every reply parses and the matcher calls
// it complete; the corpus's schemas, 6 seeds each. Under a sanitizer 2: the
// test's own loops over the vocabulary made this case 107 s of the ASan+UBSan
// stage (12 s plain), and every schema's masks are still checked there.
#ifdef WASTE_SANITIZE
constexpr uint32_t kSeeds = 2;
#else
constexpr uint32_t kSeeds = 6;
#endif
TEST(TokenMask, RandomGenerationIsAlwaysWhole) {
  const Tokenizer& tok = DeepSeek();
  const int vocab = tok.max_id() + 1;
  const auto index = std::make_shared<const VocabIndex>(tok, vocab);
  int replies = 0;
  for (const json& s : Corpus()["schemas"]) {
    const auto g = Compile(s["schema"], s["strict"].get<bool>());
    for (uint32_t seed = 0; seed < kSeeds; ++seed) {
      std::mt19937 rng(seed);
      std::uniform_real_distribution<float> noise(0.f, 1.f);
      JsonTokenConstraint c(g, index);
      std::string text;
      bool ended = false;
      for (int step = 0; step < 300 && !ended; ++step) {
        std::vector<float> logits(static_cast<size_t>(vocab));
        for (float& l : logits) l = noise(rng);
        // Favour closing once the value may end, so that replies finish.
        if (c.complete() && std::uniform_int_distribution<int>(0, 3)(rng) == 0) break;
        ASSERT_GT(c.Mask(logits), 0u) << s["name"] << " seed " << seed << " after " << text;
        int best = 0;
        for (int i = 1; i < vocab; ++i)
          if (logits[static_cast<size_t>(i)] > logits[static_cast<size_t>(best)]) best = i;
        ASSERT_TRUE(c.Accept(best));
        text += index->bytes(best);
        ended = c.finished();
      }
      if (!c.complete()) continue;  // ran out of steps: a long string or array
      ++replies;
      EXPECT_TRUE(json::accept(text)) << s["name"] << " seed " << seed << ": " << text;
    }
  }
  // 38 of the 66 end within their steps (seeds 0 and 1: 13 of 22).
  EXPECT_GE(replies, 5 * static_cast<int>(kSeeds));
}

// Closing: from every prefix of every valid instance of the corpus, the
// closing bytes complete the value, and after any prefix of them the walk
// is no longer than what is left (so a mask along them ends in time).
TEST(JsonMatcher, ClosingEndsEveryPrefix) {
  int prefixes = 0;
  for (const json& s : Corpus()["schemas"]) {
    const auto g = Compile(s["schema"], s["strict"].get<bool>());
    int valid = 0;
    for (const json& inst : s["instances"]) {
      if (!inst["valid"].get<bool>() || ++valid > 3) continue;
      const std::string text = inst["text"];
      for (size_t cut = 0; cut <= text.size(); ++cut) {
        JsonMatcher m(g);
        if (!m.Advance(std::string_view(text).substr(0, cut))) continue;  // inside a character
        const auto close = m.Closing(4096);
        ASSERT_TRUE(close) << s["name"] << ": " << text.substr(0, cut);
        EXPECT_EQ(close->empty(), m.complete()) << s["name"] << ": " << text.substr(0, cut);
        for (size_t k = 0; k < close->size(); ++k) {
          ASSERT_TRUE(m.Advance(static_cast<uint8_t>((*close)[k])))
              << s["name"] << ": " << text.substr(0, cut) << " + " << *close;
          const auto rest = m.Closing(4096);
          ASSERT_TRUE(rest);
          EXPECT_LE(rest->size(), close->size() - k - 1) << s["name"];
        }
        EXPECT_TRUE(m.complete()) << s["name"] << ": " << text.substr(0, cut) << " + " << *close;
        ++prefixes;
      }
    }
  }
  EXPECT_GT(prefixes, 300);
}

// With max_tokens, random logits (the end of turn as likely as any token,
// so it is almost never chosen) still give a whole value within the budget,
// its end of turn included, for every schema of the corpus, those open to
// extra keys too; as the scheduler samples (serve/scheduler.cc).
TEST(TokenMask, MaxTokensEndsEveryReply) {
  const Tokenizer& tok = DeepSeek();
  const int vocab = tok.max_id() + 1;
  const int32_t end = vocab;  // an end-of-turn id past the index's vocabulary
  const auto index = std::make_shared<const VocabIndex>(tok, vocab);
#ifdef WASTE_SANITIZE
  const int budgets[] = {40};  // a sanitizer's build: the short budget, the closing all along
#else
  const int budgets[] = {40, 100};
#endif
  int replies = 0;
  for (const json& s : Corpus()["schemas"]) {
    const auto g = Compile(s["schema"], s["strict"].get<bool>());
    for (const int budget : budgets) {
      std::mt19937 rng(static_cast<uint32_t>(budget));
      std::uniform_real_distribution<float> noise(0.f, 1.f);
      JsonTokenConstraint c(g, index, budget);
      std::string text;
      bool ended = false;
      for (int step = 0; step < budget && !ended; ++step) {
        std::vector<float> logits(static_cast<size_t>(vocab) + 1);
        for (float& l : logits) l = noise(rng);
        size_t allowed = c.Mask(logits);
        if (!c.complete()) logits[static_cast<size_t>(end)] = -INFINITY;
        allowed += c.complete();
        ASSERT_GT(allowed, 0u) << s["name"] << " after " << text;
        const auto best =
            static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        ended = best == end;
        if (ended) break;
        ASSERT_TRUE(c.Accept(best));
        text += index->bytes(best);
        ended = c.finished();
      }
      EXPECT_TRUE(ended) << s["name"] << " budget " << budget << ": " << text;
      EXPECT_TRUE(c.complete()) << s["name"] << ": " << text;
      EXPECT_TRUE(json::accept(text)) << s["name"] << ": " << text;
      ++replies;
    }
  }
  EXPECT_EQ(replies, static_cast<int>(std::size(budgets) * Corpus()["schemas"].size()));
}

}  // namespace
}  // namespace waste::grammar
