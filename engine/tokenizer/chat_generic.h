// Tools for a chat template with no tool syntax (the demo model's family,
// "demo"): the generic format, waste's own (no released template to match;
// llama.cpp's "generic" handler works the same way). Internal to
// engine/tokenizer (ChatPieces calls it) but for the markup below, which
// the tool-call constraint and the reply parser share (serve/).
//
// The prompt: the tools described in the system message (after its text and
// a blank line; a system message of their own first when there is none):
//
//   # Tools
//
//   You may call these tools; each line is a tool's name, description and the
//   JSON Schema of its arguments:
//   {"name": "get_weather", "description": "...", "parameters": {...}}
//
//   Reply with one JSON object: {"tool_calls": [{"name": "<tool name>",
//   "arguments": {<its arguments>}}]} to call tools, or {"response": "<your
//   reply>"} to answer.
//
// (kToolsIntro and kToolsRule below, word for word.) The reply is held to
// that one JSON object (serve/tool_constraint.h): exactly
// {"tool_calls": [{"name": NAME, "arguments": ARGS}, {"name": ...}]} or
// {"response": TEXT}. A past assistant message with tool calls is rendered
// as the model writes them (its text, if any, refused: a reply is one or
// the other); a tool result as a user message
// {"tool_result": {"name": NAME, "content": TEXT}} (NAME the call's whose id
// it answers, else the message's name; without either, no "name"). With
// tool_choice none the tools are not rendered (the server passes none):
// past calls and results are. Reasoning is not rendered (as without tools).
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/format/chat.h"
#include "engine/tokenizer/chat.h"

namespace waste::chat_generic {

// The reply's markup: calls, then each call, then a text reply.
inline constexpr std::string_view kCallsOpen = "{\"tool_calls\": [";
inline constexpr std::string_view kCallsClose = "]}";
inline constexpr std::string_view kCallName = "{\"name\": ";        // then the name's JSON string
inline constexpr std::string_view kCallArgs = ", \"arguments\": ";  // then ARGS
inline constexpr std::string_view kCallClose = "}";
inline constexpr std::string_view kCallsBetween = ", ";
inline constexpr std::string_view kResponseOpen = "{\"response\": ";  // then a JSON string
inline constexpr std::string_view kResponseClose = "}";

inline constexpr std::string_view kToolsIntro =
    "# Tools\n\nYou may call these tools; each line is a tool's name, description and the JSON "
    "Schema of its arguments:\n";
inline constexpr std::string_view kToolsRule =
    "\n\nReply with one JSON object: {\"tool_calls\": [{\"name\": \"<tool name>\", "
    "\"arguments\": {<its arguments>}}]} to call tools, or {\"response\": \"<your reply>\"} to "
    "answer.";

// Whether `chat`'s tools take the generic format (its family is "demo").
bool Applies(const ChatFormat& chat);

// `messages` with the tools, calls and results written into plain messages
// (system, user, assistant text) as above, for chat.json's markup; errors
// name the message or field.
Result<std::vector<ChatMessage>> Messages(std::span<const ChatMessage> messages,
                                          std::span<const ChatTool> tools);

}  // namespace waste::chat_generic
