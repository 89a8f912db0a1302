// serve/responses.h: OpenAI's Responses requests parsed into the neutral
// conversation (instructions, a string or items: messages, function calls
// and their outputs, reasoning), every refusal naming its field; the
// response and its stream written from synthetic reply events (text,
// reasoning, function calls): each event's type, sequence numbers in order,
// and the stream's items equal to the whole response's, and both equal to
// what the openai client's own types checked (tests/fixtures/agent_apis/).
#include "serve/responses.h"

#include <gtest/gtest.h>

#include <utility>

#include "tests/test_util.h"

namespace waste::serve {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;  // request bodies, in the client's key order
using Kind = ReplyEvent::Kind;

ojson Base(ojson extra = ojson::object()) {
  ojson b = {{"model", "m"}, {"input", "hi"}};
  b.update(extra);
  return b;
}

std::optional<ApiError> Parse(const ojson& body, ResponsesRequest* out = nullptr) {
  ResponsesRequest r;
  return ParseResponsesRequest(body.dump(), out ? out : &r);
}

std::string Refused(const ojson& body) {
  const auto e = Parse(body);
  if (!e) return "";
  EXPECT_EQ(e->status, 400) << e->message;
  EXPECT_EQ(e->type, "invalid_request_error");
  return e->param;
}

TEST(ResponsesRequest, AStringOrItemsIntoTheConversation) {
  ResponsesRequest r;
  ASSERT_FALSE(Parse(Base({{"instructions", "Be brief."},
                           {"max_output_tokens", 20},
                           {"temperature", 0},
                           {"top_p", 0.5},
                           {"stream", true},
                           {"store", false},
                           {"metadata", {{"k", "v"}}},
                           {"user", "u"},
                           {"parallel_tool_calls", true},
                           {"text", {{"format", {{"type", "text"}}}}},
                           {"truncation", "disabled"}}),
                     &r));
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "hi");
  EXPECT_EQ(*r.sampling.max_tokens, 20);
  EXPECT_EQ(r.sampling.temperature, 0.0);
  EXPECT_EQ(r.sampling.top_p, 0.5);
  EXPECT_TRUE(r.sampling.stream);
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
  EXPECT_EQ(r.echo["max_output_tokens"], 20);
  EXPECT_EQ(r.echo["metadata"], json({{"k", "v"}}));
  EXPECT_EQ(r.echo["tool_choice"], "auto");

  const ojson items = ojson::array(
      {{{"role", "developer"}, {"content", "Rules."}},
       {{"type", "message"},
        {"role", "user"},
        {"content", ojson::array({{{"type", "input_text"}, {"text", "Weather "}},
                                  {{"type", "input_text"}, {"text", "in Paris?"}}})}},
       {{"type", "reasoning"},
        {"id", "rs_1"},
        {"summary", ojson::array()},
        {"content", ojson::array({{{"type", "reasoning_text"}, {"text", "Call it."}}})}},
       {{"type", "function_call"},
        {"call_id", "call_1"},
        {"name", "weather"},
        {"arguments", "{\"city\":\"Paris\"}"}},
       {{"type", "function_call"}, {"call_id", "call_2"}, {"name", "time"}, {"arguments", "{}"}},
       {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "18C"}},
       {{"type", "function_call_output"}, {"call_id", "call_2"}, {"output", "noon"}},
       {{"type", "message"},
        {"role", "assistant"},
        {"id", "msg_1"},
        {"status", "completed"},
        {"content", ojson::array({{{"type", "output_text"},
                                   {"text", "18C at noon."},
                                   {"annotations", ojson::array()}}})}},
       {{"role", "user"}, {"content", "Thanks"}}});
  ASSERT_FALSE(Parse(
      Base({{"input", items},
            {"tools",
             ojson::array({{{"type", "function"},
                            {"name", "weather"},
                            {"description", "Gets it."},
                            {"parameters", {{"type", "object"}, {"properties", ojson::object()}}},
                            {"strict", false}}})},
            {"tool_choice", "auto"}}),
      &r))
      << Parse(Base({{"input", items}}))->message;
  ASSERT_EQ(r.messages.size(), 7u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "Weather in Paris?");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[2].reasoning, "Call it.");
  ASSERT_EQ(r.messages[2].tool_calls.size(), 2u);
  EXPECT_EQ(r.messages[2].tool_calls[0].id, "call_1");
  EXPECT_EQ(r.messages[2].tool_calls[0].name, "weather");
  EXPECT_EQ(r.messages[2].tool_calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(r.messages[2].tool_calls[1].name, "time");
  EXPECT_EQ(r.messages[3].role, "tool");
  EXPECT_EQ(r.messages[3].tool_call_id, "call_1");
  EXPECT_EQ(r.messages[3].content, "18C");
  EXPECT_EQ(r.messages[4].tool_call_id, "call_2");
  EXPECT_EQ(r.messages[5].role, "assistant");
  EXPECT_EQ(r.messages[5].content, "18C at noon.");
  EXPECT_EQ(r.messages[6].content, "Thanks");
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].parameters.dump(), R"({"type":"object","properties":{}})");
  EXPECT_EQ(r.echo["tools"][0]["name"], "weather");
}

TEST(ResponsesRequest, EveryRefusalNamesItsField) {
  auto item = [](json i) { return json{{"input", json::array({i})}}; };
  json no_input = Base();
  no_input.erase("input");
  EXPECT_EQ(Refused(no_input), "input");
  EXPECT_EQ(Refused(Base({{"input", 3}})), "input");
  EXPECT_EQ(Refused(Base({{"input", json::array()}})), "input");
  EXPECT_EQ(Refused(Base({{"model", 1}})), "model");
  EXPECT_EQ(Refused(Base({{"max_output_tokens", 0}})), "max_output_tokens");
  EXPECT_EQ(Refused(Base({{"temperature", 2.5}})), "temperature");
  EXPECT_EQ(Refused(Base({{"top_p", 1.5}})), "top_p");
  EXPECT_EQ(Refused(Base({{"stream", 1}})), "stream");
  EXPECT_EQ(Refused(Base({{"instructions", 1}})), "instructions");
  EXPECT_EQ(Refused(Base({{"store", true}})), "store");
  EXPECT_EQ(Refused(Base({{"previous_response_id", "resp_1"}})), "previous_response_id");
  EXPECT_EQ(Refused(Base({{"truncation", "auto"}})), "truncation");
  // text.format: response_format's, flat; the schema compiled, refused by name.
  ResponsesRequest formatted;
  ASSERT_FALSE(Parse(Base({{"text", {{"format", {{"type", "json_object"}}}}}}), &formatted));
  ASSERT_TRUE(formatted.format);
  EXPECT_EQ(formatted.echo["text"]["format"]["type"], "json_object");
  const ojson schema = {{"type", "object"},
                        {"properties", {{"a", {{"type", "integer"}}}}},
                        {"required", {"a"}},
                        {"additionalProperties", false}};
  ASSERT_FALSE(Parse(
      Base({{"text",
             {{"format",
               {{"type", "json_schema"}, {"name", "a"}, {"strict", true}, {"schema", schema}}}}}}),
      &formatted));
  ASSERT_TRUE(formatted.format);
  EXPECT_EQ(Refused(Base({{"text", {{"format", {{"type", "grammar"}}}}}})), "text.format.type");
  EXPECT_EQ(Refused(Base({{"text", {{"format", {{"type", "json_schema"}, {"name", "a"}}}}}})),
            "text.format.schema");
  EXPECT_EQ(Refused(Base({{"text",
                           {{"format",
                             {{"type", "json_schema"},
                              {"name", "a"},
                              {"schema", {{"type", "string"}, {"pattern", "x"}}}}}}}})),
            "text.format.schema");
  EXPECT_EQ(Refused(Base({{"text", {{"format", {{"type", "json_object"}, {"name", "a"}}}}}})),
            "text.format.name");
  EXPECT_EQ(Refused(Base({{"reasoning", {{"effort", "low"}}}})), "reasoning");
  EXPECT_EQ(Refused(Base({{"include", json::array()}})), "include");
  EXPECT_EQ(Refused(Base({{"metadata", 1}})), "metadata");
  EXPECT_EQ(Refused(Base({{"tool_choice", "required"}})), "tool_choice");  // without tools
  EXPECT_EQ(Refused(Base({{"tool_choice", {{"type", "function"}, {"name", "f"}}}})),
            "tool_choice.name");
  EXPECT_EQ(Refused(Base({{"tool_choice", {{"type", "allowed_tools"}}}})), "tool_choice.type");
  // Forced calls and parallel_tool_calls false are honoured (serve/tool_constraint.h).
  const ojson f = ojson::array({{{"type", "function"}, {"name", "f"}}});
  ResponsesRequest forced;
  ASSERT_FALSE(Parse(Base({{"tools", f},
                           {"tool_choice", {{"type", "function"}, {"name", "f"}}},
                           {"parallel_tool_calls", false}}),
                     &forced));
  EXPECT_EQ(forced.tool_choice.mode, ToolChoiceMode::kFunction);
  EXPECT_EQ(forced.tool_choice.function, "f");
  EXPECT_FALSE(forced.tool_choice.parallel);
  EXPECT_EQ(forced.echo["parallel_tool_calls"], false);
  ASSERT_FALSE(Parse(Base({{"tools", f}, {"tool_choice", "required"}}), &forced));
  EXPECT_EQ(forced.tool_choice.mode, ToolChoiceMode::kRequired);
  EXPECT_EQ(Refused(Base({{"tool_choice", "maybe"}})), "tool_choice");
  EXPECT_EQ(Refused(Base({{"tools", json::array({{{"type", "web_search"}}})}})), "tools[0].type");
  EXPECT_EQ(Refused(Base({{"tools", json::array({{{"type", "function"}}})}})), "tools[0].name");
  // strict: OpenAI's strict rules on the parameters, refused naming them.
  EXPECT_EQ(
      Refused(Base(
          {{"tools", json::array({{{"type", "function"}, {"name", "f"}, {"strict", true}}})}})),
      "tools[0].parameters");
  const json strict_ok = {{"type", "object"},
                          {"properties", {{"a", {{"type", "integer"}}}}},
                          {"required", {"a"}},
                          {"additionalProperties", false}};
  json loose = strict_ok;
  loose.erase("required");
  EXPECT_EQ(Refused(Base({{"tools", json::array({{{"type", "function"},
                                                  {"name", "f"},
                                                  {"strict", true},
                                                  {"parameters", loose}}})}})),
            "tools[0].parameters");
  ResponsesRequest strict;
  ASSERT_FALSE(Parse(Base({{"tools", json::array({{{"type", "function"},
                                                   {"name", "f"},
                                                   {"strict", true},
                                                   {"parameters", strict_ok}}})}}),
                     &strict));
  ASSERT_EQ(strict.tools.size(), 1u);
  EXPECT_EQ(
      Refused(Base(
          {{"tools", json::array({{{"type", "function"}, {"name", "f"}, {"parameters", "{}"}}})}})),
      "tools[0].parameters");
  EXPECT_EQ(Refused(Base(item({{"role", "tool"}, {"content", "x"}}))), "input[0].role");
  EXPECT_EQ(Refused(Base(item({{"role", "user"}}))), "input[0].content");
  EXPECT_EQ(Refused(Base(
                item({{"role", "user"},
                      {"content", json::array({{{"type", "input_image"}, {"image_url", "u"}}})}}))),
            "input[0].content[0].type");
  EXPECT_EQ(
      Refused(Base(item({{"role", "user"}, {"content", json::array({{{"type", "input_file"}}})}}))),
      "input[0].content[0].type");
  EXPECT_EQ(Refused(Base(item({{"type", "item_reference"}, {"id", "x"}}))), "input[0].type");
  EXPECT_EQ(Refused(Base(item({{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}}))),
            "input[0].arguments");
  EXPECT_EQ(Refused(Base(item({{"type", "function_call_output"}, {"call_id", "c"}}))),
            "input[0].output");
  EXPECT_EQ(Refused(Base(item({{"type", "function_call_output"}, {"output", "x"}}))),
            "input[0].call_id");
  EXPECT_EQ(Refused(Base(item({{"type", "reasoning"}, {"encrypted_content", "x"}}))),
            "input[0].encrypted_content");
}

ReplyEvent Ev(Kind k, std::string text = "", std::string name = "", std::string id = "") {
  ReplyEvent e;
  e.kind = k;
  e.text = std::move(text);
  e.name = std::move(name);
  e.id = std::move(id);
  return e;
}

std::vector<json> Events(const std::string& sse) {
  std::vector<json> out;
  size_t at = 0;
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    if (end == std::string::npos) {
      ADD_FAILURE() << sse.substr(at);
      break;
    }
    const std::string ev = sse.substr(at, end - at);
    at = end + 2;
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
    out.push_back(json::parse(ev.substr(nl + 7)));
    EXPECT_EQ(ev.substr(7, nl - 7), out.back()["type"]) << ev;
    EXPECT_EQ(out.back()["sequence_number"], out.size() - 1) << ev;
  }
  return out;
}

TEST(ResponseWriter, ReasoningTextAndFunctionCallsWholeAndStreamed) {
  ResponseWriter w("resp_7", "m", 1700000000, {{"tools", json::array()}, {"tool_choice", "auto"}});
  std::string sse = w.Start();
  for (const ReplyEvent& e :
       {Ev(Kind::kReasoning, "Hmm"), Ev(Kind::kReasoning, "."), Ev(Kind::kText, "It is "),
        Ev(Kind::kText, "sunny."), Ev(Kind::kToolCallStart, "", "weather", "call_x"),
        Ev(Kind::kToolCallArgs, "{\"city\""), Ev(Kind::kToolCallArgs, ":\"Paris\"}"),
        Ev(Kind::kToolCallEnd)})
    sse += w.Take(e);
  sse += w.Finish(false, Usage{5, 7});
  const json& r = w.response();
  EXPECT_EQ(r["id"], "resp_7");
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["created_at"], 1700000000);
  EXPECT_EQ(r["status"], "completed");
  EXPECT_EQ(r["incomplete_details"], nullptr);
  EXPECT_EQ(r["tool_choice"], "auto");
  EXPECT_EQ(r["usage"], json({{"input_tokens", 5}, {"output_tokens", 7}, {"total_tokens", 12}}));
  const json want_output =
      json::array({{{"type", "reasoning"},
                    {"id", "rs_7_0"},
                    {"status", "completed"},
                    {"summary", json::array()},
                    {"content", json::array({{{"type", "reasoning_text"}, {"text", "Hmm."}}})}},
                   {{"type", "message"},
                    {"id", "msg_7_1"},
                    {"status", "completed"},
                    {"role", "assistant"},
                    {"content", json::array({{{"type", "output_text"},
                                              {"text", "It is sunny."},
                                              {"annotations", json::array()}}})}},
                   {{"type", "function_call"},
                    {"id", "fc_7_2"},
                    {"status", "completed"},
                    {"call_id", "call_x"},
                    {"name", "weather"},
                    {"arguments", "{\"city\":\"Paris\"}"}}});
  EXPECT_EQ(r["output"], want_output);

  const std::vector<json> events = Events(sse);
  std::vector<std::string> types;
  for (const json& e : events) types.push_back(e["type"]);
  const std::vector<std::string> want_types = {"response.created",
                                               "response.in_progress",
                                               "response.output_item.added",
                                               "response.content_part.added",
                                               "response.reasoning_text.delta",
                                               "response.reasoning_text.delta",
                                               "response.reasoning_text.done",
                                               "response.content_part.done",
                                               "response.output_item.done",
                                               "response.output_item.added",
                                               "response.content_part.added",
                                               "response.output_text.delta",
                                               "response.output_text.delta",
                                               "response.output_text.done",
                                               "response.content_part.done",
                                               "response.output_item.done",
                                               "response.output_item.added",
                                               "response.function_call_arguments.delta",
                                               "response.function_call_arguments.delta",
                                               "response.function_call_arguments.done",
                                               "response.output_item.done",
                                               "response.completed"};
  EXPECT_EQ(types, want_types);
  EXPECT_EQ(events[0]["response"]["status"], "in_progress");
  EXPECT_EQ(events[0]["response"]["output"], json::array());
  // The items as each was done, and the deltas, add up to the whole.
  json done = json::array();
  std::string text;
  for (const json& e : events) {
    if (e["type"] == "response.output_item.done") done.push_back(e["item"]);
    if (e["type"] == "response.output_text.delta") text += e["delta"].get<std::string>();
  }
  EXPECT_EQ(done, want_output);
  EXPECT_EQ(text, "It is sunny.");
  EXPECT_EQ(events[11]["item_id"], "msg_7_1");
  EXPECT_EQ(events[11]["output_index"], 1);
  EXPECT_EQ(events.back()["response"], r);
}

TEST(ResponseWriter, RunningOutOfTokensIsIncompleteAndErrorsAreEvents) {
  ResponseWriter w("resp_8", "m", 1, json::object());
  std::string sse = w.Start();
  sse += w.Take(Ev(Kind::kText, "cut"));
  sse += w.Finish(true, Usage{1, 2});
  EXPECT_EQ(w.response()["status"], "incomplete");
  EXPECT_EQ(w.response()["incomplete_details"], json({{"reason", "max_output_tokens"}}));
  EXPECT_EQ(w.response()["output"][0]["status"], "incomplete");
  const auto events = Events(sse);
  EXPECT_EQ(events.back()["type"], "response.incomplete");

  ResponseWriter f("resp_9", "m", 1, json::object());
  std::string err = f.Start();
  err += f.Error(Busy());
  const auto ev = Events(err);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[2], json({{"type", "error"},
                         {"code", "server_busy"},
                         {"message", Busy().message},
                         {"param", nullptr},
                         {"sequence_number", 2}}));
}

// tests/fixtures/agent_apis/responses.json: the same reply's events and
// response, each checked by the openai client's own types and the stream
// folded by its accumulator (tools/agent_apis/make_fixtures.py).
TEST(ResponseWriter, TheStreamAndResponseTheOpenAIClientChecked) {
  const json fixture = json::parse(
      waste::testing::ReadText(std::string(WASTE_FIXTURES) + "/agent_apis/responses.json"));
  const json echo = {{"instructions", nullptr},      {"tools", json::array()},
                     {"tool_choice", "auto"},        {"parallel_tool_calls", true},
                     {"temperature", 1.0},           {"top_p", 1.0},
                     {"max_output_tokens", nullptr}, {"metadata", json::object()}};
  ResponseWriter w("resp_fixture", "demo", 1700000000, echo);
  std::string sse = w.Start();
  for (const ReplyEvent& e :
       {Ev(Kind::kReasoning, "Hmm"), Ev(Kind::kReasoning, "."), Ev(Kind::kText, "It is "),
        Ev(Kind::kText, "sunny."), Ev(Kind::kToolCallStart, "", "weather", "call_x"),
        Ev(Kind::kToolCallArgs, "{\"city\""), Ev(Kind::kToolCallArgs, ":\"Paris\"}"),
        Ev(Kind::kToolCallEnd)})
    sse += w.Take(e);
  sse += w.Finish(false, Usage{5, 7});
  json events = json::array();
  for (const json& e : Events(sse)) events.push_back({e["type"], e});
  ASSERT_EQ(events.size(), fixture["events"].size());
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i], fixture["events"][i]) << i;
  EXPECT_EQ(w.response(), fixture["whole"]);
}

}  // namespace
}  // namespace waste::serve
