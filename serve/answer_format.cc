#include "serve/answer_format.h"

#include <algorithm>
#include <cmath>

namespace waste::serve {
namespace {

using Mode = ReplyParser::Mode;

}  // namespace

AnswerFormat::AnswerFormat(std::shared_ptr<const grammar::JsonGrammar> format,
                           std::shared_ptr<const grammar::VocabIndex> vocab,
                           std::unique_ptr<ToolCallConstraint> calls,
                           std::shared_ptr<const ToolCallPlan> plan, const Tokenizer& tok,
                           const ChatFormat& chat, std::vector<int32_t> end_of_turn,
                           bool thinking_open, int64_t max_tokens)
    : format_(std::move(format)),
      vocab_(std::move(vocab)),
      calls_(std::move(calls)),
      plan_(std::move(plan)),
      tok_(tok),
      chat_(chat),
      end_(std::move(end_of_turn)),
      parser_(tok, chat, {.end_of_turn = {}, .stops = {}, .thinking_open = thinking_open}),
      close_(ThinkClose(chat)),
      left_(max_tokens) {
  // The close a token at a time at worst, then the answer's shortest value
  // and the slack its own closing keeps (JsonTokenConstraint).
  uint64_t longest = 0;
  for (const auto& n : format_->nodes)
    longest = std::max(longest, std::min<uint64_t>(n.shortest, 1024));
  reserve_ = close_.size() + format_->nodes[static_cast<size_t>(format_->root)].shortest + longest +
             32 + 2;
  Settle();
}

void AnswerFormat::Settle() {
  switch (parser_.mode()) {
    case Mode::kReasoning:
      if (phase_ != Phase::kReasoning) tail_.clear();
      phase_ = Phase::kReasoning;
      return;
    case Mode::kText:
      if (phase_ == Phase::kReasoning || phase_ == Phase::kMarkup) {
        phase_ = Phase::kAnswer;
        got_.clear();
      }
      return;
    default:
      break;
  }
  if (phase_ == Phase::kReasoning) {
    // The reasoning ended: the rest of the close follows (from as much of
    // it as the reply's last bytes already spell).
    size_t have = 0;
    for (size_t k = std::min(close_.size(), tail_.size()); k > 0; --k)
      if (std::string_view(tail_).substr(tail_.size() - k) ==
          std::string_view(close_).substr(0, k)) {
        have = k;
        break;
      }
    phase_ = Phase::kMarkup;
    alts_ = {close_};
    got_ = close_.substr(0, have);
  } else if (phase_ == Phase::kAnswer && chat_.family == kFamilyHarmony) {
    // A reply that begins with harmony's header: its analysis or its final channel.
    phase_ = Phase::kMarkup;
    alts_ = {"<|channel|>analysis<|message|>", chat_.reply_after};
    got_.clear();
  }
}

bool AnswerFormat::MarkupAllows(std::string_view bytes) const {
  return !bytes.empty() && std::any_of(alts_.begin(), alts_.end(), [&](const std::string& a) {
    return a.size() >= got_.size() + bytes.size() && a.starts_with(got_) &&
           std::string_view(a).substr(got_.size()).starts_with(bytes);
  });
}

bool AnswerFormat::OpeningAllows(std::string_view bytes) const {
  if (!plan_ || bytes.empty()) return false;
  const std::string s = got_ + std::string(bytes);
  for (std::string_view open : plan_->Opens())
    if (open.starts_with(s) || s.starts_with(open)) return true;
  return false;
}

size_t AnswerFormat::Mask(std::span<float> logits) {
  const size_t vocab = std::min(logits.size(), static_cast<size_t>(vocab_->vocab()));
  const auto only = [&](auto allows) {
    size_t n = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (i < vocab && logits[i] != -INFINITY && allows(static_cast<int32_t>(i)))
        ++n;
      else
        logits[i] = -INFINITY;
    }
    return n;
  };
  switch (phase_) {
    case Phase::kReasoning:
      if (calls_) calls_->Mask(logits);
      if (left_ <= static_cast<int64_t>(reserve_)) {  // no more room: the close now
        phase_ = Phase::kMarkup, alts_ = {close_}, got_.clear();
        return Mask(logits);
      }
      return only(
          [&](int32_t id) { return std::find(end_.begin(), end_.end(), id) == end_.end(); });
    case Phase::kMarkup:
      return only([&](int32_t id) { return MarkupAllows(tok_.TokenBytes(id)); });
    case Phase::kAnswer: {
      if (!json_) json_ = std::make_unique<grammar::JsonTokenConstraint>(format_, vocab_, left_);
      std::vector<float> calls(logits.begin(), logits.end());
      if (calls_) calls_->Mask(calls);
      size_t n = json_->Mask(logits);
      for (size_t i = 0; i < vocab; ++i)  // a call's opening, where the calls allow it
        if (logits[i] == -INFINITY && calls[i] != -INFINITY &&
            OpeningAllows(tok_.TokenBytes(static_cast<int32_t>(i))))
          logits[i] = calls[i], ++n;
      return n;
    }
    case Phase::kJson:
      return json_->Mask(logits);
    case Phase::kCalls:
      return calls_->Mask(logits);
  }
  return 0;
}

bool AnswerFormat::Accept(int32_t token) {
  const std::string_view bytes = tok_.TokenBytes(token);
  --left_;
  switch (phase_) {
    case Phase::kReasoning:
      if (std::find(end_.begin(), end_.end(), token) != end_.end()) return false;
      if (calls_ && !calls_->Accept(token)) return false;
      tail_ += bytes;
      if (tail_.size() > 2 * close_.size()) tail_.erase(0, tail_.size() - 2 * close_.size());
      break;
    case Phase::kMarkup:
      if (!MarkupAllows(bytes)) return false;
      if (calls_ && !calls_->Accept(token)) return false;
      got_ += bytes;
      break;
    case Phase::kAnswer:
      if (!json_)
        json_ = std::make_unique<grammar::JsonTokenConstraint>(format_, vocab_, left_ + 1);
      if (got_.empty()) {
        grammar::JsonMatcher probe(format_);
        if (!bytes.empty() && probe.Advance(bytes)) {
          phase_ = Phase::kJson;
          return json_->Accept(token);
        }
      }
      if (!OpeningAllows(bytes) || !calls_->Accept(token)) return false;
      got_ += bytes;
      for (std::string_view open : plan_->Opens())
        if (got_.starts_with(open)) phase_ = Phase::kCalls;
      return true;
    case Phase::kJson:
      return json_->Accept(token);
    case Phase::kCalls:
      return calls_->Accept(token);
  }
  parser_.Feed(token);
  if (phase_ == Phase::kMarkup && std::find(alts_.begin(), alts_.end(), got_) != alts_.end()) {
    phase_ = Phase::kAnswer;  // a header or the close written whole: where the parser is now
    got_.clear();
    if (parser_.mode() == Mode::kReasoning) phase_ = Phase::kReasoning, tail_.clear();
    return true;
  }
  if (phase_ == Phase::kReasoning) Settle();
  return true;
}

bool AnswerFormat::complete() const {
  if (phase_ == Phase::kJson) return json_->complete();
  if (phase_ == Phase::kCalls) return calls_->complete();
  return false;
}

bool AnswerFormat::finished() const {
  if (phase_ == Phase::kJson) return json_->finished();
  if (phase_ == Phase::kCalls) return calls_->finished();
  return false;
}

}  // namespace waste::serve
