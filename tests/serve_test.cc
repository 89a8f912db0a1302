// waste serve's API in process (serve/api_server.h over HttpServer and a
// Scheduler) on a synthetic model, through raw sockets: a greedy chat reply
// is the model's own greedy continuation of its rendered prompt, alone or
// beside others; the streamed answer's server-sent events byte for byte;
// errors in OpenAI's shape while the server goes on; the API key; a client
// that leaves cancels its generation; a full queue answers 503 with
// Retry-After; a follow-up turn resumes from the kept state.
#include "serve/api_server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/tokenizer/chat.h"
#include "tests/http_client.h"
#include "tests/support/tiny_engine.h"
#include "tests/test_util.h"

namespace waste::serve {
namespace {

using json = nlohmann::json;
using waste::testing::HttpClient;
using namespace std::chrono_literals;

struct Answer {
  int status = 0;
  std::string head, body;
};

Answer Split(const std::string& raw) {
  Answer a;
  const size_t at = raw.find("\r\n\r\n");
  a.head = raw.substr(0, at == std::string::npos ? raw.size() : at + 4);
  a.body = at == std::string::npos ? "" : raw.substr(at + 4);
  if (raw.size() > 12) a.status = std::atoi(raw.substr(9, 3).c_str());
  return a;
}

std::string Post(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}, {}); }
  void TearDown() override { Stop(); }

  void Start(SchedulerOptions so, ApiOptions ao) {
    waste::testing::TinyEngineOptions o;
    o.model.threads = 2;
    auto e = waste::testing::TinyEngine::Create("tiny-kimi", waste::testing::ScratchDir(), o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    engine_ = std::move(*e);
    ASSERT_TRUE(engine_->container().chat().has_value());
    auto tok = Tokenizer::Load(engine_->dir());
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    tok_ = std::make_unique<Tokenizer>(std::move(*tok));
    auto end = EndOfTurnIds(engine_->container(), *tok_);
    ASSERT_TRUE(end.ok()) << end.status().message();
    end_ = *end;
    Restart(so, ao);
  }

  // A fresh scheduler, API and HTTP server over the same model.
  void Restart(SchedulerOptions so, ApiOptions ao) {
    Stop();
    so.context = ao.context = 512;
    scheduler_ = std::make_unique<Scheduler>(so, engine_->model().config().vocab, stepper_);
    if (ao.model_name.empty()) ao.model_name = "tiny";
    api_ = std::make_unique<ApiServer>(ao, *tok_, &*engine_->container().chat(), end_, *scheduler_);
    http::HttpOptions ho;
    ho.port = 0;
    auto h =
        http::HttpServer::Start(ho, [this](http::Request r, std::shared_ptr<http::Responder> w) {
          api_->Handle(std::move(r), std::move(w));
        });
    ASSERT_TRUE(h.ok()) << h.status().message();
    http_ = std::move(*h);
  }

  void Stop() {
    if (http_) http_->Stop();
    if (scheduler_) scheduler_->Stop();
    http_.reset();
    api_.reset();
    scheduler_.reset();
  }

  // The timeout only guards against a hang: under ThreadSanitizer, with
  // another suite on the other core, four batched replies took over 10 s.
  Answer Call(const std::string& request, std::chrono::milliseconds timeout = 120s) {
    HttpClient c(http_->port());
    EXPECT_TRUE(c.connected());
    c.Send(request);
    return Split(c.ReadAnswer(timeout));
  }

  // The model's own greedy reply to `prompt`, up to an end of turn (not
  // included; with past_end, on through it) or n tokens. Only while no
  // request runs: the Model is not shared between threads.
  std::vector<int> Greedy(const std::vector<int32_t>& prompt, int n, bool past_end = false) {
    Session s = engine_->model().NewSession(512);
    std::vector<float> l(engine_->model().config().vocab);
    std::vector<int> out, next(prompt.begin(), prompt.end());
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(engine_->model().Forward(s, next, l.data()).ok());
      const int t = static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
      if (!past_end && std::find(end_.begin(), end_.end(), t) != end_.end()) break;
      out.push_back(t);
      next = {t};
    }
    return out;
  }

  std::vector<int32_t> Rendered(const json& messages) {
    std::vector<ChatMessage> m;
    for (const auto& x : messages) m.push_back({x["role"], x["content"]});
    auto ids = RenderChat(*engine_->container().chat(), *tok_, m);
    EXPECT_TRUE(ids.ok());
    return *ids;
  }

  // Each token's bytes in a chat answer's logprobs.
  std::vector<std::string> TokenBytes(const json& logprobs) {
    std::vector<std::string> out;
    for (const auto& t : logprobs["content"]) {
      std::string b;
      for (int v : t["bytes"]) b.push_back(static_cast<char>(v));
      out.push_back(b);
    }
    return out;
  }
  std::vector<std::string> TokenBytes(const std::vector<int>& ids) {
    std::vector<std::string> out;
    for (int id : ids) out.emplace_back(tok_->TokenBytes(id));
    return out;
  }

  std::unique_ptr<waste::testing::TinyEngine> engine_;
  std::unique_ptr<Tokenizer> tok_;
  std::vector<int32_t> end_;
  // The model stepped directly, in place of an Engine.
  struct ModelStepper : Stepper {
    ServeTest* t;
    explicit ModelStepper(ServeTest* test) : t(test) {}
    Status Step(std::span<const Model::BatchItem> items) override {
      return t->engine_->model().ForwardBatch(items);
    }
    Result<Session> NewSession(int max_context) override {
      return t->engine_->model().NewSession(max_context);
    }
    bool attached() const override { return true; }
  } stepper_{this};
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<http::HttpServer> http_;
};

json Chat(const std::string& text, int max_tokens) {
  return {{"model", "tiny"},
          {"messages", json::array({{{"role", "user"}, {"content", text}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"logprobs", true}};
}

TEST_F(ServeTest, AGreedyChatReplyIsTheModelsOwnAloneOrBesideOthers) {
  const std::vector<std::string> texts = {"hello there", "a longer question about the weather",
                                          "<|im_end|> is text here", "four"};
  std::vector<std::vector<int>> want;
  for (const auto& t : texts) want.push_back(Greedy(Rendered(Chat(t, 6)["messages"]), 6));
  auto check = [&](size_t i, const Answer& a) {
    ASSERT_EQ(a.status, 200) << a.head << a.body;
    const json j = json::parse(a.body);
    EXPECT_EQ(j["object"], "chat.completion");
    EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
    EXPECT_EQ(TokenBytes(j["choices"][0]["logprobs"]), TokenBytes(want[i])) << texts[i];
    EXPECT_EQ(j["usage"]["completion_tokens"], want[i].size());
    EXPECT_EQ(j["usage"]["prompt_tokens"], Rendered(Chat(texts[i], 6)["messages"]).size());
    EXPECT_EQ(j["choices"][0]["finish_reason"], want[i].size() == 6 ? "length" : "stop");
  };
  for (size_t i = 0; i < texts.size(); ++i)
    check(i, Call(Post("/v1/chat/completions", Chat(texts[i], 6).dump())));
  // All at once: one batch (parallel 4), fresh states (nothing kept).
  SchedulerOptions so;
  so.prefix_cache_bytes = 0;
  Restart(so, {});
  std::vector<Answer> answers(texts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < texts.size(); ++i)
    threads.emplace_back([&, i] { answers[i] = Call(Post("/v1/chat/completions", Chat(texts[i], 6).dump())); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < texts.size(); ++i) check(i, answers[i]);
}

TEST_F(ServeTest, IgnoreEosRunsTheReplyThroughItsEndOfTurn) {
  // The random model's replies do not end early, so one of its own tokens is
  // made an end of turn: the third of a reply, which then ends after two.
  const int n = 10;
  const json req = Chat("end here", n);
  const std::vector<int> full = Greedy(Rendered(req["messages"]), n);
  ASSERT_EQ(static_cast<int>(full.size()), n);
  const auto first = std::find(full.begin(), full.end(), full[2]) - full.begin();
  end_.push_back(full[2]);
  Restart({}, {});
  const std::vector<int> cut(full.begin(), full.begin() + first);
  for (bool ignore : {false, true}) {
    json r = req;
    r["ignore_eos"] = ignore;
    const Answer a = Call(Post("/v1/chat/completions", r.dump()));
    ASSERT_EQ(a.status, 200) << a.head << a.body;
    const json j = json::parse(a.body);
    EXPECT_EQ(j["usage"]["completion_tokens"], ignore ? n : first) << ignore;  // the end not counted
    EXPECT_EQ(j["choices"][0]["finish_reason"], ignore ? "length" : "stop") << ignore;
    EXPECT_EQ(TokenBytes(j["choices"][0]["logprobs"]), TokenBytes(ignore ? full : cut)) << ignore;
  }
}

// A random-weight model under response_format: every reply is whole JSON of
// the schema, ended by the grammar; logprobs stay the model's own (its
// favourite tokens are not all ones the schema allows).
TEST_F(ServeTest, AResponseFormatKeepsTheReplyInsideItsSchema) {
  const json schema = json::parse(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":5},"n":{"type":"integer","minimum":0,"maximum":99},
      "ok":{"type":"boolean"}},"required":["name","n","ok"],"additionalProperties":false})");
  for (int seed = 0; seed < 8; ++seed) {
    json req = Chat("give me json", 200);
    req["temperature"] = 1;
    req["seed"] = seed;
    req["top_logprobs"] = 20;
    req["response_format"] = {
        {"type", "json_schema"},
        {"json_schema", {{"name", "t"}, {"strict", true}, {"schema", schema}}}};
    const Answer a = Call(Post("/v1/chat/completions", req.dump()));
    ASSERT_EQ(a.status, 200) << a.head << a.body;
    const json j = json::parse(a.body);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop") << seed;
    const std::string text = j["choices"][0]["message"]["content"];
    ASSERT_TRUE(json::accept(text)) << seed << ": " << text;
    const json v = json::parse(text);
    ASSERT_TRUE(v["name"].is_string()) << text;
    size_t code_points = 0;
    for (unsigned char c : v["name"].get<std::string>()) code_points += (c & 0xC0) != 0x80;
    EXPECT_LE(code_points, 5u) << text;
    EXPECT_TRUE(v["n"].is_number_integer() && v["n"] >= 0 && v["n"] <= 99) << text;
    EXPECT_TRUE(v["ok"].is_boolean()) << text;
    EXPECT_EQ(v.size(), 3u) << text;
    // The first token may only open the object (or be white space); the
    // model's own top 20 hold others.
    const json& first = j["choices"][0]["logprobs"]["content"][0];
    bool other = false;
    for (const json& t : first["top_logprobs"])
      other =
          other || t["token"].get<std::string>().find_first_not_of("{ \n\t\r") != std::string::npos;
    EXPECT_TRUE(other) << first.dump();
    EXPECT_LT(first["logprob"].get<double>(), 0.0);
  }
  json bad = Chat("x", 5);
  bad["response_format"] = {
      {"type", "json_schema"},
      {"json_schema", {{"name", "t"}, {"schema", {{"oneOf", json::array()}}}}}};
  const Answer refused = Call(Post("/v1/chat/completions", bad.dump()));
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.body.find("unsupported keyword 'oneOf' at #"), std::string::npos)
      << refused.body;
}

TEST_F(ServeTest, AStreamedAnswerIsServerSentEventsEndingInDone) {
  json req = Chat("stream this", 5);
  const std::vector<int> want = Greedy(Rendered(req["messages"]), 5);
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  HttpClient c(http_->port());
  c.Send(Post("/v1/chat/completions", req.dump()));
  const std::string head = c.ReadUntil("\r\n\r\n", 5000ms);
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Type: text/event-stream\r\n"), std::string::npos) << head;
  EXPECT_NE(head.find("Transfer-Encoding: chunked\r\n"), std::string::npos) << head;
  const std::string chunks = c.ReadUntil("\r\n0\r\n\r\n", 10000ms);
  bool framed = false;
  const std::string body = waste::testing::Dechunk(chunks, &framed);
  ASSERT_TRUE(framed) << chunks;
  // Events: data: {...}\n\n, the last data: [DONE]\n\n.
  std::vector<json> events;
  size_t at = 0;
  while (at < body.size()) {
    ASSERT_EQ(body.compare(at, 6, "data: "), 0) << body.substr(at);
    const size_t end = body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos);
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end + 2;
    if (data == "[DONE]") {
      EXPECT_EQ(at, body.size()) << "bytes after [DONE]";
      break;
    }
    events.push_back(json::parse(data));
  }
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  std::vector<std::string> bytes;
  for (size_t i = 1; i + 2 < events.size(); ++i) {
    EXPECT_EQ(events[i]["object"], "chat.completion.chunk");
    text += events[i]["choices"][0]["delta"]["content"].get<std::string>();
    for (const auto& b : TokenBytes(events[i]["choices"][0]["logprobs"])) bytes.push_back(b);
  }
  EXPECT_EQ(bytes, TokenBytes(want));
  // The same text as the answer given whole.
  json whole = req;
  whole.erase("stream");
  whole.erase("stream_options");
  const Answer w = Call(Post("/v1/chat/completions", whole.dump()));
  ASSERT_EQ(w.status, 200);
  EXPECT_EQ(text, json::parse(w.body)["choices"][0]["message"]["content"]);
  const json& finish = events[events.size() - 2];
  EXPECT_EQ(finish["choices"][0]["finish_reason"], want.size() == 5 ? "length" : "stop");
  const json& usage = events.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], want.size());
}

TEST_F(ServeTest, BadRequestsGetOpenAIsErrorsAndTheServerGoesOn) {
  auto expect = [&](const std::string& request, int status, const std::string& code,
                    const std::string& param) {
    const Answer a = Call(request);
    EXPECT_EQ(a.status, status) << request << "\n" << a.head << a.body;
    const json j = json::parse(a.body, nullptr, false);
    ASSERT_TRUE(j.contains("error")) << a.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    if (!code.empty()) {
      EXPECT_EQ(j["error"]["code"], code) << a.body;
    }
    if (!param.empty()) {
      EXPECT_EQ(j["error"]["param"], param) << a.body;
    }
  };
  expect(Post("/v1/chat/completions", "{not json"), 400, "", "");
  json wrong = Chat("x", 4);
  wrong["max_tokens"] = "four";
  expect(Post("/v1/chat/completions", wrong.dump()), 400, "invalid_type", "max_tokens");
  json unknown = Chat("x", 4);
  unknown["model"] = "gpt-9";
  expect(Post("/v1/chat/completions", unknown.dump()), 404, "model_not_found", "");
  json longer = Chat(std::string(3000, 'a'), 4);
  expect(Post("/v1/chat/completions", longer.dump()), 400, "context_length_exceeded", "");
  json too_many = Chat("x", 600);
  expect(Post("/v1/chat/completions", too_many.dump()), 400, "context_length_exceeded", "");
  expect("GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n", 404, "", "");
  expect("GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", 405, "", "");
  // Still serving.
  const Answer ok = Call(Post("/v1/chat/completions", Chat("still here", 2).dump()));
  EXPECT_EQ(ok.status, 200) << ok.body;
  const Answer models = Call("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "tiny");
  EXPECT_GE(api_->counters().refused, 7u);
}

TEST_F(ServeTest, AnApiKeyIsNeededForTheApiButNotForHealth) {
  ApiOptions ao;
  ao.api_key = "secret-key-123";
  Restart({}, ao);
  const std::string body = Chat("x", 2).dump();
  EXPECT_EQ(Call(Post("/v1/chat/completions", body)).status, 401);
  EXPECT_EQ(Call(Post("/v1/chat/completions", body, "Authorization: Bearer wrong-key-1234\r\n")).status, 401);
  EXPECT_EQ(Call("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").status, 401);
  EXPECT_EQ(Call(Post("/v1/chat/completions", body, "Authorization: Bearer secret-key-123\r\n")).status, 200);
  EXPECT_EQ(Call("GET /health HTTP/1.1\r\nHost: x\r\n\r\n").status, 200);
}

TEST_F(ServeTest, AClientThatLeavesCancelsItsGeneration) {
  json req = Chat("go on and on", 400);
  req["stream"] = true;
  {
    HttpClient c(http_->port());
    c.Send(Post("/v1/chat/completions", req.dump()));
    ASSERT_FALSE(c.ReadUntil("data: ", 5000ms).empty());
  }  // closed
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (api_->counters().cancelled == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(api_->counters().cancelled, 1u);
  EXPECT_LT(scheduler_->stats().completion_tokens, 400u);
}

TEST_F(ServeTest, AFullQueueAnswers503WithRetryAfter) {
  SchedulerOptions so;
  so.parallel = 1;
  so.queue = 0;
  Restart(so, {});
  json req = Chat("keep the only place busy", 400);
  req["stream"] = true;
  HttpClient busy(http_->port());
  busy.Send(Post("/v1/chat/completions", req.dump()));
  ASSERT_FALSE(busy.ReadUntil("data: ", 5000ms).empty());
  const Answer a = Call(Post("/v1/chat/completions", Chat("me too", 2).dump()));
  EXPECT_EQ(a.status, 503) << a.head << a.body;
  EXPECT_NE(a.head.find("Retry-After: 1\r\n"), std::string::npos) << a.head;
  EXPECT_EQ(json::parse(a.body)["error"]["type"], "server_error");
}

TEST_F(ServeTest, AFollowUpTurnResumesFromTheKeptStateAndRepliesAsAFreshOne) {
  json first = Chat("tell me something", 4);
  const Answer a = Call(Post("/v1/chat/completions", first.dump()));
  ASSERT_EQ(a.status, 200);
  json follow = first;
  follow["messages"].push_back(
      {{"role", "assistant"}, {"content", json::parse(a.body)["choices"][0]["message"]["content"]}});
  follow["messages"].push_back({{"role", "user"}, {"content", "and then?"}});
  const Answer resumed = Call(Post("/v1/chat/completions", follow.dump()));
  ASSERT_EQ(resumed.status, 200);
  const uint64_t reused = scheduler_->stats().reused_tokens;
  EXPECT_GE(reused, Rendered(first["messages"]).size());  // at least the first prompt
  const Answer metrics = Call("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(metrics.body.find("waste_serve_reused_tokens_total " + std::to_string(reused) + "\n"),
            std::string::npos)
      << metrics.body;
  SchedulerOptions so;
  so.prefix_cache_bytes = 0;
  Restart(so, {});
  const Answer fresh = Call(Post("/v1/chat/completions", follow.dump()));
  ASSERT_EQ(fresh.status, 200);
  EXPECT_EQ(json::parse(resumed.body)["choices"][0]["logprobs"],
            json::parse(fresh.body)["choices"][0]["logprobs"]);
  EXPECT_EQ(scheduler_->stats().reused_tokens, 0u);
}

TEST_F(ServeTest, TheChatPageAndHealthAreServed) {
  const Answer page = Call("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.head.find("Content-Type: text/html"), std::string::npos);
  EXPECT_NE(page.body.find("/v1/chat/completions"), std::string::npos);
  const Answer health = Call("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(json::parse(health.body)["status"], "ok");
}

}  // namespace
}  // namespace waste::serve
