// The tokenizer against Python's tiktoken (fixtures written by
// tools/tokenizer/make_fixtures.py), and on its own: the pattern rewrite,
// the two BPE algorithms, UTF-8 repair, markup, load errors, long inputs,
// and the synthetic container's tokenizer.
#include "engine/tokenizer/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <gtest/gtest.h>
#include <pcre2.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/format/chat.h"
#include "engine/synth/tokenizer_files.h"
#include "engine/tokenizer/chat.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using nlohmann::json;
using waste::testing::ReadText;
using waste::testing::WriteText;
namespace tk = waste::tokenizer;

const std::string kFixtures = std::string(WASTE_FIXTURES) + "/tokenizer";



std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string Printable(std::string_view s) {
  std::string out;
  for (const char c : s.substr(0, 80)) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    }
  }
  return out;
}

std::vector<int32_t> Ids(const json& j) { return j.get<std::vector<int32_t>>(); }

// The fixture tokenizer, loaded once.
const Result<Tokenizer>& Fixture() {
  static const Result<Tokenizer> tok = Tokenizer::Load(kFixtures);
  return tok;
}

#define ASSERT_FIXTURE_LOADS() \
  ASSERT_TRUE(Fixture().ok()) << Fixture().status().message()

const json& FixtureCases(const std::string& file) {
  static std::map<std::string, json> docs;
  auto it = docs.find(file);
  if (it == docs.end()) it = docs.emplace(file, json::parse(ReadText(kFixtures + "/" + file))).first;
  return it->second;
}

// Major.minor.patch as a comparable number.
int VersionKey(const std::string& v) {
  int a = 0, b = 0, c = 0;
  std::sscanf(v.c_str(), "%d.%d.%d", &a, &b, &c);
  return a * 10000 + b * 100 + c;
}

// ---------------------------------------------------------------------------
// tiktoken fixtures
// ---------------------------------------------------------------------------

TEST(TokenizerFixtures, EveryCaseMatchesTiktoken) {
  ASSERT_FIXTURE_LOADS();
  const Tokenizer& tok = *Fixture();
  const json& doc = FixtureCases("cases.json");
  ASSERT_EQ(doc["pat_str"].get<std::string>(), tk::kKimiPatStr);
  ASSERT_EQ(tok.n_ranks(), doc["n_ranks"].get<int>());
  ASSERT_EQ(tok.n_specials(), doc["n_specials"].get<int>());
  const json& cases = doc["cases"];
  ASSERT_GE(cases.size(), 1000u);
  std::map<std::string, int> per_cat, failed_cat;
  int failures = 0, markup_cases = 0, invalid_cases = 0;
  for (const json& c : cases) {
    const std::string cat = c["cat"];
    const bool valid = c.contains("text");
    const std::string input = valid ? c["text"].get<std::string>() : FromHex(c["hex"]);
    const std::string expect_text = valid ? input : c["replaced"].get<std::string>();
    const std::vector<int32_t> content = Ids(c["content"]);
    const std::vector<int32_t> markup = c.contains("markup") ? Ids(c["markup"]) : content;
    markup_cases += c.contains("markup");
    invalid_cases += !valid;
    ++per_cat[cat];

    const std::vector<int32_t> got = tok.Encode(input);
    const std::vector<int32_t> got_markup = tok.EncodeMarkup(input);
    bool ok = true;
    if (got != content) {
      ok = false;
      ADD_FAILURE() << cat << ": Encode(\"" << Printable(input) << "\") differs from tiktoken's encode_ordinary";
    }
    if (got_markup != markup) {
      ok = false;
      ADD_FAILURE() << cat << ": EncodeMarkup(\"" << Printable(input) << "\") differs from tiktoken's encode";
    }
    // Decoding: tiktoken's ids give the text back, and so do ours.
    if (tok.Decode(content) != expect_text || tok.Decode(got) != expect_text ||
        tok.Decode(got_markup) != expect_text) {
      ok = false;
      ADD_FAILURE() << cat << ": decode of \"" << Printable(input) << "\" is not the text";
    }
    if (!ok) {
      ++failures;
      ++failed_cat[cat];
    }
    if (failures > 20) FAIL() << "stopping after 20 failing cases";
  }
  std::string summary;
  for (const auto& [cat, n] : per_cat)
    summary += "  " + cat + ": " + std::to_string(n - failed_cat[cat]) + "/" + std::to_string(n) + "\n";
  std::printf("tiktoken %s fixtures, %zu cases (%d with specials in markup, %d invalid UTF-8):\n%s",
              doc["tiktoken_version"].get<std::string>().c_str(), cases.size(), markup_cases,
              invalid_cases, summary.c_str());
  EXPECT_EQ(failures, 0);
  EXPECT_GE(markup_cases, 100);
  EXPECT_GE(invalid_cases, 100);
}

// A rank file holding every piece as one token: the ids show the regex split
// itself, so this is where the PCRE2 rewrite of Kimi's pattern is held to
// tiktoken's Rust regex. `dir` holds tokenizer.model and cases.json.
void CheckSplits(const std::string& dir, size_t min_cases) {
  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const json doc = json::parse(ReadText(dir + "/cases.json"));
  ASSERT_EQ(doc["pat_str"].get<std::string>(), tk::kKimiPatStr);
  int failures = 0;
  for (const json& c : doc["cases"]) {
    const std::string text = c["text"];
    if (tok->Encode(text) != Ids(c["content"])) {
      ADD_FAILURE() << "split of \"" << Printable(text) << "\" differs from tiktoken's";
      if (++failures > 20) FAIL() << "stopping after 20 failing cases";
    }
  }
  std::printf("%zu split cases\n", doc["cases"].size());
  EXPECT_GE(doc["cases"].size(), min_cases);

  // Characters newer than this PCRE2's Unicode tables: compared when it
  // knows them, counted otherwise (README.md: known differences).
  const std::string have = tk::Pcre2UnicodeVersion();
  int skipped = 0, skipped_same = 0;
  for (const json& c : doc["newer_unicode"]) {
    const std::string text = c["text"], need = c["unicode"];
    const bool same = tok->Encode(text) == Ids(c["content"]);
    if (VersionKey(have) >= VersionKey(need)) {
      EXPECT_TRUE(same) << "Unicode " << need << " case \"" << Printable(text) << "\"";
    } else {
      ++skipped;
      skipped_same += same;
      if (skipped <= 5)
        std::printf("  not compared (PCRE2 has Unicode %s, needs %s): \"%s\" %s tiktoken\n",
                    have.c_str(), need.c_str(), Printable(text).c_str(),
                    same ? "matches" : "differs from");
    }
    EXPECT_EQ(tok->Decode(tok->Encode(text)), text);
  }
  if (skipped)
    std::printf("%d cases with characters newer than Unicode %s not compared (%d match anyway)\n",
                skipped, have.c_str(), skipped_same);
}

TEST(TokenizerFixtures, PreTokenSplitsMatchTiktoken) { CheckSplits(kFixtures + "/splits", 1000); }

// The same check on a directory written by `make_fixtures.py --exhaustive`
// (every assigned code point in context; too large to commit).
TEST(TokenizerFixtures, ExtraSplitsFromEnvironment) {
  const char* dir = std::getenv("WASTE_TOKENIZER_EXTRA_FIXTURES");
  if (!dir || !*dir)
    GTEST_SKIP() << "SKIP: the exhaustive Unicode check needs WASTE_TOKENIZER_EXTRA_FIXTURES=DIR, "
                    "written by `python3 tools/tokenizer/make_fixtures.py --exhaustive DIR` "
                    "(40 MB, not committed)";
  CheckSplits(dir, 1);
}

// ---------------------------------------------------------------------------
// the pattern rewrite, exhaustively over every code point
// ---------------------------------------------------------------------------

class Pcre2Class {
 public:
  explicit Pcre2Class(const std::string& cls) {
    const std::string pat = "^(?:" + cls + ")$";
    int err = 0;
    PCRE2_SIZE off = 0;
    re_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.c_str()), pat.size(),
                        PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    EXPECT_NE(re_, nullptr) << pat;
    if (re_) pcre2_jit_compile(re_, PCRE2_JIT_COMPLETE);
    md_ = re_ ? pcre2_match_data_create_from_pattern(re_, nullptr) : nullptr;
  }
  ~Pcre2Class() {
    pcre2_match_data_free(md_);
    pcre2_code_free(re_);
  }
  bool Matches(uint32_t cp) const {
    if (!re_) return false;
    const std::string s = Utf8(cp);
    return pcre2_match(re_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md_, nullptr) >= 0;
  }
  static std::string Utf8(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  }

 private:
  pcre2_code* re_ = nullptr;
  pcre2_match_data* md_ = nullptr;
};

template <class F>
void ForEachScalarValue(F f) {
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp)
    if (cp < 0xD800 || cp > 0xDFFF) f(cp);
}

// [X && [^\p{Han}]] became one negated class; the direct form with a
// lookahead per character must agree on every code point.
TEST(TokenizerPattern, IntersectionRewriteIsExact) {
  const Pcre2Class upper(tk::kUpperClass), lower(tk::kLowerClass);
  const Pcre2Class upper_ref(R"((?!\p{sc:Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])");
  const Pcre2Class lower_ref(R"((?!\p{sc:Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])");
  int64_t upper_n = 0, lower_n = 0, diffs = 0;
  ForEachScalarValue([&](uint32_t cp) {
    const bool u = upper.Matches(cp), l = lower.Matches(cp);
    upper_n += u;
    lower_n += l;
    if (u != upper_ref.Matches(cp) || l != lower_ref.Matches(cp)) {
      if (++diffs < 10) ADD_FAILURE() << "U+" << std::hex << cp;
    }
  });
  EXPECT_EQ(diffs, 0);
  EXPECT_GT(upper_n, 30000);  // Lo without Han is most of them: some 38,000 in Unicode 14
  EXPECT_GT(lower_n, 30000);
}

// \p{Han} in Rust's regex crate is the Script property; a bare \p{Han} in
// PCRE2 10.40+ is Script_Extensions and would take CJK punctuation.
TEST(TokenizerPattern, HanIsTheScriptProperty) {
  const Pcre2Class han(R"(\p{sc:Han})");
  EXPECT_TRUE(han.Matches(0x4E2D));   // 中
  EXPECT_TRUE(han.Matches(0x3005));   // 々 (Lm, Han)
  EXPECT_TRUE(han.Matches(0x3007));   // 〇 (Nl, Han)
  EXPECT_TRUE(han.Matches(0x2E80));   // a CJK radical (So, Han)
  EXPECT_FALSE(han.Matches(0x3001));  // 、 (Common; Han only in Script_Extensions)
  EXPECT_FALSE(han.Matches(0x3002));  // 。
  EXPECT_FALSE(han.Matches(0x30FC));  // ー
  EXPECT_FALSE(han.Matches(0x3041));  // ぁ (Hiragana)
}

// The spelled-out \s is White_Space, the 25 code points of PropList.txt
// (stable since Unicode 6.3), and nothing else.
TEST(TokenizerPattern, WhiteSpaceIsThePropertyExactly) {
  const std::vector<uint32_t> white_space = {
      0x09,   0x0A,   0x0B,   0x0C,   0x0D,   0x20,   0x85,   0xA0,   0x1680,
      0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008,
      0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
  const Pcre2Class ws(std::string("[") + tk::kWhiteSpace + "]");
  std::vector<uint32_t> got;
  ForEachScalarValue([&](uint32_t cp) {
    if (ws.Matches(cp)) got.push_back(cp);
  });
  EXPECT_EQ(got, white_space);
}

TEST(TokenizerPattern, CompilesAndUsesJitWhereAvailable) {
  auto pre = tk::PreTokenizer::Create();
  ASSERT_TRUE(pre.ok()) << pre.status().message();
  uint32_t jit = 0;
  pcre2_config(PCRE2_CONFIG_JIT, &jit);
  EXPECT_EQ(pre->jit(), jit != 0);
  std::printf("PCRE2 Unicode %s, JIT %s\n", tk::Pcre2UnicodeVersion().c_str(), pre->jit() ? "on" : "off");
  std::vector<std::string> pieces;
  pre->Split("Hello world's  12345 中文。\n\n  x", [&](std::string_view p) { pieces.emplace_back(p); });
  const std::vector<std::string> want = {"Hello", " world's", " ", " ", "123", "45", " ",
                                         "中文", "。\n\n", " ", " x"};
  EXPECT_EQ(pieces, want);
}

// ---------------------------------------------------------------------------
// BPE
// ---------------------------------------------------------------------------

tk::RankTable FixtureRanks() {
  std::vector<std::string> tokens;
  for (int32_t r = 0; r < Fixture()->n_ranks(); ++r) tokens.emplace_back(Fixture()->TokenBytes(r));
  return tk::RankTable(tokens);
}

TEST(TokenizerBpe, ScanAndHeapAgree) {
  ASSERT_FIXTURE_LOADS();
  const tk::RankTable ranks = FixtureRanks();
  auto pre = tk::PreTokenizer::Create();
  ASSERT_TRUE(pre.ok());
  int64_t pieces = 0;
  const auto check = [&](std::string_view piece) {
    std::vector<int32_t> a, b;
    tk::BytePairEncodeScan(piece, ranks, &a);
    tk::BytePairEncodeHeap(piece, ranks, &b);
    ++pieces;
    ASSERT_EQ(a, b) << "\"" << Printable(piece) << "\"";
    std::string back;
    for (int32_t id : a) back += ranks.Bytes(id);
    ASSERT_EQ(back, piece);
  };
  for (const json& c : FixtureCases("cases.json")["cases"]) {
    const std::string text = c.contains("text") ? c["text"].get<std::string>()
                                                : tk::ReplaceInvalidUtf8(FromHex(c["hex"]));
    pre->Split(text, check);
    check(text.empty() ? std::string("x") : text);  // whole strings as one piece: long, many merges
  }
  // Random strings over a few characters that merge a lot.
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"e", " ", "t", "h", "th", "the", "in", "ing", "  ", "\n", "中", "é"};
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 200);
    for (int k = 0; k < n; ++k) s += alphabet[rng() % alphabet.size()];
    check(s);
  }
  EXPECT_GT(pieces, 20000);
}

// A piece made of one repeated character must not take quadratic time.
TEST(TokenizerBpe, LongRepeatedPiecesAreFast) {
  ASSERT_FIXTURE_LOADS();
  const std::string dir = waste::testing::ScratchDir();
  // The fixture ranks plus a doubling chain of 'a' and of ' ', so a long run
  // merges down through every level.
  std::string model = ReadText(kFixtures + "/tokenizer.model");
  int32_t rank = Fixture()->n_ranks();
  const auto b64 = [](const std::string& s) {
    static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    size_t i = 0;
    for (; i + 2 < s.size(); i += 3) {
      const uint32_t v = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8) | uint8_t(s[i + 2]);
      for (int j = 3; j >= 0; --j) out += k[(v >> (6 * j)) & 63];
    }
    if (s.size() - i == 1) {
      const uint32_t v = uint8_t(s[i]) << 16;
      out += std::string{k[v >> 18], k[(v >> 12) & 63]} + "==";
    } else if (s.size() - i == 2) {
      const uint32_t v = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8);
      out += std::string{k[v >> 18], k[(v >> 12) & 63], k[(v >> 6) & 63]} + "=";
    }
    return out;
  };
  const Tokenizer& fixture = *Fixture();
  for (const char c : {'a', ' '}) {
    for (size_t len = 2; len <= 64; len *= 2) {
      const std::string t(len, c);
      if (fixture.Encode(t).size() == 1 && fixture.TokenBytes(fixture.Encode(t)[0]) == t) continue;
      model += b64(t) + " " + std::to_string(rank++) + "\n";
    }
  }
  WriteText(dir + "/tokenizer.model", model);
  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();

  // The bound is there to catch an encoder quadratic in a run's length.
  // Under a sanitizer this one took up to 0.34 s alone on the Zen 1 host and
  // 0.69 s beside another build, so the bound is wider there.
#ifdef WASTE_SANITIZE
  constexpr double kSeconds = 2.0;
#else
  constexpr double kSeconds = 0.5;
#endif
  for (const std::string unit : {"a", "A", " ", "\n", "1", "!", "中", "é", "\xF0\x9F\x98\x80", "'s"}) {
    std::string text;
    while (text.size() < 100 * 1024) text += unit;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok->Encode(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, kSeconds) << "\"" << Printable(unit) << "\" x " << text.size() / unit.size();
    EXPECT_EQ(tok->Decode(ids), text);
    std::printf("100 KB of \"%s\": %zu ids in %.1f ms\n", Printable(unit).c_str(), ids.size(), s * 1e3);
  }
  // The doubling chain: 102400 a's are 1600 tokens of 64.
  const std::vector<int32_t> ids = tok->Encode(std::string(102400, 'a'));
  ASSERT_EQ(ids.size(), 1600u);
  EXPECT_EQ(tok->TokenBytes(ids[0]), std::string(64, 'a'));
}

// ---------------------------------------------------------------------------
// UTF-8
// ---------------------------------------------------------------------------

TEST(TokenizerUtf8, ReplacesMaximalSubparts) {
  const std::string R = "\xEF\xBF\xBD";
  const std::vector<std::pair<std::string, std::string>> table = {
      {"", ""},
      {"abc", "abc"},
      {"\xC3\xA9", "\xC3\xA9"},
      {"\x80", R},
      {"\xC0\xAF", R + R},                      // overlong lead bytes are never valid
      {"\xE0\x80\x80", R + R + R},              // E0 needs A0..BF next
      {"\xE0\xA0", R},                          // truncated: one U+FFFD for the subpart
      {"\xE2\x82" "a", R + "a"},
      {"\xED\xA0\x80", R + R + R},              // a surrogate
      {"\xF0\x9F\x98", R},
      {"\xF0\x9F\x98\x80\x80", "\xF0\x9F\x98\x80" + R},
      {"\xF4\x90\x80\x80", R + R + R + R},      // above U+10FFFF
      {"\xF5\x80", R + R},
      {"\xFF\xFE", R + R},
      {"a\xF0\x28\x8C\xBC", "a" + R + "(" + R + R},
  };
  for (const auto& [in, want] : table) {
    EXPECT_EQ(tk::ReplaceInvalidUtf8(in), want) << Printable(in);
    EXPECT_EQ(tk::IsValidUtf8(in), in == want) << Printable(in);
  }
  EXPECT_EQ(tk::ValidUtf8Prefix("a\xF0\x28\x8C\xBC"), 1u);
  EXPECT_EQ(tk::ValidUtf8Prefix("abcdefghij\xC3\xA9\xE2\x82"), 12u);
  // Random bytes: the repair is valid, a no-op on valid input, and agrees
  // with the check.
  std::mt19937 rng(3);
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 24, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 3 == 0 ? 0x80 + rng() % 0x80 : rng() % 256);
    const std::string r = tk::ReplaceInvalidUtf8(s);
    ASSERT_TRUE(tk::IsValidUtf8(r));
    ASSERT_EQ(tk::IsValidUtf8(s), r == s);
    // The valid prefix is what the repair keeps before its first U+FFFD.
    const size_t p = tk::ValidUtf8Prefix(s);
    ASSERT_EQ(r.substr(0, p), s.substr(0, p));
    if (p < s.size()) {
      ASSERT_EQ(r.substr(p, 3), R) << Printable(s);
    }
    ASSERT_EQ(tk::ReplaceInvalidUtf8(r), r);
  }
}

TEST(TokenizerUtf8, EncodeNeverFailsAndRoundTripsValidText) {
  ASSERT_FIXTURE_LOADS();
  const Tokenizer& tok = *Fixture();
  std::mt19937 rng(11);
  for (int i = 0; i < 3000; ++i) {
    // Valid: random scalar values from every plane, weighted to the BMP.
    std::string valid;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) {
      uint32_t cp;
      do {
        const uint32_t r = rng() % 4;
        cp = r == 0 ? rng() % 0x80 : r == 1 ? rng() % 0x800 : r == 2 ? rng() % 0x10000 : rng() % 0x110000;
      } while (cp >= 0xD800 && cp <= 0xDFFF);
      valid += Pcre2Class::Utf8(cp);
    }
    ASSERT_EQ(tok.Decode(tok.Encode(valid)), valid);
    ASSERT_EQ(tok.Decode(tok.EncodeMarkup(valid)), valid);
    // Invalid: random bytes come back as their repair.
    std::string bytes(rng() % 40, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    ASSERT_EQ(tok.Decode(tok.Encode(bytes)), tk::ReplaceInvalidUtf8(bytes));
  }
}

// ---------------------------------------------------------------------------
// markup and content
// ---------------------------------------------------------------------------

TEST(TokenizerMarkup, SpecialsOnlyInMarkup) {
  ASSERT_FIXTURE_LOADS();
  const Tokenizer& tok = *Fixture();
  const int32_t n = tok.n_ranks();
  ASSERT_EQ(tok.SpecialId("[BOS]"), n);
  ASSERT_EQ(tok.SpecialId("<|im_end|>"), n + 2);
  ASSERT_EQ(tok.SpecialId("<|im_middle|>"), n + 17);
  EXPECT_EQ(tok.SpecialId("<|im_end"), std::nullopt);
  EXPECT_EQ(tok.max_id(), n + 255);
  const int32_t end = *tok.SpecialId("<|im_end|>");
  EXPECT_TRUE(tok.IsSpecial(end));
  EXPECT_FALSE(tok.IsSpecial(5));
  EXPECT_FALSE(tok.IsSpecial(tok.max_id() + 1));
  EXPECT_EQ(tok.TokenBytes(end), "<|im_end|>");
  EXPECT_EQ(tok.TokenBytes(-1), "");
  EXPECT_EQ(tok.TokenBytes(tok.max_id() + 1), "");

  // Content never produces a special id, whatever the text.
  const std::string chat =
      "<|im_user|>user<|im_middle|>Hi <|im_end|>!<|im_end|><|im_assistant|>assistant<|im_middle|>";
  for (const int32_t id : tok.Encode(chat)) EXPECT_LT(id, n);
  EXPECT_EQ(tok.Decode(tok.Encode(chat)), chat);

  // Markup: the specials, and the text between them encoded as content.
  std::vector<int32_t> want;
  const auto add = [&](const std::vector<int32_t>& v) { want.insert(want.end(), v.begin(), v.end()); };
  want.push_back(*tok.SpecialId("<|im_user|>"));
  add(tok.Encode("user"));
  want.push_back(*tok.SpecialId("<|im_middle|>"));
  add(tok.Encode("Hi "));
  want.push_back(end);
  add(tok.Encode("!"));
  want.push_back(end);
  want.push_back(*tok.SpecialId("<|im_assistant|>"));
  add(tok.Encode("assistant"));
  want.push_back(*tok.SpecialId("<|im_middle|>"));
  EXPECT_EQ(tok.EncodeMarkup(chat), want);
  EXPECT_EQ(tok.Decode(want), chat);

  EXPECT_EQ(tok.EncodeMarkup("<|im_end"), tok.Encode("<|im_end"));
  std::vector<int32_t> partial = tok.Encode("<|im_");
  partial.push_back(end);
  EXPECT_EQ(tok.EncodeMarkup("<|im_<|im_end|>"), partial);
  EXPECT_EQ(tok.EncodeMarkup(""), std::vector<int32_t>{});
  EXPECT_EQ(tok.Encode(""), std::vector<int32_t>{});
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{-5, tok.max_id() + 7}), "");
}

// The longest special at a position wins (tiktoken's order among specials
// that prefix one another is a hash map's; Kimi has none).
TEST(TokenizerMarkup, LongestSpecialWins) {
  ASSERT_FIXTURE_LOADS();
  const std::string dir = waste::testing::ScratchDir();
  std::filesystem::copy_file(kFixtures + "/tokenizer.model", dir + "/tokenizer.model");
  const int32_t n = Fixture()->n_ranks();
  WriteText(dir + "/specials.json", "[{\"id\": " + std::to_string(n) + ", \"text\": \"<a>\"}, {\"id\": " +
                                        std::to_string(n + 1) + ", \"text\": \"<a>b\"}]");
  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->EncodeMarkup("<a>b"), (std::vector<int32_t>{n + 1}));
  EXPECT_EQ(tok->EncodeMarkup("<a>c"), (std::vector<int32_t>{n, tok->Encode("c")[0]}));
  EXPECT_EQ(tok->EncodeMarkup("<a<a>"), [&] {
    auto v = tok->Encode("<a");
    v.push_back(n);
    return v;
  }());
}

TEST(TokenizerMarkup, ManyThreadsSameIds) {
  ASSERT_FIXTURE_LOADS();
  const Tokenizer& tok = *Fixture();
  const std::string text = ReadText(kFixtures + "/specials.json") + "Hello 世界 <|im_end|> 'll 123456";
  const std::vector<int32_t> want = tok.EncodeMarkup(text);
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) bad[static_cast<size_t>(t)] += tok.EncodeMarkup(text) != want;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad, std::vector<int>(4, 0));
}

// ---------------------------------------------------------------------------
// loading untrusted files
// ---------------------------------------------------------------------------

std::string ByteLines(int skip = -1) {
  std::string model;
  int rank = 0;
  for (int b = 0; b < 256; ++b) {
    if (b == skip) continue;
    static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    model += std::string{k[b >> 2], k[(b & 3) << 4]} + "== " + std::to_string(rank++) + "\n";
  }
  return model;
}

struct BadModel {
  const char* name;
  std::string model;
  std::string message;  // the whole error
};

TEST(TokenizerLoad, BadTokenizerModels) {
  const std::string bytes = ByteLines();
  const std::vector<BadModel> table = {
      {"empty", "", "tokenizer.model: no tokens"},
      {"blank lines only", "\n\r\n\n", "tokenizer.model: no tokens"},
      {"bad base64 char", bytes + "QU!C 256\n", "tokenizer.model: line 257: bad base64 \"QU!C\""},
      {"base64 length", bytes + "QUJ 256\n", "tokenizer.model: line 257: bad base64 \"QUJ\""},
      {"base64 padding inside", bytes + "QQ==QUJD 256\n",
       "tokenizer.model: line 257: bad base64 \"QQ==QUJD\""},
      {"base64 non-canonical", bytes + "QUK= 256\n", "tokenizer.model: line 257: bad base64 \"QUK=\""},
      {"empty token", bytes + " 256\n", "tokenizer.model: line 257: bad base64 \"\""},
      {"no rank", bytes + "QUJD\n",
       "tokenizer.model: line 257: expected \"<base64> <rank>\", got \"QUJD\""},
      {"two spaces", bytes + "QUJD  256\n",
       "tokenizer.model: line 257: expected \"<base64> <rank>\", got \"QUJD  256\""},
      {"tab", bytes + "QUJD\t256\n",
       "tokenizer.model: line 257: expected \"<base64> <rank>\", got \"QUJD\\x09256\""},
      {"negative rank", bytes + "QUJD -1\n", "tokenizer.model: line 257: bad rank \"-1\""},
      {"rank not a number", bytes + "QUJD 2x\n", "tokenizer.model: line 257: bad rank \"2x\""},
      {"huge rank", bytes + "QUJD 99999999999999\n",
       "tokenizer.model: line 257: bad rank \"99999999999999\""},
      {"gap in ranks", bytes + "QUJD 300\n",
       "tokenizer.model: line 257: rank 300 leaves a gap: the file has 257 tokens, so the ranks "
       "must be 0..256"},
      {"duplicate rank", bytes + "QUJD 256\nQUJE 256\n",
       "tokenizer.model: line 258: rank 256 already given on line 257"},
      {"duplicate token", bytes + "QUJD 256\nQUJD 257\n",
       "tokenizer.model: line 258: token \"QUJD\" already has rank 256 (line 257)"},
      {"duplicate of a byte", bytes + "QQ== 256\n",
       "tokenizer.model: line 257: token \"QQ==\" already has rank 65 (line 66)"},
      {"missing byte", ByteLines(0x41), "tokenizer.model: no token for the byte 0x41 (every single byte must be a token)"},
  };
  for (const BadModel& b : table) {
    const std::string dir = waste::testing::ScratchDir(std::string(".") + b.name);
    WriteText(dir + "/tokenizer.model", b.model);
    auto tok = Tokenizer::Load(dir);
    ASSERT_FALSE(tok.ok()) << b.name;
    EXPECT_EQ(tok.status().message(), b.message) << b.name;
  }
}

TEST(TokenizerLoad, AcceptsCrlfAndAnyRankOrder) {
  // Ranks in reverse order, CRLF line ends, blank lines: tiktoken reads it.
  std::vector<std::string> lines;
  std::istringstream in(ByteLines() + "QUJD 256\n");
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::string model = "\r\n";
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) model += *it + "\r\n";
  const std::string dir = waste::testing::ScratchDir();
  WriteText(dir + "/tokenizer.model", model);
  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->n_ranks(), 257);
  EXPECT_EQ(tok->n_specials(), 0);
  EXPECT_EQ(tok->max_id(), 256);
  EXPECT_EQ(tok->TokenBytes(256), "ABC");
  EXPECT_EQ(tok->Encode("ABC"), std::vector<int32_t>{256});
  // No merge builds "ABC" (there is no "AB" or "BC"): only a whole piece
  // reaches it, as in tiktoken.
  EXPECT_EQ(tok->Encode("ABCD"), (std::vector<int32_t>{'A', 'B', 'C', 'D'}));
}

TEST(TokenizerLoad, MissingAndHugeFiles) {
  const std::string dir = waste::testing::ScratchDir();
  auto tok = Tokenizer::Load(dir);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().message(), "tokenizer.model: No such file or directory");
  // A sparse file one byte over the limit is refused before it is read.
  {
    std::ofstream f(dir + "/tokenizer.model");
  }
  ASSERT_EQ(truncate((dir + "/tokenizer.model").c_str(), (64 << 20) + 1), 0);
  tok = Tokenizer::Load(dir);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().message(), "tokenizer.model: 67108865 bytes, more than the 67108864 allowed");
}

TEST(TokenizerLoad, BadSpecials) {
  const std::string model = ByteLines();
  const std::vector<std::pair<std::string, std::string>> table = {
      {"{", "specials.json: "},  // the JSON parser's message follows
      {"{}", "specials.json: not a list"},
      {"[1]", "specials.json: entry 0 is not {\"id\": int, \"text\": string}"},
      {R"([{"id": "300", "text": "<x>"}])", "specials.json: entry 0 is not {\"id\": int, \"text\": string}"},
      {R"([{"id": 300}])", "specials.json: entry 0 is not {\"id\": int, \"text\": string}"},
      {R"([{"id": 300.5, "text": "<x>"}])", "specials.json: entry 0 is not {\"id\": int, \"text\": string}"},
      {R"([{"id": 5, "text": "<x>"}])",
       "specials.json: entry 0: id 5 is a rank of tokenizer.model (ranks are 0..255)"},
      {R"([{"id": -1, "text": "<x>"}])", "specials.json: entry 0: id -1 is outside 0..16777215"},
      {R"([{"id": 18446744073709551615, "text": "<x>"}])",
       "specials.json: entry 0: id 18446744073709551615 is outside 0..16777215"},
      {R"([{"id": 16777216, "text": "<x>"}])", "specials.json: entry 0: id 16777216 is outside 0..16777215"},
      {R"([{"id": 300, "text": ""}])", "specials.json: entry 0: text is empty or longer than 256 bytes"},
      {R"([{"id": 300, "text": "<x>"}, {"id": 300, "text": "<y>"}])",
       "specials.json: entry 1: id 300 is also entry 0's"},
      {R"([{"id": 300, "text": "<x>"}, {"id": 301, "text": "<x>"}])",
       "specials.json: entry 1: text \"<x>\" is also entry 0's"},
  };
  for (const auto& [specials, message] : table) {
    const std::string dir = waste::testing::ScratchDir();
    WriteText(dir + "/tokenizer.model", model);
    WriteText(dir + "/specials.json", specials);
    auto tok = Tokenizer::Load(dir);
    ASSERT_FALSE(tok.ok()) << specials;
    EXPECT_EQ(tok.status().message().substr(0, message.size()), message) << specials;
    if (message != "specials.json: ") {
      EXPECT_EQ(tok.status().message(), message);
    }
  }
  // Specials may leave gaps and sit far above the ranks.
  const std::string dir = waste::testing::ScratchDir("ok");
  WriteText(dir + "/tokenizer.model", model);
  WriteText(dir + "/specials.json", R"([{"id": 163586, "text": "<|im_end|>"}, {"id": 256, "text": "[BOS]"}])");
  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->max_id(), 163586);
  EXPECT_EQ(tok->EncodeMarkup("[BOS]hi<|im_end|>"), (std::vector<int32_t>{256, 'h', 'i', 163586}));
}

// ---------------------------------------------------------------------------
// the synthetic container's tokenizer
// ---------------------------------------------------------------------------

class SynthTokenizer : public ::testing::TestWithParam<int> {};

TEST_P(SynthTokenizer, LoadsAndRoundTrips) {
  const TokenizerFiles files = MakeTokenizerFiles(GetParam(), kFamilyKimiK2);
  ASSERT_TRUE(files.error.empty()) << files.error;
  const std::string dir = waste::testing::ScratchDir();
  WriteText(dir + "/tokenizer.model", files.tokenizer_model);
  WriteText(dir + "/specials.json", files.specials_json);
  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->n_specials(), 7);
  EXPECT_EQ(tok->SpecialId("[BOS]"), files.bos_id);
  EXPECT_EQ(tok->SpecialId("<|im_end|>"), files.eos_id);
  EXPECT_LT(tok->max_id(), GetParam());

  const std::string text = "Hello world, the model reads the expert cache from disk.\n\n    return 0;";
  const std::vector<int32_t> ids = tok->Encode(text);
  EXPECT_EQ(tok->Decode(ids), text);
  EXPECT_LT(ids.size(), text.size() / 2);  // the merges work: " the", " world", ...
  ASSERT_EQ(tok->Encode(" hello").size(), 1u);
  EXPECT_EQ(tok->TokenBytes(tok->Encode(" hello")[0]), " hello");

  // The chat markup of chat.json: each special one id.
  const json chat = json::parse(files.chat_json);
  const std::string prefix = chat["user"][0], suffix = chat["user"][1];
  const std::vector<int32_t> m = tok->EncodeMarkup(prefix + "Hi" + suffix);
  ASSERT_GE(m.size(), 4u);
  EXPECT_EQ(m.front(), *tok->SpecialId("<|im_user|>"));
  EXPECT_EQ(m.back(), files.eos_id);
  EXPECT_EQ(tok->Decode(m), prefix + "Hi" + suffix);
}

// The tiny presets' vocabulary and Kimi's real one (specials at 163584+).
INSTANTIATE_TEST_SUITE_P(Vocab, SynthTokenizer, ::testing::Values(512, 163840));

// Every other family's synthetic specials are added tokens of its released
// tokenizer (the fixtures' tokenizer.json), and every added token of the
// released tokenizer that the family's prompt writes as markup (chat.json's
// layout, and tools, a call and its result as the family renders them) is
// one of them: the markup tokenizes as the real model's does.
struct FamilyCase {
  const char* family;
  const char* fixture;  // under tests/fixtures/tokenizer
};

class SynthFamilyTokenizer : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(SynthFamilyTokenizer, SpecialsAreTheReleasedOnesItsMarkupWrites) {
  const TokenizerFiles files = MakeTokenizerFiles(512, GetParam().family);
  ASSERT_EQ(files.error, "");
  const std::string dir = waste::testing::ScratchDir();
  WriteText(dir + "/tokenizer.model", files.tokenizer_model);
  WriteText(dir + "/specials.json", files.specials_json);
  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_GE(files.eos_id, 0);

  std::set<std::string> released;
  // Only added_tokens is kept (DeepSeek's file is 6 MB).
  const json tj = json::parse(ReadText(kFixtures + "/" + GetParam().fixture + "/tokenizer.json"),
                              [](int depth, json::parse_event_t event, const json& parsed) {
                                return depth != 1 || event != json::parse_event_t::key ||
                                       parsed == "added_tokens";
                              });
  for (const json& a : tj.at("added_tokens")) released.insert(a["content"].get<std::string>());
  for (const json& s : json::parse(files.specials_json))
    EXPECT_TRUE(released.count(s["text"].get<std::string>())) << s["text"];

  auto chat = ParseChat(files.chat_json);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  EXPECT_EQ(chat->family, GetParam().family);
  const std::vector<ChatMessage> messages = {
      {.role = "system", .content = "Be brief."},
      {.role = "user", .content = "Weather in Paris?"},
      {.role = "assistant",
       .content = "",
       .tool_calls = {{.id = "c1", .name = "get_weather", .arguments = R"({"city": "Paris"})"}}},
      {.role = "tool", .content = R"({"c": 20})", .tool_call_id = "c1", .name = "get_weather"},
      {.role = "user", .content = "Thanks."}};
  const std::vector<ChatTool> tools = {
      {.name = "get_weather",
       .parameters = nlohmann::ordered_json::parse(
           R"({"type": "object", "properties": {"city": {"type": "string"}}})")}};
  ChatRenderOptions options;
  options.date = "2026-01-01";
  // DeepSeek-V3.1's template renders calls and results but not tools.
  if (chat->family != kFamilyDeepseekV31) options.tools = tools;
  auto pieces = ChatPieces(*chat, messages, options);
  ASSERT_TRUE(pieces.ok()) << pieces.status().message();
  std::set<std::string> written;
  for (const ChatPiece& p : *pieces)
    for (const std::string& r : released)
      if (p.markup && p.text.find(r) != std::string::npos) written.insert(r);
  EXPECT_GE(written.size(), 4u);  // role markers, end of turn, call and result markup
  for (const std::string& r : written) EXPECT_TRUE(tok->SpecialId(r)) << r;
}

INSTANTIATE_TEST_SUITE_P(
    Families, SynthFamilyTokenizer,
    ::testing::Values(FamilyCase{kFamilyQwen3, "qwen3"}, FamilyCase{kFamilyDeepseekV31, "deepseek"},
                      FamilyCase{kFamilyGlm45, "glm45"}, FamilyCase{kFamilyHarmony, "gpt-oss"}),
    [](const auto& p) {
      return std::string(p.param.fixture == std::string("gpt-oss") ? "gpt_oss" : p.param.fixture);
    });


}  // namespace
}  // namespace waste
