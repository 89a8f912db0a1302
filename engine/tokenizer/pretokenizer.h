// Kimi's pre-tokenizer: the regex of tokenization_kimi.py (pat_str) that
// splits text into pieces before byte-pair merging, run with PCRE2.
//
// Kimi's pattern is written for tiktoken's Rust regex engine and uses class
// intersection ([...&&[^\p{Han}]]), which PCRE2 10.42 lacks, and \s and
// \p{Han}, which PCRE2 reads differently. KimiPcre2Pattern() is the same
// pattern in PCRE2's terms; README.md in this directory gives the rewrite.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace waste::tokenizer {

// Kimi's pat_str exactly as tokenization_kimi.py writes it (for reference
// and for the tests; PCRE2 cannot compile it).
extern const char* const kKimiPatStr;

// The pieces of the PCRE2 translation, exposed for the equivalence tests.
// White_Space (what \s means in Rust's regex crate), as class contents.
extern const char* const kWhiteSpace;
// [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] as one PCRE2 class.
extern const char* const kUpperClass;
// [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] as one PCRE2 class.
extern const char* const kLowerClass;

// The full PCRE2 pattern (compile with PCRE2_UTF | PCRE2_UCP).
std::string KimiPcre2Pattern();

// PCRE2's Unicode version, e.g. "14.0.0".
std::string Pcre2UnicodeVersion();

class PreTokenizer {
 public:
  // Compiles the pattern (JIT-compiled where PCRE2 supports it).
  static Result<PreTokenizer> Create();

  // Calls `piece` for each piece of `text`, in order. `text` must be valid
  // UTF-8 (it is not checked again). Like tiktoken, text no branch matches
  // would be skipped; the pattern matches every character, so none is.
  void Split(std::string_view text, const std::function<void(std::string_view)>& piece) const;

  bool jit() const;

 private:
  struct Code;
  explicit PreTokenizer(std::shared_ptr<const Code> code) : code_(std::move(code)) {}
  std::shared_ptr<const Code> code_;
};

}  // namespace waste::tokenizer
