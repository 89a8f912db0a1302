// A reply in the generic tool format (engine/tokenizer/chat_generic.h: one
// JSON object, {"tool_calls": [{"name": NAME, "arguments": ARGS}, ...]} or
// {"response": TEXT}, its markup exactly as the constraint forces it) read as
// it arrives, into ReplyParser's events (serve/reply.h): the response's
// string unescaped and streamed as text, each call's start once its name is
// read, its arguments in pieces as they arrive, its end after them. A reply
// cut short (max_tokens) ends an open call where it stopped. Bytes that are
// not the format's (a reply no constraint held) are text from there on, as
// written (an empty name is not a call's); a call cut before its name was read
// shows nothing.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "serve/reply.h"

namespace waste::serve {

class GenericReply {
 public:
  // The reply's next bytes (whole UTF-8 characters): their events onto `out`.
  void Feed(std::string_view bytes, std::vector<ReplyEvent>* out);
  // The reply ended.
  void Finish(std::vector<ReplyEvent>* out);
  // Inside a call (its name or arguments): a reply ending here was cut.
  bool in_call() const { return state_ == State::kName || state_ == State::kArgs; }

 private:
  enum class State { kOpen, kName, kArgs, kAfterCall, kQuote, kResponse, kDone, kRaw };
  void Step(std::vector<ReplyEvent>* out);

  State state_ = State::kOpen;
  std::string buf_;                           // bytes not yet read
  size_t scanned_ = 0;                        // kArgs: bytes of buf_ already scanned
  int depth_ = 0;                             // kArgs: brackets open
  bool in_string_ = false, escaped_ = false;  // kArgs: where the scan is
  int calls_ = 0;
};

}  // namespace waste::serve
