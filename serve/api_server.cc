#include "serve/api_server.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "serve/openai.h"

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

// One request's answer, shared by the scheduler's callbacks (its thread)
// and the handler that made it (the loop thread, before submitting).
struct ApiServer::Reply {
  bool chat = true;
  Sampling sampling;
  AnswerHead head;
  std::shared_ptr<http::Responder> r;
  ReplyText text;
  std::string whole;                 // a whole answer's text so far
  std::vector<LoggedToken> logged;   // a whole answer's tokens, or a stream's not yet sent
  std::shared_ptr<const grammar::JsonGrammar> format;  // response_format; null: text
  int64_t code_points_sent = 0;      // a streamed completion's text_offset
  double submitted = 0;
  Reply(const Tokenizer& tok, std::vector<int32_t> end, std::vector<std::string> stops,
        std::string_view reply_after, std::string_view opening)
      : text(tok, std::move(end), std::move(stops), reply_after, opening) {}
};

ApiServer::ApiServer(ApiOptions o, const Tokenizer& tok, const ChatFormat* chat,
                     std::vector<int32_t> end_of_turn, Scheduler& scheduler)
    : o_(std::move(o)),
      tok_(tok),
      chat_(chat),
      end_of_turn_(std::move(end_of_turn)),
      scheduler_(scheduler) {}

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
  if (api && !o_.api_key.empty()) {
    const auto auth = req.Header("Authorization");
    const std::string_view bearer = "Bearer ";
    if (!auth || auth->substr(0, bearer.size()) != bearer ||
        !SameKey(auth->substr(bearer.size()), o_.api_key)) {
      ApiError e = BadRequest("Incorrect API key provided: pass it as 'Authorization: Bearer KEY'.",
                              "", "invalid_api_key");
      e.status = 401;
      return Refuse(r, 401, e.ToJson().dump(), {{"WWW-Authenticate", "Bearer"}});
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
    std::shared_ptr<const grammar::JsonGrammar> format;
    if (chat) {
      ChatRequest q;
      if (auto e = ParseChatRequest(req.body, &q)) return Refuse(r, e->status, e->ToJson().dump());
      if (!chat_)
        return Refuse(r, 400,
                      BadRequest("this model's container has no chat format (chat.json); use "
                                 "/v1/completions")
                          .ToJson()
                          .dump());
      auto ids = RenderChat(*chat_, tok_, q.messages);
      if (!ids.ok())
        return Refuse(r, 400, BadRequest(ids.status().message(), "messages").ToJson().dump());
      prompt = std::move(*ids);
      model = q.model, sampling = q.sampling, format = q.response_format;
      // The constraint holds from the reply's first token: a format whose
      // reply comes after channel markup (harmony's, K3's) cannot write it.
      const std::string_view after = chat_->reply_after, open = chat_->open;
      if (format && !after.empty() &&
          (open.size() < after.size() || open.substr(open.size() - after.size()) != after))
        return Refuse(r, 400,
                      BadRequest("response_format is not supported yet for a chat format whose "
                                 "reply follows channel markup (harmony, K3)",
                                 "response_format", "unsupported_value")
                          .ToJson()
                          .dump());
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
    const int64_t room = o_.context - static_cast<int64_t>(prompt.size());
    // Without max_tokens the reply may fill the context; it needs room for one token.
    const int64_t max_tokens = sampling.max_tokens.value_or(std::max<int64_t>(room, 1));
    if (max_tokens > room) {
      const ApiError e = ContextExceeded(static_cast<int64_t>(prompt.size()), max_tokens, o_.context);
      return Refuse(r, e.status, e.ToJson().dump());
    }
    // A chat's reply is its final channel where the format has channels
    // (harmony's final, K3's response); a completion's is the raw text.
    const bool channels = chat && chat_;
    auto reply = std::make_shared<Reply>(
        tok_, sampling.ignore_eos ? std::vector<int32_t>{} : end_of_turn_, sampling.stop,
        channels ? chat_->reply_after : std::string(), channels ? chat_->open : std::string());
    reply->chat = chat;
    reply->format = std::move(format);
    reply->sampling = sampling;
    reply->sampling.max_tokens = max_tokens;
    reply->head = {(chat ? "chatcmpl-" : "cmpl-") + std::to_string(UnixNow()) + "-" +
                       std::to_string(next_id_++),
                   UnixNow(), o_.model_name};
    reply->r = r;
    Generate(std::move(reply), std::move(prompt), r);
  } else if (known("/") || known("/health") || known("/metrics") || known("/v1/models") ||
             known("/v1/chat/completions") || known("/v1/completions")) {
    ApiError e = BadRequest("method " + req.method + " is not allowed on " + path);
    e.status = 405;
    Refuse(r, 405, e.ToJson().dump());
  } else {
    ApiError e = BadRequest("no route " + req.method + " " + path);
    e.status = 404;
    Refuse(r, 404, e.ToJson().dump());
  }
}

void ApiServer::Generate(std::shared_ptr<Reply> reply, std::vector<int32_t> prompt,
                         const std::shared_ptr<http::Responder>& r) {
  auto g = std::make_shared<Generation>();
  g->prompt.assign(prompt.begin(), prompt.end());
  g->max_tokens = static_cast<int>(*reply->sampling.max_tokens);
  g->sampling = reply->sampling.SamplerFor(std::random_device{}());
  if (!reply->sampling.ignore_eos) g->end_tokens.assign(end_of_turn_.begin(), end_of_turn_.end());
  if (reply->format)
    g->constraint = std::make_unique<grammar::JsonTokenConstraint>(reply->format, Vocab());
  const int top_n = reply->sampling.logprobs || !reply->chat
                        ? static_cast<int>(reply->sampling.top_logprobs)
                        : 0;
  const bool want_logprobs = reply->chat ? reply->sampling.logprobs : reply->sampling.top_logprobs > 0;
  // The logprobs of the tokens in `logged`, in the route's shape; null without logprobs.
  auto logprobs_of = [this, want_logprobs](Reply& rep, int64_t offset) -> json {
    if (!want_logprobs) return nullptr;
    return rep.chat ? ChatLogprobs(tok_, rep.logged) : CompletionLogprobs(tok_, rep.logged, offset);
  };
  auto send_piece = [logprobs_of](Reply& rep, const std::string& piece) {
    if (piece.empty() && rep.logged.empty()) return;
    const json lp = logprobs_of(rep, rep.code_points_sent);
    rep.r->Write(SseEvent(rep.chat ? ChatContentChunk(rep.head, piece, lp)
                                   : TextChunk(rep.head, piece, lp, std::nullopt)));
    rep.logged.clear();
    for (unsigned char ch : piece) rep.code_points_sent += (ch & 0xC0) != 0x80;
  };
  std::weak_ptr<Reply> weak = reply;
  g->on_token = [reply, top_n, want_logprobs, send_piece](int id, std::span<const float> logits) {
    Reply& rep = *reply;
    const std::string piece = rep.text.Feed(id);
    if (want_logprobs) rep.logged.push_back({id, LogprobsOf(logits, id, top_n)});
    if (rep.sampling.stream) {
      if (!piece.empty()) send_piece(rep, piece);
    } else {
      rep.whole += piece;
    }
    return !rep.text.done() && !rep.r->cancelled();
  };
  const uint64_t prompt_tokens = prompt.size();
  g->on_end = [this, reply, send_piece, logprobs_of, prompt_tokens](const GenerationEnd& end) {
    Reply& rep = *reply;
    const double now = Now();
    Count([&](ApiCounters& c) {
      if (end.reason == EndReason::kError) ++c.failed;
      if (end.reason == EndReason::kCancelled) ++c.cancelled;
      if (end.completion_tokens > 0) {
        c.first_token_seconds += end.first_token_seconds;
        ++c.first_tokens;
        c.decode_seconds += std::max(0.0, now - rep.submitted - end.first_token_seconds);
        c.decode_tokens += static_cast<uint64_t>(end.completion_tokens - 1);
      }
    });
    if (end.reason == EndReason::kCancelled && rep.r->cancelled()) return;  // nobody to tell
    if (end.reason == EndReason::kError || end.reason == EndReason::kCancelled) {
      const std::string message = end.reason == EndReason::kError
                                      ? end.error
                                      : std::string("the server is stopping");
      ApiError e = BadRequest(message);
      e.status = end.reason == EndReason::kError ? 500 : 503;
      e.type = "server_error";
      if (rep.sampling.stream) {
        rep.r->Write(SseEvent(e.ToJson()));
        rep.r->Write(kSseDone);
        rep.r->End();
      } else {
        rep.r->Send(e.status, "application/json", e.ToJson().dump());
      }
      return;
    }
    const std::string rest = rep.text.Flush();
    const Finish finish = end.reason == EndReason::kLength && !rep.text.done() ? Finish::kLength
                                                                                : Finish::kStop;
    const Usage usage{static_cast<int64_t>(prompt_tokens), end.completion_tokens};
    if (rep.sampling.stream) {
      if (!rest.empty() || !rep.logged.empty()) send_piece(rep, rest);
      const char* object = rep.chat ? "chat.completion.chunk" : "text_completion";
      rep.r->Write(SseEvent(rep.chat ? ChatFinishChunk(rep.head, finish)
                                     : TextChunk(rep.head, "", nullptr, finish)));
      if (rep.sampling.include_usage) rep.r->Write(SseEvent(UsageChunk(rep.head, object, usage)));
      rep.r->Write(kSseDone);
      rep.r->End();
    } else {
      rep.whole += rest;
      const json lp = logprobs_of(rep, 0);
      const json body = rep.chat ? ChatCompletion(rep.head, rep.whole, lp, finish, usage)
                                 : TextCompletion(rep.head, rep.whole, lp, finish, usage);
      rep.r->Send(200, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace));
    }
  };
  std::weak_ptr<Generation> weak_g = g;
  r->OnCancel([weak_g] {
    if (auto gen = weak_g.lock()) gen->cancelled = true;
  });
  reply->submitted = Now();
  if (reply->sampling.stream) {
    r->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    if (reply->chat) r->Write(SseEvent(ChatRoleChunk(reply->head)));
  }
  if (!scheduler_.Submit(g)) {
    const ApiError e = Busy();
    if (reply->sampling.stream) {
      r->Write(SseEvent(e.ToJson()));
      r->Write(kSseDone);
      r->End();
      Count([](ApiCounters& c) { ++c.refused; });
    } else {
      Refuse(r, e.status, e.ToJson().dump(), {{"Retry-After", "1"}});
    }
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
  line("waste_serve_requests_total", "counter", "Requests by route.", c.chat,
       "{route=\"chat\"}");
  more("waste_serve_requests_total", "{route=\"completions\"}", c.completions);
  more("waste_serve_requests_total", "{route=\"other\"}", c.other);
  line("waste_serve_refused_total", "counter", "Requests answered with an error before generating.",
       c.refused);
  line("waste_serve_failed_total", "counter", "Generations that ended in an error.", c.failed);
  line("waste_serve_cancelled_total", "counter", "Generations whose client went away.", c.cancelled);
  line("waste_serve_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
       s.prompt_tokens);
  line("waste_serve_reused_tokens_total", "counter",
       "Prompt tokens taken from a kept conversation state, not run again.", s.reused_tokens);
  line("waste_serve_completion_tokens_total", "counter", "Tokens generated.", s.completion_tokens);
  line("waste_serve_queue_length", "gauge", "Requests waiting for a place in the batch.", s.queued);
  line("waste_serve_running", "gauge", "Generations in the batch.", s.running);
  line("waste_serve_steps_total", "counter", "Forward steps run.", s.steps);
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
    line("waste_serve_http_errors_total", "counter",
         "Requests the HTTP layer answered 400, 408, 413 or 431.", http->errors);
    line("waste_serve_http_open_connections", "gauge", "Connections open now.", http->open);
  }
  return out;
}

}  // namespace waste::serve
