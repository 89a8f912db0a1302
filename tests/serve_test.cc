// waste serve's API in process (serve/api_server.h over HttpServer and a
// Scheduler) on a synthetic model, through raw sockets: a greedy chat reply
// is the model's own greedy continuation of its rendered prompt, alone or
// beside others; the streamed answer's server-sent events byte for byte;
// errors in OpenAI's shape while the server goes on; the API key; a client
// that leaves cancels its generation; a full queue answers 503 with
// Retry-After; a follow-up turn resumes from the kept state; n choices of
// one prompt, whole and streamed, from one prefill; Anthropic's Messages and
// OpenAI's Responses answer the chat reply, whole and streamed, with
// Anthropic's errors and x-api-key; tool calls held to their tools, on the
// synthetic model and (the generic format) on the converted demo model.
#include "serve/api_server.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "engine/convert/convert.h"
#include "engine/tokenizer/chat.h"
#include "engine/tokenizer/utf8.h"
#include "serve/openai.h"
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

  // Over the synthetic tiny-kimi model, or the container in `converted`.
  void Start(SchedulerOptions so, ApiOptions ao, const std::string& converted = "") {
    Stop();
    waste::testing::TinyEngineOptions o;
    o.model.threads = 2;
    auto e = converted.empty()
                 ? waste::testing::TinyEngine::Create("tiny-kimi", waste::testing::ScratchDir(), o)
                 : waste::testing::TinyEngine::Open(converted, o);
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
  void Restart(SchedulerOptions so, ApiOptions ao, int context = 512) {
    Stop();
    so.context = ao.context = context;
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

  // A streamed answer's events (its data: objects in order), checking the
  // head, the chunked framing and that [DONE] comes once, last.
  std::vector<json> StreamEvents(const std::string& path, const json& request) {
    HttpClient c(http_->port());
    c.Send(Post(path, request.dump()));
    const std::string head = c.ReadUntil("\r\n\r\n", 5000ms);
    EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
    EXPECT_NE(head.find("Content-Type: text/event-stream\r\n"), std::string::npos) << head;
    bool framed = false;
    const std::string body = waste::testing::Dechunk(c.ReadUntil("\r\n0\r\n\r\n", 60s), &framed);
    EXPECT_TRUE(framed) << body;
    std::vector<json> events;
    bool done = false;
    for (size_t at = 0; at < body.size();) {
      EXPECT_EQ(body.compare(at, 6, "data: "), 0) << body.substr(at);
      const size_t end = body.find("\n\n", at);
      if (end == std::string::npos || done) {
        ADD_FAILURE() << "not an event, or one after [DONE]: " << body.substr(at);
        break;
      }
      const std::string data = body.substr(at + 6, end - at - 6);
      at = end + 2;
      if (data == "[DONE]")
        done = true;
      else
        events.push_back(json::parse(data));
    }
    EXPECT_TRUE(done) << body;
    return events;
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

  // Greedy as OpenAI defines logit_bias and the penalties, written out over
  // the model's own logits: each chosen token with its log-probability in
  // the model's own distribution (before the adjustments).
  std::vector<std::pair<int, double>> GreedyAdjusted(const std::vector<int32_t>& prompt, int n,
                                                     const std::map<int, float>& bias,
                                                     float frequency, float presence) {
    Session s = engine_->model().NewSession(512);
    std::vector<float> l(engine_->model().config().vocab);
    std::vector<int> count(l.size(), 0);
    std::vector<std::pair<int, double>> out;
    std::vector<int> next(prompt.begin(), prompt.end());
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(engine_->model().Forward(s, next, l.data()).ok());
      std::vector<float> a = l;
      for (size_t j = 0; j < a.size(); ++j) {
        if (bias.count(static_cast<int>(j))) a[j] += bias.at(static_cast<int>(j));
        if (count[j] > 0) a[j] -= static_cast<float>(count[j]) * frequency + presence;
      }
      const int t = static_cast<int>(std::max_element(a.begin(), a.end()) - a.begin());
      if (std::find(end_.begin(), end_.end(), t) != end_.end()) break;
      out.emplace_back(t, LogprobsOf(l, t, 0).chosen.logprob);
      ++count[t];
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
      if (before_step) before_step();
      return t->engine_->model().ForwardBatch(items);
    }
    std::function<void()> before_step;  // on the scheduler's thread; set while none runs
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
    threads.emplace_back(
        [&, i] { answers[i] = Call(Post("/v1/chat/completions", Chat(texts[i], 6).dump())); });
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
    EXPECT_EQ(j["usage"]["completion_tokens"], ignore ? n : first)
        << ignore;  // the end not counted
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
  // Beside tools (tool_choice auto): the answer held to the schema, or calls.
  json both = Chat("give me json", 120);
  both["temperature"] = 1;
  both["seed"] = 3;
  both["response_format"] = {{"type", "json_schema"},
                             {"json_schema", {{"name", "t"}, {"schema", schema}}}};
  both["tools"] = json::parse(R"([{"type": "function", "function": {"name": "f", "parameters":
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}])");
  const Answer b = Call(Post("/v1/chat/completions", both.dump()));
  ASSERT_EQ(b.status, 200) << b.body;
  const json bj = json::parse(b.body)["choices"][0];
  if (bj["finish_reason"] == "tool_calls") {
    EXPECT_TRUE(
        json::parse(bj["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>())
            .contains("a"))
        << b.body;
  } else {
    EXPECT_EQ(bj["finish_reason"], "stop") << b.body;
    const json v = json::parse(bj["message"]["content"].get<std::string>());
    EXPECT_TRUE(v["name"].is_string() && v["n"].is_number_integer() && v["ok"].is_boolean())
        << b.body;
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

TEST_F(ServeTest, ToolCallsAreHeldToTheToolsAndTheirChoice) {
  // The synthetic model writes Kimi K2's markup (serve/tool_constraint.h);
  // the tools' prompt takes most of the usual context.
  Restart({}, {}, 1024);
  const json weather = json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Lyon"]},
      "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"],
      "additionalProperties": false}}})");
  const json time = json::parse(R"({"type": "function", "function": {"name": "get_time",
      "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 4}},
      "required": ["tz"], "additionalProperties": false}}})");
  for (int seed = 0; seed < 4; ++seed) {
    json req = Chat("weather?", 300);
    req["temperature"] = 1;
    req["seed"] = seed;
    req["tools"] = {weather, time};
    req["tool_choice"] = seed % 2
                             ? json("required")
                             : json{{"type", "function"}, {"function", {{"name", "get_time"}}}};
    req["parallel_tool_calls"] = false;
    const Answer a = Call(Post("/v1/chat/completions", req.dump()));
    ASSERT_EQ(a.status, 200) << a.head << a.body;
    const json j = json::parse(a.body);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls") << a.body;
    const json& calls = j["choices"][0]["message"]["tool_calls"];
    ASSERT_TRUE(calls.is_array() && calls.size() == 1) << a.body;
    const std::string name = calls[0]["function"]["name"];
    const json args = json::parse(calls[0]["function"]["arguments"].get<std::string>());
    if (seed % 2 == 0) {
      EXPECT_EQ(name, "get_time");
    }
    if (name == "get_weather") {
      EXPECT_TRUE(args["city"] == "Paris" || args["city"] == "Lyon") << args;
      EXPECT_TRUE(args["days"].is_number_integer() && args["days"] >= 1 && args["days"] <= 7);
      EXPECT_EQ(args.size(), 2u) << args;
    } else {
      EXPECT_EQ(name, "get_time");
      EXPECT_TRUE(args["tz"].is_string()) << args;
      EXPECT_EQ(args.size(), 1u) << args;
    }
  }
  // none: the same model, never a call.
  json none = Chat("weather?", 40);
  none["tools"] = {weather};
  none["tool_choice"] = "none";
  const Answer n = Call(Post("/v1/chat/completions", none.dump()));
  ASSERT_EQ(n.status, 200) << n.body;
  EXPECT_TRUE(json::parse(n.body)["choices"][0]["message"]["tool_calls"].is_null()) << n.body;
  json bad = Chat("x", 5);
  bad["tools"] = {weather};
  bad["tools"][0]["function"]["parameters"]["properties"]["city"]["format"] = "city";
  const Answer refused = Call(Post("/v1/chat/completions", bad.dump()));
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(json::parse(refused.body)["error"]["param"], "tools[0].function.parameters")
      << refused.body;
}

// max_tokens cuts a forced call inside its arguments: the call is listed as
// far as it was written (as OpenAI lists it), and every API says the reply
// ran out: finish_reason length, stop_reason max_tokens, status incomplete
// (the function_call item too). Greedy, the cut reply is the whole one's start.
TEST_F(ServeTest, ACallCutByMaxTokensEndsAsLength) {
  Restart({}, {}, 1024);
  const json params = json::parse(R"({"type": "object", "properties": {"tz": {"type": "string",
      "maxLength": 4}}, "required": ["tz"], "additionalProperties": false})");
  json req = Chat("time?", 300);
  req.erase("logprobs");
  req["tools"] = {
      {{"type", "function"}, {"function", {{"name", "get_time"}, {"parameters", params}}}}};
  req["tool_choice"] = "required";
  req["parallel_tool_calls"] = false;
  const Answer a = Call(Post("/v1/chat/completions", req.dump()));
  ASSERT_EQ(a.status, 200) << a.body;
  const json full = json::parse(a.body);
  ASSERT_EQ(full["choices"][0]["finish_reason"], "tool_calls") << a.body;
  const std::string args = full["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"];
  const int used = full["usage"]["completion_tokens"];
  int cut_at = 0;
  std::string part;
  // A search for a cut inside the arguments: before them the call's head is
  // cut (shown as text), after them the whole arguments are listed.
  for (int lo = 1, hi = used - 1; lo <= hi && cut_at == 0;) {
    const int m = (lo + hi) / 2;
    req["max_tokens"] = m;
    const Answer b = Call(Post("/v1/chat/completions", req.dump()));
    ASSERT_EQ(b.status, 200) << b.body;
    const json choice = json::parse(b.body)["choices"][0];
    const json calls = choice["message"].value("tool_calls", json());
    if (calls.is_null()) {
      EXPECT_EQ(choice["finish_reason"], "length") << m << ": " << b.body;
      lo = m + 1;
      continue;
    }
    ASSERT_EQ(calls.size(), 1u) << m << ": " << b.body;
    part = calls[0]["function"]["arguments"];
    ASSERT_TRUE(args.starts_with(part)) << m << ": " << b.body;
    if (part == args) {  // cut after the arguments: in the call's end marker, or after it
      EXPECT_TRUE(choice["finish_reason"] == "tool_calls" || choice["finish_reason"] == "length")
          << b.body;
      hi = m - 1;
      continue;
    }
    EXPECT_EQ(choice["finish_reason"], "length") << b.body;
    cut_at = m;
  }
  ASSERT_GT(cut_at, 0) << "no cut inside the arguments: " << args;

  const json anthropic = {
      {"model", "tiny"},
      {"max_tokens", cut_at},
      {"temperature", 0},
      {"messages", json::array({{{"role", "user"}, {"content", "time?"}}})},
      {"tools", json::array({{{"name", "get_time"}, {"input_schema", params}}})},
      {"tool_choice", {{"type", "any"}, {"disable_parallel_tool_use", true}}}};
  const Answer m =
      Call(Post("/v1/messages", anthropic.dump(), "anthropic-version: 2023-06-01\r\n"));
  ASSERT_EQ(m.status, 200) << m.body;
  const json message = json::parse(m.body);
  EXPECT_EQ(message["stop_reason"], "max_tokens") << m.body;
  ASSERT_FALSE(message["content"].empty()) << m.body;
  EXPECT_EQ(message["content"].back()["type"], "tool_use") << m.body;

  const json responses = {
      {"model", "tiny"},
      {"input", "time?"},
      {"max_output_tokens", cut_at},
      {"temperature", 0},
      {"store", false},
      {"tools",
       json::array({{{"type", "function"}, {"name", "get_time"}, {"parameters", params}}})},
      {"tool_choice", "required"},
      {"parallel_tool_calls", false}};
  const Answer r = Call(Post("/v1/responses", responses.dump()));
  ASSERT_EQ(r.status, 200) << r.body;
  const json response = json::parse(r.body);
  EXPECT_EQ(response["status"], "incomplete") << r.body;
  EXPECT_EQ(response["incomplete_details"]["reason"], "max_output_tokens") << r.body;
  ASSERT_FALSE(response["output"].empty()) << r.body;
  const json& item = response["output"].back();
  EXPECT_EQ(item["type"], "function_call") << r.body;
  EXPECT_EQ(item["status"], "incomplete") << r.body;
  EXPECT_EQ(item["arguments"], part) << r.body;
}

// The demo model's template has no tool syntax: the generic format holds its
// whole reply to one JSON object (engine/tokenizer/chat_generic.h). Required,
// it calls the tools, streamed as whole; the calls and their result sent
// back render into a second turn, which (tool_choice none) answers in text.
TEST_F(ServeTest, TheDemoModelCallsToolsInTheGenericFormat) {
  const std::string dir = waste::testing::ScratchDir() + "/demo";
  convert::ConvertOptions co;
  co.src = std::string(WASTE_MODELS) + "/demo-moe";
  co.out = dir;
  co.jobs = 2;
  co.expert_fmt = *convert::ParseExpertFormat("bf16");
  auto converted = convert::Convert(co);
  ASSERT_TRUE(converted.ok()) << converted.status().message();
  Start({}, {}, dir);
  Restart({}, {}, 1024);
  ASSERT_EQ(engine_->container().chat()->family, kFamilyDemo);
  const json time = json::parse(R"({"type": "function", "function": {"name": "get_time",
      "description": "The time in a time zone.", "parameters": {"type": "object", "properties":
      {"tz": {"type": "string", "enum": ["CET", "UTC"]}}, "required": ["tz"],
      "additionalProperties": false}}})");
  // Greedy, the model writes white space as freely as the grammar lets it.
  json req = Chat("What time is it in Paris?", 600);
  req.erase("logprobs");
  req["tools"] = {time};
  req["tool_choice"] = "required";
  req["parallel_tool_calls"] = false;
  const Answer a = Call(Post("/v1/chat/completions", req.dump()));
  ASSERT_EQ(a.status, 200) << a.head << a.body;
  const json choice = json::parse(a.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << a.body;
  EXPECT_TRUE(choice["message"]["content"].is_null()) << a.body;
  const json& calls = choice["message"]["tool_calls"];
  ASSERT_TRUE(calls.is_array() && calls.size() == 1) << a.body;
  for (const json& c : calls) {
    EXPECT_EQ(c["function"]["name"], "get_time");
    const json args = json::parse(c["function"]["arguments"].get<std::string>(), nullptr, false);
    ASSERT_TRUE(args.is_object()) << a.body;
    ASSERT_EQ(args.size(), 1u) << args;
    EXPECT_TRUE(args["tz"] == "CET" || args["tz"] == "UTC") << args;
  }
  // Streamed: the same calls, their arguments in pieces.
  req["stream"] = true;
  std::vector<std::string> names, arguments;
  for (const json& e : StreamEvents("/v1/chat/completions", req))
    for (const json& d : e["choices"][0]["delta"].value("tool_calls", json::array())) {
      const size_t i = d["index"];
      if (i >= names.size()) names.resize(i + 1), arguments.resize(i + 1);
      if (d["function"].contains("name")) names[i] = d["function"]["name"];
      arguments[i] += d["function"]["arguments"].get<std::string>();
    }
  ASSERT_EQ(names.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(names[i], calls[i]["function"]["name"]);
    EXPECT_EQ(arguments[i], calls[i]["function"]["arguments"]);
  }
  // The second turn: the calls and a result rendered; none answers in text.
  json next = Chat("", 8);
  next.erase("logprobs");
  next["messages"] = {{{"role", "user"}, {"content", "What time is it in Paris?"}},
                      {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", calls}},
                      {{"role", "tool"}, {"tool_call_id", calls[0]["id"]}, {"content", "12:00"}}};
  next["tools"] = {time};
  next["tool_choice"] = "none";
  const Answer b = Call(Post("/v1/chat/completions", next.dump()));
  ASSERT_EQ(b.status, 200) << b.body;
  const json m = json::parse(b.body)["choices"][0]["message"];
  EXPECT_FALSE(m.contains("tool_calls")) << b.body;
  EXPECT_TRUE(m["content"].is_string()) << b.body;
  EXPECT_EQ(json::parse(b.body)["choices"][0]["finish_reason"], "length") << b.body;
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

// logit_bias and the penalties steer a greedy reply on both routes exactly
// as OpenAI's definition over the model's own logits says; the logprobs
// stay the model's own; an id past the vocabulary is refused by name.
TEST_F(ServeTest, LogitBiasAndPenaltiesSteerTheReplyAndLogprobsStayTheModels) {
  const int n = 12;
  json chat = Chat("repeat after me", n);
  const std::vector<int32_t> prompt = Rendered(chat["messages"]);
  const std::vector<int> plain = Greedy(prompt, n);
  ASSERT_GE(plain.size(), 3u);
  // Bias the plain reply's second token down and a token it never chose up a little.
  const std::map<int, float> bias = {{plain[1], -5.f}, {(plain[0] + 7) % 100, 3.f}};
  const auto want = GreedyAdjusted(prompt, n, bias, 1.5f, 0.5f);
  std::vector<int> want_ids;
  for (const auto& [id, lp] : want) want_ids.push_back(id);
  ASSERT_NE(want_ids, plain);  // the adjustments change this reply
  json biased = json::object();
  for (const auto& [id, b] : bias) biased[std::to_string(id)] = b;
  chat["logit_bias"] = biased;
  chat["frequency_penalty"] = 1.5;
  chat["presence_penalty"] = 0.5;
  const Answer a = Call(Post("/v1/chat/completions", chat.dump()));
  ASSERT_EQ(a.status, 200) << a.head << a.body;
  const json lp = json::parse(a.body)["choices"][0]["logprobs"];
  EXPECT_EQ(TokenBytes(lp), TokenBytes(want_ids));
  ASSERT_EQ(lp["content"].size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(lp["content"][i]["logprob"].get<double>(), want[i].second, 1e-4) << i;
  // Completions: a bias of +100 decides every token; the penalty cannot move it.
  const std::string text = "once upon a time";
  const std::vector<int32_t> cprompt = CompletionPrompt(&*engine_->container().chat(), *tok_, text);
  const std::map<int, float> forced = {{plain[0], 100.f}};
  const auto repeated = GreedyAdjusted(cprompt, 6, forced, 2.f, 0.f);
  ASSERT_EQ(repeated.size(), 6u);
  for (const auto& [id, lp6] : repeated) EXPECT_EQ(id, plain[0]);
  const json completion = {{"model", "tiny"},
                           {"prompt", text},
                           {"max_tokens", 6},
                           {"temperature", 0},
                           {"logprobs", 1},
                           {"frequency_penalty", 2},
                           {"logit_bias", {{std::to_string(plain[0]), 100}}}};
  const Answer c = Call(Post("/v1/completions", completion.dump()));
  ASSERT_EQ(c.status, 200) << c.head << c.body;
  const json clp = json::parse(c.body)["choices"][0]["logprobs"];
  ASSERT_EQ(clp["token_logprobs"].size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(clp["tokens"][i], tokenizer::ReplaceInvalidUtf8(tok_->TokenBytes(plain[0])));
    EXPECT_NEAR(clp["token_logprobs"][i].get<double>(), repeated[i].second, 1e-4) << i;
  }
  // An id past the vocabulary, on either route.
  const std::string past = std::to_string(engine_->model().config().vocab);
  for (json req : {Chat("x", 2), completion}) {
    req["logit_bias"] = {{past, 1}};
    const bool is_chat = req.contains("messages");
    const Answer e = Call(Post(is_chat ? "/v1/chat/completions" : "/v1/completions", req.dump()));
    EXPECT_EQ(e.status, 400) << e.body;
    const json j = json::parse(e.body);
    EXPECT_EQ(j["error"]["param"], "logit_bias") << e.body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find("'" + past + "'"), std::string::npos)
        << e.body;
  }
}

// Invalid UTF-8 anywhere in a request is a 400 (404 for a path) that says
// so, never a 500 from an error message that quotes the bytes.
TEST_F(ServeTest, InvalidUtf8IsRefusedNamingItOnEveryRoute) {
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    const bool chat = path == std::string("/v1/chat/completions");
    const json body =
        chat ? Chat("x", 2) : json{{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 2}};
    const std::string bad = body.dump().insert(body.dump().find("\"x\"") + 2, "\xC3(\xFF");
    const Answer a = Call(Post(path, bad));
    EXPECT_EQ(a.status, 400) << path << "\n" << a.head << a.body;
    const json j = json::parse(a.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << a.body;
    EXPECT_EQ(j["error"]["code"], "invalid_utf8") << a.body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find("not valid UTF-8"), std::string::npos);
    // An unknown model, quoted in the message cut at 200 bytes: inside an é.
    json unknown = body;
    unknown["model"] = std::string(199, 'm') + "\xC3\xA9";
    const Answer m = Call(Post(path, unknown.dump()));
    EXPECT_EQ(m.status, 404) << path << "\n" << m.head << m.body;
    EXPECT_FALSE(json::parse(m.body, nullptr, false).is_discarded()) << m.body;
  }
  const Answer route = Call("GET /v1/\xFF\xFE HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(route.status, 404) << route.head << route.body;
  EXPECT_FALSE(json::parse(route.body, nullptr, false).is_discarded()) << route.body;
  EXPECT_EQ(Call(Post("/v1/chat/completions", Chat("still here", 2).dump())).status, 200);
}

TEST_F(ServeTest, AnApiKeyIsNeededForTheApiButNotForHealth) {
  ApiOptions ao;
  ao.api_key = "secret-key-123";
  Restart({}, ao);
  const std::string body = Chat("x", 2).dump();
  EXPECT_EQ(Call(Post("/v1/chat/completions", body)).status, 401);
  EXPECT_EQ(
      Call(Post("/v1/chat/completions", body, "Authorization: Bearer wrong-key-1234\r\n")).status,
      401);
  EXPECT_EQ(Call("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").status, 401);
  EXPECT_EQ(
      Call(Post("/v1/chat/completions", body, "Authorization: Bearer secret-key-123\r\n")).status,
      200);
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
      {{"role", "assistant"},
       {"content", json::parse(a.body)["choices"][0]["message"]["content"]}});
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

// /metrics during a prompt's prefill, run 4 tokens a step: the request's
// prompt tokens done (as of its last step) and in all, labelled by its
// number; no such sample once it has ended.
TEST_F(ServeTest, MetricsShowEachPrefillingRequestsProgress) {
  SchedulerOptions so;
  so.chunk = 4;
  Restart(so, {});
  std::promise<void> third_step, go;
  std::shared_future<void> going = go.get_future().share();
  int steps = 0;
  stepper_.before_step = [&] {
    if (++steps != 3) return;
    third_step.set_value();
    going.wait();
  };
  const json request = Chat("tell me something about the weather today", 1);
  const size_t prompt = Rendered(request["messages"]).size();
  ASSERT_GT(prompt, 12u);  // still in prefill at its third step
  HttpClient c(http_->port());
  c.Send(Post("/v1/chat/completions", request.dump()));
  third_step.get_future().wait();
  const Answer during = Call("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  go.set_value();
  EXPECT_NE(during.body.find("# TYPE waste_serve_prefill_done_tokens gauge\n"), std::string::npos);
  EXPECT_NE(during.body.find("waste_serve_prefill_done_tokens{request=\"1\"} 8\n"),
            std::string::npos)
      << during.body;
  EXPECT_NE(during.body.find("waste_serve_prefill_prompt_tokens{request=\"1\"} " +
                             std::to_string(prompt) + "\n"),
            std::string::npos)
      << during.body;
  const Answer a = Split(c.ReadAnswer(120s));
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(json::parse(a.body)["usage"]["prompt_tokens"], prompt);
  // The progress is published just after the step that ended the reply.
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = Call("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
               .body.find("waste_serve_prefill_done_tokens{") == std::string::npos;
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone);
  stepper_.before_step = nullptr;
}

// OpenAI's n: the choices of one prompt, sampled apart (with a seed, the
// same ones every time; choice 0 the one n = 1 gives), run as one batch
// from one prefill of the prompt, counted once in the usage.
TEST_F(ServeTest, NChoicesAreSampledApartInOneBatchFromOnePrefill) {
  SchedulerOptions so;
  so.prefix_cache_bytes = 0;  // no kept state: only the group shares the prompt
  Restart(so, {});
  json req = Chat("tell me three things", 6);
  req["n"] = 3;
  req["temperature"] = 1.0;
  req["seed"] = 1234;
  const size_t prompt = Rendered(req["messages"]).size();
  const Answer a = Call(Post("/v1/chat/completions", req.dump()));
  ASSERT_EQ(a.status, 200) << a.head << a.body;
  const json j = json::parse(a.body);
  ASSERT_EQ(j["choices"].size(), 3u);
  size_t completion = 0;
  std::set<std::vector<std::string>> replies;
  for (size_t i = 0; i < 3; ++i) {
    const json& c = j["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["message"]["role"], "assistant");
    completion += c["logprobs"]["content"].size();
    replies.insert(TokenBytes(c["logprobs"]));
  }
  EXPECT_GT(replies.size(), 1u) << "the choices were not sampled apart";
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt);
  EXPECT_EQ(j["usage"]["completion_tokens"], completion);
  const SchedulerStats st = scheduler_->stats();
  EXPECT_EQ(st.prompt_tokens, 3 * prompt);
  EXPECT_EQ(st.reused_tokens, 2 * prompt);  // the prompt ran once
  const Answer again = Call(Post("/v1/chat/completions", req.dump()));
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(json::parse(again.body)["choices"], j["choices"]);
  json one = req;
  one["n"] = 1;
  const Answer single = Call(Post("/v1/chat/completions", one.dump()));
  ASSERT_EQ(single.status, 200) << single.body;
  EXPECT_EQ(json::parse(single.body)["choices"][0], j["choices"][0]);
  // Greedy: n copies of the model's own reply.
  req["temperature"] = 0;
  req.erase("seed");
  const std::vector<int> greedy = Greedy(Rendered(req["messages"]), 6);
  const Answer g = Call(Post("/v1/chat/completions", req.dump()));
  ASSERT_EQ(g.status, 200) << g.body;
  const json gj = json::parse(g.body);
  ASSERT_EQ(gj["choices"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(TokenBytes(gj["choices"][i]["logprobs"]), TokenBytes(greedy)) << i;
    EXPECT_EQ(gj["choices"][i]["message"], gj["choices"][0]["message"]) << i;
  }
  EXPECT_EQ(gj["usage"]["completion_tokens"], 3 * greedy.size());
}

// Streamed, each chunk is one choice's: its role chunk first, its pieces,
// its finish chunk; after every choice, one usage chunk (the prompt once),
// then [DONE] once. Each choice's text is the whole answer's same choice.
TEST_F(ServeTest, NChoicesStreamedAreTheWholeAnswersChoicesByIndex) {
  json req = Chat("stream three", 6);
  req["n"] = 3;
  req["temperature"] = 1.0;
  req["seed"] = 77;
  const Answer w = Call(Post("/v1/chat/completions", req.dump()));
  ASSERT_EQ(w.status, 200) << w.body;
  const json whole = json::parse(w.body);
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  const std::vector<json> events = StreamEvents("/v1/chat/completions", req);
  ASSERT_GE(events.size(), 7u);
  std::map<int, std::string> text;
  std::map<int, std::vector<std::string>> bytes;
  std::map<int, int> chunks, finishes;
  for (size_t e = 0; e + 1 < events.size(); ++e) {
    const json& c = events[e]["choices"];
    ASSERT_EQ(c.size(), 1u) << events[e];
    const int i = c[0]["index"];
    ASSERT_TRUE(i >= 0 && i < 3) << events[e];
    EXPECT_EQ(finishes[i], 0) << "a chunk after choice " << i << "'s finish";
    if (chunks[i]++ == 0) {
      EXPECT_EQ(c[0]["delta"]["role"], "assistant") << events[e];
    }
    if (c[0]["delta"].contains("content")) text[i] += c[0]["delta"]["content"].get<std::string>();
    if (!c[0]["logprobs"].is_null())
      for (const auto& b : TokenBytes(c[0]["logprobs"])) bytes[i].push_back(b);
    if (!c[0]["finish_reason"].is_null()) {
      ++finishes[i];
      EXPECT_EQ(c[0]["finish_reason"], whole["choices"][i]["finish_reason"]);
    }
  }
  size_t completion = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(finishes[i], 1) << i;
    EXPECT_EQ(text[i], whole["choices"][i]["message"]["content"]) << i;
    EXPECT_EQ(bytes[i], TokenBytes(whole["choices"][i]["logprobs"])) << i;
    completion += bytes[i].size();
  }
  const json& usage = events.back();
  EXPECT_TRUE(usage["choices"].empty()) << usage;
  EXPECT_EQ(usage["usage"]["prompt_tokens"], Rendered(req["messages"]).size());
  EXPECT_EQ(usage["usage"]["completion_tokens"], completion);
  EXPECT_EQ(whole["usage"], usage["usage"]);
}

TEST_F(ServeTest, NCompletionsWholeAndStreamedAgree) {
  json req = {{"model", "tiny"}, {"prompt", "once upon a time"}, {"max_tokens", 5},
              {"n", 2},          {"temperature", 1.0},           {"seed", 5},
              {"logprobs", 0}};
  const Answer w = Call(Post("/v1/completions", req.dump()));
  ASSERT_EQ(w.status, 200) << w.body;
  const json whole = json::parse(w.body);
  ASSERT_EQ(whole["choices"].size(), 2u);
  req["stream"] = true;
  std::map<int, std::string> text;
  std::map<int, json> finish;
  for (const json& e : StreamEvents("/v1/completions", req)) {
    const int i = e["choices"][0]["index"];
    text[i] += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish[i] = e["choices"][0]["finish_reason"];
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(whole["choices"][i]["index"], i);
    EXPECT_EQ(text[i], whole["choices"][i]["text"]) << i;
    EXPECT_EQ(finish[i], whole["choices"][i]["finish_reason"]) << i;
  }
  EXPECT_EQ(whole["usage"]["completion_tokens"],
            whole["choices"][0]["logprobs"]["tokens"].size() +
                whole["choices"][1]["logprobs"]["tokens"].size());
}

// n past what the server holds is refused by name; n the queue cannot take
// whole now is a 503, with nothing of it queued; a client that leaves
// cancels every choice.
TEST_F(ServeTest, NIsBoundedQueuedWholeAndCancelledWhole) {
  SchedulerOptions so;
  so.parallel = 2;
  so.queue = 1;
  Restart(so, {});
  json req = Chat("x", 2);
  req["n"] = 4;
  const Answer big = Call(Post("/v1/chat/completions", req.dump()));
  EXPECT_EQ(big.status, 400) << big.body;
  EXPECT_EQ(json::parse(big.body)["error"]["param"], "n") << big.body;
  // Two places taken by one request's two choices; a third free in the queue.
  json busy = Chat("keep both places busy", 400);
  busy["n"] = 2;
  busy["stream"] = true;
  busy["ignore_eos"] = true;  // on to max_tokens, whatever the model says
  {
    HttpClient c(http_->port());
    c.Send(Post("/v1/chat/completions", busy.dump()));
    // Deadlines are generous: CI runs this under ASan beside other suites.
    ASSERT_FALSE(c.ReadUntil("\"logprobs\":{", 30000ms).empty());  // generating
    req["n"] = 2;
    const Answer full = Call(Post("/v1/chat/completions", req.dump()));
    EXPECT_EQ(full.status, 503) << full.head << full.body;
    EXPECT_NE(full.head.find("Retry-After: 1\r\n"), std::string::npos) << full.head;
    EXPECT_EQ(scheduler_->stats().queued, 0u);
  }  // closed: both of its choices end
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (api_->counters().cancelled < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(api_->counters().cancelled, 2u);
  EXPECT_LT(scheduler_->stats().completion_tokens, 800u);
  EXPECT_EQ(Call(Post("/v1/chat/completions", req.dump())).status, 200);
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

// A streamed answer's body, its chunked framing undone.
std::string StreamBody(uint16_t port, const std::string& request) {
  HttpClient c(port);
  c.Send(request);
  const std::string head = c.ReadUntil("\r\n\r\n", 120000ms);
  EXPECT_EQ(head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Type: text/event-stream\r\n"), std::string::npos) << head;
  bool framed = false;
  const std::string body = waste::testing::Dechunk(c.ReadUntil("\r\n0\r\n\r\n", 120000ms), &framed);
  EXPECT_TRUE(framed);
  return body;
}

// "event: NAME\ndata: JSON\n\n" events, each name its object's type.
std::vector<json> NamedEvents(const std::string& body) {
  std::vector<json> out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) {
      ADD_FAILURE() << body.substr(at);
      break;
    }
    const std::string ev = body.substr(at, end - at);
    at = end + 2;
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.compare(0, 7, "event: "), 0) << ev;
    EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
    out.push_back(json::parse(ev.substr(nl + 7)));
    EXPECT_EQ(ev.substr(7, nl - 7), out.back()["type"]) << ev;
  }
  return out;
}

json Message(const std::string& text, int max_tokens) {
  return {{"model", "tiny"},
          {"max_tokens", max_tokens},
          {"messages", json::array({{{"role", "user"}, {"content", text}}})},
          {"temperature", 0}};
}

TEST_F(ServeTest, AnthropicsMessagesAreTheChatReplyWholeStreamedAndCounted) {
  const json chat = Chat("tell me a story", 8);
  const std::vector<int32_t> prompt = Rendered(chat["messages"]);
  const Answer c = Call(Post("/v1/chat/completions", chat.dump()));
  ASSERT_EQ(c.status, 200) << c.body;
  const std::string text = json::parse(c.body)["choices"][0]["message"]["content"];
  const int64_t used = json::parse(c.body)["usage"]["completion_tokens"];

  const Answer m = Call(Post("/v1/messages", Message("tell me a story", 8).dump(),
                             "anthropic-version: 2023-06-01\r\n"));
  ASSERT_EQ(m.status, 200) << m.body;
  const json whole = json::parse(m.body);
  EXPECT_EQ(whole["type"], "message");
  EXPECT_EQ(whole["role"], "assistant");
  EXPECT_EQ(whole["model"], "tiny");
  EXPECT_EQ(whole["id"].get<std::string>().rfind("msg_", 0), 0u);
  const json want_content =
      text.empty() ? json::array() : json::array({{{"type", "text"}, {"text", text}}});
  EXPECT_EQ(whole["content"], want_content);
  EXPECT_EQ(whole["stop_reason"], used == 8 ? "max_tokens" : "end_turn");
  EXPECT_EQ(whole["stop_sequence"], nullptr);
  EXPECT_EQ(whole["usage"], json({{"input_tokens", prompt.size()}, {"output_tokens", used}}));

  json streamed = Message("tell me a story", 8);
  streamed["stream"] = true;
  const std::vector<json> events =
      NamedEvents(StreamBody(http_->port(), Post("/v1/messages", streamed.dump())));
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.front()["type"], "message_start");
  EXPECT_EQ(events.back()["type"], "message_stop");
  std::string deltas;
  for (const json& e : events)
    if (e["type"] == "content_block_delta") deltas += e["delta"]["text"].get<std::string>();
  EXPECT_EQ(deltas, text);
  const json& last = events[events.size() - 2];
  EXPECT_EQ(last["type"], "message_delta");
  EXPECT_EQ(last["delta"]["stop_reason"], whole["stop_reason"]);
  EXPECT_EQ(last["usage"]["output_tokens"], used);

  json count = Message("tell me a story", 8);
  count.erase("max_tokens");
  count.erase("temperature");
  const Answer n = Call(Post("/v1/messages/count_tokens", count.dump()));
  ASSERT_EQ(n.status, 200) << n.body;
  EXPECT_EQ(json::parse(n.body), json({{"input_tokens", prompt.size()}}));

  // A stop sequence from the middle of the reply ends it there, named.
  ASSERT_GE(text.size(), 4u) << "the reply is too short to cut: " << text;
  json stopped = Message("tell me a story", 8);
  const std::string stop = text.substr(text.size() / 2, 2);
  stopped["stop_sequences"] = {stop};
  const Answer s = Call(Post("/v1/messages", stopped.dump()));
  ASSERT_EQ(s.status, 200) << s.body;
  const json cut = json::parse(s.body);
  EXPECT_EQ(cut["stop_reason"], "stop_sequence");
  EXPECT_EQ(cut["stop_sequence"], stop);
  const std::string before = text.substr(0, text.find(stop));
  EXPECT_EQ(cut["content"],
            before.empty() ? json::array() : json::array({{{"type", "text"}, {"text", before}}}));
}

TEST_F(ServeTest, OpenAIsResponsesAreTheChatReplyWholeAndStreamed) {
  const json chat = Chat("what is new", 6);
  const Answer c = Call(Post("/v1/chat/completions", chat.dump()));
  ASSERT_EQ(c.status, 200) << c.body;
  const std::string text = json::parse(c.body)["choices"][0]["message"]["content"];
  const int64_t used = json::parse(c.body)["usage"]["completion_tokens"];
  const json req = {{"model", "tiny"},
                    {"input", "what is new"},
                    {"max_output_tokens", 6},
                    {"temperature", 0},
                    {"store", false}};
  const Answer r = Call(Post("/v1/responses", req.dump()));
  ASSERT_EQ(r.status, 200) << r.body;
  const json whole = json::parse(r.body);
  EXPECT_EQ(whole["object"], "response");
  EXPECT_EQ(whole["status"], used == 6 ? "incomplete" : "completed");
  EXPECT_EQ(whole["usage"]["input_tokens"], Rendered(chat["messages"]).size());
  EXPECT_EQ(whole["usage"]["output_tokens"], used);
  ASSERT_EQ(whole["output"].size(), text.empty() ? 0u : 1u);
  if (!text.empty()) {
    EXPECT_EQ(whole["output"][0]["content"][0]["text"], text);
  }

  json streamed = req;
  streamed["stream"] = true;
  const std::vector<json> events =
      NamedEvents(StreamBody(http_->port(), Post("/v1/responses", streamed.dump())));
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["type"], "response.created");
  std::string deltas;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["sequence_number"], i);
    if (events[i]["type"] == "response.output_text.delta")
      deltas += events[i]["delta"].get<std::string>();
  }
  EXPECT_EQ(deltas, text);
  EXPECT_EQ(events.back()["type"], used == 6 ? "response.incomplete" : "response.completed");
  // The same items but for their ids (made from each response's own).
  const auto without_ids = [](json items) {
    for (json& item : items) item.erase("id");
    return items;
  };
  EXPECT_EQ(without_ids(events.back()["response"]["output"]), without_ids(whole["output"]));

  // text.format: the answer is a JSON object, ended within max_output_tokens.
  json formatted = req;
  formatted["max_output_tokens"] = 40;
  formatted["temperature"] = 1;
  formatted["text"] = {{"format", {{"type", "json_object"}}}};
  const Answer f = Call(Post("/v1/responses", formatted.dump()));
  ASSERT_EQ(f.status, 200) << f.body;
  const json fj = json::parse(f.body);
  EXPECT_EQ(fj["status"], "completed") << f.body;
  ASSERT_EQ(fj["output"].size(), 1u) << f.body;
  const std::string object = fj["output"][0]["content"][0]["text"];
  EXPECT_TRUE(json::accept(object) && json::parse(object).is_object()) << object;
}

TEST_F(ServeTest, AnthropicsRoutesAnswerErrorsInAnthropicsShape) {
  auto expect = [&](const std::string& request, int status, const std::string& type) {
    const Answer a = Call(request);
    EXPECT_EQ(a.status, status) << request << "\n" << a.head << a.body;
    const json j = json::parse(a.body, nullptr, false);
    EXPECT_EQ(j["type"], "error") << a.body;
    EXPECT_EQ(j["error"]["type"], type) << a.body;
    EXPECT_TRUE(j["error"]["message"].is_string()) << a.body;
    return j["error"]["message"].is_string() ? j["error"]["message"].get<std::string>() : "";
  };
  expect(Post("/v1/messages", "{not json"), 400, "invalid_request_error");
  json no_max = Message("x", 4);
  no_max.erase("max_tokens");
  EXPECT_NE(
      expect(Post("/v1/messages", no_max.dump()), 400, "invalid_request_error").find("max_tokens"),
      std::string::npos);
  json image = Message("x", 4);
  image["messages"][0]["content"] = json::array({{{"type", "image"}, {"source", json::object()}}});
  EXPECT_NE(expect(Post("/v1/messages", image.dump()), 400, "invalid_request_error").find("image"),
            std::string::npos);
  // Tools are served; a schema keyword the constraint cannot hold is refused by name.
  json tools = Message("x", 4);
  tools["tools"] = json::array({{{"name", "f"}, {"input_schema", {{"type", "object"}}}}});
  EXPECT_EQ(Call(Post("/v1/messages", tools.dump())).status, 200);
  tools["tools"][0]["input_schema"]["properties"]["a"] = {{"type", "string"}, {"pattern", "x"}};
  const std::string why = expect(Post("/v1/messages", tools.dump()), 400, "invalid_request_error");
  EXPECT_TRUE(why.starts_with("tools[0].input_schema: ")) << why;
  EXPECT_NE(why.find("pattern"), std::string::npos) << why;
  // Thinking is switched where the family's template allows it; Kimi K2's
  // never thinks: off is what it does, on is refused naming it.
  json thinking = Message("x", 4);
  thinking["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
  EXPECT_NE(
      expect(Post("/v1/messages", thinking.dump()), 400, "invalid_request_error").find("thinking"),
      std::string::npos);
  thinking["thinking"] = {{"type", "disabled"}};
  EXPECT_EQ(Call(Post("/v1/messages", thinking.dump())).status, 200);
  json unknown = Message("x", 4);
  unknown["model"] = "claude-9";
  expect(Post("/v1/messages", unknown.dump()), 404, "not_found_error");
  expect(Post("/v1/messages", Message("x", 600).dump()), 400, "invalid_request_error");
  expect("GET /v1/messages HTTP/1.1\r\nHost: x\r\n\r\n", 405, "invalid_request_error");
  // The Responses route keeps OpenAI's shape.
  const Answer r = Call(Post("/v1/responses", json{{"input", "x"}, {"store", true}}.dump()));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "store") << r.body;

  ApiOptions ao;
  ao.api_key = "secret-key-123";
  Restart({}, ao);
  const std::string body = Message("x", 2).dump();
  expect(Post("/v1/messages", body), 401, "authentication_error");
  expect(Post("/v1/messages", body, "x-api-key: wrong-key-1234\r\n"), 401, "authentication_error");
  EXPECT_EQ(Call(Post("/v1/messages", body, "x-api-key: secret-key-123\r\n")).status, 200);
  EXPECT_EQ(Call(Post("/v1/messages", body, "Authorization: Bearer secret-key-123\r\n")).status,
            200);
  EXPECT_EQ(Call(Post("/v1/chat/completions", Chat("x", 2).dump(), "x-api-key: secret-key-123\r\n"))
                .status,
            200);
}

}  // namespace
}  // namespace waste::serve
