// Tools, tool calls, tool results and past reasoning in a prompt, as each
// family's released chat template writes them (tests/fixtures/chat/*.jinja;
// checked token for token against transformers' apply_chat_template in
// tests/chat_test.cc). Internal to engine/tokenizer: ChatPieces calls it.
//
//   Qwen3 (hybrid)   tools in the system turn (after the first system
//                    message's text) as "# Tools" and one json.dumps line per
//                    tool; calls <tool_call>\n{"name": .., "arguments": ..}
//                    \n</tool_call> after the text (the arguments' text as
//                    given); results as <tool_response> blocks, a run of them
//                    one user turn; reasoning in a think block after the last
//                    user query
//   GLM-4.5 / 4.6    tools in a <|system|> turn after [gMASK]<sop>; calls
//                    <tool_call>{name} with <arg_key>/<arg_value> per argument
//                    (the arguments parsed: strings bare, the rest json.dumps);
//                    results after one <|observation|> per run; reasoning in
//                    the think element after the last user message
//   DeepSeek-V3.1    tools after the system prompt as the model card's "## Tools"
//                    section (its released template ignores them; checked
//                    against vLLM's tool_chat_template_deepseekv31.jinja); calls
//                    <｜tool▁calls▁begin｜>..<｜tool▁calls▁end｜> after the text,
//                    results <｜tool▁output▁begin｜>..; after results the
//                    template opens no reply (the model writes on)
//   Kimi K2          tools first, <|im_system|>tool_declare<|im_middle|>
//                    json.dumps(tools)<|im_end|>; results
//                    <|im_system|>tool<|im_middle|>..<|im_end|>; its template
//                    drops an assistant's tool calls (so does this: its text
//                    alone is rendered)
//   GPT-OSS harmony  tools in the developer message as the template's
//                    TypeScript-like "namespace functions" (oneOf refused),
//                    and a line in the system message; a call
//                    <|start|>assistant to=functions.{name}<|channel|>commentary
//                    json<|message|>{arguments, parsed, json.dumps}<|call|>, one
//                    per message (more refused), after its analysis (the
//                    text or reasoning) unless a final reply follows later; a
//                    result <|start|>functions.{name} to=assistant<|channel|>
//                    commentary<|message|>{json.dumps(text)}<|end|>
//   Qwen3.5 / 3.6    always (its template strips every text): the system text
//                    after the tools ("# Tools", one json.dumps line per tool,
//                    the XML call format); calls <tool_call>\n<function={name}>
//                    with <parameter={key}>\n{value}\n</parameter> per argument
//                    (the arguments parsed: strings bare, the rest json.dumps);
//                    results as Qwen3's; reasoning in a think block after the
//                    last user query; a system message not first refused, as
//                    the template raises (chat_qwen35.cc)
//   Kimi K3 (XTML)   encoding_k3.py's elements, segment for segment: tools as
//                    a system message of type tool-declare (compact JSON, keys
//                    sorted); calls in a tools element after the response,
//                    one call element per call with typed argument elements
//                    (text that is not JSON kept in a json element); results
//                    as tool messages put in call order, each with its index;
//                    reasoning in the think element (thinking on)
//
// The demo model's template has no tool syntax: it takes the generic format
// (chat_generic.h). Every other family (DeepSeek-V3: no tool prompt is
// documented for it; Qwen3 Instruct-2507) refuses tools, tool calls and
// tool results by name.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/format/chat.h"
#include "engine/tokenizer/chat.h"

namespace waste::chat_tools {

// Python's json.dumps(v, ensure_ascii=False) with its default separators
// (", ", ": "), keys in their order: what the templates' tojson prints.
std::string PyJsonDumps(const nlohmann::ordered_json& v);

// Python's str.strip(): the white space of str.isspace() off both ends.
std::string PyStrip(std::string_view s);

// An XTML attribute's value as encoding_k3.py writes it: "&" first, then
// the quote ("<" and ">" are text in XTML).
std::string XtmlEscape(std::string_view v);

// A tool as the API gives it to the template: OpenAI's {"type": "function",
// "function": {name, description, parameters}} (no description when empty).
nlohmann::ordered_json ToolJson(const ChatTool& t);

// The pieces of a prompt, as ChatPieces makes them (none empty).
class Pieces {
 public:
  void Markup(std::string_view s) { Add(s, true); }
  void Content(std::string_view s) { Add(s, false); }
  std::vector<ChatPiece> Take() { return std::move(pieces_); }

 private:
  void Add(std::string_view s, bool markup) {
    if (!s.empty()) pieces_.push_back({std::string(s), markup});
  }
  std::vector<ChatPiece> pieces_;
};

// Qwen3.5's and 3.6's layout of any conversation (chat_qwen35.cc); with
// options.continuation the messages after a reply the model ended.
Result<std::vector<ChatPiece>> Qwen35Pieces(const ChatFormat& chat,
                                            std::span<const ChatMessage> messages,
                                            const ChatRenderOptions& options);

// Whether the conversation needs more than chat.json's markup: tools
// offered, an assistant's tool calls, a tool result, or an assistant's
// reasoning where the family's template renders it (Qwen3, GLM-4.5, K3;
// the others' templates drop it).
bool NeedsFamily(const ChatFormat& chat, std::span<const ChatMessage> messages,
                 const ChatRenderOptions& options);

// The conversation laid out by `chat.family`'s template (chat already
// switched for thinking), or an error naming what that family does not
// render. Not for a continuation (refused), but for Qwen3.5's.
Result<std::vector<ChatPiece>> FamilyPieces(const ChatFormat& chat,
                                            std::span<const ChatMessage> messages,
                                            const ChatRenderOptions& options);

}  // namespace waste::chat_tools
