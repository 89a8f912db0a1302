// response_format held on a chat reply's answer, whatever comes before it
// or instead of it: a token constraint (the scheduler's
// Generation::constraint) that reads the reply as ReplyParser does
// (serve/reply.h) and holds each part to what the request asked.
//
//   reasoning  free (a think block the prompt opened, harmony's analysis
//              channel, K3's think element), but for the end of turn; once
//              it ends, the rest of the family's close (ThinkClose) is
//              forced, so that the answer follows; and when the tokens
//              left come within that close plus what the answer needs, the
//              close is forced there
//   a header   where the reply begins with harmony's channel markup, one of
//              its analysis or final channel headers is forced
//   the answer its text held to the JSON grammar (a JsonTokenConstraint
//              started there, ended within the tokens left); with tools
//              (tool_choice auto), the answer may be calls instead,
//              whichever the reply begins with: a call's opening hands the
//              rest to the ToolCallConstraint (serve/tool_constraint.h),
//              any other byte to the grammar
//
// tool_choice required or a named function leaves no answer text (the
// ToolCallConstraint alone holds such a reply); none: the grammar alone.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/format/chat.h"
#include "engine/grammar/token_mask.h"
#include "engine/tokenizer/tokenizer.h"
#include "serve/reply.h"
#include "serve/tool_constraint.h"

namespace waste::serve {

class AnswerFormat : public grammar::TokenConstraint {
 public:
  // `calls`: the tools' constraint (tool_choice auto) and `plan` its plan,
  // or both null. `end_of_turn`: the ids that end the reply (masked until the
  // answer is complete). `tok` and `chat` must outlive it; `thinking_open`:
  // the prompt left the reasoning open (ThinkingOpen); `max_tokens`: the
  // reply's.
  AnswerFormat(std::shared_ptr<const grammar::JsonGrammar> format,
               std::shared_ptr<const grammar::VocabIndex> vocab,
               std::unique_ptr<ToolCallConstraint> calls, std::shared_ptr<const ToolCallPlan> plan,
               const Tokenizer& tok, const ChatFormat& chat, std::vector<int32_t> end_of_turn,
               bool thinking_open, int64_t max_tokens);

  size_t Mask(std::span<float> logits) override;
  bool Accept(int32_t token) override;
  bool complete() const override;
  bool finished() const override;

 private:
  enum class Phase { kReasoning, kMarkup, kAnswer, kJson, kCalls };
  void Settle();  // after a token (or at the start): the phase the parser's mode calls for
  bool MarkupAllows(std::string_view bytes) const;
  bool OpeningAllows(std::string_view bytes) const;  // kAnswer: a call's opening so far

  std::shared_ptr<const grammar::JsonGrammar> format_;
  std::shared_ptr<const grammar::VocabIndex> vocab_;
  std::unique_ptr<ToolCallConstraint> calls_;
  std::shared_ptr<const ToolCallPlan> plan_;
  const Tokenizer& tok_;
  const ChatFormat& chat_;
  const std::vector<int32_t> end_;
  ReplyParser parser_;
  const std::string close_;  // ThinkClose
  int64_t left_;             // tokens the reply may still take
  uint64_t reserve_ = 0;     // tokens the close and the answer need, at least

  Phase phase_ = Phase::kAnswer;
  std::vector<std::string> alts_;  // kMarkup: the texts one of which is forced
  std::string got_;                // kMarkup: written so far; kAnswer: a call's opening so far
  std::string tail_;               // kReasoning: the last bytes (the close's reach)
  std::unique_ptr<grammar::JsonTokenConstraint> json_;
};

}  // namespace waste::serve
