// UTF-8 validation and repair for the tokenizer's input. The pre-tokenizer
// works on characters, so the bytes it sees must be valid UTF-8; invalid
// sequences are replaced the way Python's bytes.decode("utf-8",
// errors="replace") does it, so the ids match tiktoken's on that string.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace waste::tokenizer {

// True when `s` is well-formed UTF-8 (Unicode Table 3-7: no overlongs, no
// surrogates, nothing above U+10FFFF).
bool IsValidUtf8(std::string_view s);
// The length of the longest well-formed prefix of `s`: where the first
// ill-formed sequence starts, s.size() when there is none.
size_t ValidUtf8Prefix(std::string_view s);

// `s` with each maximal subpart of an ill-formed sequence replaced by U+FFFD
// (EF BF BD): a lead byte and the continuation bytes that could still belong
// to it become one U+FFFD, any other invalid byte one U+FFFD each. This is
// the Unicode "substitution of maximal subparts" practice, which CPython's
// UTF-8 decoder follows. Valid input comes back unchanged.
std::string ReplaceInvalidUtf8(std::string_view s);

// GPT-2's byte-level alphabet (tokenizer.json's vocabulary and merges, a
// GGUF's tokenizer.ggml.tokens): byte b is written as one code point,
// printable Latin-1 bytes as themselves, the others as U+0100 onwards. The
// bytes `token` spells, or nullopt when it holds a code point outside the
// alphabet (or is not UTF-8).
std::optional<std::string> ByteLevelDecode(std::string_view token);

}  // namespace waste::tokenizer
