// A chat reply's tokens as what a client is shown, API-neutral: pieces of
// text, of thinking, and of tool calls. OpenAI's chat completions
// (content, reasoning_content, tool_calls) and Anthropic's Messages (text,
// thinking and tool_use blocks) are both written from these events, whole or
// streamed (serve/openai.h, serve/anthropic.h).
//
// Markup never reaches an event: end-of-turn and other special tokens, the
// family's thinking and tool-call delimiters are consumed here. Stop strings
// end the text (and nothing after them is shown); UTF-8 is held back to whole
// characters, as ReplyText does (serve/openai.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/format/chat.h"
#include "engine/tokenizer/tokenizer.h"
#include "serve/openai.h"

namespace waste::serve {

struct ReplyEvent {
  enum class Kind {
    kText,           // text: a piece of the answer
    kReasoning,      // text: a piece of the model's thinking
    kToolCallStart,  // a call begins: tool_index, name (whole), id (made here)
    kToolCallArgs,   // text: a piece of the call's arguments (JSON text)
    kToolCallEnd,    // the call's arguments are complete
  };
  Kind kind = Kind::kText;
  std::string text;
  int tool_index = -1;  // the call's place in the reply: 0, 1, ...
  std::string name;     // kToolCallStart: the function's name
  std::string id;       // kToolCallStart: "call_..." (unique in the server's life)
  bool operator==(const ReplyEvent&) const = default;
};

struct ReplyOptions {
  std::vector<int32_t> end_of_turn;  // ids that end the reply (EndOfTurnIds); none: never
  std::vector<std::string> stops;    // the request's stop strings
};

// Feed every generated token in order, then Flush once at the end.
// `tok` and `chat` must outlive it.
class ReplyParser {
 public:
  ReplyParser(const Tokenizer& tok, const ChatFormat& chat, ReplyOptions o);
  std::vector<ReplyEvent> Feed(int32_t id);
  std::vector<ReplyEvent> Flush();
  // An end-of-turn id or a stop string ended the reply.
  bool done() const { return text_.done(); }
  // The stop string that ended the reply (Anthropic's stop_sequence); empty when none did.
  const std::string& stop_sequence() const { return text_.stop_sequence(); }

 private:
  ReplyText text_;
};

}  // namespace waste::serve
