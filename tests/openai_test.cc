// serve/openai.h: every request parameter's checks (right and wrong types,
// ranges, what is refused by name; tools, tool calls and results, thinking), OpenAI's error shape,
// the chunks of a short made-up streamed generation and their SSE framing, logprobs against a
// log-softmax worked by hand, a token that ends inside a UTF-8 character held back, stop strings
// across token boundaries, end-of-turn and other special tokens kept out of the reply.
#include "serve/openai.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "engine/grammar/json_matcher.h"
#include "engine/tokenizer/base64.h"
#include "tests/test_util.h"

namespace waste::serve {
namespace {

using nlohmann::json;

std::optional<ApiError> Chat(const json& body, ChatRequest* out = nullptr) {
  ChatRequest r;
  return ParseChatRequest(body.dump(), out ? out : &r);
}

json Base(json extra = json::object()) {
  json b = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  b.update(extra);
  return b;
}

// The request with `key` set to `value`: refused with `param` named (and
// the status 400), or "" when accepted.
std::string ParamOf(const json& key_value) {
  auto e = Chat(Base(key_value));
  if (!e) return "";
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->type, "invalid_request_error");
  return e->param;
}

TEST(Request, DefaultsAndEveryField) {
  ChatRequest r;
  ASSERT_FALSE(Chat(Base(), &r));
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.sampling.temperature, 1.0);
  EXPECT_EQ(r.sampling.top_p, 1.0);
  EXPECT_FALSE(r.sampling.max_tokens);
  EXPECT_FALSE(r.sampling.seed);
  EXPECT_FALSE(r.sampling.ignore_eos);
  ASSERT_FALSE(Chat(Base({{"max_tokens", 7},
                          {"temperature", 0},
                          {"top_p", 0.5},
                          {"top_k", 40},
                          {"seed", -1},
                          {"stop", "END"},
                          {"logprobs", true},
                          {"top_logprobs", 3},
                          {"stream", true},
                          {"stream_options", {{"include_usage", true}}},
                          {"ignore_eos", true},
                          {"n", 3},
                          {"presence_penalty", -0.5},
                          {"frequency_penalty", 1.25},
                          {"logit_bias", {{"17", -100}, {"5", 2.5}}},
                          {"unknown_field", {1, 2}},
                          {"user", "someone"}}),
                    &r));
  EXPECT_EQ(*r.sampling.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.0);
  EXPECT_EQ(r.sampling.top_p, 0.5);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(*r.sampling.seed, ~uint64_t{0});
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(r.sampling.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 3);
  EXPECT_TRUE(r.sampling.stream);
  EXPECT_TRUE(r.sampling.include_usage);
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_EQ(r.sampling.n, 3);
  const SamplerOptions so = r.sampling.SamplerFor(99);
  EXPECT_EQ(so.temperature, 0.f);
  EXPECT_EQ(so.top_k, 40);
  EXPECT_EQ(so.top_p, 0.5f);
  EXPECT_EQ(so.seed, ~uint64_t{0});
  EXPECT_EQ(so.presence_penalty, -0.5f);
  EXPECT_EQ(so.frequency_penalty, 1.25f);
  const std::vector<std::pair<int32_t, float>> bias = {{5, 2.5f}, {17, -100.f}};  // by id
  EXPECT_EQ(so.logit_bias, bias);
  EXPECT_EQ(Sampling{}.SamplerFor(99).seed, 99u);
  // n's choices: with a seed, choice 0 has it and the others seeds of their
  // own derived from it (the same every time); without, the caller's.
  EXPECT_EQ(r.sampling.SamplerFor(99, 0).seed, ~uint64_t{0});
  const uint64_t s1 = r.sampling.SamplerFor(99, 1).seed, s2 = r.sampling.SamplerFor(7, 2).seed;
  EXPECT_NE(s1, ~uint64_t{0});
  EXPECT_NE(s2, ~uint64_t{0});
  EXPECT_NE(s1, s2);
  EXPECT_EQ(r.sampling.SamplerFor(5, 1).seed, s1);
  EXPECT_EQ(Sampling{}.SamplerFor(42, 3).seed, 42u);
  // max_completion_tokens wins over max_tokens.
  ASSERT_FALSE(Chat(Base({{"max_tokens", 7}, {"max_completion_tokens", 9}}), &r));
  EXPECT_EQ(*r.sampling.max_tokens, 9);
  // null is absent.
  ASSERT_FALSE(Chat(Base({{"temperature", nullptr}, {"stop", nullptr}}), &r));
  EXPECT_EQ(r.sampling.temperature, 1.0);
}

TEST(Request, EachParameterTypeAndRange) {
  struct Case {
    json kv;
    std::string param;  // "" = accepted
  };
  const std::vector<Case> cases = {
      {{{"max_tokens", 1}}, ""},
      {{{"max_tokens", 0}}, "max_tokens"},
      {{{"max_tokens", "5"}}, "max_tokens"},
      {{{"max_tokens", 1.5}}, "max_tokens"},
      {{{"max_tokens", 4.0}}, ""},
      {{{"max_completion_tokens", -3}}, "max_completion_tokens"},
      {{{"temperature", 2}}, ""},
      {{{"temperature", 2.01}}, "temperature"},
      {{{"temperature", -0.1}}, "temperature"},
      {{{"temperature", "hot"}}, "temperature"},
      {{{"top_p", 1}}, ""},
      {{{"top_p", 0}}, "top_p"},
      {{{"top_p", 1.2}}, "top_p"},
      {{{"top_p", true}}, "top_p"},
      {{{"top_k", 0}}, ""},
      {{{"top_k", -1}}, "top_k"},
      {{{"top_k", 2.5}}, "top_k"},
      {{{"seed", 12345678901234LL}}, ""},
      {{{"seed", "1"}}, "seed"},
      {{{"seed", 1e300}}, "seed"},
      {{{"stop", json::array({"a", "b", "c", "d"})}}, ""},
      {{{"stop", json::array({"a", "b", "c", "d", "e"})}}, "stop"},
      {{{"stop", 5}}, "stop"},
      {{{"stop", json::array({"a", 5})}}, "stop"},
      {{{"logprobs", 1}}, "logprobs"},
      {{{"logprobs", true}, {"top_logprobs", 20}}, ""},
      {{{"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs"},
      {{{"logprobs", true}, {"top_logprobs", -1}}, "top_logprobs"},
      {{{"top_logprobs", 2}}, "top_logprobs"},  // needs logprobs
      {{{"stream", "yes"}}, "stream"},
      {{{"ignore_eos", 1}}, "ignore_eos"},
      {{{"stream", true}, {"stream_options", 1}}, "stream_options"},
      {{{"stream", true}, {"stream_options", {{"include_usage", "y"}}}},
       "stream_options.include_usage"},
      {{{"stream_options", {{"include_usage", true}}}}, "stream_options"},  // not streaming
      {{{"n", 1}}, ""},
      {{{"n", 2}}, ""},
      {{{"n", 128}}, ""},  // OpenAI's bounds
      {{{"n", 129}}, "n"},
      {{{"n", 0}}, "n"},
      {{{"n", "1"}}, "n"},
      {{{"presence_penalty", 0.5}}, ""},
      {{{"presence_penalty", 2}}, ""},
      {{{"presence_penalty", -2.01}}, "presence_penalty"},
      {{{"presence_penalty", "1"}}, "presence_penalty"},
      {{{"frequency_penalty", -1}}, ""},
      {{{"frequency_penalty", 3}}, "frequency_penalty"},
      {{{"logit_bias", json::object()}}, ""},
      {{{"logit_bias", {{"50256", -100}}}}, ""},
      {{{"logit_bias", {{"0", 100}, {"2147483647", 1.5}}}}, ""},
      {{{"logit_bias", {{"50256", -100.5}}}}, "logit_bias"},
      {{{"logit_bias", {{"50256", "1"}}}}, "logit_bias"},
      {{{"logit_bias", {{"-1", 1}}}}, "logit_bias"},
      {{{"logit_bias", {{"01", 1}}}}, "logit_bias"},
      {{{"logit_bias", {{"1.0", 1}}}}, "logit_bias"},
      {{{"logit_bias", {{"", 1}}}}, "logit_bias"},
      {{{"logit_bias", {{"2147483648", 1}}}}, "logit_bias"},
      {{{"logit_bias", json::array({1})}}, "logit_bias"},
      // Tools are parsed (held to the call markup apart); the legacy
      // functions are refused by name; their empty or default forms pass.
      {{{"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}})}}, ""},
      {{{"tools", json::array()}}, ""},
      {{{"functions", json::array({{{"name", "f"}}})}}, "functions"},
      {{{"tool_choice", "none"}}, ""},
      {{{"tool_choice", "auto"}}, ""},
      {{{"tool_choice", "required"}}, "tool_choice"},  // no tools offered
      {{{"tool_choice", {{"type", "function"}}}}, "tool_choice.function"},
      {{{"function_call", {{"name", "f"}}}}, "function_call"},
      {{{"response_format", {{"type", "text"}}}}, ""},
      {{{"response_format", {{"type", "json_object"}}}}, ""},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}, ""},
      {{{"response_format", {{"type", "json_schema"}}}}, "response_format.json_schema"},
      {{{"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"schema", json::object()}}}}}},
       "response_format.json_schema.name"},
      {{{"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"strict", "yes"}}}}}},
       "response_format.json_schema.strict"},
      {{{"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"name", "x"}, {"schema", {{"type", "string"}, {"format", "date"}}}}}}}},
       "response_format.json_schema.schema"},
      {{{"response_format", {{"type", "xml"}}}}, "response_format.type"},
      {{{"response_format", "json"}}, "response_format"},
      {{{"model", 5}}, "model"},
  };
  for (const Case& c : cases) EXPECT_EQ(ParamOf(c.kv), c.param) << c.kv.dump();
}

// logit_bias's refusals name the key; the ids are checked against the
// model's vocabulary once it is known; at most 300 entries.
TEST(Request, LogitBias) {
  auto e = Chat(Base({{"logit_bias", {{"12abc", 1}}}}));
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("'12abc'"), std::string::npos) << e->message;
  e = Chat(Base({{"logit_bias", {{"42", 101}}}}));
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("'42'"), std::string::npos) << e->message;
  EXPECT_NE(e->message.find("[-100, 100]"), std::string::npos) << e->message;
  json many = json::object();
  for (int i = 0; i < 300; ++i) many[std::to_string(i)] = 1;
  EXPECT_FALSE(Chat(Base({{"logit_bias", many}})));
  many["300"] = 1;
  e = Chat(Base({{"logit_bias", many}}));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "logit_bias");
  ChatRequest r;
  ASSERT_FALSE(Chat(Base({{"logit_bias", {{"99", 1}, {"100", -1}}}}), &r));
  EXPECT_FALSE(CheckLogitBias(r.sampling, 101));
  e = CheckLogitBias(r.sampling, 100);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->param, "logit_bias");
  EXPECT_NE(e->message.find("'100'"), std::string::npos) << e->message;
  EXPECT_NE(e->message.find("0 to 99"), std::string::npos) << e->message;
  // The completions route reads them too.
  CompletionRequest c;
  ASSERT_FALSE(ParseCompletionRequest(
      json({{"prompt", "x"}, {"logit_bias", {{"7", 5}}}, {"frequency_penalty", 0.5}}).dump(), &c));
  EXPECT_EQ(c.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{7, 5.f}}));
  EXPECT_EQ(c.sampling.frequency_penalty, 0.5);
  EXPECT_EQ(
      ParseCompletionRequest(json({{"prompt", "x"}, {"presence_penalty", 9}}).dump(), &c)->param,
      "presence_penalty");
}

TEST(Request, ResponseFormat) {
  ChatRequest q;
  const json strict_schema = {{"type", "object"},
                              {"properties", {{"id", {{"type", "string"}, {"pattern", "^a"}}}}},
                              {"required", {"id"}},
                              {"additionalProperties", false}};
  json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
               {"response_format",
                {{"type", "json_schema"},
                 {"json_schema", {{"name", "ids"}, {"strict", true}, {"schema", strict_schema}}}}}};
  auto e = ParseChatRequest(body.dump(), &q);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "response_format.json_schema.schema");
  EXPECT_NE(e->message.find("unsupported keyword 'pattern' at #/properties/id"), std::string::npos)
      << e->message;
  body["response_format"]["json_schema"]["schema"]["properties"]["id"].erase("pattern");
  body["response_format"]["json_schema"]["schema"]["properties"]["n"] = {{"type", "integer"}};
  e = ParseChatRequest(body.dump(), &q);  // strict: n must be required too
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("strict mode needs every property required"), std::string::npos);
  body["response_format"]["json_schema"]["schema"]["required"] = {"id", "n"};
  ASSERT_FALSE(ParseChatRequest(body.dump(), &q));
  ASSERT_TRUE(q.response_format);
  grammar::JsonMatcher m(q.response_format);
  EXPECT_TRUE(m.Advance(R"({"n": 3, "id": "x"})") && m.finished());
  CompletionRequest c;
  e = ParseCompletionRequest(R"({"prompt":"x","response_format":{"type":"json_object"}})", &c);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "response_format");
}

TEST(Request, Messages) {
  const auto param = [](json messages) {
    auto e = Chat({{"messages", messages}});
    return e ? e->param : std::string();
  };
  EXPECT_EQ(param(json::array()), "messages");
  EXPECT_EQ(param("hi"), "messages");
  EXPECT_EQ(param({1}), "messages[0]");
  EXPECT_EQ(param({{{"content", "x"}}}), "messages[0].role");
  EXPECT_EQ(param({{{"role", 3}, {"content", "x"}}}), "messages[0].role");
  EXPECT_EQ(param({{{"role", "tool"}, {"content", "x"}}}), "messages[0].tool_call_id");
  EXPECT_EQ(param({{{"role", "user"}}}), "messages[0].content");
  EXPECT_EQ(param({{{"role", "user"}, {"content", 5}}}), "messages[0].content");
  EXPECT_EQ(param({{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}),
            "messages[0].content[0].type");
  EXPECT_EQ(param({{{"role", "user"}, {"content", {{{"type", "text"}, {"text", 1}}}}}}),
            "messages[0].content[0].text");
  auto e = Chat({{"messages", {{{"role", "function"}, {"content", "x"}}}}});
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("'function'"), std::string::npos) << e->message;
  ChatRequest r;
  ASSERT_FALSE(
      Chat({{"messages",
             {{{"role", "developer"}, {"content", "be brief"}},
              {{"role", "user"},
               {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
              {{"role", "assistant"}, {"content", "c"}}}}},
           &r));
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].role, "assistant");
}

// Tools, tool_choice, parallel_tool_calls: parsed into the request, every
// bad shape refused naming its field (whether the model's family can honour
// them is the server's check, ToolCallPlan).
TEST(Request, Tools) {
  const json weather = {
      {"type", "function"},
      {"function",
       {{"name", "get_weather"},
        {"description", "Weather now"},
        {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}};
  ChatRequest r;
  // The parameters keep the client's key order (z before a), which the
  // templates print; a sorted parse would not.
  const std::string body =
      R"({"messages": [{"role": "user", "content": "hi"}], "parallel_tool_calls": false,
          "tools": [{"type": "function", "function": {"name": "f-1_x", "parameters":
            {"z": 1, "a": {"y": 2, "b": 3}}}}], "tool_choice": {"type": "function",
          "function": {"name": "f-1_x"}}})";
  ASSERT_FALSE(ParseChatRequest(body, &r));
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].name, "f-1_x");
  EXPECT_EQ(r.tools[0].description, "");
  EXPECT_EQ(r.tools[0].parameters.dump(), R"({"z":1,"a":{"y":2,"b":3}})");
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kFunction);
  EXPECT_EQ(r.tool_choice.function, "f-1_x");
  EXPECT_FALSE(r.parallel_tool_calls);
  ASSERT_FALSE(Chat(Base({{"tools", {weather}}, {"tool_choice", "required"}}), &r));
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kRequired);
  EXPECT_TRUE(r.parallel_tool_calls);
  ASSERT_FALSE(Chat(Base({{"tool_choice", "none"}}), &r));
  EXPECT_EQ(r.tool_choice.mode, ToolChoice::Mode::kNone);
  const auto param = [&](json extra) {
    auto e = Chat(Base(std::move(extra)));
    return e ? e->param : std::string();
  };
  const auto with = [&](const char* key, json value) {
    json t = weather;
    t["function"][key] = std::move(value);
    return json{{"tools", {t}}};
  };
  EXPECT_EQ(param({{"tools", "f"}}), "tools");
  EXPECT_EQ(param({{"tools", {1}}}), "tools[0]");
  EXPECT_EQ(param({{"tools", {{{"function", weather["function"]}}}}}), "tools[0].type");
  EXPECT_EQ(param({{"tools", {{{"type", "web_search"}}}}}), "tools[0].type");
  EXPECT_EQ(param({{"tools", {{{"type", "function"}}}}}), "tools[0].function");
  EXPECT_EQ(param({{"tools", {{{"type", "function"}, {"function", {{"description", "d"}}}}}}}),
            "tools[0].function.name");
  EXPECT_EQ(param(with("name", "has space")), "tools[0].function.name");
  EXPECT_EQ(param(with("name", std::string(65, 'a'))), "tools[0].function.name");
  EXPECT_EQ(param(with("name", "")), "tools[0].function.name");
  EXPECT_EQ(param(with("name", std::string(64, 'a'))), "");
  EXPECT_EQ(param({{"tools", {weather, weather}}}), "tools[1].function.name");
  EXPECT_EQ(param(with("description", 3)), "tools[0].function.description");
  EXPECT_EQ(param(with("parameters", "{}")), "tools[0].function.parameters");
  // strict = true: OpenAI's strict rules on the parameters (additionalProperties
  // false, every property required), refused naming them; a schema that keeps
  // them is accepted.
  EXPECT_EQ(param(with("strict", "yes")), "tools[0].function.strict");
  EXPECT_EQ(param(with("strict", true)), "tools[0].function.parameters");
  EXPECT_EQ(param(with("strict", false)), "");
  {
    json t = weather;
    t["function"]["strict"] = true;
    t["function"]["parameters"]["additionalProperties"] = false;
    EXPECT_EQ(param({{"tools", {t}}}), "tools[0].function.parameters");  // city not required
    t["function"]["parameters"]["required"] = {"city"};
    EXPECT_EQ(param({{"tools", {t}}}), "");
    ChatRequest strict;
    ASSERT_FALSE(Chat(Base({{"tools", {t}}}), &strict));
    ASSERT_EQ(strict.tools.size(), 1u);
    t["function"]["parameters"]["properties"]["city"]["pattern"] = "^P";  // unsupported either way
    const auto e = Chat(Base({{"tools", {t}}}));
    ASSERT_TRUE(e);
    EXPECT_EQ(e->param, "tools[0].function.parameters");
    EXPECT_NE(e->message.find("pattern"), std::string::npos) << e->message;
  }
  EXPECT_EQ(param({{"tools", {weather}}, {"tool_choice", "sometimes"}}), "tool_choice");
  EXPECT_EQ(param({{"tools", {weather}}, {"tool_choice", 1}}), "tool_choice");
  EXPECT_EQ(param({{"tools", {weather}},
                   {"tool_choice", {{"type", "function"}, {"function", {{"name", "other"}}}}}}),
            "tool_choice.function.name");
  EXPECT_EQ(param({{"tools", {weather}}, {"tool_choice", {{"type", "custom"}}}}),
            "tool_choice.type");
  EXPECT_EQ(param({{"tools", {weather}}, {"parallel_tool_calls", "no"}}), "parallel_tool_calls");
}

// An agent's next turn: an assistant's tool calls (content null or absent)
// and the tool results, reasoning_content; every bad shape named.
TEST(Request, ToolCallsAndResults) {
  const json call = {
      {"id", "call_1"},
      {"type", "function"},
      {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}};
  const json user = {{"role", "user"}, {"content", "weather?"}};
  const json result = {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}};
  ChatRequest r;
  ASSERT_FALSE(Chat({{"messages",
                      {user,
                       {{"role", "assistant"},
                        {"content", nullptr},
                        {"reasoning_content", "Look it up."},
                        {"tool_calls", {call}}},
                       result}}},
                    &r));
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "");
  EXPECT_EQ(r.messages[1].reasoning, "Look it up.");
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "call_1");
  EXPECT_EQ(r.messages[2].name, "get_weather");
  EXPECT_EQ(r.messages[2].content, "sunny");
  // Content absent beside the calls, as the openai client sends it.
  ASSERT_FALSE(
      Chat({{"messages", {user, {{"role", "assistant"}, {"tool_calls", {call}}}, result}}}));
  const auto param = [&](json assistant, json tool = nullptr) {
    json msgs = {user, assistant};
    if (!tool.is_null()) msgs.push_back(tool);
    auto e = Chat({{"messages", msgs}});
    return e ? e->param : std::string();
  };
  const auto calling = [&](json calls) {
    return json{{"role", "assistant"}, {"tool_calls", std::move(calls)}};
  };
  const auto call_with = [&](const char* key, json value) {
    json c = call;
    if (value.is_null())
      c.erase(key);
    else
      c[key] = std::move(value);
    return calling({c});
  };
  const auto fn_with = [&](const char* key, json value) {
    json c = call;
    if (value.is_null())
      c["function"].erase(key);
    else
      c["function"][key] = std::move(value);
    return calling({c});
  };
  EXPECT_EQ(param({{"role", "assistant"}}), "messages[1].content");
  EXPECT_EQ(param(calling("x")), "messages[1].tool_calls");
  EXPECT_EQ(param(calling(json::array())), "messages[1].tool_calls");
  EXPECT_EQ(param(calling({1})), "messages[1].tool_calls[0]");
  EXPECT_EQ(param(call_with("id", nullptr)), "messages[1].tool_calls[0].id");
  EXPECT_EQ(param(call_with("id", 7)), "messages[1].tool_calls[0].id");
  EXPECT_EQ(param(call_with("type", "custom")), "messages[1].tool_calls[0].type");
  EXPECT_EQ(param(call_with("function", nullptr)), "messages[1].tool_calls[0].function");
  EXPECT_EQ(param(fn_with("name", nullptr)), "messages[1].tool_calls[0].function.name");
  EXPECT_EQ(param(fn_with("arguments", json{{"city", "Paris"}})),
            "messages[1].tool_calls[0].function.arguments");
  EXPECT_EQ(param({{"role", "assistant"}, {"content", "x"}, {"reasoning_content", 1}}),
            "messages[1].reasoning_content");
  EXPECT_EQ(param({{"role", "assistant"}, {"content", "x"}, {"function_call", {{"name", "f"}}}}),
            "messages[1].function_call");
  // A result answers a call of the assistant message before the results.
  EXPECT_EQ(param(calling({call}), {{"role", "tool"}, {"content", "sunny"}}),
            "messages[2].tool_call_id");
  EXPECT_EQ(
      param(calling({call}), {{"role", "tool"}, {"tool_call_id", "call_9"}, {"content", "x"}}),
      "messages[2].tool_call_id");
  EXPECT_EQ(param({{"role", "assistant"}, {"content", "no calls"}}, result),
            "messages[2].tool_call_id");
  EXPECT_EQ(param(calling({call}), {{"role", "tool"}, {"tool_call_id", "call_1"}}),
            "messages[2].content");
  EXPECT_EQ(param(calling({call}), result), "");
}

// Thinking per request (chat_template_kwargs) and harmony's reasoning effort.
TEST(Request, ThinkingAndReasoningEffort) {
  ChatRequest r;
  ASSERT_FALSE(Chat(Base(), &r));
  EXPECT_FALSE(r.thinking);
  EXPECT_EQ(r.reasoning_effort, "");
  ASSERT_FALSE(Chat(
      Base({{"chat_template_kwargs", {{"enable_thinking", true}}}, {"reasoning_effort", "high"}}),
      &r));
  EXPECT_EQ(r.thinking, true);
  EXPECT_EQ(r.reasoning_effort, "high");
  ASSERT_FALSE(Chat(Base({{"chat_template_kwargs", {{"thinking", false}}}}), &r));
  EXPECT_EQ(r.thinking, false);
  EXPECT_EQ(ParamOf({{"chat_template_kwargs", {{"enable_thinking", "yes"}}}}),
            "chat_template_kwargs.enable_thinking");
  EXPECT_EQ(ParamOf({{"chat_template_kwargs", {{"enable_thinking", true}, {"thinking", false}}}}),
            "chat_template_kwargs.thinking");
  EXPECT_EQ(ParamOf({{"chat_template_kwargs", {{"custom_instructions", "x"}}}}),
            "chat_template_kwargs.custom_instructions");
  EXPECT_EQ(ParamOf({{"chat_template_kwargs", "on"}}), "chat_template_kwargs");
  EXPECT_EQ(ParamOf({{"reasoning_effort", "max"}}), "reasoning_effort");
  EXPECT_EQ(ParamOf({{"reasoning_effort", 2}}), "reasoning_effort");
}

TEST(Request, BodiesThatAreNotRequests) {
  ChatRequest r;
  for (const char* body : {"", "{", "[1]", "null", "\"x\"", "{\"messages\": [}", "{\"a\":1}{"}) {
    auto e = ParseChatRequest(body, &r);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400);
  }
  std::string deep(100000, '[');
  EXPECT_TRUE(ParseChatRequest(deep, &r));
  auto e = ParseChatRequest("{}", &r);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages");
  EXPECT_EQ(e->code, "missing_required_parameter");
}

// Invalid UTF-8 is a 400 that says so (by offset, never quoting the bytes),
// on both routes; an error message that quotes a request cut inside a
// character still dumps (nlohmann's dump throws on invalid UTF-8: a 500).
TEST(Request, BodiesThatAreNotUtf8) {
  const std::string chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"caf\xE9\"}]}";
  const std::string completion = "{\"prompt\": \"\xFF\xFE\"}";
  ChatRequest c;
  CompletionRequest p;
  for (const auto& e : {ParseChatRequest(chat, &c), ParseCompletionRequest(completion, &p)}) {
    ASSERT_TRUE(e);
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->code, "invalid_utf8");
    EXPECT_NE(e->message.find("not valid UTF-8"), std::string::npos) << e->message;
    EXPECT_NO_THROW(e->ToJson().dump());
  }
  EXPECT_NE(ParseChatRequest(chat, &c)->message.find("offset 46"), std::string::npos);
  EXPECT_NE(ParseCompletionRequest(completion, &p)->message.find("offset 12"), std::string::npos);
  std::string role = "a";
  for (int i = 0; i < 30; ++i) role += "\xC3\xA9";  // é: cut inside one at 40 bytes
  auto e = Chat({{"messages", {{{"role", role}, {"content", "x"}}}}});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "messages[0].role");
  std::string dumped;
  EXPECT_NO_THROW(dumped = e->ToJson().dump());
  EXPECT_NE(dumped.find("\xEF\xBF\xBD"), std::string::npos) << dumped;  // U+FFFD
}

TEST(Request, Completions) {
  CompletionRequest r;
  const auto parse = [&](json b) {
    auto e = ParseCompletionRequest(b.dump(), &r);
    return e ? e->param : std::string("ok");
  };
  EXPECT_EQ(parse({{"prompt", "once upon"}}), "ok");
  EXPECT_EQ(r.prompt, "once upon");
  EXPECT_FALSE(r.sampling.logprobs);
  EXPECT_EQ(parse({{"prompt", {"one"}}, {"logprobs", 2}}), "ok");
  EXPECT_EQ(r.prompt, "one");
  EXPECT_TRUE(r.sampling.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 2);
  EXPECT_EQ(parse({{"prompt", {"one"}}, {"logprobs", 0}}), "ok");
  EXPECT_TRUE(r.sampling.logprobs);
  EXPECT_EQ(parse({{"prompt", "x"}, {"logprobs", true}}), "logprobs");
  EXPECT_EQ(parse({{"prompt", "x"}, {"logprobs", 21}}), "logprobs");
  EXPECT_EQ(parse(json::object()), "prompt");
  EXPECT_EQ(parse({{"prompt", 5}}), "prompt");
  EXPECT_EQ(parse({{"prompt", {1, 2, 3}}}), "prompt");
  EXPECT_EQ(parse({{"prompt", {"a", "b"}}}), "prompt");
  EXPECT_EQ(parse({{"prompt", json::array()}}), "prompt");
  EXPECT_EQ(parse({{"prompt", "x"}, {"echo", true}}), "echo");
  EXPECT_EQ(parse({{"prompt", "x"}, {"best_of", 2}}), "best_of");
  EXPECT_EQ(parse({{"prompt", "x"}, {"suffix", "y"}}), "suffix");
  EXPECT_EQ(parse({{"prompt", "x"}, {"n", 3}}), "ok");
  EXPECT_EQ(parse({{"prompt", "x"}, {"n", 0}}), "n");
  auto e = ParseCompletionRequest(json({{"prompt", {1, 2}}}).dump(), &r);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("token ids"), std::string::npos) << e->message;
}

TEST(Errors, OpenAIsShapeAndStatus) {
  auto e = Chat(Base({{"temperature", "hot"}}));
  ASSERT_TRUE(e);
  const json j = e->ToJson();
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"].size(), 4u);
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_EQ(j["error"]["code"], "invalid_type");
  EXPECT_EQ(j["error"]["message"],
            "Invalid type for 'temperature': expected a number, but got a string instead.");
  const ApiError plain = BadRequest("x");
  EXPECT_TRUE(plain.ToJson()["error"]["param"].is_null());
  EXPECT_TRUE(plain.ToJson()["error"]["code"].is_null());
  EXPECT_EQ(UnknownModel("gpt-9").status, 404);
  EXPECT_EQ(UnknownModel("gpt-9").code, "model_not_found");
  EXPECT_EQ(BodyTooLarge(1024).status, 413);
  EXPECT_EQ(Busy().status, 503);
  EXPECT_EQ(Busy().type, "server_error");
  const ApiError ctx = ContextExceeded(100, 30, 64);
  EXPECT_EQ(ctx.status, 400);
  EXPECT_EQ(ctx.code, "context_length_exceeded");
  EXPECT_NE(ctx.message.find("64 tokens"), std::string::npos);
}

// ---------------------------------------------------------------- logprobs

TEST(Logprobs, LogSoftmaxWorkedByHand) {
  // logits 0, ln 2, ln 3, 0: exp = 1, 2, 3, 1, sum 7.
  const float l[] = {0.f, std::log(2.f), std::log(3.f), 0.f};
  const StepLogprobs s = LogprobsOf(l, 1, 3);
  EXPECT_EQ(s.chosen.id, 1);
  EXPECT_NEAR(s.chosen.logprob, std::log(2.0 / 7.0), 1e-7);
  ASSERT_EQ(s.top.size(), 3u);
  EXPECT_EQ(s.top[0].id, 2);
  EXPECT_NEAR(s.top[0].logprob, std::log(3.0 / 7.0), 1e-7);
  EXPECT_EQ(s.top[1].id, 1);
  EXPECT_EQ(s.top[2].id, 0);  // tie with id 3: the lowest id first
  EXPECT_NEAR(s.top[2].logprob, -std::log(7.0), 1e-7);
  // Large logits do not overflow (the max is taken out first).
  const float big[] = {1000.f, 1000.f};
  EXPECT_NEAR(LogprobsOf(big, 0, 0).chosen.logprob, -std::log(2.0), 1e-12);
  EXPECT_TRUE(LogprobsOf(big, 0, 0).top.empty());
  EXPECT_EQ(LogprobsOf(big, 0, 50).top.size(), 2u);
}

// --------------------------------------------------------------- a tokenizer

// A tiny tokenizer: every byte, "hel", "lo", the two halves of "é" apart
// (0xC3, 0xA9 are single bytes already), "\xF0\x9F" (half an emoji), and two
// specials: <|im_end|> and <|other|>.
class Reply : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = waste::testing::ScratchDir();
    std::string model;
    int rank = 0;
    for (int b = 0; b < 256; ++b)
      model += tokenizer::Base64Encode(std::string(1, static_cast<char>(b))) + " " +
               std::to_string(rank++) + "\n";
    for (const char* t : {"hel", "lo", "\xF0\x9F"})
      model += tokenizer::Base64Encode(t) + " " + std::to_string(rank++) + "\n";
    std::ofstream(dir_ + "/tokenizer.model") << model;
    std::ofstream(dir_ + "/specials.json")
        << R"([{"id": 259, "text": "<|im_end|>"}, {"id": 260, "text": "<|other|>"}])";
    auto tok = Tokenizer::Load(dir_);
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    tok_.emplace(std::move(*tok));
  }
  int Id(const std::string& text) {
    const auto ids = tok_->EncodeMarkup(text);
    EXPECT_EQ(ids.size(), 1u) << text;
    return ids.empty() ? -1 : ids[0];
  }
  // Feeds the ids; the pieces returned, one a token ("" when held back).
  std::vector<std::string> Run(ReplyText& r, const std::vector<int>& ids) {
    std::vector<std::string> out;
    for (int id : ids) out.push_back(r.Feed(id));
    return out;
  }
  std::string dir_;
  std::optional<Tokenizer> tok_;
};

// With reply_after (harmony's final channel), only what follows that markup
// is the reply: the channel before it, the markup itself, and what a later
// special opens, are not shown.
TEST_F(Reply, OnlyTheTextAfterReplyAfterIsShown) {
  ReplyText r(*tok_, {259}, {}, "<|other|>fin<|other|>");
  std::string shown;
  for (int id : tok_->EncodeMarkup("think<|other|>fin<|other|>hello<|other|>more"))
    shown += r.Feed(id);
  shown += r.Feed(259);
  EXPECT_EQ(shown, "hello");
  EXPECT_TRUE(r.done());
  // Without it every token but a special is shown, as before.
  ReplyText plain(*tok_, {259}, {});
  std::string all;
  for (int id : tok_->EncodeMarkup("think<|other|>fin")) all += plain.Feed(id);
  EXPECT_EQ(all + plain.Flush(), "thinkfin");
}

TEST_F(Reply, ATokenEndingInsideACharacterWaits) {
  ReplyText r(*tok_, {259}, {});
  // "é" = C3 A9 as two tokens, then half an emoji (F0 9F) and its rest (98 80).
  const auto out = Run(r, {Id("a"), 0xC3, 0xA9, 256 + 2, 0x98, 0x80, Id("b")});
  EXPECT_EQ(out, (std::vector<std::string>{"a", "", "\xC3\xA9", "", "", "\xF0\x9F\x98\x80", "b"}));
  // Held at the end: a lead byte that never completed becomes U+FFFD.
  EXPECT_EQ(r.Feed(0xE2), "");
  EXPECT_EQ(r.Flush(), "\xEF\xBF\xBD");
  EXPECT_FALSE(r.done());
  // A byte that can never start a character is not waited on.
  ReplyText bad(*tok_, {}, {});
  EXPECT_EQ(bad.Feed(0xFF), "\xEF\xBF\xBD");
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(CompleteUtf8Prefix("\x80\x80"), 2u);
}

TEST_F(Reply, StopStringsAcrossTokens) {
  ReplyText r(*tok_, {259}, {"lo w", "xyz"});
  // "hel" "lo" " " "w" "!": the stop "lo w" spans three tokens. Each "l"
  // waits (it may start the stop): "he" goes, then the first "l"; "lo" and
  // " " wait, and nothing from the stop on is ever sent.
  const auto out = Run(r, {256, 257, Id(" "), Id("w"), Id("!")});
  EXPECT_EQ(out, (std::vector<std::string>{"he", "l", "", "", ""}));
  EXPECT_TRUE(r.done());
  EXPECT_EQ(r.Flush(), "");
  // A held prefix that turns out not to be the stop is released.
  ReplyText s(*tok_, {259}, {"xyz"});
  EXPECT_EQ(Run(s, {Id("x"), Id("y"), Id("a")}), (std::vector<std::string>{"", "", "xya"}));
  EXPECT_EQ(s.Feed(Id("x")), "");
  EXPECT_EQ(s.Flush(), "x");  // the end of generation releases it
}

TEST_F(Reply, EndOfTurnAndSpecialsNeverShow) {
  ReplyText r(*tok_, {259}, {"xyz"});
  EXPECT_EQ(r.Feed(Id("a")), "a");
  EXPECT_EQ(r.Feed(260), "");  // another special: no markup in the reply
  EXPECT_EQ(r.Feed(Id("x")), "");
  EXPECT_EQ(r.Feed(259), "x");  // the end releases what was held, shows nothing of itself
  EXPECT_TRUE(r.done());
  EXPECT_EQ(r.Feed(Id("b")), "");
}

// A short made-up streamed chat: the chunks in order, then the SSE bytes.
TEST_F(Reply, StreamedChatChunks) {
  const AnswerHead h{"chatcmpl-1", 1700000000, "tiny"};
  ReplyText reply(*tok_, {259}, {});
  std::vector<json> chunks = {ChatRoleChunk(h, 0)};
  int completion = 0;
  for (int id : {256, 257, 0xC3, 0xA9, 259}) {
    ++completion;
    const std::string text = reply.Feed(id);
    if (!text.empty()) chunks.push_back(ChatContentChunk(h, 0, text, nullptr));
    if (reply.done()) break;
  }
  chunks.push_back(ChatFinishChunk(h, 0, reply.done() ? Finish::kStop : Finish::kLength));
  chunks.push_back(UsageChunk(h, "chat.completion.chunk", {5, completion}));
  ASSERT_EQ(chunks.size(), 6u);
  for (const json& c : chunks) {
    EXPECT_EQ(c["id"], "chatcmpl-1");
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["created"], 1700000000);
    EXPECT_EQ(c["model"], "tiny");
  }
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(chunks[0]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(chunks[1]["choices"][0]["delta"], (json{{"content", "hel"}}));
  EXPECT_EQ(chunks[2]["choices"][0]["delta"], (json{{"content", "lo"}}));
  EXPECT_EQ(chunks[3]["choices"][0]["delta"], (json{{"content", "\xC3\xA9"}}));
  EXPECT_EQ(chunks[4]["choices"][0]["delta"], json::object());
  EXPECT_EQ(chunks[4]["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(chunks[5]["choices"], json::array());
  EXPECT_EQ(chunks[5]["usage"],
            (json{{"prompt_tokens", 5}, {"completion_tokens", 5}, {"total_tokens", 10}}));
  std::string sse;
  for (const json& c : chunks) sse += SseEvent(c);
  sse += kSseDone;
  EXPECT_EQ(
      sse.rfind("data: {\"choices\":[{\"delta\":{\"content\":\"\",\"role\":\"assistant\"}", 0), 0u)
      << sse.substr(0, 120);
  EXPECT_EQ(sse.substr(sse.size() - 14), "data: [DONE]\n\n");
  size_t events = 0;
  for (size_t p = 0; (p = sse.find("\n\n", p)) != std::string::npos; p += 2) ++events;
  EXPECT_EQ(events, 7u);
  EXPECT_EQ(SseEvent(json("\xC3")), "data: \"\xEF\xBF\xBD\"\n\n");  // never invalid UTF-8 out
}

TEST_F(Reply, WholeAnswersAndLogprobs) {
  const AnswerHead h{"cmpl-2", 7, "tiny"};
  const float logits[] = {0.f, std::log(3.f)};  // two-token toy distribution: 1/4, 3/4
  std::vector<LoggedToken> toks = {{256, LogprobsOf(logits, 1, 2)},
                                   {0xC3, LogprobsOf(logits, 0, 1)}};
  const json chat_lp = ChatLogprobs(*tok_, toks);
  ASSERT_EQ(chat_lp["content"].size(), 2u);
  EXPECT_EQ(chat_lp["content"][0]["token"], "hel");
  EXPECT_NEAR(chat_lp["content"][0]["logprob"].get<double>(), std::log(0.75), 1e-7);
  EXPECT_EQ(chat_lp["content"][0]["bytes"], (json{104, 101, 108}));
  EXPECT_EQ(chat_lp["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(chat_lp["content"][0]["top_logprobs"][0]["bytes"], json{1});
  EXPECT_EQ(chat_lp["content"][1]["token"], "\xEF\xBF\xBD");  // half a character
  EXPECT_EQ(chat_lp["content"][1]["bytes"], json{0xC3});
  const json c = ChatCompletion(
      h, {ChatChoice(0, {.content = "hel\xC3\xA9"}, chat_lp, Finish::kLength)}, {3, 2});
  EXPECT_EQ(c["object"], "chat.completion");
  EXPECT_EQ(c["choices"][0]["message"], (json{{"role", "assistant"}, {"content", "hel\xC3\xA9"}}));
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["choices"][0]["index"], 0);
  EXPECT_EQ(c["usage"]["total_tokens"], 5);

  const json text_lp = CompletionLogprobs(*tok_, toks, 4);
  EXPECT_EQ(text_lp["tokens"], (json{"hel", "\xEF\xBF\xBD"}));
  EXPECT_EQ(text_lp["text_offset"], (json{4, 7}));
  EXPECT_EQ(text_lp["top_logprobs"][1].size(), 1u);
  const json t = TextCompletion(h, {TextChoice(0, "hel", text_lp, Finish::kStop)}, {1, 1});
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["choices"][0]["text"], "hel");
  EXPECT_EQ(t["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(TextChunk(h, 0, "x", nullptr, std::nullopt)["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(TextChunk(h, 0, "", nullptr, Finish::kLength)["choices"][0]["finish_reason"], "length");
  // n's choices: each whole choice and each chunk carries its index.
  const json two = TextCompletion(
      h, {TextChoice(0, "a", nullptr, Finish::kStop), TextChoice(1, "b", nullptr, Finish::kLength)},
      {4, 3});
  EXPECT_EQ(two["choices"][1]["index"], 1);
  EXPECT_EQ(two["choices"][1]["text"], "b");
  EXPECT_EQ(two["usage"]["total_tokens"], 7);
  EXPECT_EQ(TextChunk(h, 2, "x", nullptr, std::nullopt)["choices"][0]["index"], 2);
  EXPECT_EQ(ChatRoleChunk(h, 1)["choices"][0]["index"], 1);
  EXPECT_EQ(ChatContentChunk(h, 3, "x", nullptr)["choices"][0]["index"], 3);
  EXPECT_EQ(ChatFinishChunk(h, 2, Finish::kStop)["choices"][0]["index"], 2);

  const std::string names[] = {"tiny", "other"};
  const json models = ModelList(names, 5);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][1],
            (json{{"id", "other"}, {"object", "model"}, {"created", 5}, {"owned_by", "waste"}}));
}

TEST_F(Reply, CompletionPromptHasTheTemplatesBos) {
  ChatFormat f;
  f.bos = "<|other|>";
  EXPECT_EQ(CompletionPrompt(&f, *tok_, "a<|im_end|>"),
            (std::vector<int32_t>{260, 'a', '<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>'}));
  EXPECT_EQ(CompletionPrompt(nullptr, *tok_, "a"), std::vector<int32_t>{'a'});
}

}  // namespace
}  // namespace waste::serve
