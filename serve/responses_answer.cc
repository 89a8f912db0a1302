#include "serve/responses_answer.h"

#include <utility>

#include "serve/responses.h"

namespace waste::serve {
namespace {

class ResponsesAnswer final : public Answer {
 public:
  ResponsesAnswer(OpenAiAnswerParts p, const ChatFormat& chat, nlohmann::json echo)
      : p_(std::move(p)),
        reply_(*p_.tok, chat, ReplyOptions{p_.end_of_turn, {}, p_.thinking_open, p_.tool_plan}),
        writer_(p_.head.id, p_.head.model, p_.head.created, std::move(echo)) {}

  bool streaming() const override { return p_.sampling.stream; }

  void Start() override {
    if (!streaming()) return;
    p_.r->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    p_.r->Write(writer_.Start());
  }

  bool OnToken(int32_t id, std::span<const float>) override {
    Take(reply_.Feed(id));
    return !reply_.done() && !p_.r->cancelled();
  }

  void OnEnd(bool length, const Usage& usage) override {
    std::vector<ReplyEvent> events = reply_.Flush();
    // A call max_tokens cut stays open: Finish closes its item "incomplete".
    if (reply_.cut_in_call() && !events.empty() &&
        events.back().kind == ReplyEvent::Kind::kToolCallEnd)
      events.pop_back();
    Take(events);
    const std::string last = writer_.Finish(length && !reply_.done(), usage);
    if (streaming()) {
      p_.r->Write(last);
      p_.r->End();
    } else {
      p_.r->Send(200, "application/json",
                 writer_.response().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }

  void OnError(const ApiError& e) override {
    if (streaming()) {
      p_.r->Write(writer_.Error(e));
      p_.r->End();
    } else {
      http::Headers extra;
      if (e.status == 503) extra.push_back({"Retry-After", "1"});
      p_.r->Send(e.status, "application/json", e.ToJson().dump(), extra);
    }
  }

 private:
  void Take(const std::vector<ReplyEvent>& events) {
    for (const ReplyEvent& e : events) {
      const std::string sse = writer_.Take(e);
      if (streaming() && !sse.empty()) p_.r->Write(sse);
    }
  }

  OpenAiAnswerParts p_;
  ReplyParser reply_;
  ResponseWriter writer_;
};

}  // namespace

std::unique_ptr<Answer> MakeResponsesAnswer(OpenAiAnswerParts parts, const ChatFormat& chat,
                                            nlohmann::json echo) {
  return std::make_unique<ResponsesAnswer>(std::move(parts), chat, std::move(echo));
}

}  // namespace waste::serve
