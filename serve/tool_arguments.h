// Tool-call arguments written as key/value pairs, not one JSON text: the
// families whose templates spell each argument in markup of its own
// (serve/tool_constraint.h uses them, serve/reply.h reads them).
//
//   glm-4.5   <arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>, pairs apart
//             by "\n", then </tool_call>; VALUE raw when the property's
//             values are all strings, else its JSON text
//   qwen3.5   <parameter=KEY>\nVALUE\n</parameter>, pairs apart by "\n",
//             then </function>\n</tool_call>; VALUE raw when the property's
//             values are all strings, else its JSON text
//   k3-xtml   <|open|>argument key="KEY" type="TYPE"<|sep|>VALUE<|close|>argument<|sep|>,
//             then <|close|>call<|sep|>; TYPE what the JSON value is (string,
//             number, boolean, null, object, array), VALUE raw for a string,
//             else its JSON text; KEY escaped as an attribute (&amp; &quot;)
//
// KeyValueArguments is one tool's `parameters` schema compiled for that
// markup: its properties (an object schema with properties; anything else
// is refused by name), each with the values it may take (K3: one per JSON
// type the property allows, held to that type's part of its schema).
// Only declared keys are written, each at most once, in any order, the
// required ones before the call may close: what is written validates even
// where the schema would also take extra keys.
//
// KeyValueConstraint holds one call's arguments and its close markup. A raw
// value is held to its property's string schema (length, enum) and may not
// hold the markup that would end it early (glm: </arg_value>, </tool_call>;
// qwen3.5: </parameter>, </tool_call>; K3: <|close|>); a JSON value is held to its schema through
// engine/grammar and may not hold that markup either. Special tokens are markup only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/grammar/token_mask.h"
#include "engine/tokenizer/tokenizer.h"

namespace waste::serve {

inline constexpr std::string_view kGlmCallOpen = "<tool_call>";
inline constexpr std::string_view kGlmCallClose = "</tool_call>";
inline constexpr std::string_view kGlmKeyOpen = "<arg_key>";
inline constexpr std::string_view kGlmKeyClose = "</arg_key>";
inline constexpr std::string_view kGlmValueOpen = "<arg_value>";
inline constexpr std::string_view kGlmValueClose = "</arg_value>";
// Qwen3.5's call: <tool_call>\n<function=NAME>\n, its pairs, then kQwen35CallClose.
inline constexpr std::string_view kQwen35Function = "<function=";
inline constexpr std::string_view kQwen35Parameter = "<parameter=";
inline constexpr std::string_view kQwen35ParameterClose = "</parameter>";
inline constexpr std::string_view kQwen35CallClose = "</function>\n</tool_call>";

// An XTML attribute's value read back (chat_tools::XtmlEscape undone).
std::string XtmlUnescape(std::string_view v);

struct KeyValueArguments {
  struct Value {
    std::string head;  // the markup from the pair's start to the value
    bool raw = false;  // a string written as its bytes
    std::shared_ptr<const grammar::JsonGrammar> grammar;  // the value's (raw: of the string)
  };
  struct Key {
    std::string key;
    bool required = false;
    std::vector<Value> values;
  };
  std::vector<Key> keys;
  std::string sep;          // between a value's end and the next pair or the call's close
  std::string value_close;  // what ends a value
  std::string call_close;
  std::vector<std::string> forbidden;  // what a value may not hold

  // `family` is glm-4.5, qwen3.5 or k3-xtml; `g` the tool's compiled parameters.
  // Errors are "...: " messages for the schema's field to prefix.
  static Result<std::shared_ptr<const KeyValueArguments>> Make(std::string_view family,
                                                               const grammar::JsonGrammar& g);
  // glm-4.5, qwen3.5: whether `key`'s value is written raw (false for an unknown key).
  bool Raw(std::string_view key) const;
};

// The tokens a value's mask checks one by one; every other token's bytes
// are the value's alone, as engine/grammar's mask sees them. A scan of the
// vocabulary: a ToolCallConstraint makes it once, when a call's arguments begin.
struct ValueTokens {
  // Specials, and ordinary tokens that may touch a marker (hold one, begin
  // with its end or end with its beginning).
  std::vector<int32_t> markup;
  // The other ordinary tokens a raw string writes escaped ('"', '\\', control bytes).
  std::vector<int32_t> escaped;
};
std::shared_ptr<const ValueTokens> MakeValueTokens(const Tokenizer& tok,
                                                   const grammar::VocabIndex& vocab,
                                                   std::span<const std::string> markers);

class KeyValueConstraint : public grammar::TokenConstraint {
 public:
  // `tok` must outlive it; `tokens` is MakeValueTokens of `args`'
  // value_close and forbidden.
  KeyValueConstraint(std::shared_ptr<const KeyValueArguments> args, const Tokenizer& tok,
                     std::shared_ptr<const grammar::VocabIndex> vocab,
                     std::shared_ptr<const ValueTokens> tokens);
  size_t Mask(std::span<float> logits) override;
  bool Accept(int32_t token) override;
  bool complete() const override { return done_; }
  bool finished() const override { return done_; }

 private:
  struct Alt {
    std::string text;
    int key = -1;  // -1: the call's close
    int value = 0;
  };
  // A value's state: its matcher, bytes that may begin its end, its last bytes.
  struct ValueState {
    std::optional<grammar::JsonMatcher> m;
    std::string held, tail;
  };
  void Markup(std::string lead, std::string got);
  void Settle();
  bool MarkupAllows(std::string_view bytes) const;
  // `bytes` (a special token's: `special`) on the value's state `s`: false
  // if refused; else whether the value ended (the token ends with its end).
  bool Step(std::string_view bytes, bool special, ValueState* s, bool* ended) const;
  bool Feed(ValueState* s, std::string_view content) const;
  // A raw string's token that touches no marker: its bytes escaped.
  bool Escaped(std::string_view bytes);
  bool Ends(const ValueState& s) const;

  std::shared_ptr<const KeyValueArguments> args_;
  const Tokenizer& tok_;
  std::shared_ptr<const grammar::VocabIndex> vocab_;
  std::shared_ptr<const ValueTokens> tokens_;
  std::vector<bool> used_;
  bool in_value_ = false;
  bool raw_ = false;
  bool done_ = false;
  std::vector<Alt> alts_;
  std::string got_;
  ValueState value_;
  std::vector<uint64_t> allowed_;
  std::string escaped_;                          // scratch
  std::optional<grammar::JsonMatcher> scratch_;  // scratch, of the value's grammar
};

// A constrained call's pairs (the markup after its head, as `args` spells
// it) read as they arrive and written as its arguments' JSON text in
// pieces: {"KEY": when a key's head is read, a raw value's bytes escaped as
// they come, a JSON value's bytes as they come (white space at either end
// dropped), "," between pairs, "}" at the call's end. Bytes that may begin a
// value's close wait for the next ones. The pieces joined are one compact
// JSON object, the same however the bytes come apart (fed whole UTF-8
// characters). Markup `args` does not know (no constraint writes it) is held
// unread.
class KeyValueReader {
 public:
  explicit KeyValueReader(std::shared_ptr<const KeyValueArguments> args);
  // More of the call's bytes: the arguments' text they complete.
  std::string Feed(std::string_view bytes);
  // The call's close was read: the rest of the arguments, "}" last. (When
  // the reply ends inside the call, what is held is markup, or a JSON
  // value's trailing white space: nothing more is written.)
  std::string Close();

 private:
  // The value's first `n` held bytes (`whole`: all of it, its close next)
  // as its text; a JSON value's trailing white space stays held.
  std::string Value(size_t n, bool whole);

  std::shared_ptr<const KeyValueArguments> args_;
  std::string held_;  // bytes not yet read
  bool in_value_ = false;
  bool raw_ = false;
  bool pairs_ = false;        // a pair was written
  bool value_begun_ = false;  // JSON value: some of its bytes were written
};

}  // namespace waste::serve
