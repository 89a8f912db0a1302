// ApiServer's routes for agents' other APIs: Anthropic's Messages
// (/v1/messages, /v1/messages/count_tokens) and OpenAI's Responses
// (/v1/responses), each parsed into the neutral conversation, rendered and
// generated as a chat completion is (serve/api_server.cc).
#include <algorithm>
#include <chrono>

#include "serve/anthropic.h"
#include "serve/anthropic_answer.h"
#include "serve/api_server.h"
#include "serve/responses.h"
#include "serve/responses_answer.h"
#include "serve/thinking_budget.h"

namespace waste::serve {
namespace {

// These APIs have no n: one choice.
std::vector<std::unique_ptr<Answer>> OneChoice(std::unique_ptr<Answer> a) {
  std::vector<std::unique_ptr<Answer>> one;
  one.push_back(std::move(a));
  return one;
}

}  // namespace

std::string ApiServer::NewId(const char* prefix) {
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  return prefix + std::to_string(now) + "-" + std::to_string(next_id_++);
}

std::optional<ApiError> ApiServer::Admit(
    const std::string& model, std::span<const ChatMessage> messages,
    std::span<const ChatTool> tools, const ToolChoiceSpec& choice, std::string_view schema_field,
    std::optional<bool> thinking, std::optional<int64_t>* max_tokens, std::vector<int32_t>* prompt,
    std::shared_ptr<const ToolCallPlan>* plan, std::optional<bool>* thinking_open) const {
  if (!model.empty() && model != o_.model_name) return UnknownModel(model);
  if (!chat_)
    return BadRequest("this model's container has no chat format (chat.json); use /v1/completions");
  auto format = WithThinking(*chat_, thinking, "");
  if (!format.ok()) return BadRequest(format.status().message(), "thinking");
  *thinking_open = ThinkingOpen(*chat_, format->open);
  if (!tools.empty()) {  // as on /v1/chat/completions
    auto p = ToolCallPlan::Make(chat_->family, tools, choice.mode, choice.function, choice.parallel,
                                thinking_open->value_or(false), schema_field);
    if (!p.ok()) {
      const std::string& why = p.status().message();
      return BadRequest(why, why.substr(0, why.find(':')), "unsupported_value");
    }
    *plan = *p;
  }
  ChatRenderOptions options;
  options.tools = RenderedTools(tools, choice.mode == ToolChoiceMode::kNone);
  options.thinking = thinking;
  auto ids = RenderChat(*chat_, tok_, messages, options);
  // The renderer names what it refused: a message ("messages[i]: ...") or the tools.
  if (!ids.ok()) {
    const std::string& why = ids.status().message();
    return BadRequest(why, tools.empty() || why.rfind("messages[", 0) == 0 ? "messages" : "tools");
  }
  *prompt = std::move(*ids);
  const int64_t room = o_.context - static_cast<int64_t>(prompt->size());
  // Without a limit the reply may fill the context; it needs room for one token.
  const int64_t max = max_tokens->value_or(std::max<int64_t>(room, 1));
  if (max > room) return ContextExceeded(static_cast<int64_t>(prompt->size()), max, o_.context);
  *max_tokens = max;
  return std::nullopt;
}

void ApiServer::Messages(const http::Request& req, const std::shared_ptr<http::Responder>& r,
                         bool count_tokens) {
  const auto refuse = [&](const ApiError& e) {
    Refuse(r, AnthropicStatus(e), AnthropicError(e).dump());
  };
  MessagesRequest q;
  if (auto e = ParseMessagesRequest(req.body, count_tokens, &q)) return refuse(*e);
  std::vector<int32_t> prompt;
  // count_tokens asks for no reply: only the prompt needs to fit.
  std::optional<int64_t> max_tokens =
      count_tokens ? std::optional<int64_t>(1) : q.sampling.max_tokens;
  std::optional<bool> thinking_open;
  using AnthropicMode = AnthropicToolChoice::Mode;
  const AnthropicMode m = q.tool_choice.mode;
  const ToolChoiceSpec choice{m == AnthropicMode::kNone   ? ToolChoiceMode::kNone
                              : m == AnthropicMode::kAny  ? ToolChoiceMode::kRequired
                              : m == AnthropicMode::kTool ? ToolChoiceMode::kFunction
                                                          : ToolChoiceMode::kAuto,
                              q.tool_choice.name, !q.tool_choice.disable_parallel_tool_use};
  std::shared_ptr<const ToolCallPlan> plan;
  if (auto e = Admit(q.model, q.messages, q.tools, choice, "input_schema", q.thinking, &max_tokens,
                     &prompt, &plan, &thinking_open))
    return refuse(*e);
  if (q.thinking == true)
    if (auto e = NotBesideCalls(plan.get(), "thinking")) return refuse(*e);
  if (count_tokens) {
    r->Send(200, "application/json", nlohmann::json{{"input_tokens", prompt.size()}}.dump());
    return;
  }
  OpenAiAnswerParts parts;
  parts.tok = &tok_;
  parts.head = {NewId("msg_"), 0, o_.model_name};
  parts.sampling = q.sampling;
  parts.sampling.max_tokens = max_tokens;
  parts.end_of_turn = end_of_turn_;
  parts.tool_plan = plan;
  parts.r = r;
  parts.thinking_open = thinking_open;
  const auto input_tokens = static_cast<int64_t>(prompt.size());
  MakeConstraint constrain = Constrain(nullptr, plan, *max_tokens);
  if (q.thinking == true)  // the reasoning held to budget_tokens, then the calls to the tools
    constrain = [inner = std::move(constrain), open = thinking_open.value_or(false),
                 budget = q.thinking_budget, &tok = tok_, &chat = *chat_] {
      return std::make_unique<ThinkingBudget>(inner ? inner() : nullptr, tok, chat, open, budget);
    };
  Generate(OneChoice(MakeMessagesAnswer(std::move(parts), *chat_, input_tokens)), std::move(prompt),
           q.sampling, *max_tokens, std::move(constrain), r);
}

void ApiServer::Responses(const http::Request& req, const std::shared_ptr<http::Responder>& r) {
  const auto refuse = [&](const ApiError& e) { Refuse(r, e.status, e.ToJson().dump()); };
  ResponsesRequest q;
  if (auto e = ParseResponsesRequest(req.body, &q)) return refuse(*e);
  std::vector<int32_t> prompt;
  std::optional<int64_t> max_tokens = q.sampling.max_tokens;
  std::optional<bool> thinking_open;
  std::shared_ptr<const ToolCallPlan> plan;
  if (auto e = Admit(q.model, q.messages, q.tools, q.tool_choice, "parameters", std::nullopt,
                     &max_tokens, &prompt, &plan, &thinking_open))
    return refuse(*e);
  if (q.format && plan && plan->mode == ToolChoiceMode::kAuto)  // else no answer text
    if (auto e = NotBesideCalls(plan.get(), "text.format")) return refuse(*e);
  OpenAiAnswerParts parts;
  parts.tok = &tok_;
  parts.head = {NewId("resp_"),
                std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count(),
                o_.model_name};
  parts.sampling = q.sampling;
  parts.sampling.max_tokens = max_tokens;
  parts.end_of_turn = end_of_turn_;
  parts.tool_plan = plan;
  parts.r = r;
  parts.thinking_open = thinking_open;
  Generate(OneChoice(MakeResponsesAnswer(std::move(parts), *chat_, std::move(q.echo))),
           std::move(prompt), q.sampling, *max_tokens,
           Constrain(q.format, plan, *max_tokens, thinking_open.value_or(false)), r);
}

}  // namespace waste::serve
