#include "engine/tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <utility>

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
  return R"(\p{sc:Han}+)"                                       // [\p{Han}]+
         R"(|[^\r\n\p{L}\p{N}]?)" + up + "*" + lo + "+" + suffix +
         R"(|[^\r\n\p{L}\p{N}]?)" + up + "+" + lo + "*" + suffix +
         R"(|\p{N}{1,3})"
         "| ?[^" + ws + R"(\p{L}\p{N}]+[\r\n]*)"                // \s inside a negated class
         "|[" + ws + R"(]*[\r\n]+)"                             // \s*[\r\n]+
         "|[" + ws + "]+(?![^" + ws + "])"                      // \s+(?!\S)
         "|[" + ws + "]+";                                      // \s+
}

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

Result<PreTokenizer> PreTokenizer::Create() {
  const std::string pattern = KimiPcre2Pattern();
  int err = 0;
  PCRE2_SIZE where = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &err, &where, nullptr);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return Status::Error("tokenizer: PCRE2 refused the pre-token pattern at offset " +
                         std::to_string(where) + ": " + reinterpret_cast<const char*>(msg));
  }
  auto code = std::make_shared<Code>();
  code->re = re;
  // A run of N letters in one case costs some N backtracking steps (the
  // first letter branch tries every split of it before the second takes
  // it whole), and PCRE2's default limit of 10 million steps would refuse a
  // 10 MB run. Linear, not catastrophic, so the limits are lifted.
  code->context = pcre2_match_context_create(nullptr);
  if (!code->context) return Status::Error("tokenizer: out of memory for a PCRE2 match context");
  pcre2_set_match_limit(code->context, UINT32_MAX);
  pcre2_set_depth_limit(code->context, UINT32_MAX);
  // JIT where this PCRE2 has it; the interpreter otherwise.
  code->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
  return PreTokenizer(std::move(code));
}

bool PreTokenizer::jit() const { return code_->jit; }

namespace {

// The byte length of the UTF-8 character starting at s[i] (valid input).
size_t CharLen(std::string_view s, size_t i) {
  const uint8_t b = static_cast<uint8_t>(s[i]);
  const size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - i);
}

}  // namespace

void PreTokenizer::Split(std::string_view text,
                         const std::function<void(std::string_view)>& piece) const {
  if (text.empty()) return;
  const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> data(
      pcre2_match_data_create_from_pattern(code_->re, nullptr), pcre2_match_data_free);
  pcre2_match_data* md = data.get();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t off = 0;
  while (off < text.size()) {
    int rc = pcre2_match(code_->re, subject, text.size(), off, PCRE2_NO_UTF_CHECK, md,
                         code_->context);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && code_->jit) {
      // The JIT's stack ran out (or another resource limit): the
      // interpreter keeps its backtracking state on the heap.
      rc = pcre2_match(code_->re, subject, text.size(), off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       md, code_->context);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;  // nothing left that the pattern takes
    size_t start, end;
    if (rc < 0) {
      // A resource limit even so (a run of billions of letters, or no
      // memory): never fatal. The next character becomes a piece.
      start = off;
      end = off + CharLen(text, off);
    } else {
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      start = ov[0];
      end = ov[1];
      if (end <= start) end = start + CharLen(text, start);  // no branch matches empty
    }
    piece(text.substr(start, end - start));
    off = end;
  }
}

}  // namespace waste::tokenizer
