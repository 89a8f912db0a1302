// A conversation as the token ids its model was trained on: chat.json's
// markup (engine/format/chat.h) around each message, the markup's special
// tokens as their ids and the messages' text as plain text, so that text
// which looks like markup ("<|im_end|>" typed by a user) stays text. For the
// released templates the ids are transformers' apply_chat_template's
// (tests/chat_test.cc, tests/fixtures/chat/).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "engine/format/chat.h"
#include "engine/tokenizer/tokenizer.h"

namespace waste {

class Container;

// A call of a tool, as an assistant message carries it (a past call, to be
// rendered) or as a reply's parser finds it (serve/reply.h).
struct ChatToolCall {
  std::string id{};       // the API's call id ("call_..."/"toolu_..."); may be empty
  std::string name;       // the function's name
  std::string arguments;  // a JSON object's text
};

// A tool offered to the model: OpenAI's {"type":"function","function":{name,
// description, parameters}}, Anthropic's {name, description, input_schema}.
struct ChatTool {
  std::string name;
  std::string description{};
  // JSON Schema of the arguments, its keys in the client's order (the
  // templates print it with Python's json.dumps, which keeps that order).
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();
};

struct ChatMessage {
  std::string role;                        // "system", "user", "assistant" or "tool"
  std::string content;                     // the API's null content is empty
  std::string reasoning{};                 // an assistant's thinking, where the format renders it
  std::vector<ChatToolCall> tool_calls{};  // an assistant's calls, in order
  std::string tool_call_id{};              // a tool result's: the call it answers
  std::string name{};                      // a tool result's: the function that was called
};

struct ChatRenderOptions {
  // End with chat.open, the start of the assistant's reply.
  bool add_generation_prompt = true;
  // The messages continue a conversation already in context (a chat's next
  // turn): no bos and no default system prompt before them; the rest of the
  // assistant's suffix after the end of turn the model wrote comes first
  // (Qwen3's "\n" after <|im_end|>).
  bool continuation = false;
  // The current date, YYYY-MM-DD, for "{date}" in chat.bos (harmony's system
  // message); empty: today's, in UTC.
  std::string date{};
  // The tools offered (OpenAI's `tools`, Anthropic's), rendered where and as
  // the family's released template renders them (engine/tokenizer/chat_tools.h).
  // A format that does not render tools refuses a non-empty list by name.
  std::span<const ChatTool> tools{};
  // Thinking switched on or off where the family's template has the switch
  // (WithThinking, engine/format/chat.h); none: the format's default.
  std::optional<bool> thinking{};
  // Harmony's reasoning effort: low, medium or high; empty: the format's.
  std::string reasoning_effort{};
};

// One piece of a rendered conversation: markup (the format's own text, its
// special-token texts becoming their ids) or content (plain text).
struct ChatPiece {
  std::string text;
  bool markup = false;
  bool operator==(const ChatPiece&) const = default;
};

// `messages` laid out by `chat` (switched by options.thinking and
// reasoning_effort), as pieces in order, none empty. With chat.xtml the
// markup is cut as encoding_k3.py cuts it (its segments, piece for piece:
// each tag header's name and attribute pieces as content, each special
// alone); otherwise the pieces are chat.json's strings and the messages'
// texts as they come. Tools, tool calls, tool results and an assistant's
// reasoning are laid out by the family's template where waste renders them
// (chat_tools.h), and refused by name where not. A role other than system,
// user, assistant or tool is refused by name.
Result<std::vector<ChatPiece>> ChatPieces(const ChatFormat& chat,
                                          std::span<const ChatMessage> messages,
                                          const ChatRenderOptions& options = {});

// The ids of ChatPieces: with chat.xtml each piece encoded apart (markup as
// EncodeMarkup, content as Encode), as encoding_k3.py encodes its segments;
// otherwise as Hugging Face tokenizers encodes a rendered template
// (EncodeParts).
Result<std::vector<int32_t>> RenderChat(const ChatFormat& chat, const Tokenizer& tok,
                                        std::span<const ChatMessage> messages,
                                        const ChatRenderOptions& options = {});

// Which tokens of a reply are its text, as chat.json's reply_after says:
// without it every token that is not a special; with it (harmony's
// <|channel|>final<|message|>, K3's <|open|>response<|sep|>) only those after
// that markup, until the next special (the analysis or think channel before
// it, and the markup, are not shown). `opening` is the markup that opened
// the reply (chat.json's open): when it ends with reply_after (K3 with
// thinking off) the reply's text starts at its first token. Feed it every
// token of the reply, the end of turn aside, in order. `tok` must outlive it.
class ReplyFilter {
 public:
  ReplyFilter(const Tokenizer& tok, std::string_view reply_after, std::string_view opening = {});
  bool Shown(int32_t id);

 private:
  const Tokenizer* tok_;
  std::vector<int32_t> marker_;  // reply_after's ids
  std::vector<int32_t> recent_;  // the last marker_.size() ids
  bool open_;
};

// Where a reply ends: the ids of chat.json's end_of_turn (when the container
// has chat.json) and the model's eos_token_id (each of a list), without repeats. An end_of_turn
// text that is not a special token of `tok` is an error naming it.
Result<std::vector<int32_t>> EndOfTurnIds(const Container& ct, const Tokenizer& tok);
// The same of a chat format in chat.json's place (none: eos_tokens alone).
Result<std::vector<int32_t>> EndOfTurnIds(const std::optional<ChatFormat>& chat,
                                          const std::vector<int>& eos_tokens, const Tokenizer& tok);

}  // namespace waste
