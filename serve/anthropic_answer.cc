#include "serve/anthropic_answer.h"

#include <utility>

#include "serve/anthropic.h"

namespace waste::serve {
namespace {

class MessagesAnswer final : public Answer {
 public:
  MessagesAnswer(OpenAiAnswerParts p, const ChatFormat& chat, int64_t input_tokens)
      : p_(std::move(p)),
        reply_(*p_.tok, chat,
               ReplyOptions{p_.end_of_turn, p_.sampling.stop, p_.thinking_open, p_.tool_plan}),
        writer_(p_.head.id, p_.head.model, input_tokens) {}

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
    Take(reply_.Flush());
    const StopReason reason = StopReasonOf(writer_.called_tool() && !reply_.cut_in_call(),
                                           reply_.stop_sequence(), length && !reply_.done());
    const std::string last =
        writer_.Finish(reason, reply_.stop_sequence(), usage.completion_tokens);
    if (streaming()) {
      p_.r->Write(last);
      p_.r->End();
    } else {
      p_.r->Send(200, "application/json",
                 writer_.message().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }

  void OnError(const ApiError& e) override {
    if (streaming()) {
      p_.r->Write(AnthropicEvent(AnthropicError(e)));
      p_.r->End();
    } else {
      http::Headers extra;
      if (e.status == 503) extra.push_back({"Retry-After", "1"});
      p_.r->Send(AnthropicStatus(e), "application/json", AnthropicError(e).dump(), extra);
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
  MessageWriter writer_;
};

}  // namespace

std::unique_ptr<Answer> MakeMessagesAnswer(OpenAiAnswerParts parts, const ChatFormat& chat,
                                           int64_t input_tokens) {
  return std::make_unique<MessagesAnswer>(std::move(parts), chat, input_tokens);
}

}  // namespace waste::serve
