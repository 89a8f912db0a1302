#include "engine/tokenizer/chat.h"

#include <algorithm>
#include <ctime>
#include <string_view>

#include "engine/format/container.h"
#include "engine/tokenizer/chat_generic.h"
#include "engine/tokenizer/chat_tools.h"

namespace waste {

namespace {

std::string TodayUtc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// A tag header as encoding_k3.py writes it, cut into its pieces: the name,
// then per attribute " key", "=\"", the value (when not empty) and "\"".
// What does not follow that shape (a hand-written chat.json's) is one piece.
void CutXtmlHeader(std::string_view h, std::vector<ChatPiece>* out) {
  const auto piece = [&](std::string_view t) {
    if (!t.empty()) out->push_back({std::string(t), false});
  };
  size_t at = std::min(h.find(' '), h.size());
  piece(h.substr(0, at));
  while (at < h.size()) {
    const size_t eq = h.find("=\"", at);
    const size_t quote = eq == std::string_view::npos ? eq : h.find('"', eq + 2);
    if (quote == std::string_view::npos || h[at] != ' ') break;
    piece(h.substr(at, eq - at));
    piece("=\"");
    piece(h.substr(eq + 2, quote - eq - 2));
    piece("\"");
    at = quote + 1;
  }
  piece(h.substr(std::min(at, h.size())));
}

// XTML markup into pieces: each of XTML's four tokens alone, a tag header
// (between <|open|> or <|close|> and <|sep|>) cut into its pieces, any other
// text (a media block) one markup piece.
void CutXtmlMarkup(std::string_view m, std::vector<ChatPiece>* out) {
  static const std::string_view kMarkers[] = {kXtmlOpen, kXtmlClose, kXtmlSep, kXtmlEndOfMessage};
  struct Run {
    std::string_view text;
    int marker;  // index into kMarkers, or -1: text
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < m.size();) {
    size_t next = m.size();
    int which = -1;
    for (int k = 0; k < 4; ++k)
      if (const size_t at = m.find(kMarkers[k], i); at < next) next = at, which = k;
    if (next > i) runs.push_back({m.substr(i, next - i), -1});
    if (which < 0) break;
    runs.push_back({kMarkers[which], which});
    i = next + kMarkers[which].size();
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    const bool header = runs[r].marker < 0 && r > 0 && runs[r - 1].marker <= 1 &&
                        runs[r - 1].marker >= 0 && r + 1 < runs.size() && runs[r + 1].marker == 2;
    if (header)
      CutXtmlHeader(runs[r].text, out);
    else
      out->push_back({std::string(runs[r].text), true});
  }
}

}  // namespace

ReplyFilter::ReplyFilter(const Tokenizer& tok, std::string_view reply_after,
                         std::string_view opening)
    : tok_(&tok),
      open_(reply_after.empty() ||
            (opening.size() >= reply_after.size() &&
             opening.substr(opening.size() - reply_after.size()) == reply_after)) {
  if (!reply_after.empty()) marker_ = tok.EncodeMarkup(reply_after);
}

bool ReplyFilter::Shown(int32_t id) {
  if (marker_.empty()) return !tok_->IsSpecial(id);
  recent_.push_back(id);
  if (recent_.size() > marker_.size()) recent_.erase(recent_.begin());
  if (recent_ == marker_) {
    open_ = true;
    return false;
  }
  if (tok_->IsSpecial(id)) open_ = false;
  return open_ && !tok_->IsSpecial(id);
}

Result<std::vector<ChatPiece>> ChatPieces(const ChatFormat& stored,
                                          std::span<const ChatMessage> messages,
                                          const ChatRenderOptions& options) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      return Status::Error("messages[" + std::to_string(i) + "]: the role \"" + r.substr(0, 40) +
                           "\" is not supported (system, user, assistant or tool)");
  }
  auto switched = WithThinking(stored, options.thinking, options.reasoning_effort);
  if (!switched.ok()) return switched.status();
  ChatFormat& chat = *switched;
  if (const size_t at = chat.bos.find("{date}"); at != std::string::npos)
    chat.bos.replace(at, 6, options.date.empty() ? TodayUtc() : options.date);
  if (chat_tools::NeedsFamily(chat, messages, options)) {
    if (!chat_generic::Applies(chat)) return chat_tools::FamilyPieces(chat, messages, options);
    // A template with no tool syntax: plain messages in its markup.
    auto plain = chat_generic::Messages(messages, options.tools);
    if (!plain.ok()) return plain.status();
    ChatRenderOptions without = options;
    without.tools = {};
    return ChatPieces(stored, *plain, without);
  }
  std::vector<ChatPiece> pieces;
  const auto markup = [&](std::string_view s) {
    if (s.empty()) return;
    if (chat.xtml)
      CutXtmlMarkup(s, &pieces);
    else
      pieces.push_back({std::string(s), true});
  };
  const auto content = [&](std::string_view s) {
    if (!s.empty()) pieces.push_back({std::string(s), false});
  };
  static const std::string kJoin = "\n\n";  // DeepSeek-V3's between system messages
  if (!options.continuation) markup(chat.bos);
  if (options.continuation)
    for (const std::string& end : chat.end_of_turn)
      if (chat.assistant.suffix.rfind(end, 0) == 0) {
        markup(std::string_view(chat.assistant.suffix).substr(end.size()));
        break;
      }
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
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "system" && chat.system_first) continue;
    if (m.role == "system" && chat.leading_system_only && (i > 0 || m.content.empty())) continue;
    const bool last_reply = m.role == "assistant" && chat.last_reply && i + 1 == messages.size() &&
                            !options.add_generation_prompt;
    const ChatRole& role = m.role == "system" ? chat.system
                           : m.role == "user" ? chat.user
                           : last_reply       ? *chat.last_reply
                                              : chat.assistant;
    markup(role.prefix);
    if (m.role == "assistant" && chat.assistant_text_stripped) {
      const std::string text = chat_tools::PyStrip(m.content);
      if (!text.empty()) markup("\n"), content(text);
    } else {
      content(m.content);
    }
    markup(role.suffix);
  }
  if (options.add_generation_prompt) markup(chat.open);
  return pieces;
}

Result<std::vector<int32_t>> RenderChat(const ChatFormat& chat, const Tokenizer& tok,
                                        std::span<const ChatMessage> messages,
                                        const ChatRenderOptions& options) {
  auto pieces = ChatPieces(chat, messages, options);
  if (!pieces.ok()) return pieces.status();
  if (chat.xtml) {
    std::vector<int32_t> ids;
    for (const ChatPiece& p : *pieces) {
      const std::vector<int32_t> some = p.markup ? tok.EncodeMarkup(p.text) : tok.Encode(p.text);
      ids.insert(ids.end(), some.begin(), some.end());
    }
    return ids;
  }
  std::vector<Tokenizer::Part> parts;
  parts.reserve(pieces->size());
  for (const ChatPiece& p : *pieces) parts.push_back({p.text, p.markup});
  return tok.EncodeParts(parts);
}

Result<std::vector<int32_t>> EndOfTurnIds(const Container& ct, const Tokenizer& tok) {
  return EndOfTurnIds(ct.chat(), ct.config().eos_tokens, tok);
}

Result<std::vector<int32_t>> EndOfTurnIds(const std::optional<ChatFormat>& chat,
                                          const std::vector<int>& eos_tokens,
                                          const Tokenizer& tok) {
  std::vector<int32_t> ids;
  if (chat)
    for (const std::string& text : chat->end_of_turn) {
      const auto id = tok.SpecialId(text);
      if (!id)
        return Status::Error("chat.json: end_of_turn \"" + text.substr(0, 60) +
                             "\" is not a special token of the tokenizer");
      ids.push_back(*id);
    }
  ids.insert(ids.end(), eos_tokens.begin(), eos_tokens.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace waste
