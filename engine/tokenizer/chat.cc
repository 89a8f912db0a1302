#include "engine/tokenizer/chat.h"

#include <algorithm>

#include "engine/format/container.h"

namespace waste {

Result<std::vector<int32_t>> RenderChat(const ChatFormat& chat, const Tokenizer& tok,
                                        std::span<const ChatMessage> messages,
                                        const ChatRenderOptions& options) {
  using Part = Tokenizer::Part;
  std::vector<Part> parts;
  const auto markup = [&](const std::string& s) { parts.push_back({s, true}); };
  const auto content = [&](const std::string& s) { parts.push_back({s, false}); };
  static const std::string kJoin = "\n\n";  // DeepSeek-V3's between system messages
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant")
      return Status::Error("messages[" + std::to_string(i) + "]: the role \"" + r.substr(0, 40) +
                           "\" is not supported (system, user or assistant)");
  }
  if (!options.continuation) markup(chat.bos);
  if (chat.system_first) {
    bool first = true;
    for (const ChatMessage& m : messages) {
      if (m.role != "system") continue;
      if (!first) markup(kJoin);
      content(m.content);
      first = false;
    }
  }
  if (!options.continuation && !chat.default_system.empty() && !messages.empty() &&
      messages[0].role != "system") {
    markup(chat.system.prefix);
    markup(chat.default_system);
    markup(chat.system.suffix);
  }
  for (const ChatMessage& m : messages) {
    if (m.role == "system" && chat.system_first) continue;
    const ChatRole& role = m.role == "system" ? chat.system
                           : m.role == "user" ? chat.user
                                              : chat.assistant;
    markup(role.prefix);
    content(m.content);
    markup(role.suffix);
  }
  if (options.add_generation_prompt) markup(chat.open);
  return tok.EncodeParts(parts);
}

Result<std::vector<int32_t>> EndOfTurnIds(const Container& ct, const Tokenizer& tok) {
  std::vector<int32_t> ids;
  if (ct.chat())
    for (const std::string& text : ct.chat()->end_of_turn) {
      const auto id = tok.SpecialId(text);
      if (!id)
        return Status::Error("chat.json: end_of_turn \"" + text.substr(0, 60) +
                             "\" is not a special token of the tokenizer");
      ids.push_back(*id);
    }
  if (ct.config().eos_token >= 0) ids.push_back(ct.config().eos_token);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace waste
