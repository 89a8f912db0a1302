// A byte-level pushdown matcher for the JSON texts a JsonGrammar accepts:
// fed a reply's bytes, it says whether each may come next, whether the bytes
// so far are a whole value, and whether nothing but white space may follow.
//
// It accepts a JSON value with bounded white space: at most kMaxWhitespace
// bytes (space, tab, newline, carriage return) in any one gap, before and
// after the value and around its punctuation, so a model cannot loop on
// spaces. Strings are valid UTF-8 without raw control characters; \u escapes
// of surrogates are refused (so that a length counts what Python counts).
// Numbers have at most 16 digits before and after the point when they are
// bounded (exactly comparable as doubles), 32 otherwise, and an exponent of
// at most 2 digits, none when bounded: every number is then a finite double
// (at most 10^131), which strict parsers require (nlohmann, Go's and Rust's
// refuse 2.5e888 as out of range). A bounded number's every prefix can
// still end within its bounds (so the matcher never walks into a dead end).
//
// anyOf is matched by keeping every alternative alive (a set of stacks, at
// most kMaxStacks; past it the first are kept: what is accepted is still
// valid, some valid texts are not). Copying a matcher is cheap (the token
// mask copies it at every step of its walk).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar/json_schema.h"

namespace waste::grammar {

inline constexpr int kMaxWhitespace = 20;
inline constexpr size_t kMaxStacks = 32;

class JsonMatcher {
 public:
  explicit JsonMatcher(std::shared_ptr<const JsonGrammar> g);

  // Feeds `bytes`; false when they cannot continue the text, and the
  // matcher is then dead() for good (to try bytes, advance a copy).
  bool Advance(std::string_view bytes);
  bool Advance(uint8_t byte);
  bool dead() const { return stacks_.empty(); }
  // The bytes so far are a whole value (trailing white space allowed).
  bool complete() const;
  // Complete, and no byte but white space may follow (the reply ends here).
  bool finished() const;

  // The string-content state the token mask's fast path needs: how many
  // more code points some alternative inside a string (or a key that may
  // be an extra one) takes, after a whole character and not in an escape;
  // 0 when none is. Any run of at most that many whole characters without
  // '"', '\\' or control bytes is then accepted.
  uint64_t PlainRoom() const;

  // The bytes that end the value soonest, found by a greedy walk of one
  // alternative's frames: each open value closed, the required keys, the
  // minimum items and characters still missing written with their shortest
  // values (0 for numbers where the bounds allow, "a" for characters, the
  // shortest literal), optional keys and extra items never begun. Empty
  // when complete() already; none when no walk ends within `limit` bytes.
  // Fed in order they make the matcher complete(), and after any prefix of
  // them the walk from there is no longer than the rest (the token mask
  // steers a reply to its end by it: JsonTokenConstraint's max_tokens).
  std::optional<std::string> Closing(size_t limit) const;

  // This matcher becomes `from` advanced by `byte` (the mask's walk: no
  // allocation once warm). Both must be of the same grammar.
  bool AdvanceFrom(const JsonMatcher& from, uint8_t byte);

  struct Frame;
  struct Stack;

 private:
  const JsonGrammar* g_;
  std::shared_ptr<const JsonGrammar> keep_;
  std::vector<Stack> stacks_;
  std::vector<Stack> scratch_;
};

// The frames of one alternative, innermost last. Public for the matcher's
// own .cc only; not an interface.
struct JsonMatcher::Frame {
  int32_t node = 0;
  uint8_t type = 0;
  uint8_t phase = 0;
  uint8_t ws = 0;                          // white space bytes in the current gap
  uint8_t utf8_need = 0;                   // string, key: continuation bytes still to come
  uint8_t utf8_lo = 0x80, utf8_hi = 0xBF;  // the next continuation byte's range
  int16_t member = -1;  // object: the property whose value comes (-1: an extra key)
  uint32_t pos = 0;     // key, literal: bytes matched
  uint64_t count = 0;   // array: items; string: code points
  uint64_t seen = 0;    // object: properties given
  uint64_t alive = 0;   // key, literal: candidates still matching
};

struct JsonMatcher::Stack {
  std::vector<Frame> frames;
  char number[80];  // the number being read, when the innermost frame is one
  uint8_t number_len = 0;
};

}  // namespace waste::grammar
