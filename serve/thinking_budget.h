// A reply's reasoning capped at a number of tokens (Anthropic's
// thinking.budget_tokens): a token constraint over another one (the tool
// calls', or none) that reads the reply as ReplyParser does (a think block,
// harmony's analysis channel, K3's think element: serve/reply.h) and counts
// the tokens written inside its reasoning. Once `budget` of them were, only
// the family's markup that ends the reasoning and begins the answer
// (ThinkClose) may come, token by token, whatever spells it; then the inner
// constraint alone holds the rest of the reply (text, or a call: a
// ToolCallConstraint reads the same close and moves on from its think
// phase). A later think block has no budget left: it is closed at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "engine/format/chat.h"
#include "engine/grammar/token_mask.h"
#include "engine/tokenizer/tokenizer.h"
#include "serve/reply.h"

namespace waste::serve {

class ThinkingBudget : public grammar::TokenConstraint {
 public:
  // `inner` may be null (the reply is otherwise free). `tok` and `chat`
  // must outlive it; `thinking_open`: the prompt left the reasoning open
  // (ThinkingOpen). A family without reasoning (ThinkClose empty) is never
  // held.
  ThinkingBudget(std::unique_ptr<grammar::TokenConstraint> inner, const Tokenizer& tok,
                 const ChatFormat& chat, bool thinking_open, int64_t budget);

  size_t Mask(std::span<float> logits) override;
  bool Accept(int32_t token) override;
  // Not while the close is being written (the reply ends after it).
  bool complete() const override;
  bool finished() const override;

  // The tokens written inside the reasoning so far.
  int64_t reasoning_tokens() const { return reasoning_; }

 private:
  std::unique_ptr<grammar::TokenConstraint> inner_;
  const Tokenizer& tok_;
  ReplyParser parser_;
  const std::string close_;
  const int64_t budget_;
  int64_t reasoning_ = 0;
  bool closing_ = false;  // writing close_
  std::string got_;       // of close_, so far
};

}  // namespace waste::serve
