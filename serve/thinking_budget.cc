#include "serve/thinking_budget.h"

#include <cmath>

namespace waste::serve {

ThinkingBudget::ThinkingBudget(std::unique_ptr<grammar::TokenConstraint> inner,
                               const Tokenizer& tok, const ChatFormat& chat, bool thinking_open,
                               int64_t budget)
    : inner_(std::move(inner)),
      tok_(tok),
      parser_(tok, chat, {.end_of_turn = {}, .stops = {}, .thinking_open = thinking_open}),
      close_(ThinkClose(chat)),
      budget_(budget) {
  closing_ = !close_.empty() && budget_ <= 0 && parser_.mode() == ReplyParser::Mode::kReasoning;
}

size_t ThinkingBudget::Mask(std::span<float> logits) {
  size_t n = logits.size();
  if (inner_) n = inner_->Mask(logits);
  if (!closing_) return n;
  // Only tokens that go on spelling the close (the inner mask's too).
  const std::string_view rest = std::string_view(close_).substr(got_.size());
  n = 0;
  for (size_t id = 0; id < logits.size(); ++id) {
    const std::string_view b = tok_.TokenBytes(static_cast<int32_t>(id));
    if (logits[id] == -INFINITY) continue;
    if (!b.empty() && rest.starts_with(b))
      ++n;
    else
      logits[id] = -INFINITY;
  }
  return n;
}

bool ThinkingBudget::Accept(int32_t token) {
  const std::string_view b = tok_.TokenBytes(token);
  if (closing_) {
    if (b.empty() || !std::string_view(close_).substr(got_.size()).starts_with(b)) return false;
    got_ += b;
    if (got_ == close_) closing_ = false, got_.clear();
  } else if (parser_.mode() == ReplyParser::Mode::kReasoning) {
    ++reasoning_;
  }
  if (inner_ && !inner_->Accept(token)) return false;
  parser_.Feed(token);
  if (!closing_ && !close_.empty() && reasoning_ >= budget_ &&
      parser_.mode() == ReplyParser::Mode::kReasoning)
    closing_ = true;
  return true;
}

bool ThinkingBudget::complete() const {
  return !closing_ && (!inner_ || inner_->complete());
}

bool ThinkingBudget::finished() const {
  return inner_ && inner_->finished();
}

}  // namespace waste::serve
