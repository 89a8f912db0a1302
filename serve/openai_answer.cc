#include "serve/openai_answer.h"

#include <utility>

namespace waste::serve {
namespace {

using json = nlohmann::json;

// What the choices of one answer share: the client and the head, the
// stream's head and end, a whole answer's choices, the usage, and the first
// error. Its choices' callbacks all run on one thread at a time (Start on
// the loop thread before the generations are submitted, the rest on the
// scheduler's), so it needs no lock.
class Response {
 public:
  Response(OpenAiAnswerParts p, bool chat)
      : p_(std::move(p)), chat_(chat), choices_(static_cast<size_t>(p_.sampling.n)) {}

  const OpenAiAnswerParts& parts() const { return p_; }
  bool chat() const { return chat_; }
  bool streaming() const { return p_.sampling.stream; }
  // Neither an error sent nor the client gone: choices go on.
  bool open() const { return !failed_ && !p_.r->cancelled(); }

  // The stream's head, once for every choice.
  void Start() {
    if (!streaming() || started_) return;
    started_ = true;
    p_.r->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
  }
  void Write(const json& chunk) {
    if (!failed_) p_.r->Write(SseEvent(chunk));
  }
  // Choice `index` ended with `usage`'s completion tokens; `whole` is its
  // choice object for a whole answer (a stream has written its finish chunk).
  // After the last, the answer ends.
  void ChoiceEnded(int index, json whole, const Usage& usage) {
    if (failed_) return;
    choices_[static_cast<size_t>(index)] = std::move(whole);
    usage_.prompt_tokens = usage.prompt_tokens;  // the same prompt for every choice
    usage_.completion_tokens += usage.completion_tokens;
    if (++ended_ < choices_.size()) return;
    if (streaming()) {
      if (p_.sampling.include_usage)
        Write(UsageChunk(p_.head, chat_ ? "chat.completion.chunk" : "text_completion", usage_));
      p_.r->Write(kSseDone);
      p_.r->End();
      return;
    }
    json all(std::move(choices_));
    const json body = chat_ ? ChatCompletion(p_.head, std::move(all), usage_)
                            : TextCompletion(p_.head, std::move(all), usage_);
    p_.r->Send(200, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  // The first error is the answer; later ones and later ends are dropped.
  void Fail(const ApiError& e) {
    if (failed_) return;
    failed_ = true;
    if (streaming()) {
      p_.r->Write(SseEvent(e.ToJson()));
      p_.r->Write(kSseDone);
      p_.r->End();
    } else {
      http::Headers extra;
      if (e.status == 503) extra.push_back({"Retry-After", "1"});
      p_.r->Send(e.status, "application/json", e.ToJson().dump(), extra);
    }
  }

 private:
  const OpenAiAnswerParts p_;
  const bool chat_;
  std::vector<json> choices_;  // a whole answer's, by index
  size_t ended_ = 0;
  Usage usage_;
  bool started_ = false, failed_ = false;
};

// One choice: its logprobs, and what both routes' choices share.
class Choice : public Answer {
 public:
  Choice(std::shared_ptr<Response> response, int index)
      : response_(std::move(response)),
        p_(response_->parts()),
        index_(index),
        // Chat: logprobs true (with top_logprobs); completions: "logprobs": n,
        // 0 included (the chosen tokens' alone, as OpenAI and vLLM answer).
        want_logprobs_(p_.sampling.logprobs),
        top_n_(want_logprobs_ ? static_cast<int>(p_.sampling.top_logprobs) : 0) {}

  bool streaming() const override { return response_->streaming(); }
  void OnError(const ApiError& e) override { response_->Fail(e); }

 protected:
  void Log(int32_t id, std::span<const float> logits) {
    if (want_logprobs_) logged_.push_back({id, LogprobsOf(logits, id, top_n_)});
  }
  // The logprobs of the tokens in logged_, in the route's shape; null without logprobs.
  json LoggedJson(int64_t text_offset) const {
    if (!want_logprobs_) return nullptr;
    return response_->chat() ? ChatLogprobs(*p_.tok, logged_)
                             : CompletionLogprobs(*p_.tok, logged_, text_offset);
  }

  const std::shared_ptr<Response> response_;
  const OpenAiAnswerParts& p_;
  const int index_;
  const bool want_logprobs_;
  const int top_n_;
  // A whole answer's tokens, or a stream's not yet sent (they go with the
  // next piece of text).
  std::vector<LoggedToken> logged_;
};

class ChatChoiceAnswer final : public Choice {
 public:
  ChatChoiceAnswer(std::shared_ptr<Response> response, int index, const ChatFormat& chat)
      : Choice(std::move(response), index),
        reply_(*p_.tok, chat,
               ReplyOptions{p_.end_of_turn, p_.sampling.stop, p_.thinking_open, p_.tool_plan}) {}

  void Start() override {
    response_->Start();
    if (streaming()) response_->Write(ChatRoleChunk(p_.head, index_));
  }

  bool OnToken(int32_t id, std::span<const float> logits) override {
    Log(id, logits);
    Take(reply_.Feed(id));
    return !reply_.done() && response_->open();
  }

  void OnEnd(bool length, const Usage& usage) override {
    Take(reply_.Flush());
    // A call cut by max_tokens is listed, but the reply ran out: "length".
    const Finish finish = calls_ > 0 && !reply_.cut_in_call() ? Finish::kToolCalls
                          : length && !reply_.done()          ? Finish::kLength
                                                              : Finish::kStop;
    if (streaming()) {
      if (!logged_.empty()) Send(ChatContentChunk(p_.head, index_, "", LoggedJson(0)));
      response_->Write(ChatFinishChunk(p_.head, index_, finish));
      response_->ChoiceEnded(index_, nullptr, usage);
    } else {
      response_->ChoiceEnded(index_, ChatChoice(index_, whole_, LoggedJson(0), finish), usage);
    }
  }

 private:
  using Kind = ReplyEvent::Kind;

  // A stream sends each event as it comes, with the logprobs of the tokens
  // since the last chunk; a whole answer gathers them.
  void Take(const std::vector<ReplyEvent>& events) {
    for (const ReplyEvent& e : events) {
      if (e.kind == Kind::kToolCallStart) ++calls_;
      if (!streaming()) {
        Gather(e);
        continue;
      }
      switch (e.kind) {
        case Kind::kText:
          Send(ChatContentChunk(p_.head, index_, e.text, LoggedJson(0)));
          break;
        case Kind::kReasoning:
          Send(ChatReasoningChunk(p_.head, index_, e.text, LoggedJson(0)));
          break;
        case Kind::kToolCallStart:
          Send(ChatToolCallChunk(p_.head, index_, e.tool_index, e.id, e.name, LoggedJson(0)));
          break;
        case Kind::kToolCallArgs:
          Send(ChatToolArgsChunk(p_.head, index_, e.tool_index, e.text, LoggedJson(0)));
          break;
        case Kind::kToolCallEnd:
          break;
      }
    }
  }
  void Gather(const ReplyEvent& e) {
    switch (e.kind) {
      case Kind::kText:
        whole_.content += e.text;
        break;
      case Kind::kReasoning:
        whole_.reasoning += e.text;
        break;
      case Kind::kToolCallStart:
        whole_.tool_calls.push_back({e.id, e.name, ""});
        break;
      case Kind::kToolCallArgs:
        whole_.tool_calls.back().arguments += e.text;
        break;
      case Kind::kToolCallEnd:
        break;
    }
  }
  void Send(const json& chunk) {
    response_->Write(chunk);
    logged_.clear();
  }

  ReplyParser reply_;
  ChatReply whole_;  // a whole answer's message
  int calls_ = 0;
};

class CompletionChoiceAnswer final : public Choice {
 public:
  CompletionChoiceAnswer(std::shared_ptr<Response> response, int index)
      : Choice(std::move(response), index), text_(*p_.tok, p_.end_of_turn, p_.sampling.stop) {}

  void Start() override { response_->Start(); }

  bool OnToken(int32_t id, std::span<const float> logits) override {
    Log(id, logits);
    Take(text_.Feed(id));
    return !text_.done() && response_->open();
  }

  void OnEnd(bool length, const Usage& usage) override {
    const std::string rest = text_.Flush();
    const Finish finish = length && !text_.done() ? Finish::kLength : Finish::kStop;
    if (streaming()) {
      if (!rest.empty() || !logged_.empty()) SendText(rest);
      response_->Write(TextChunk(p_.head, index_, "", nullptr, finish));
      response_->ChoiceEnded(index_, nullptr, usage);
    } else {
      whole_ += rest;
      response_->ChoiceEnded(index_, TextChoice(index_, whole_, LoggedJson(0), finish), usage);
    }
  }

 private:
  void Take(const std::string& piece) {
    if (!streaming())
      whole_ += piece;
    else if (!piece.empty())
      SendText(piece);
  }
  void SendText(const std::string& piece) {
    response_->Write(
        TextChunk(p_.head, index_, piece, LoggedJson(code_points_sent_), std::nullopt));
    logged_.clear();
    for (const unsigned char ch : piece) code_points_sent_ += (ch & 0xC0) != 0x80;
  }

  ReplyText text_;
  std::string whole_;
  int64_t code_points_sent_ = 0;  // the stream's text_offset
};

}  // namespace

std::vector<std::unique_ptr<Answer>> MakeChatAnswers(OpenAiAnswerParts parts,
                                                     const ChatFormat& chat) {
  auto response = std::make_shared<Response>(std::move(parts), true);
  std::vector<std::unique_ptr<Answer>> out;
  for (int i = 0; i < response->parts().sampling.n; ++i)
    out.push_back(std::make_unique<ChatChoiceAnswer>(response, i, chat));
  return out;
}

std::vector<std::unique_ptr<Answer>> MakeCompletionAnswers(OpenAiAnswerParts parts) {
  auto response = std::make_shared<Response>(std::move(parts), false);
  std::vector<std::unique_ptr<Answer>> out;
  for (int i = 0; i < response->parts().sampling.n; ++i)
    out.push_back(std::make_unique<CompletionChoiceAnswer>(response, i));
  return out;
}

}  // namespace waste::serve
