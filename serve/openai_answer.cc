#include "serve/openai_answer.h"

#include <utility>

namespace waste::serve {
namespace {

using json = nlohmann::json;

// What the two answers share: the client, the head, the logprobs asked for,
// and how an error or a whole answer is sent.
class OpenAiAnswer : public Answer {
 public:
  explicit OpenAiAnswer(OpenAiAnswerParts p, bool chat)
      : p_(std::move(p)),
        chat_(chat),
        // Chat: logprobs true (with top_logprobs); completions: "logprobs": n,
        // 0 included (the chosen tokens' alone, as OpenAI and vLLM answer).
        want_logprobs_(p_.sampling.logprobs),
        top_n_(want_logprobs_ ? static_cast<int>(p_.sampling.top_logprobs) : 0) {}

  bool streaming() const override { return p_.sampling.stream; }

  void OnError(const ApiError& e) override {
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

 protected:
  void Log(int32_t id, std::span<const float> logits) {
    if (want_logprobs_) logged_.push_back({id, LogprobsOf(logits, id, top_n_)});
  }
  // The logprobs of the tokens in logged_, in the route's shape; null without logprobs.
  json LoggedJson(int64_t text_offset) const {
    if (!want_logprobs_) return nullptr;
    return chat_ ? ChatLogprobs(*p_.tok, logged_)
                 : CompletionLogprobs(*p_.tok, logged_, text_offset);
  }
  void SendWhole(const json& body) {
    p_.r->Send(200, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  void EndStream(const json& finish_chunk, const Usage& usage) {
    p_.r->Write(SseEvent(finish_chunk));
    if (p_.sampling.include_usage)
      p_.r->Write(SseEvent(
          UsageChunk(p_.head, chat_ ? "chat.completion.chunk" : "text_completion", usage)));
    p_.r->Write(kSseDone);
    p_.r->End();
  }

  OpenAiAnswerParts p_;
  const bool chat_;
  const bool want_logprobs_;
  const int top_n_;
  // A whole answer's tokens, or a stream's not yet sent (they go with the
  // next piece of text).
  std::vector<LoggedToken> logged_;
};

class ChatAnswer final : public OpenAiAnswer {
 public:
  ChatAnswer(OpenAiAnswerParts p, const ChatFormat& chat)
      : OpenAiAnswer(std::move(p), true),
        reply_(*p_.tok, chat, ReplyOptions{p_.end_of_turn, p_.sampling.stop, p_.thinking_open}) {}

  void Start() override {
    if (!streaming()) return;
    p_.r->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    p_.r->Write(SseEvent(ChatRoleChunk(p_.head)));
  }

  bool OnToken(int32_t id, std::span<const float> logits) override {
    Log(id, logits);
    Take(reply_.Feed(id));
    return !reply_.done() && !p_.r->cancelled();
  }

  void OnEnd(bool length, const Usage& usage) override {
    Take(reply_.Flush());
    const Finish finish = calls_ > 0                 ? Finish::kToolCalls
                          : length && !reply_.done() ? Finish::kLength
                                                     : Finish::kStop;
    if (streaming()) {
      if (!logged_.empty()) Send(ChatContentChunk(p_.head, "", LoggedJson(0)));
      EndStream(ChatFinishChunk(p_.head, finish), usage);
    } else {
      SendWhole(ChatCompletion(p_.head, whole_, LoggedJson(0), finish, usage));
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
          Send(ChatContentChunk(p_.head, e.text, LoggedJson(0)));
          break;
        case Kind::kReasoning:
          Send(ChatReasoningChunk(p_.head, e.text, LoggedJson(0)));
          break;
        case Kind::kToolCallStart:
          Send(ChatToolCallChunk(p_.head, e.tool_index, e.id, e.name, LoggedJson(0)));
          break;
        case Kind::kToolCallArgs:
          Send(ChatToolArgsChunk(p_.head, e.tool_index, e.text, LoggedJson(0)));
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
    p_.r->Write(SseEvent(chunk));
    logged_.clear();
  }

  ReplyParser reply_;
  ChatReply whole_;  // a whole answer's message
  int calls_ = 0;
};

class CompletionAnswer final : public OpenAiAnswer {
 public:
  explicit CompletionAnswer(OpenAiAnswerParts p)
      : OpenAiAnswer(std::move(p), false), text_(*p_.tok, p_.end_of_turn, p_.sampling.stop) {}

  void Start() override {
    if (streaming()) p_.r->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
  }

  bool OnToken(int32_t id, std::span<const float> logits) override {
    Log(id, logits);
    Take(text_.Feed(id));
    return !text_.done() && !p_.r->cancelled();
  }

  void OnEnd(bool length, const Usage& usage) override {
    const std::string rest = text_.Flush();
    const Finish finish = length && !text_.done() ? Finish::kLength : Finish::kStop;
    if (streaming()) {
      if (!rest.empty() || !logged_.empty()) SendText(rest);
      EndStream(TextChunk(p_.head, "", nullptr, finish), usage);
    } else {
      whole_ += rest;
      SendWhole(TextCompletion(p_.head, whole_, LoggedJson(0), finish, usage));
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
    p_.r->Write(SseEvent(TextChunk(p_.head, piece, LoggedJson(code_points_sent_), std::nullopt)));
    logged_.clear();
    for (const unsigned char ch : piece) code_points_sent_ += (ch & 0xC0) != 0x80;
  }

  ReplyText text_;
  std::string whole_;
  int64_t code_points_sent_ = 0;  // the stream's text_offset
};

}  // namespace

std::unique_ptr<Answer> MakeChatAnswer(OpenAiAnswerParts parts, const ChatFormat& chat) {
  return std::make_unique<ChatAnswer>(std::move(parts), chat);
}

std::unique_ptr<Answer> MakeCompletionAnswer(OpenAiAnswerParts parts) {
  return std::make_unique<CompletionAnswer>(std::move(parts));
}

}  // namespace waste::serve
