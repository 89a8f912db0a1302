// OpenAI's answers as a generation runs (serve/answer.h): a chat completion
// (the reply's events, serve/reply.h, as the message's content,
// reasoning_content and tool_calls; finish_reason "tool_calls" when it made
// calls) and a text completion (the raw text), each whole or as server-sent
// events, with log-probabilities when asked (a stream's go with its next
// chunk, whatever its kind).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/format/chat.h"
#include "engine/tokenizer/tokenizer.h"
#include "serve/answer.h"
#include "serve/reply.h"

namespace waste::serve {

// What both answers are given: `tok` and `chat` outlive them.
struct OpenAiAnswerParts {
  const Tokenizer* tok = nullptr;
  AnswerHead head;
  Sampling sampling;                 // max_tokens set
  std::vector<int32_t> end_of_turn;  // empty with ignore_eos
  std::shared_ptr<http::Responder> r;
  // A chat: the generation prompt left a think block open (ReplyOptions).
  std::optional<bool> thinking_open{};
};

// /v1/chat/completions: `chat` is the container's format.
std::unique_ptr<Answer> MakeChatAnswer(OpenAiAnswerParts parts, const ChatFormat& chat);
// /v1/completions.
std::unique_ptr<Answer> MakeCompletionAnswer(OpenAiAnswerParts parts);

}  // namespace waste::serve
