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
//
// Rendering to ids is RenderChat (engine/tokenizer/chat.h).
#pragma once

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

  std::string bos;  // before everything (DeepSeek's templates' bos_token); may be empty
  ChatRole system, user, assistant;
  std::string open;  // starts the assistant's reply: the generation prompt
  // When non-empty and the first message is not a system message, a system
  // turn of this text comes first (Kimi's "You are a helpful assistant").
  std::string default_system;
  // DeepSeek-V3: every system message's text comes first, right after bos,
  // joined by "\n\n", in place of the messages themselves.
  bool system_first = false;
  // The texts of the special tokens at which a reply ends (each a special
  // token of the container's tokenizer).
  std::vector<std::string> end_of_turn;

  nlohmann::json ToJson() const;

  // Each family's markup, the one definition (waste convert and waste synth
  // write them). Deepseek(system_first): the released DeepSeek-V3 template
  // (true) or the demo model's (false).
  // DeepseekV31: DeepSeek-V3.1's with thinking off; a reply that does not
  // follow a user turn, which its template opens with nothing, is opened
  // here as every other.
  static ChatFormat Kimi();
  static ChatFormat Deepseek(bool system_first);
  static ChatFormat DeepseekV31();
};

// chat.json, untrusted: an object with "version" 2, "system", "user" and
// "assistant" each [prefix, suffix] of strings, "open", "bos" and
// "default_system" strings, "system_first" a bool and "end_of_turn" a list
// of at most 16 non-empty strings. Errors name the key. An older converter's
// chat.json (no "version") is read as it rendered then: its roles' markup
// and "open", no bos, no default system turn, the reply ending at the
// assistant's suffix (converting again gives the released layout).
Result<ChatFormat> ParseChat(std::string_view text);

}  // namespace waste
