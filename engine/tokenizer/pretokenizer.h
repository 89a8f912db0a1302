// The pre-tokenizer: what splits text into pieces before byte-pair
// merging, run with PCRE2. Two kinds:
//
// - Kimi's (the default, and the tiktoken path): the regex of
//   tokenization_kimi.py (pat_str), whose matches are the pieces. It is
//   written for tiktoken's Rust regex engine and uses class intersection
//   ([...&&[^\p{Han}]]), which PCRE2 10.42 lacks, and \s and \p{Han}, which
//   PCRE2 reads differently. KimiPcre2Pattern() is the same pattern in
//   PCRE2's terms; README.md in this directory gives the rewrite.
// - The steps of a container's pretokenizer.json, the pre-tokenizer of a
//   Hugging Face tokenizer.json as `tokenizers` runs it (docs/FORMAT.md):
//   Split (a regex or a string, one of tokenizers' five behaviors, invert),
//   Digits, Punctuation and ByteLevel, each step splitting every piece the
//   step before it made.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

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

// GPT-2's pattern, which tokenizers' ByteLevel splits with when use_regex
// is true (as tokenizers writes it, for Oniguruma).
extern const char* const kGpt2Pattern;

class PreTokenizer {
 public:
  // Kimi's pattern (JIT-compiled where PCRE2 supports it).
  static Result<PreTokenizer> Create();

  // The steps of a pretokenizer.json document (a list), each read as
  // tokenizers reads it; regexes go through TranslateOnigPattern. An
  // unknown step type or behavior, a missing or mistyped field, ByteLevel
  // with add_prefix_space or before another step, a pattern that cannot be
  // translated or compiled: an error naming `what`, the step and the field.
  static Result<PreTokenizer> FromSteps(const nlohmann::json& steps, const std::string& what);

  // Calls `piece` for each piece of `text`, in order. `text` must be valid
  // UTF-8 (it is not checked again). Kimi's: like tiktoken, text no branch
  // matches would be skipped (the pattern matches every character, so none
  // is). Steps: like tokenizers, text between matches is a piece too (per
  // the behavior), and no piece is empty.
  void Split(std::string_view text, const std::function<void(std::string_view)>& piece) const;

  // True when every regex is JIT-compiled.
  bool jit() const;

  struct Code;  // one compiled regex (opaque)

 private:
  struct Step;
  PreTokenizer() = default;
  void SplitFrom(size_t step, std::string_view text,
                 const std::function<void(std::string_view)>& piece) const;
  std::shared_ptr<const Code> kimi_;  // set: Kimi's pattern, tiktoken's way
  std::shared_ptr<const std::vector<Step>> steps_;
};

}  // namespace waste::tokenizer
