// OpenAI's Responses API as waste serve speaks it, stateless: request
// bodies parsed and checked into the neutral conversation
// (engine/tokenizer/chat.h), the response object and its streamed events
// written from a reply's events (serve/reply.h). Pure functions over JSON:
// no sockets, no model. Errors are OpenAI's error object (serve/openai.h).
//
//   POST /v1/responses   ParseResponsesRequest -> ResponsesRequest
//
// The conversation: `instructions` becomes a system message; `input` a
// string (one user message) or items: messages (roles user, assistant,
// system, developer; content a string or input_text / output_text parts),
// function_call items (the assistant's tool_calls, joined to the assistant
// message before them), function_call_output items ("tool" messages),
// reasoning items (the next assistant message's reasoning). Refused by
// name: images, files and every other item or part type, stored state
// (store: true, previous_response_id), parameters OpenAI does not define,
// and what waste does not honour yet (truncation auto). text.format
// json_object and json_schema are the answer's (AnswerFormat). A strict tool's parameters are
// checked against OpenAI's strict rules (fields::CheckStrictParameters); its calls are held to the
// schema. tool_choice required / a named function and parallel_tool_calls false are honoured by the
// tool-call constraint (serve/tool_constraint.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/chat.h"
#include "serve/openai.h"
#include "serve/reply.h"
#include "serve/tool_constraint.h"

namespace waste::serve {

struct ResponsesRequest {
  std::string model;
  std::vector<ChatMessage> messages;  // the instructions first when given
  std::vector<ChatTool> tools;
  ToolChoiceSpec tool_choice;  // tool_choice, parallel_tool_calls
  // max_output_tokens (max_tokens), temperature [0, 2], top_p, stream.
  Sampling sampling;
  // What the response object repeats of the request: instructions, tools,
  // tool_choice, parallel_tool_calls, temperature, top_p,
  // max_output_tokens, metadata (null when not given).
  nlohmann::json echo;
  // text.format json_object or json_schema, compiled; null: text.
  std::shared_ptr<const grammar::JsonGrammar> format;
};

// Parses and checks a body. The error, if any, is the answer to send.
std::optional<ApiError> ParseResponsesRequest(std::string_view body, ResponsesRequest* out);

// One answer's response, built from the reply's events in order: its output
// items (reasoning with reasoning_text content, a message with output_text
// content, function_call with call_id, name and arguments) whole, and the
// same as the stream's server-sent events, each with its sequence_number.
// Consecutive events of one kind extend one item.
class ResponseWriter {
 public:
  // `id`: "resp_..."; its items' ids are made from it. `echo`: the request's.
  ResponseWriter(std::string id, std::string model, int64_t created_at, nlohmann::json echo);

  // The stream's first events: response.created, response.in_progress.
  std::string Start();
  // Adds the event; returns its stream events (response.output_item.added,
  // response.content_part.added, response.output_text.delta,
  // response.reasoning_text.delta, response.function_call_arguments.delta,
  // and the .done events of an item it closes), maybe none.
  std::string Take(const ReplyEvent& e);
  // The stream's last events: the open item's .done events, then
  // response.completed, or response.incomplete (reason max_output_tokens)
  // when the reply ran out of tokens (`length`).
  std::string Finish(bool length, const Usage& usage);
  // An error as the stream's last event: {type: "error", code, message, param}.
  std::string Error(const ApiError& e);
  // The whole response, after Finish.
  const nlohmann::json& response() const { return response_; }

 private:
  std::string Event(nlohmann::json j);
  std::string OpenItem(nlohmann::json item);
  std::string CloseItem(const char* status);

  nlohmann::json response_;
  int64_t sequence_ = 0;
  int open_ = -1;  // the output index of the item open in the stream, or -1
};

}  // namespace waste::serve
