// OpenAI's Responses answer as a generation runs (serve/answer.h): the
// reply's events (serve/reply.h) as the response's output items, whole or
// as the Responses API's server-sent events (serve/responses.h's
// ResponseWriter); errors as OpenAI's error object.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "engine/format/chat.h"
#include "serve/answer.h"
#include "serve/openai_answer.h"

namespace waste::serve {

// /v1/responses: `parts.head.id` is "resp_..."; `echo` the request's
// (ResponsesRequest::echo). `chat` outlives it.
std::unique_ptr<Answer> MakeResponsesAnswer(OpenAiAnswerParts parts, const ChatFormat& chat,
                                            nlohmann::json echo);

}  // namespace waste::serve
