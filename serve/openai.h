// OpenAI's API as waste serve speaks it: request bodies parsed and checked
// into plain structs, the objects and server-sent events of the answers, the
// log-probabilities of a step and the text of a reply as its tokens arrive.
// Pure functions over JSON and the tokenizer: no sockets, no HTTP (that is
// http/server.h), no model (the caller runs it).
//
//   POST /v1/chat/completions   ParseChatRequest -> ChatRequest
//   POST /v1/completions        ParseCompletionRequest -> CompletionRequest
//   GET  /v1/models             ModelList
//
// Requests are untrusted: a body that is not UTF-8 is refused saying so
// (400, code invalid_utf8), unknown fields are ignored, a known field of the
// wrong type or outside its range is refused with OpenAI's error object
// (ApiError: status 400, type invalid_request_error, param naming the
// field). What waste does not do is refused by name, never ignored: best_of
// other than 1, a prompt of token ids, roles other than system (or developer),
// user, assistant and tool, tools other than functions, the legacy functions
// and function_call, chat_template_kwargs other than enable_thinking and
// thinking. A function's strict = true is honoured (its arguments are held
// to the schema as every tool's are) after its parameters are checked
// against OpenAI's strict rules (fields::CheckStrictParameters).
//
// n (1 to 128, as OpenAI) asks for n choices of one prompt, each sampled on
// its own: with a seed, choice i's is derived from it (SamplerFor), so the
// same request gives the same choices; the answers carry each choice's index,
// whole (choices in index order) or streamed (each chunk one choice's), the
// usage counting the prompt once and every choice's completion tokens.
//
// Sampling follows OpenAI's meaning (engine/model/sampler.h computes it):
// logit_bias (token id as a string -> [-100, 100], at most 300) is added to
// the logits, and presence_penalty and frequency_penalty ([-2, 2]) are taken
// off the tokens of this reply so far (count * frequency + (count > 0) *
// presence); then temperature scales them (0: greedy, still after bias and
// penalties), top_k keeps the k most likely, top_p the smallest set reaching
// that probability; the same seed gives the same tokens. Log-probabilities
// are of the model's own distribution: log-softmax of the raw logits, before
// bias, penalties, temperature, top_k and top_p (as vLLM reports by
// default), so they do not depend on how the token was drawn.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/json_schema.h"
#include "engine/model/sampler.h"
#include "engine/model/stop.h"
#include "engine/tokenizer/chat.h"
#include "engine/tokenizer/tokenizer.h"

namespace waste::serve {

// ------------------------------------------------------------------ errors

// An answer that is an error: the HTTP status and OpenAI's error object.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request's field; empty: null
  std::string code;   // empty: null
  // {"error": {"message", "type", "param", "code"}}, invalid UTF-8 in the
  // message or param (quoted from a request) as U+FFFD, so it always dumps.
  nlohmann::json ToJson() const;
};

ApiError BadRequest(std::string message, std::string param = "", std::string code = "");
// 404, code model_not_found.
ApiError UnknownModel(const std::string& model);
// 400, code context_length_exceeded: prompt and reply do not fit the context.
ApiError ContextExceeded(int64_t prompt_tokens, int64_t max_tokens, int64_t context);
// 413: a body over `limit` bytes.
ApiError BodyTooLarge(uint64_t limit);
// 503, type server_error: the queue is full (send Retry-After with it).
ApiError Busy();

// ---------------------------------------------------------------- requests

struct Sampling {
  std::optional<int64_t>
      max_tokens;                 // max_completion_tokens, else max_tokens; none: to the context
  double temperature = 1.0;       // [0, 2]; OpenAI's default 1
  double top_p = 1.0;             // (0, 1]
  int64_t top_k = 0;              // 0: no limit (not OpenAI's; llama.cpp's and vLLM's)
  std::optional<uint64_t> seed;   // none: the server picks one
  std::vector<std::string> stop;  // at most 4, none empty
  bool logprobs = false;
  int64_t top_logprobs = 0;  // [0, 20]; chat: needs logprobs; completions: its "logprobs" int
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with usage
  // Not OpenAI's (llama.cpp's server and vLLM take it): the end-of-turn ids
  // do not end the reply, which runs to max_tokens or a stop string. For
  // benchmarks on random-weight models, whose replies may end at once.
  bool ignore_eos = false;
  std::vector<std::pair<int32_t, float>> logit_bias;  // by id; CheckLogitBias checks the ids
  double presence_penalty = 0;                        // [-2, 2]
  double frequency_penalty = 0;                       // [-2, 2]
  int64_t n = 1;                                      // choices, [1, 128]

  // The sampler's options for choice `choice` (0 to n - 1): the request's
  // seed for choice 0 and one derived from it and the index for the others;
  // `fallback_seed` when the request gave none (the caller gives each choice
  // its own).
  SamplerOptions SamplerFor(uint64_t fallback_seed, int choice = 0) const;
};

// OpenAI's tool_choice: none, auto, required, or one function by name.
struct ToolChoice {
  enum class Mode { kNone, kAuto, kRequired, kFunction };
  Mode mode = Mode::kAuto;
  std::string function;  // kFunction's name, one of the tools offered
};

struct ChatRequest {
  std::string model;
  // Roles system ("developer" read as system), user, assistant (content null
  // or absent beside tool_calls: empty) and tool (a result: tool_call_id one
  // of the calls of the assistant message before the results; name is that
  // call's function).
  std::vector<ChatMessage> messages;
  Sampling sampling;
  // `tools`: functions offered ({"type": "function", "function": {name,
  // description, parameters}}), the parameters' keys in the client's order.
  std::vector<ChatTool> tools;
  ToolChoice tool_choice;  // absent: auto
  bool parallel_tool_calls = true;
  // chat_template_kwargs' enable_thinking (or thinking): none, the format's default.
  std::optional<bool> thinking;
  std::string reasoning_effort;  // low, medium or high; empty: the format's
  // response_format json_object (any object) or json_schema (its schema,
  // strict or not; what engine/grammar does not support refused by name);
  // null: text.
  std::shared_ptr<const grammar::JsonGrammar> response_format;
};

struct CompletionRequest {
  std::string model;
  std::string prompt;  // a string, or a list of one string
  Sampling sampling;
};

// Parses and checks a body. The error, if any, is the answer to send.
std::optional<ApiError> ParseChatRequest(std::string_view body, ChatRequest* out);
std::optional<ApiError> ParseCompletionRequest(std::string_view body, CompletionRequest* out);
// logit_bias's ids against the model's vocabulary (the parse cannot know
// it): one outside [0, vocab) is refused naming its key.
std::optional<ApiError> CheckLogitBias(const Sampling& s, int64_t vocab);

// A completion's prompt as ids: the chat format's bos (the template's, when
// the container has chat.json) then the prompt as plain text, special-token
// text included.
std::vector<int32_t> CompletionPrompt(const ChatFormat* chat, const Tokenizer& tok,
                                      const std::string& prompt);

// ----------------------------------------------------------- logprobs

struct TokenLogprob {
  int32_t id = 0;
  double logprob = 0;
};
struct StepLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // the top_n most likely, most likely first (lowest id on ties)
};
// log-softmax of `logits` in double: the chosen token's and the top_n best.
StepLogprobs LogprobsOf(std::span<const float> logits, int32_t chosen, int top_n);

// ------------------------------------------------------------ reply text

// The text of a reply as its tokens arrive. An end-of-turn id ends it and
// shows nothing; another special token shows nothing (no markup leaks into
// the reply); a stop string ends it and neither it nor anything after it is
// ever returned; text that may be the start of a stop string, and a token
// that ends inside a UTF-8 character, wait for the next token. With
// `reply_after` (chat.json's: harmony's final channel, K3's response) only
// the tokens after that markup are the reply's, or every one when `opening`
// (chat.json's open) ends with it (ReplyFilter). `tok` must outlive it. A caller that handles the
// end-of-turn ids itself (and never feeds them) calls Flush at the end either way.
class ReplyText {
 public:
  ReplyText(const Tokenizer& tok, std::vector<int32_t> end_of_turn, std::vector<std::string> stops,
            std::string_view reply_after = {}, std::string_view opening = {});
  // The text now safe to send (often empty). Nothing once done().
  std::string Feed(int32_t id);
  // At the end of generation: what is still held back (bytes that never
  // completed a character become U+FFFD).
  std::string Flush();
  bool done() const { return done_; }  // an end-of-turn id or a stop string ended the reply
  // The stop string that ended the reply; empty when none did.
  const std::string& stop_sequence() const { return stop_.matched(); }

 private:
  const Tokenizer& tok_;
  std::vector<int32_t> end_;
  ReplyFilter shown_;
  StopMatcher stop_;
  std::string partial_;  // the bytes of an unfinished UTF-8 character
  bool done_ = false;
};

// The length of the longest prefix of `s` that ends on a whole UTF-8
// character (what can be sent now); the rest is at most 3 bytes.
size_t CompleteUtf8Prefix(std::string_view s);

// --------------------------------------------------------------- answers

enum class Finish { kStop, kLength, kToolCalls };
const char* FinishName(Finish f);  // "stop", "length", "tool_calls"

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  nlohmann::json ToJson() const;  // with total_tokens
};

// What every object of one answer shares.
struct AnswerHead {
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

// A generated token with its log-probabilities (for the logprobs objects).
struct LoggedToken {
  int32_t id = 0;
  StepLogprobs logprobs;
};

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
nlohmann::json ChatLogprobs(const Tokenizer& tok, std::span<const LoggedToken> tokens);
// Completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}; the
// offsets count code points from `offset0` (the text before the first token).
nlohmann::json CompletionLogprobs(const Tokenizer& tok, std::span<const LoggedToken> tokens,
                                  int64_t offset0);

// A chat reply as its whole answer shows it (serve/reply.h's events gathered).
struct ChatReply {
  std::string content{};
  std::string reasoning{};                 // the model's thinking; empty: none
  std::vector<ChatToolCall> tool_calls{};  // id, name, arguments (a JSON object's text)
};

// Whole answers: one choice each (`index`, 0 to n - 1), then the answer over
// them (in index order). `logprobs`: null, or ChatLogprobs / CompletionLogprobs.
// Chat: message {role, content, reasoning_content (only when there was
// reasoning), tool_calls [{id, type "function", function {name, arguments}}]
// (only when there were calls)}; content null when there were calls and no
// text, as DeepSeek's API and vLLM answer.
nlohmann::json ChatChoice(int index, const ChatReply& reply, const nlohmann::json& logprobs,
                          Finish finish);
nlohmann::json TextChoice(int index, const std::string& text, const nlohmann::json& logprobs,
                          Finish finish);
nlohmann::json ChatCompletion(const AnswerHead& h, nlohmann::json choices, const Usage& usage);
nlohmann::json TextCompletion(const AnswerHead& h, nlohmann::json choices, const Usage& usage);

// Streamed: each chunk is one choice's (`choice`, its index). Chat, per
// choice: ChatRoleChunk first (delta role assistant, content ""), then
// ChatContentChunk for each piece of text, ChatReasoningChunk for each piece
// of thinking (delta reasoning_content), per call ChatToolCallChunk once
// (delta tool_calls [{index: `call`, id, type "function", function {name,
// arguments ""}}]) then ChatToolArgsChunk per piece of its arguments
// ([{index, function {arguments}}]), ChatFinishChunk (empty delta,
// finish_reason); once every choice has finished, UsageChunk when
// include_usage (choices empty), then kSseDone.
nlohmann::json ChatRoleChunk(const AnswerHead& h, int choice);
nlohmann::json ChatContentChunk(const AnswerHead& h, int choice, const std::string& text,
                                const nlohmann::json& logprobs);
nlohmann::json ChatReasoningChunk(const AnswerHead& h, int choice, const std::string& text,
                                  const nlohmann::json& logprobs);
nlohmann::json ChatToolCallChunk(const AnswerHead& h, int choice, int call, const std::string& id,
                                 const std::string& name, const nlohmann::json& logprobs);
nlohmann::json ChatToolArgsChunk(const AnswerHead& h, int choice, int call,
                                 const std::string& arguments, const nlohmann::json& logprobs);
nlohmann::json ChatFinishChunk(const AnswerHead& h, int choice, Finish finish);
// Streamed completions: TextChunk for each piece, each choice's last with its finish.
nlohmann::json TextChunk(const AnswerHead& h, int choice, const std::string& text,
                         const nlohmann::json& logprobs, std::optional<Finish> finish);
// `object`: "chat.completion.chunk" or "text_completion".
nlohmann::json UsageChunk(const AnswerHead& h, const char* object, const Usage& usage);

// One server-sent event: "data: " + the object's JSON + "\n\n" (invalid
// UTF-8, if any reached it, as U+FFFD).
std::string SseEvent(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// GET /v1/models: {"object": "list", "data": [{id, object: "model", created, owned_by}]}.
nlohmann::json ModelList(std::span<const std::string> models, int64_t created);

}  // namespace waste::serve
