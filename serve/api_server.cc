#include "serve/api_server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "engine/tokenizer/chat_generic.h"
#include "serve/answer_format.h"
#include "serve/anthropic.h"
#include "serve/openai.h"
#include "serve/openai_answer.h"

namespace waste::serve {
namespace {

using json = nlohmann::json;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Compares without stopping at the first difference, so the time taken
// does not tell how much of a guessed key was right.
bool SameKey(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ (i < b.size() ? b[i] : 0);
  return diff == 0;
}

}  // namespace

ApiServer::ApiServer(ApiOptions o, const Tokenizer& tok, const ChatFormat* chat,
                     std::vector<int32_t> end_of_turn, Scheduler& scheduler)
    : o_(std::move(o)),
      tok_(tok),
      chat_(chat),
      end_of_turn_(std::move(end_of_turn)),
      scheduler_(scheduler) {}

std::span<const ChatTool> ApiServer::RenderedTools(std::span<const ChatTool> tools,
                                                   bool choice_none) const {
  return choice_none && chat_generic::Applies(*chat_) ? std::span<const ChatTool>() : tools;
}

std::optional<ApiError> ApiServer::NotBesideCalls(const ToolCallPlan* plan,
                                                  std::string_view field) {
  if (!plan || plan->mode == ToolChoiceMode::kNone) return std::nullopt;
  if (plan->family != kFamilyHarmony && !plan->generic()) return std::nullopt;
  return BadRequest(std::string(field) + " beside tools is not supported for the '" + plan->family +
                        "' chat format (its answer and its calls cannot both be held); send "
                        "tool_choice none or leave " +
                        std::string(field) + " out",
                    std::string(field), "unsupported_value");
}

ApiServer::MakeConstraint ApiServer::Constrain(
    std::shared_ptr<const grammar::JsonGrammar> json_format,
    std::shared_ptr<const ToolCallPlan> tool_plan, int64_t max_tokens, bool thinking_open) {
  // A forced call leaves no answer text for a response_format to hold.
  const bool text = !tool_plan || tool_plan->mode == ToolChoiceMode::kAuto ||
                    tool_plan->mode == ToolChoiceMode::kNone;
  if (json_format && chat_ && text) {
    if (tool_plan && tool_plan->mode == ToolChoiceMode::kNone) tool_plan = nullptr;
    return [this, json_format, tool_plan, vocab = Vocab(), max_tokens, thinking_open] {
      auto calls =
          tool_plan ? std::make_unique<ToolCallConstraint>(tool_plan, tok_, vocab) : nullptr;
      return std::make_unique<AnswerFormat>(json_format, vocab, std::move(calls), tool_plan, tok_,
                                            *chat_, end_of_turn_, thinking_open, max_tokens);
    };
  }
  if (tool_plan)
    return [tool_plan, vocab = Vocab(), &tok = tok_] {
      return std::make_unique<ToolCallConstraint>(tool_plan, tok, vocab);
    };
  return {};
}

std::shared_ptr<const grammar::VocabIndex> ApiServer::Vocab() {
  std::call_once(vocab_once_, [this] {
    vocab_ = std::make_shared<const grammar::VocabIndex>(tok_, scheduler_.vocab());
  });
  return vocab_;
}

ApiCounters ApiServer::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void ApiServer::Count(const std::function<void(ApiCounters&)>& f) {
  std::lock_guard<std::mutex> lock(mu_);
  f(counters_);
}

void ApiServer::Refuse(const std::shared_ptr<http::Responder>& r, int status,
                       const std::string& json_body, const http::Headers& extra) {
  Count([](ApiCounters& c) { ++c.refused; });
  r->Send(status, "application/json", json_body, extra);
}

void ApiServer::Handle(http::Request req, std::shared_ptr<http::Responder> r) {
  const std::string& path = req.path;
  const bool api = path.rfind("/v1/", 0) == 0 || path == "/metrics";
  // Anthropic's routes answer in Anthropic's error shape.
  const bool anthropic = path.rfind("/v1/messages", 0) == 0;
  const auto shaped = [&](const ApiError& e) {
    return anthropic ? AnthropicError(e).dump() : e.ToJson().dump();
  };
  if (api && !o_.api_key.empty()) {
    const auto auth = req.Header("Authorization");
    const auto x_api_key = req.Header("x-api-key");  // Anthropic's
    const std::string_view bearer = "Bearer ";
    const bool bearer_ok = auth && auth->substr(0, bearer.size()) == bearer &&
                           SameKey(auth->substr(bearer.size()), o_.api_key);
    if (!bearer_ok && !(x_api_key && SameKey(*x_api_key, o_.api_key))) {
      ApiError e = BadRequest(
          "Incorrect API key provided: pass it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'.",
          "", "invalid_api_key");
      e.status = 401;
      return Refuse(r, 401, shaped(e), {{"WWW-Authenticate", "Bearer"}});
    }
  }
  auto route = [&](const char* method, const char* p) { return path == p && req.method == method; };
  auto known = [&](const char* p) { return path == p; };
  if (route("GET", "/") || route("HEAD", "/")) {
    Count([](ApiCounters& c) { ++c.other; });
    r->Send(200, "text/html; charset=utf-8", kChatPage);
  } else if (route("GET", "/health")) {
    Count([](ApiCounters& c) { ++c.other; });
    const bool ok = scheduler_.attached();
    r->Send(ok ? 200 : 503, "application/json",
            json{{"status", ok ? "ok" : "the model is not attached"}}.dump());
  } else if (route("GET", "/metrics")) {
    Count([](ApiCounters& c) { ++c.other; });
    http::HttpCounters hc;
    if (http_) hc = http_->counters();
    r->Send(200, "text/plain; version=0.0.4", Metrics(http_ ? &hc : nullptr));
  } else if (route("GET", "/v1/models")) {
    Count([](ApiCounters& c) { ++c.other; });
    const std::string names[] = {o_.model_name};
    r->Send(200, "application/json", ModelList(names, UnixNow()).dump());
  } else if (route("POST", "/v1/chat/completions") || route("POST", "/v1/completions")) {
    const bool chat = path == "/v1/chat/completions";
    Count([&](ApiCounters& c) { ++(chat ? c.chat : c.completions); });
    std::string model;
    Sampling sampling;
    std::vector<int32_t> prompt;
    std::string opening;  // the markup that opened a chat's reply (thinking switched)
    std::shared_ptr<const grammar::JsonGrammar> json_format;  // response_format; null: text
    std::shared_ptr<const ToolCallPlan> tool_plan;            // tools offered; null: none
    if (chat) {
      ChatRequest q;
      if (auto e = ParseChatRequest(req.body, &q)) return Refuse(r, e->status, e->ToJson().dump());
      if (!chat_)
        return Refuse(r, 400,
                      BadRequest("this model's container has no chat format (chat.json); use "
                                 "/v1/completions")
                          .ToJson()
                          .dump());
      auto format = WithThinking(*chat_, q.thinking, q.reasoning_effort);
      auto ids =
          format.ok()
              ? RenderChat(
                    *chat_, tok_, q.messages,
                    {.tools = RenderedTools(q.tools, q.tool_choice.mode == ToolChoice::Mode::kNone),
                     .thinking = q.thinking,
                     .reasoning_effort = q.reasoning_effort})
              : Result<std::vector<int32_t>>(format.status());
      if (!ids.ok()) {
        // The error names the field it is about: tools, thinking, reasoning_effort, messages.
        const std::string& why = ids.status().message();
        const std::string param = why.starts_with("tools")              ? "tools"
                                  : why.starts_with("thinking")         ? "chat_template_kwargs"
                                  : why.starts_with("reasoning_effort") ? "reasoning_effort"
                                                                        : "messages";
        return Refuse(r, 400, BadRequest(why, param).ToJson().dump());
      }
      prompt = std::move(*ids);
      opening = format->open;
      model = q.model, sampling = q.sampling, json_format = q.response_format;
      if (!q.tools.empty()) {
        using M = ToolChoice::Mode;
        const M m = q.tool_choice.mode;
        auto plan = ToolCallPlan::Make(chat_->family, q.tools,
                                       m == M::kNone       ? ToolChoiceMode::kNone
                                       : m == M::kAuto     ? ToolChoiceMode::kAuto
                                       : m == M::kRequired ? ToolChoiceMode::kRequired
                                                           : ToolChoiceMode::kFunction,
                                       q.tool_choice.function, q.parallel_tool_calls,
                                       ThinkingOpen(*chat_, opening), "function.parameters");
        if (!plan.ok()) {
          const std::string& why = plan.status().message();
          return Refuse(
              r, 400,
              BadRequest(why, why.substr(0, why.find(':')), "unsupported_value").ToJson().dump());
        }
        tool_plan = *plan;
        if (json_format && tool_plan->mode == ToolChoiceMode::kAuto)  // else no answer text
          if (auto e = NotBesideCalls(tool_plan.get(), "response_format"))
            return Refuse(r, e->status, e->ToJson().dump());
      }
    } else {
      CompletionRequest q;
      if (auto e = ParseCompletionRequest(req.body, &q))
        return Refuse(r, e->status, e->ToJson().dump());
      prompt = CompletionPrompt(chat_, tok_, q.prompt);
      if (prompt.empty())
        return Refuse(r, 400, BadRequest("the prompt is empty", "prompt").ToJson().dump());
      model = q.model, sampling = q.sampling;
    }
    if (!model.empty() && model != o_.model_name) {
      const ApiError e = UnknownModel(model);
      return Refuse(r, e.status, e.ToJson().dump());
    }
    if (auto e = CheckLogitBias(sampling, scheduler_.vocab()))
      return Refuse(r, e->status, e->ToJson().dump());
    if (static_cast<size_t>(sampling.n) > scheduler_.capacity())
      return Refuse(
          r, 400,
          BadRequest("n = " + std::to_string(sampling.n) +
                         " is more choices than this server holds at once (" +
                         std::to_string(scheduler_.capacity()) + ": --parallel plus --queue)",
                     "n", "invalid_value")
              .ToJson()
              .dump());
    const int64_t room = o_.context - static_cast<int64_t>(prompt.size());
    // Without max_tokens the reply may fill the context; it needs room for one token.
    const int64_t max_tokens = sampling.max_tokens.value_or(std::max<int64_t>(room, 1));
    if (max_tokens > room) {
      const ApiError e =
          ContextExceeded(static_cast<int64_t>(prompt.size()), max_tokens, o_.context);
      return Refuse(r, e.status, e.ToJson().dump());
    }
    OpenAiAnswerParts parts;
    parts.tok = &tok_;
    parts.head = {(chat ? "chatcmpl-" : "cmpl-") + std::to_string(UnixNow()) + "-" +
                      std::to_string(next_id_++),
                  UnixNow(), o_.model_name};
    parts.sampling = sampling;
    parts.sampling.max_tokens = max_tokens;
    if (!sampling.ignore_eos) parts.end_of_turn = end_of_turn_;
    parts.r = r;
    if (chat) parts.thinking_open = ThinkingOpen(*chat_, opening);
    parts.tool_plan = tool_plan;
    Generate(
        chat ? MakeChatAnswers(std::move(parts), *chat_) : MakeCompletionAnswers(std::move(parts)),
        std::move(prompt), sampling, max_tokens,
        Constrain(json_format, tool_plan, max_tokens, chat && ThinkingOpen(*chat_, opening)), r);
  } else if (route("POST", "/v1/messages") || route("POST", "/v1/messages/count_tokens")) {
    Count([](ApiCounters& c) { ++c.messages; });
    Messages(req, r, path == "/v1/messages/count_tokens");
  } else if (route("POST", "/v1/responses")) {
    Count([](ApiCounters& c) { ++c.responses; });
    Responses(req, r);
  } else if (known("/") || known("/health") || known("/metrics") || known("/v1/models") ||
             known("/v1/chat/completions") || known("/v1/completions") || known("/v1/messages") ||
             known("/v1/messages/count_tokens") || known("/v1/responses")) {
    ApiError e = BadRequest("method " + req.method + " is not allowed on " + path);
    e.status = 405;
    Refuse(r, 405, shaped(e));
  } else {
    ApiError e = BadRequest("no route " + req.method + " " + path);
    e.status = 404;
    Refuse(r, 404, shaped(e));
  }
}

void ApiServer::Generate(std::vector<std::unique_ptr<Answer>> choices, std::vector<int32_t> prompt,
                         const Sampling& sampling, int64_t max_tokens, MakeConstraint constrain,
                         const std::shared_ptr<http::Responder>& r) {
  // Every choice's generation, for a client gone or a failed choice to cancel.
  auto all = std::make_shared<std::vector<std::weak_ptr<Generation>>>();
  auto cancel_all = [all] {
    for (const auto& weak : *all)
      if (auto gen = weak.lock()) gen->cancelled = true;
  };
  const double submitted = Now();
  const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
  std::vector<std::shared_ptr<Answer>> answers;
  std::vector<std::shared_ptr<Generation>> gens;
  for (size_t i = 0; i < choices.size(); ++i) {
    // Shared by the scheduler's callbacks (its thread) and this handler (the
    // loop thread, before submitting).
    std::shared_ptr<Answer> a = std::move(choices[i]);
    auto g = std::make_shared<Generation>();
    g->prompt.assign(prompt.begin(), prompt.end());
    g->max_tokens = static_cast<int>(max_tokens);
    g->sampling = sampling.SamplerFor(std::random_device{}(), static_cast<int>(i));
    if (!sampling.ignore_eos) g->end_tokens.assign(end_of_turn_.begin(), end_of_turn_.end());
    if (constrain) g->constraint = constrain();
    g->on_token = [a](int id, std::span<const float> logits) { return a->OnToken(id, logits); };
    g->on_end = [this, a, r, submitted, prompt_tokens, cancel_all](const GenerationEnd& end) {
      const double now = Now();
      Count([&](ApiCounters& c) {
        if (end.reason == EndReason::kError) ++c.failed;
        if (end.reason == EndReason::kCancelled) ++c.cancelled;
        if (end.completion_tokens > 0) {
          c.first_token_seconds += end.first_token_seconds;
          ++c.first_tokens;
          c.decode_seconds += std::max(0.0, now - submitted - end.first_token_seconds);
          c.decode_tokens += static_cast<uint64_t>(end.completion_tokens - 1);
        }
      });
      if (end.reason == EndReason::kCancelled && r->cancelled()) return;  // nobody to tell
      if (end.reason == EndReason::kError || end.reason == EndReason::kCancelled) {
        ApiError e = BadRequest(
            end.reason == EndReason::kError ? end.error : std::string("the server is stopping"));
        e.status = end.reason == EndReason::kError ? 500 : 503;
        e.type = "server_error";
        cancel_all();  // the answer is this error: the other choices stop
        return a->OnError(e);
      }
      a->OnEnd(end.reason == EndReason::kLength, Usage{prompt_tokens, end.completion_tokens});
    };
    all->push_back(g);
    answers.push_back(std::move(a));
    gens.push_back(std::move(g));
  }
  r->OnCancel(cancel_all);
  for (const auto& a : answers) a->Start();
  if (!scheduler_.SubmitGroup(std::move(gens))) {
    Count([](ApiCounters& c) { ++c.refused; });
    answers.front()->OnError(Busy());
  }
}

std::string ApiServer::Metrics(const http::HttpCounters* http) const {
  const ApiCounters c = counters();
  const SchedulerStats s = scheduler_.stats();
  std::string out;
  auto line = [&](const char* name, const char* type, const char* help, double v,
                  const char* labels = "") {
    char buf[512];
    std::snprintf(buf, sizeof buf, "# HELP %s %s\n# TYPE %s %s\n%s%s %.17g\n", name, help, name,
                  type, name, labels, v);
    out += buf;
  };
  auto more = [&](const char* name, const char* labels, double v) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s%s %.17g\n", name, labels, v);
    out += buf;
  };
  line("waste_serve_requests_total", "counter", "Requests by route.", c.chat, "{route=\"chat\"}");
  more("waste_serve_requests_total", "{route=\"completions\"}", c.completions);
  more("waste_serve_requests_total", "{route=\"messages\"}", c.messages);
  more("waste_serve_requests_total", "{route=\"responses\"}", c.responses);
  more("waste_serve_requests_total", "{route=\"other\"}", c.other);
  line("waste_serve_refused_total", "counter", "Requests answered with an error before generating.",
       c.refused);
  line("waste_serve_failed_total", "counter", "Generations that ended in an error.", c.failed);
  line("waste_serve_cancelled_total", "counter", "Generations whose client went away.",
       c.cancelled);
  line("waste_serve_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
       s.prompt_tokens);
  line("waste_serve_reused_tokens_total", "counter",
       "Prompt tokens taken from a kept conversation state, not run again.", s.reused_tokens);
  line("waste_serve_completion_tokens_total", "counter", "Tokens generated.", s.completion_tokens);
  line("waste_serve_queue_length", "gauge", "Requests waiting for a place in the batch.", s.queued);
  line("waste_serve_running", "gauge", "Generations in the batch.", s.running);
  line("waste_serve_steps_total", "counter", "Forward steps run.", s.steps);
  // Per request in prefill, labelled by its number in order of admission;
  // no sample when none is.
  out += "# HELP waste_serve_prefill_done_tokens Prompt tokens done (run or taken from a kept "
         "state) of each request in prefill.\n# TYPE waste_serve_prefill_done_tokens gauge\n";
  for (const PrefillProgress& p : s.prefilling)
    more("waste_serve_prefill_done_tokens",
         ("{request=\"" + std::to_string(p.request) + "\"}").c_str(), p.done);
  out += "# HELP waste_serve_prefill_prompt_tokens Prompt tokens of each request in prefill.\n"
         "# TYPE waste_serve_prefill_prompt_tokens gauge\n";
  for (const PrefillProgress& p : s.prefilling)
    more("waste_serve_prefill_prompt_tokens",
         ("{request=\"" + std::to_string(p.request) + "\"}").c_str(), p.total);
  line("waste_serve_kept_states", "gauge", "Conversation states kept.", s.kept_states);
  line("waste_serve_kept_bytes", "gauge", "Bytes of the kept conversation states.", s.kept_bytes);
  line("waste_serve_time_to_first_token_seconds_sum", "counter",
       "Time from a request's arrival to its first token, summed.", c.first_token_seconds);
  line("waste_serve_time_to_first_token_seconds_count", "counter",
       "Requests that had a first token.", c.first_tokens);
  line("waste_serve_decode_tokens_per_second", "gauge",
       "Tokens after the first per second of decoding, over every ended request.",
       c.decode_seconds > 0 ? c.decode_tokens / c.decode_seconds : 0.0);
  if (http) {
    line("waste_serve_http_connections_total", "counter", "Connections served.", http->accepted);
    line("waste_serve_http_refused_connections_total", "counter",
         "Connections refused past the connection cap.", http->refused);
    line("waste_serve_http_displaced_connections_total", "counter",
         "Idle connections closed to make room for a new one at the connection cap.",
         http->displaced);
    line("waste_serve_http_errors_total", "counter",
         "Requests the HTTP layer answered 400, 408, 413 or 431.", http->errors);
    line("waste_serve_http_open_connections", "gauge", "Connections open now.", http->open);
  }
  return out;
}

}  // namespace waste::serve
