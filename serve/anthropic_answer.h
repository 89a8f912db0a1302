// Anthropic's Messages answer as a generation runs (serve/answer.h): the
// reply's events (serve/reply.h) as the message's content blocks, whole or
// as Anthropic's server-sent events (serve/anthropic.h's MessageWriter);
// errors in Anthropic's shape (AnthropicError).
#pragma once

#include <cstdint>
#include <memory>

#include "engine/format/chat.h"
#include "serve/answer.h"
#include "serve/openai_answer.h"

namespace waste::serve {

// /v1/messages: `parts.head.id` is "msg_..."; `parts.sampling.stop` the
// stop_sequences; `input_tokens` the rendered prompt's. `chat` outlives it.
std::unique_ptr<Answer> MakeMessagesAnswer(OpenAiAnswerParts parts, const ChatFormat& chat,
                                           int64_t input_tokens);

}  // namespace waste::serve
