#include "engine/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/format/container.h"  // JsonString, JsonBool
#include "engine/tokenizer/onig_pattern.h"

namespace waste::tokenizer {

const char* const kKimiPatStr =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

// The 25 characters of Unicode's White_Space property, which is what \s
// means in Rust's regex crate. PCRE2's \s under UCP differs (it takes
// U+180E, which left White_Space in Unicode 6.3), so it is spelled out.
const char* const kWhiteSpace =
    R"(\t\n\x{0B}\x{0C}\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// X && [^\p{Han}] for X a union of general categories, written as one
// negated class: the general categories partition every code point, so
// "in X and not Han" is "in none of the other categories and not Han".
// \p{sc:Han} is the Script property, as \p{Han} is in Rust's regex crate;
// PCRE2 10.40+ reads a bare \p{Han} as Script_Extensions, which would take
// in shared CJK punctuation such as U+3001 and U+3002.
//   Lu Lt Lm Lo M   = not (Ll N P S Z C)
const char* const kUpperClass = R"([^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}])";
//   Ll Lm Lo M      = not (Lu Lt N P S Z C)
const char* const kLowerClass = R"([^\p{Lu}\p{Lt}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}])";

std::string KimiPcre2Pattern() {
  const std::string ws = kWhiteSpace, up = kUpperClass, lo = kLowerClass;
  const std::string suffix = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?)";
  return R"(\p{sc:Han}+)"  // [\p{Han}]+
         R"(|[^\r\n\p{L}\p{N}]?)" +
         up + "*" + lo + "+" + suffix + R"(|[^\r\n\p{L}\p{N}]?)" + up + "+" + lo + "*" + suffix +
         R"(|\p{N}{1,3})"
         "| ?[^" +
         ws +
         R"(\p{L}\p{N}]+[\r\n]*)"  // \s inside a negated class
         "|[" +
         ws +
         R"(]*[\r\n]+)"  // \s*[\r\n]+
         "|[" +
         ws + "]+(?![^" + ws +
         "])"  // \s+(?!\S)
         "|[" +
         ws + "]+";  // \s+
}

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string Pcre2UnicodeVersion() {
  char buf[64] = {};
  if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, buf) < 0) return "";
  return buf;
}

struct PreTokenizer::Code {
  pcre2_code* re = nullptr;
  pcre2_match_context* context = nullptr;  // read-only once made: shared by threads
  bool jit = false;
  ~Code() {
    pcre2_match_context_free(context);
    pcre2_code_free(re);
  }
};

// tokenizers' SplitDelimiterBehavior.
enum class Behavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizer::Step {
  std::shared_ptr<const Code> code;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
};

namespace {

// Compiles a PCRE2 pattern; `what` names it in the error.
Result<std::shared_ptr<const PreTokenizer::Code>> Compile(const std::string& pattern,
                                                          const std::string& what);

}  // namespace

Result<PreTokenizer> PreTokenizer::Create() {
  auto code = Compile(KimiPcre2Pattern(), "tokenizer: the pre-token pattern");
  if (!code.ok()) return code.status();
  PreTokenizer p;
  p.kimi_ = std::move(*code);
  return p;
}

bool PreTokenizer::jit() const {
  if (kimi_) return kimi_->jit;
  return std::all_of(steps_->begin(), steps_->end(), [](const Step& s) { return s.code->jit; });
}

namespace {

Result<std::shared_ptr<const PreTokenizer::Code>> Compile(const std::string& pattern,
                                                          const std::string& what) {
  int err = 0;
  PCRE2_SIZE where = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &err, &where, nullptr);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return Status::Error(what + ": PCRE2 refused the pattern at offset " + std::to_string(where) +
                         ": " + reinterpret_cast<const char*>(msg));
  }
  auto code = std::make_shared<PreTokenizer::Code>();
  code->re = re;
  // A run of N letters in one case costs some N backtracking steps (the
  // first letter branch tries every split of it before the second takes
  // it whole), and PCRE2's default limit of 10 million steps would refuse a
  // 10 MB run. Linear, not catastrophic, so the limits are lifted.
  code->context = pcre2_match_context_create(nullptr);
  if (!code->context) return Status::Error(what + ": out of memory for a PCRE2 match context");
  pcre2_set_match_limit(code->context, UINT32_MAX);
  pcre2_set_depth_limit(code->context, UINT32_MAX);
  // JIT where this PCRE2 has it; the interpreter otherwise.
  code->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
  return std::shared_ptr<const PreTokenizer::Code>(std::move(code));
}

// The byte length of the UTF-8 character starting at s[i] (valid input).
size_t CharLen(std::string_view s, size_t i) {
  const uint8_t b = static_cast<uint8_t>(s[i]);
  const size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - i);
}

using MatchData = std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)>;

MatchData NewMatchData(const PreTokenizer::Code& code) {
  return MatchData(pcre2_match_data_create_from_pattern(code.re, nullptr), pcre2_match_data_free);
}

// Calls match(start, end) for each leftmost match in `text`, each search
// starting where the last match ended. An empty match: with
// `empty_is_char` the next character is the match (tiktoken's loop here
// always did so; Kimi's pattern never matches empty), else it is no match
// and the search goes on a character later (Oniguruma's find_iter).
template <typename F>
void ForEachMatch(const PreTokenizer::Code& code, pcre2_match_data* md, std::string_view text,
                  bool empty_is_char, const F& match) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t off = 0;
  while (off < text.size()) {
    int rc = pcre2_match(code.re, subject, text.size(), off, PCRE2_NO_UTF_CHECK, md, code.context);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && code.jit) {
      // The JIT's stack ran out (or another resource limit): the
      // interpreter keeps its backtracking state on the heap.
      rc = pcre2_match(code.re, subject, text.size(), off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                       code.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;  // nothing left that the pattern takes
    size_t start, end;
    if (rc < 0) {
      // A resource limit even so (a run of billions of letters, or no
      // memory): never fatal. The next character becomes a match.
      start = off;
      end = off + CharLen(text, off);
    } else {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      start = ov[0];
      end = ov[1];
      if (end <= start) {
        if (!empty_is_char) {
          off = start < text.size() ? start + CharLen(text, start) : text.size();
          continue;
        }
        end = start + CharLen(text, start);
      }
    }
    match(start, end);
    off = end;
  }
}

// One step of tokenizers' NormalizedString::split: the matches and the
// text between them, each marked; inverted if asked; then joined as the
// behavior says (tokenizers' own folds, case by case).
struct Segment {
  size_t start, end;
  bool is_match;
};

std::vector<Segment> Segments(const PreTokenizer::Code& code, pcre2_match_data* md,
                              std::string_view text, bool invert) {
  std::vector<Segment> m;
  size_t prev = 0;
  ForEachMatch(code, md, text, /*empty_is_char=*/false, [&](size_t start, size_t end) {
    if (prev != start) m.push_back({prev, start, false});
    m.push_back({start, end, true});
    prev = end;
  });
  if (prev != text.size()) m.push_back({prev, text.size(), false});
  if (invert)
    for (Segment& s : m) s.is_match = !s.is_match;
  return m;
}

// The pieces (start, end) of one step over `text`, empty ones dropped.
std::vector<std::pair<size_t, size_t>> Apply(Behavior b, const std::vector<Segment>& m) {
  std::vector<std::pair<size_t, size_t>> acc;
  bool previous_match = false;
  switch (b) {
    case Behavior::kIsolated:
      for (const Segment& s : m) acc.emplace_back(s.start, s.end);
      break;
    case Behavior::kRemoved:
      for (const Segment& s : m)
        if (!s.is_match) acc.emplace_back(s.start, s.end);
      break;
    case Behavior::kMergedWithPrevious:
      for (const Segment& s : m) {
        if (s.is_match && !previous_match && !acc.empty())
          acc.back().second = s.end;
        else
          acc.emplace_back(s.start, s.end);
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = m.rbegin(); it != m.rend(); ++it) {
        if (it->is_match && !previous_match && !acc.empty())
          acc.back().first = it->start;
        else
          acc.emplace_back(it->start, it->end);
        previous_match = it->is_match;
      }
      std::reverse(acc.begin(), acc.end());
      break;
    case Behavior::kContiguous:
      for (const Segment& s : m) {
        if (s.is_match == previous_match && !acc.empty())
          acc.back().second = s.end;
        else
          acc.emplace_back(s.start, s.end);
        previous_match = s.is_match;
      }
      break;
  }
  std::erase_if(acc, [](const auto& r) { return r.first == r.second; });
  return acc;
}

Result<Behavior> ParseBehavior(const nlohmann::json& step, const std::string& where) {
  std::string name = "Isolated";
  WASTE_RETURN_IF_ERROR(JsonString(step, where, "behavior", &name));
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return Status::Error(where + "behavior \"" + name.substr(0, 40) +
                       "\" is not one of Isolated, "
                       "Removed, MergedWithPrevious, MergedWithNext, Contiguous");
}

// What tokenizers' Digits and Punctuation split on, one character a match:
// Rust's char::is_numeric (Nd, Nl, No), and tokenizers' is_punc (ASCII
// punctuation, which takes the symbols $+<=>^`|~ too, or Unicode's P).
constexpr const char* kDigit = R"(\p{N})";
constexpr const char* kPunctuation =
    R"([\p{P}\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E}])";

}  // namespace

Result<PreTokenizer> PreTokenizer::FromSteps(const nlohmann::json& doc, const std::string& what) {
  if (!doc.is_array()) return Status::Error(what + ": not a list of steps");
  auto steps = std::make_shared<std::vector<Step>>();
  bool byte_level = false;
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& s = doc[i];
    const std::string where = what + ": step " + std::to_string(i) + ": ";
    if (!s.is_object()) return Status::Error(where + "not an object");
    std::string type;
    WASTE_RETURN_IF_ERROR(JsonString(s, where, "type", &type));
    if (byte_level)
      return Status::Error(where + type.substr(0, 40) +
                           " after ByteLevel (ByteLevel must be the "
                           "last step: the steps after it would see its byte alphabet)");
    Step step;
    std::string pattern, shown;  // PCRE2's, and the source's for messages
    if (type == "Split") {
      const auto p = s.find("pattern");
      if (p == s.end() || !p->is_object() || p->size() != 1 ||
          !(p->contains("Regex") || p->contains("String")) || !p->begin()->is_string())
        return Status::Error(where + "pattern is not {\"Regex\": string} or {\"String\": string}");
      shown = p->begin()->get<std::string>();
      if (p->contains("String")) {
        pattern = QuotePcre2(shown);
      } else {
        auto t = TranslateOnigPattern(shown);
        if (!t.ok())
          return Status::Error(where + "pattern \"" + shown.substr(0, 80) +
                               "\": " + t.status().message());
        pattern = std::move(*t);
      }
      auto b = ParseBehavior(s, where);
      if (!b.ok()) return b.status();
      step.behavior = *b;
      WASTE_RETURN_IF_ERROR(JsonBool(s, where, "invert", &step.invert));
    } else if (type == "Digits") {
      bool individual = false;
      WASTE_RETURN_IF_ERROR(JsonBool(s, where, "individual_digits", &individual));
      pattern = shown = kDigit;
      step.behavior = individual ? Behavior::kIsolated : Behavior::kContiguous;
    } else if (type == "Punctuation") {
      pattern = shown = kPunctuation;
      auto b = ParseBehavior(s, where);
      if (!b.ok()) return b.status();
      step.behavior = *b;
    } else if (type == "ByteLevel") {
      byte_level = true;
      bool prefix = false, use_regex = true;
      WASTE_RETURN_IF_ERROR(JsonBool(s, where, "add_prefix_space", &prefix));
      WASTE_RETURN_IF_ERROR(JsonBool(s, where, "use_regex", &use_regex));
      if (prefix) return Status::Error(where + "add_prefix_space true is not supported");
      if (!use_regex) continue;  // the byte alphabet alone: the bytes are the engine's already
      auto t = TranslateOnigPattern(kGpt2Pattern);
      if (!t.ok()) return t.status();
      pattern = std::move(*t);
      shown = kGpt2Pattern;
    } else {
      return Status::Error(where + "type \"" + type.substr(0, 40) +
                           "\" is not one of Split, Digits, Punctuation, ByteLevel");
    }
    auto code = Compile(pattern, where + "pattern \"" + shown.substr(0, 80) + "\"");
    if (!code.ok()) return code.status();
    step.code = std::move(*code);
    steps->push_back(std::move(step));
  }
  PreTokenizer p;
  p.steps_ = std::move(steps);
  return p;
}

void PreTokenizer::Split(std::string_view text,
                         const std::function<void(std::string_view)>& piece) const {
  if (text.empty()) return;
  if (!kimi_) {
    SplitFrom(0, text, piece);
    return;
  }
  const MatchData data = NewMatchData(*kimi_);
  ForEachMatch(*kimi_, data.get(), text, /*empty_is_char=*/true,
               [&](size_t start, size_t end) { piece(text.substr(start, end - start)); });
}

void PreTokenizer::SplitFrom(size_t i, std::string_view text,
                             const std::function<void(std::string_view)>& piece) const {
  if (i == steps_->size()) {
    piece(text);
    return;
  }
  const Step& step = (*steps_)[i];
  std::vector<std::pair<size_t, size_t>> pieces;
  {
    const MatchData data = NewMatchData(*step.code);
    pieces = Apply(step.behavior, Segments(*step.code, data.get(), text, step.invert));
  }
  for (const auto& [start, end] : pieces) SplitFrom(i + 1, text.substr(start, end - start), piece);
}

}  // namespace waste::tokenizer
