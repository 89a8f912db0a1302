// Anthropic's Messages API as waste serve speaks it: request bodies parsed
// and checked into the neutral conversation (engine/tokenizer/chat.h), the
// message object and its streamed events written from a reply's events
// (serve/reply.h), and Anthropic's error object. Pure functions over JSON:
// no sockets, no model.
//
//   POST /v1/messages               ParseMessagesRequest -> MessagesRequest
//   POST /v1/messages/count_tokens  ParseMessagesRequest(count_tokens) -> {input_tokens}
//
// The conversation: `system` (a string or text blocks) becomes a system
// message; a user's text blocks one user message, each tool_result block a
// "tool" message (tool_call_id, its text; is_error puts "Error: " before
// it), in the blocks' order; an assistant's text blocks its content, its
// thinking blocks its reasoning, its tool_use blocks its tool_calls
// (arguments: the input's JSON text, keys in the client's order).
// cache_control is accepted anywhere Anthropic takes it, a hint only (waste
// keeps conversation states by itself); metadata is informational.
// Refused by name: image, document and every other block type, roles other
// than user and assistant, fields Anthropic does not define (as Anthropic
// refuses them). tool_choice any / tool and disable_parallel_tool_use are
// honoured by the tool-call constraint (serve/tool_constraint.h).
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

namespace waste::serve {

// ------------------------------------------------------------------ errors

// {"type": "error", "error": {"type", "message"}}: the type from the
// status (400 invalid_request_error, 401 authentication_error, 404
// not_found_error, 413 request_too_large, 503 overloaded_error, 5xx
// api_error).
nlohmann::json AnthropicError(const ApiError& e);
// The status Anthropic answers `e` with: 529 for an overloaded server (503
// here), else e.status.
int AnthropicStatus(const ApiError& e);

// ---------------------------------------------------------------- requests

struct AnthropicToolChoice {
  enum class Mode { kAuto, kAny, kTool, kNone };
  Mode mode = Mode::kAuto;
  std::string name;                        // kTool: the tool that must be called
  bool disable_parallel_tool_use = false;  // at most one call
};

struct MessagesRequest {
  std::string model;
  std::vector<ChatMessage> messages;  // the system message first when given
  std::vector<ChatTool> tools;
  AnthropicToolChoice tool_choice;
  // thinking: {type: "enabled", budget_tokens} (true) or {type: "disabled"}
  // (false); none: the template's default. The budget caps the reasoning's
  // tokens (serve/thinking_budget.h), then the answer follows.
  std::optional<bool> thinking;
  int64_t thinking_budget = 0;
  // max_tokens (required but for count_tokens), temperature [0, 1], top_p,
  // top_k, stop_sequences (stop), stream.
  Sampling sampling;
};

// Parses and checks a body; `count_tokens`: /v1/messages/count_tokens's
// (no max_tokens, stream, sampling or stop_sequences). The error, if any, is
// the answer to send (in Anthropic's shape: AnthropicError).
std::optional<ApiError> ParseMessagesRequest(std::string_view body, bool count_tokens,
                                             MessagesRequest* out);

// ------------------------------------------------------------- answers

enum class StopReason { kEndTurn, kMaxTokens, kStopSequence, kToolUse };
const char* StopReasonName(StopReason r);  // "end_turn", ...

// How a reply ended, in Anthropic's words: tool_use when it called a tool
// (a call max_tokens cut is not one: the caller says so),
// stop_sequence when a stop string ended it, max_tokens when it ran out of
// tokens (`length`) before its end, else end_turn.
StopReason StopReasonOf(bool called_tool, const std::string& stop_sequence, bool length);

// One answer's message, built from the reply's events in order: its content
// blocks (text, thinking with signature "", tool_use with id "toolu_..." and
// the arguments' JSON as input) whole, and the same as the stream's
// server-sent events. Consecutive events of one kind extend one block.
class MessageWriter {
 public:
  // `id`: "msg_..."; `input_tokens`: the rendered prompt's.
  MessageWriter(std::string id, std::string model, int64_t input_tokens);

  // The stream's first events: message_start (empty content), ping.
  std::string Start() const;
  // Adds the event; returns its stream events (content_block_start,
  // content_block_delta, content_block_stop), maybe none.
  std::string Take(const ReplyEvent& e);
  // The stream's last events: the open block's stop, message_delta
  // (stop_reason, stop_sequence, usage), message_stop.
  std::string Finish(StopReason reason, const std::string& stop_sequence, int64_t output_tokens);
  // The whole message, after Finish.
  const nlohmann::json& message() const { return message_; }
  bool called_tool() const { return called_tool_; }

 private:
  std::string CloseBlock();
  std::string OpenBlock(const nlohmann::json& block);

  nlohmann::json message_;
  int open_ = -1;          // the index of the block open in the stream, or -1
  std::string arguments_;  // the open tool_use block's arguments so far
  bool called_tool_ = false;
};

// An Anthropic server-sent event: "event: TYPE\ndata: JSON\n\n", TYPE being
// the object's "type".
std::string AnthropicEvent(const nlohmann::json& j);

}  // namespace waste::serve
