// ApiServer: OpenAI's HTTP API over a Scheduler, what `waste serve` runs.
//
// Routes (HttpServer calls Handle on its loop thread; nothing here blocks):
//   GET  /                     the chat page (chat_page.html, built in)
//   GET  /health               200 {"status":"ok"} while the model is attached, else 503
//   GET  /metrics              Prometheus text: requests, tokens in and out and reused,
//                              queue length, time to first token, decode tok/s, each
//                              prefilling request's prompt tokens done and in all
//   GET  /v1/models            the one model served
//   POST /v1/chat/completions  a conversation, rendered as the model was trained
//                              (RenderChat), its reply whole or streamed
//   POST /v1/completions       text continued, whole or streamed
//   POST /v1/messages          Anthropic's Messages API (serve/anthropic.h), whole or
//                              streamed; /v1/messages/count_tokens its prompt's length
//   POST /v1/responses         OpenAI's Responses API, stateless (serve/responses.h)
// With an API key, /v1/* and /metrics need "Authorization: Bearer KEY" or
// "x-api-key: KEY" (401 otherwise). Errors are OpenAI's error objects
// (serve/openai.h), Anthropic's on /v1/messages*.
// A request's generation runs on the scheduler's thread, driving the
// route's Answer (serve/answer.h); its reply text is
// cut at end-of-turn tokens and stop strings, never showing markup; a
// client that goes away cancels its generation (Generation::cancelled).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/format/chat.h"
#include "engine/tokenizer/chat.h"
#include "engine/tokenizer/tokenizer.h"
#include "http/server.h"
#include "serve/answer.h"
#include "serve/scheduler.h"
#include "serve/tool_constraint.h"

namespace waste::serve {

struct ApiOptions {
  std::string model_name;  // what /v1/models lists and requests must name (or leave out)
  std::string api_key;     // empty: none needed
  int context = 4096;      // tokens a conversation may hold (the scheduler's)
};

// What the server counts, for /metrics.
struct ApiCounters {
  uint64_t chat = 0, completions = 0, messages = 0, responses = 0, other = 0;  // by route
  uint64_t refused = 0;            // answered 4xx or 503 before generating
  uint64_t failed = 0;             // generations that ended in an error
  uint64_t cancelled = 0;          // generations whose client went away
  double first_token_seconds = 0;  // summed over generations with a token
  uint64_t first_tokens = 0;
  double decode_seconds = 0;   // after each first token, summed
  uint64_t decode_tokens = 0;  // tokens after each first one
};

class ApiServer {
 public:
  // `tok` and `chat` (null: the container has no chat.json; chat requests
  // are then refused) must outlive the server, `scheduler` too. `end_of_turn`:
  // the ids that end a reply (EndOfTurnIds). /health says whether the
  // scheduler's model is attached.
  ApiServer(ApiOptions o, const Tokenizer& tok, const ChatFormat* chat,
            std::vector<int32_t> end_of_turn, Scheduler& scheduler);

  // HttpServer's handler.
  void Handle(http::Request req, std::shared_ptr<http::Responder> r);
  ApiCounters counters() const;
  // GET /metrics's text (with the HTTP server's counters when given).
  std::string Metrics(const http::HttpCounters* http) const;
  // For HttpServer's counters in /metrics; null: none.
  void set_http(const http::HttpServer* http) { http_ = http; }

 private:
  // Submits one generation of `prompt` per choice, together (the prompt
  // prefilled once; all or none: a full queue is the first choice's 503),
  // each one's tokens and end driving its Answer; a client gone, or an
  // error in one, cancels them all.
  // Each choice under its own constraint from `constrain` when it is set
  // (response_format, tool calls).
  using MakeConstraint = std::function<std::unique_ptr<grammar::TokenConstraint>()>;
  void Generate(std::vector<std::unique_ptr<Answer>> choices, std::vector<int32_t> prompt,
                const Sampling& sampling, int64_t max_tokens, MakeConstraint constrain,
                const std::shared_ptr<http::Responder>& r);
  // /v1/messages and /v1/messages/count_tokens (`count_tokens`), /v1/responses
  // (serve/api_agents.cc).
  void Messages(const http::Request& req, const std::shared_ptr<http::Responder>& r,
                bool count_tokens);
  void Responses(const http::Request& req, const std::shared_ptr<http::Responder>& r);
  // `messages` rendered with `tools` and thinking switched (`thinking`
  // none: the format's default) into `prompt`, after checking the model
  // (`model` empty or the one served) and that the prompt and `*max_tokens`
  // (none: to the context) fit the context; `*max_tokens` then set, and
  // `*thinking_open`: whether the prompt leaves a think block open. With
  // tools, `*plan` holds the reply's calls to them (`choice`); a schema's
  // errors name it as tools[i].`schema_field`.
  std::optional<ApiError> Admit(const std::string& model, std::span<const ChatMessage> messages,
                                std::span<const ChatTool> tools, const ToolChoiceSpec& choice,
                                std::string_view schema_field, std::optional<bool> thinking,
                                std::optional<int64_t>* max_tokens, std::vector<int32_t>* prompt,
                                std::shared_ptr<const ToolCallPlan>* plan,
                                std::optional<bool>* thinking_open) const;
  // A fresh id: `prefix` then the time and a count.
  std::string NewId(const char* prefix);
  void Refuse(const std::shared_ptr<http::Responder>& r, int status, const std::string& json_body,
              const http::Headers& extra = {});
  void Count(const std::function<void(ApiCounters&)>& f);
  // The vocabulary's token mask index (response_format), made on first use.
  std::shared_ptr<const grammar::VocabIndex> Vocab();
  // The tools the prompt renders: none for a format with no tool syntax of
  // its own (the generic one, engine/tokenizer/chat_generic.h) when
  // tool_choice is none; else all.
  std::span<const ChatTool> RenderedTools(std::span<const ChatTool> tools, bool choice_none) const;
  // The constraint of a response_format on the reply's answer (after its
  // reasoning, beside the tools' calls with tool_choice auto: AnswerFormat;
  // ended within `max_tokens`), else of the tools; none: unset.
  // `thinking_open`: the prompt left the reasoning open.
  // A response_format (or a thinking budget: `field`) beside calls a
  // family's markup cannot hold together: harmony's (its answer is the
  // final channel, where no call comes) and the generic format's (the whole
  // reply is one JSON object already). A 400 naming `field`, else none.
  static std::optional<ApiError> NotBesideCalls(const ToolCallPlan* plan, std::string_view field);
  MakeConstraint Constrain(std::shared_ptr<const grammar::JsonGrammar> json_format,
                           std::shared_ptr<const ToolCallPlan> tool_plan, int64_t max_tokens,
                           bool thinking_open = false);

  const ApiOptions o_;
  const Tokenizer& tok_;
  const ChatFormat* chat_;
  const std::vector<int32_t> end_of_turn_;
  Scheduler& scheduler_;
  const http::HttpServer* http_ = nullptr;
  std::atomic<uint64_t> next_id_{0};
  mutable std::mutex mu_;  // guards counters_
  ApiCounters counters_;
  std::once_flag vocab_once_;
  std::shared_ptr<const grammar::VocabIndex> vocab_;
};

// The chat page served at "/": one HTML file with its script, built in.
extern const char* const kChatPage;

}  // namespace waste::serve
