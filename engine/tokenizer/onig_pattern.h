// The regexes of a Hugging Face tokenizer.json in PCRE2's terms.
//
// `tokenizers` compiles its Split patterns with Oniguruma (its default
// build), whose syntax and Unicode readings differ from PCRE2's in places:
// `\s` is White_Space, `\w` is letters, marks, decimal digits and
// connector punctuation, `\p{Han}` is a Script, `^`/`$` are always line
// anchors, `.` is anything but `\n`, `{,n}` is `{0,n}`, `\uHHHH` a code
// point, and classes may intersect (`[A&&[^B]]`). TranslateOnigPattern
// rewrites what differs and refuses what it cannot rewrite exactly
// (backreferences, `\b`, POSIX brackets, other intersections, `(?m)`,
// `{n,m}+`, unknown escapes), naming the construct and its offset. engine/tokenizer/README.md
// gives the table.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace waste::tokenizer {

// The PCRE2 pattern (compile with PCRE2_UTF | PCRE2_UCP) that matches what
// Oniguruma matches with `onig`. Errors read "offset N: <why>".
Result<std::string> TranslateOnigPattern(std::string_view onig);

// A literal string as a PCRE2 pattern that matches exactly it.
std::string QuotePcre2(std::string_view literal);

}  // namespace waste::tokenizer
