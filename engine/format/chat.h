// chat.json: how a family's chat template lays a conversation out, as data
// the engine renders without a template engine (docs/FORMAT.md "chat.json").
// The released templates this covers, and the fixtures that prove it, are in
// tests/fixtures/chat/ (tests/chat_test.cc renders them token for token):
//
//   Kimi K2 / Kimi-Linear  <|im_system|>system<|im_middle|>{text}<|im_end|> per turn
//                          (user, assistant alike), a default system turn when
//                          the first message is not one, reply opened by
//                          <|im_assistant|>assistant<|im_middle|>, ends at <|im_end|>
//   DeepSeek-V3            <｜begin▁of▁sentence｜>, every system message's text
//                          first (joined by a blank line), <｜User｜>{text},
//                          <｜Assistant｜>{text}<｜end▁of▁sentence｜>
//   DeepSeek-V3.1          as DeepSeek-V3, with </think> after <｜Assistant｜> (thinking
//                          off, the template's default), where a reply follows a user turn
//   the demo model         as DeepSeek-V3, but a system message's text in place
//   Qwen3 (hybrid)         ChatML: <|im_start|>{role}\n{text}<|im_end|>\n per turn; thinking
//                          off: the reply opened by <|im_start|>assistant\n<think>\n\n</think>\n\n
//                          (the template's enable_thinking=false; with it true the reply
//                          opens bare and the model writes its <think> block), as is a
//                          final assistant message; ends at <|im_end|>
//   Qwen3 Instruct-2507    the same without any <think> block (its template has none)
//   Qwen3.5 / 3.6          Qwen3's ChatML, thinking off: the reply opened by
//                          <|im_start|>assistant\n<think>\n\n</think>\n\n (on: by
//                          <|im_start|>assistant\n<think>\n, the template's default);
//                          every message's text stripped, so always laid out by
//                          chat_tools (engine/tokenizer/chat_tools.h)
//   GLM-4.5 / 4.6          [gMASK]<sop>, <|system|>\n{text}, <|user|>\n{text}/nothink,
//                          <|assistant|>\n<think></think> then "\n" and the stripped text
//                          (thinking off: enable_thinking=false, which appends /nothink);
//                          a reply ends at <|user|>, <|observation|> or <|endoftext|>
//   GPT-OSS (harmony)      <|start|>system<|message|>{identity, knowledge cutoff, current
//                          date, reasoning: medium, valid channels}<|end|>, the first
//                          message if it is a system one as the developer message
//                          (# Instructions), <|start|>{role}<|message|>{text}<|end|>, history
//                          replies in the final channel; the reply is opened by
//                          <|start|>assistant and ends at <|return|> or <|call|>; its text
//                          is the final channel's (the analysis channel is not shown)
//   Kimi K3 (XTML)         no template: encoding_k3.py's reserved-token markup, a turn
//                          <|open|>message role="{role}"<|sep|>{text}<|close|>message<|sep|>
//                          <|end_of_msg|>; an assistant's text in a response element
//                          (<|open|>response<|sep|>..<|close|>response<|sep|>), after an
//                          empty think element when thinking is on; the reply opened by
//                          the unclosed assistant message and its channel (thinking off:
//                          response, the reply's text from its first token; on: think,
//                          the text after <|open|>response<|sep|>), ends at <|end_of_msg|>;
//                          no bos, no default system turn; every piece encoded apart
//                          (`xtml`). Checked segment for segment against the release's
//                          encoder (tests/fixtures/chat/xtml.json)
//
// Where the released templates do more than chat.json holds (none of it in
// the committed cases): Qwen3's and GLM's split an assistant text holding
// </think> into reasoning and reply (here it stays text); Qwen3 writes the
// think block into a last assistant message even before a generation
// prompt, and not when no user message precedes it; GLM does not append
// /nothink to a text that already ends with it (here it does; chat_tools.h's
// layout, used with tools, follows the template); harmony's model identity is the default
// (the template's model_identity argument); K3's names, response_format,
// tool_choice, thinking_effort and images (encoding_k3.py renders them) are
// not rendered, and a message's content parts are joined into one text where
// encoding_k3.py encodes each apart.
//
// Switched per request (WithThinking below): thinking on (Qwen3's and GLM's
// template default) is the same layout with the reply opened bare and no
// /nothink; DeepSeek-V3.1's opens the reply with <think>; harmony's
// reasoning effort (low, medium, high) is its system message's. Tools, tool
// calls, tool results and past reasoning are not markup here: each family's
// layout of them is engine/tokenizer/chat_tools.h (Qwen3 hybrid, GLM-4.5,
// DeepSeek-V3.1, Kimi K2, harmony, K3; the demo model's generic format,
// chat_generic.h; the others refuse them by name).
// Rendering to ids is RenderChat (engine/tokenizer/chat.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace waste {

struct ChatRole {
  std::string prefix, suffix;  // markup around the turn's text
};

struct ChatFormat {
  static constexpr int kVersion = 2;  // chat.json's "version"

  // Which family's template this is, for what the markup above does not
  // hold (tools, tool calls, thinking): one of the kFamily* names below, or
  // empty (a chat.json written before the key, or a hand-written one; what
  // needs the family is then refused by name).
  std::string family;

  // Before everything (DeepSeek's templates' bos_token, GLM's [gMASK]<sop>,
  // harmony's system message); may be empty. "{date}" in it is the current
  // date (ChatRenderOptions::date): harmony's "Current date: ".
  std::string bos;
  ChatRole system, user, assistant;
  std::string open;  // starts the assistant's reply: the generation prompt
  // When non-empty and the first message is not a system message, a system
  // turn of this text comes first (Kimi's "You are a helpful assistant").
  std::string default_system;
  // DeepSeek-V3: every system message's text comes first, right after bos,
  // joined by "\n\n", in place of the messages themselves.
  bool system_first = false;
  // Harmony: only a first message that is a system one, and has text, is
  // rendered (the developer message); other system messages are dropped.
  bool leading_system_only = false;
  // The markup of an assistant message that ends the conversation with no
  // generation prompt after it, when not the assistant's (Qwen3's think
  // block, harmony's <|return|>).
  std::optional<ChatRole> last_reply;
  // GLM: an assistant message's text is stripped of surrounding white space
  // (Python's str.strip) and, when any is left, follows a "\n".
  bool assistant_text_stripped = false;
  // Harmony: the reply's text is what follows the last of this markup
  // (<|channel|>final<|message|>); what comes before it (the analysis
  // channel) is not shown. Empty: every token of the reply that is not a
  // special (ReplyFilter, engine/tokenizer/chat.h).
  std::string reply_after;
  // The texts of the special tokens at which a reply ends (each a special
  // token of the container's tokenizer).
  std::vector<std::string> end_of_turn;
  // K3's XTML: every piece of the prompt is encoded apart, as encoding_k3.py
  // encodes its segments (never merged with a neighbour: BPE is not
  // associative), and the text of each tag header, between <|open|> or
  // <|close|> and <|sep|>, is cut into that encoder's pieces: the tag name,
  // then per attribute " key", "=\"", the value and "\"" (ChatPieces).
  bool xtml = false;

  nlohmann::json ToJson() const;

  // Each family's markup, the one definition (waste convert and waste synth
  // write them). Deepseek(system_first): the released DeepSeek-V3 template
  // (true) or the demo model's (false).
  // DeepseekV31: DeepSeek-V3.1's, thinking off (its template's default:
  // the reply opened by </think>) or on (<think>); a reply that does not
  // follow a user turn, which its template opens with nothing, is opened
  // here as every other.
  static ChatFormat Kimi();
  static ChatFormat Deepseek(bool system_first);
  static ChatFormat DeepseekV31(bool thinking = false);
  // Qwen3's ChatML: hybrid (thinking off: the empty think block opens the
  // reply; on: the reply opens bare) or without think blocks
  // (Instruct-2507). GLM-4.5's, thinking off (/nothink after each user
  // text, the reply opened by an empty think element) or on. GPT-OSS's
  // harmony with its reasoning effort (low, medium, high) in the system
  // message.
  static ChatFormat Qwen3(bool hybrid, bool thinking = false);
  // Qwen3.5's and 3.6's ChatML (tools as XML <function=..> calls), thinking
  // off (waste's default, as for Qwen3) or on (the template's default).
  static ChatFormat Qwen35(bool thinking = false);
  static ChatFormat Glm45(bool thinking = false);
  static ChatFormat Harmony(std::string_view reasoning_effort = "medium");
  // Kimi K3's XTML, thinking off (the reply opens in the response channel)
  // or on (in the think channel, history replies with an empty think
  // element, as encoding_k3.py renders a reply without reasoning_content).
  static ChatFormat Xtml(bool thinking);
};

// ChatFormat::family's names, one per released template family.
inline constexpr const char* kFamilyKimiK2 = "kimi-k2";
inline constexpr const char* kFamilyDeepseekV3 = "deepseek-v3";
inline constexpr const char* kFamilyDeepseekV31 = "deepseek-v3.1";
inline constexpr const char* kFamilyDemo = "demo";    // the demo model's DeepSeek-like template
inline constexpr const char* kFamilyQwen3 = "qwen3";  // hybrid and Instruct-2507 alike
inline constexpr const char* kFamilyQwen35 = "qwen3.5";  // Qwen3.5 and 3.6
inline constexpr const char* kFamilyGlm45 = "glm-4.5";
inline constexpr const char* kFamilyHarmony = "harmony";
inline constexpr const char* kFamilyXtml = "k3-xtml";

// XTML's reserved tokens (K3's tokenizer_config.json names them).
inline constexpr const char* kXtmlOpen = "<|open|>";
inline constexpr const char* kXtmlClose = "<|close|>";
inline constexpr const char* kXtmlSep = "<|sep|>";
inline constexpr const char* kXtmlEndOfMessage = "<|end_of_msg|>";

// `stored` (a container's chat.json) as a request switches it: `thinking`
// on or off where the family's template has the switch (Qwen3's hybrid
// and Qwen3.5's enable_thinking, GLM-4.5's enable_thinking, DeepSeek-V3.1's thinking, K3's
// think channel), `reasoning_effort` (low, medium, high) for harmony. None
// and empty: `stored` as it is (its family's default). Off for a family that
// never thinks is what it does; on for it, off for harmony (which always
// reasons), an effort for another family are errors naming the field.
Result<ChatFormat> WithThinking(const ChatFormat& stored, std::optional<bool> thinking,
                                std::string_view reasoning_effort = {});

// chat.json, untrusted: an object with "version" 2, "system", "user" and
// "assistant" each [prefix, suffix] of strings, "open", "bos" and
// "default_system" strings, "system_first" a bool and "end_of_turn" a list
// of at most 16 non-empty strings; optionally "leading_system_only",
// "assistant_text_stripped" and "xtml" bools, "last_reply" [prefix, suffix] and
// "reply_after" and "family" strings (absent: off, empty). Errors name the key. An older
// converter's chat.json (no "version") is read as it rendered then: its roles' markup and "open",
// no bos, no default system turn, the reply ending at the assistant's suffix (converting again
// gives the released layout).
Result<ChatFormat> ParseChat(std::string_view text);

}  // namespace waste
