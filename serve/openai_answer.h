// OpenAI's answers as a generation runs (serve/answer.h): a chat completion
// (the reply's events, serve/reply.h, as the message's content,
// reasoning_content and tool_calls; finish_reason "tool_calls" when it made
// calls, "length" when max_tokens cut one, which is listed as written) and
// a text completion (the raw text), each whole or as server-sent events,
// with log-probabilities when asked (a stream's go with its next chunk,
// whatever its kind).
//
// One answer has `sampling.n` choices, each one generation's Answer with its
// own reply parser and logprobs; they share the client and write one answer:
// whole, the choices in index order once the last has ended; streamed, each
// choice's chunks with its index as they come (its role chunk first, its
// finish chunk when it ends), then once every choice has ended the usage
// chunk (include_usage) and [DONE]. Usage counts the prompt once and every
// choice's completion tokens. The first error (a failed generation, a full
// queue) is the whole answer's, sent once; the other choices then stop at
// their next token.
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
  Sampling sampling;                 // max_tokens set; n choices
  std::vector<int32_t> end_of_turn;  // empty with ignore_eos
  std::shared_ptr<http::Responder> r;
  // A chat: the generation prompt left a think block open (ReplyOptions).
  std::optional<bool> thinking_open{};
  // A chat: the plan its calls are held to (ReplyOptions); none: no tools.
  std::shared_ptr<const ToolCallPlan> tool_plan;
};

// /v1/chat/completions: `chat` is the container's format. The choices'
// Answers, index 0 to n - 1.
std::vector<std::unique_ptr<Answer>> MakeChatAnswers(OpenAiAnswerParts parts,
                                                     const ChatFormat& chat);
// /v1/completions.
std::vector<std::unique_ptr<Answer>> MakeCompletionAnswers(OpenAiAnswerParts parts);

}  // namespace waste::serve
