#include "serve/reply.h"

namespace waste::serve {
namespace {

std::vector<ReplyEvent> TextEvents(std::string piece) {
  if (piece.empty()) return {};
  ReplyEvent e;
  e.text = std::move(piece);
  return {std::move(e)};
}

}  // namespace

// The reply's text only: the format's reply_after channel (harmony's final,
// K3's response), everything else of the reply not shown.
ReplyParser::ReplyParser(const Tokenizer& tok, const ChatFormat& chat, ReplyOptions o)
    : text_(tok, std::move(o.end_of_turn), std::move(o.stops), chat.reply_after, chat.open) {}

std::vector<ReplyEvent> ReplyParser::Feed(int32_t id) {
  return TextEvents(text_.Feed(id));
}

std::vector<ReplyEvent> ReplyParser::Flush() {
  return TextEvents(text_.Flush());
}

}  // namespace waste::serve
