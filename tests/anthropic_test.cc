// serve/anthropic.h: Anthropic's Messages requests parsed into the neutral
// conversation (system, text, tool_use, tool_result and thinking blocks,
// tools, tool_choice, thinking, sampling), every refusal naming its field;
// Anthropic's error shapes and statuses; the message and its stream written
// from synthetic reply events (text, thinking, tool calls): the stream's
// events in Anthropic's order, and the stream folded back (as the anthropic
// client folds it) equal to the whole message, and both equal to what the
// anthropic client's own types checked (tests/fixtures/agent_apis/).
#include "serve/anthropic.h"

#include <gtest/gtest.h>

#include <utility>

#include "tests/test_util.h"

namespace waste::serve {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;  // request bodies, in the client's key order
using Kind = ReplyEvent::Kind;

ojson Base(ojson extra = ojson::object()) {
  ojson b = {
      {"model", "m"}, {"max_tokens", 16}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  b.update(extra);
  return b;
}

std::optional<ApiError> Parse(const ojson& body, MessagesRequest* out = nullptr,
                              bool count_tokens = false) {
  MessagesRequest r;
  return ParseMessagesRequest(body.dump(), count_tokens, out ? out : &r);
}

// The field a refused body names ("" when accepted); the status is 400.
std::string Refused(const ojson& body, bool count_tokens = false) {
  const auto e = Parse(body, nullptr, count_tokens);
  if (!e) return "";
  EXPECT_EQ(e->status, 400) << e->message;
  EXPECT_NE(e->message.find(e->param.empty() ? "" : e->param.substr(0, e->param.find('['))),
            std::string::npos)
      << e->message;
  return e->param;
}

TEST(MessagesRequest, EveryFieldIntoTheConversationAndSampling) {
  MessagesRequest r;
  const ojson body = Base(
      {{"system",
        ojson::array(
            {{{"type", "text"}, {"text", "Be "}},
             {{"type", "text"}, {"text", "brief."}, {"cache_control", {{"type", "ephemeral"}}}}})},
       {"messages",
        ojson::array(
            {{{"role", "user"}, {"content", "Weather in Paris?"}},
             {{"role", "assistant"},
              {"content",
               ojson::array({{{"type", "thinking"}, {"thinking", "Call it."}, {"signature", "s"}},
                             {{"type", "text"}, {"text", "Checking."}},
                             {{"type", "tool_use"},
                              {"id", "toolu_1"},
                              {"name", "weather"},
                              {"input", {{"city", "Paris"}, {"a", 1}}}}})}},
             {{"role", "user"},
              {"content",
               ojson::array(
                   {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "18C"}},
                    {{"type", "tool_result"},
                     {"tool_use_id", "toolu_2"},
                     {"content", ojson::array({{{"type", "text"}, {"text", "down"}}})},
                     {"is_error", true}},
                    {{"type", "text"}, {"text", "And now?"}}})}}})},
       {"tools",
        ojson::array({{{"name", "weather"},
                       {"description", "Gets it."},
                       {"input_schema", {{"type", "object"}, {"properties", ojson::object()}}}}})},
       {"tool_choice", {{"type", "auto"}}},
       {"stop_sequences", {"END", "\n\n"}},
       {"temperature", 0.5},
       {"top_p", 0.9},
       {"top_k", 40},
       {"stream", true},
       {"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}},
       {"max_tokens", 2048},
       {"metadata", {{"user_id", "u"}}}});
  ASSERT_FALSE(Parse(body, &r)) << Parse(body)->message;
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 6u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "Checking.");
  EXPECT_EQ(r.messages[2].reasoning, "Call it.");
  ASSERT_EQ(r.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[2].tool_calls[0].id, "toolu_1");
  EXPECT_EQ(r.messages[2].tool_calls[0].name, "weather");
  // The input's keys in the client's order, not sorted.
  EXPECT_EQ(r.messages[2].tool_calls[0].arguments, R"({"city":"Paris","a":1})");
  EXPECT_EQ(r.messages[3].role, "tool");
  EXPECT_EQ(r.messages[3].tool_call_id, "toolu_1");
  EXPECT_EQ(r.messages[3].content, "18C");
  EXPECT_EQ(r.messages[4].role, "tool");
  EXPECT_EQ(r.messages[4].content, "Error: down");
  EXPECT_EQ(r.messages[5].role, "user");
  EXPECT_EQ(r.messages[5].content, "And now?");
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].name, "weather");
  EXPECT_EQ(r.tools[0].description, "Gets it.");
  EXPECT_EQ(r.tools[0].parameters.dump(), R"({"type":"object","properties":{}})");
  EXPECT_EQ(r.tool_choice.mode, AnthropicToolChoice::Mode::kAuto);
  EXPECT_EQ(r.sampling.stop, (std::vector<std::string>{"END", "\n\n"}));
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_p, 0.9);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_TRUE(r.sampling.stream);
  EXPECT_EQ(*r.sampling.max_tokens, 2048);
  EXPECT_EQ(r.thinking, std::optional<bool>(true));
  EXPECT_EQ(r.thinking_budget, 1024);

  ASSERT_FALSE(
      Parse(Base({{"thinking", {{"type", "disabled"}}}, {"tool_choice", {{"type", "none"}}}}), &r));
  EXPECT_EQ(r.thinking, std::optional<bool>(false));
  EXPECT_EQ(r.tool_choice.mode, AnthropicToolChoice::Mode::kNone);
  ASSERT_FALSE(Parse(Base(), &r));
  EXPECT_FALSE(r.thinking);
  EXPECT_EQ(r.sampling.temperature, 1.0);
  EXPECT_FALSE(r.sampling.stream);
}

TEST(MessagesRequest, EveryRefusalNamesItsField) {
  auto user = [](json block) {
    return json{{"messages", json::array({{{"role", "user"}, {"content", json::array({block})}}})}};
  };
  auto assistant = [](json block) {
    return json{
        {"messages", json::array({{{"role", "user"}, {"content", "q"}},
                                  {{"role", "assistant"}, {"content", json::array({block})}},
                                  {{"role", "user"}, {"content", "q"}}})}};
  };
  EXPECT_EQ(Refused(Base()), "");
  json no_max = Base();
  no_max.erase("max_tokens");
  EXPECT_EQ(Refused(no_max), "max_tokens");
  EXPECT_EQ(Refused(no_max, /*count_tokens=*/true), "");
  json no_model = Base();
  no_model.erase("model");
  EXPECT_EQ(Refused(no_model), "model");
  EXPECT_EQ(Refused(Base({{"max_tokens", 0}})), "max_tokens");
  EXPECT_EQ(Refused(Base({{"max_tokens", "8"}})), "max_tokens");
  EXPECT_EQ(Refused(Base({{"temperature", 1.5}})), "temperature");
  EXPECT_EQ(Refused(Base({{"top_p", 0}})), "top_p");
  EXPECT_EQ(Refused(Base({{"top_k", -1}})), "top_k");
  EXPECT_EQ(Refused(Base({{"stream", "yes"}})), "stream");
  EXPECT_EQ(Refused(Base({{"stop_sequences", "END"}})), "stop_sequences");
  EXPECT_EQ(Refused(Base({{"stop_sequences", {"a", 3}}})), "stop_sequences[1]");
  EXPECT_EQ(Refused(Base({{"stop_sequences", {""}}})), "stop_sequences[0]");
  EXPECT_EQ(Refused(Base({{"metadata", "x"}})), "metadata");
  EXPECT_EQ(Refused(Base({{"service_tier", "priority"}})), "service_tier");
  EXPECT_EQ(Refused(Base({{"container", "c"}})), "container");        // not Anthropic's to ignore
  EXPECT_EQ(Refused(Base({{"max_tokens", 1}}), true), "max_tokens");  // not count_tokens'
  EXPECT_EQ(Refused(Base({{"system", 3}})), "system");
  EXPECT_EQ(Refused(Base({{"system", json::array({{{"type", "image"}}})}})), "system[0].type");
  EXPECT_EQ(Refused(Base({{"messages", json::array()}})), "messages");
  EXPECT_EQ(Refused(Base({{"messages", "hi"}})), "messages");
  EXPECT_EQ(Refused(Base({{"messages", json::array({{{"role", "system"}, {"content", "x"}}})}})),
            "messages[0].role");
  EXPECT_EQ(Refused(Base({{"messages", json::array({{{"role", "user"}}})}})),
            "messages[0].content");
  EXPECT_EQ(Refused(Base({{"messages", json::array({{{"role", "user"}, {"content", 1}}})}})),
            "messages[0].content");
  EXPECT_EQ(Refused(Base({{"messages",
                           json::array({{{"role", "user"}, {"content", "x"}, {"name", "n"}}})}})),
            "messages[0].name");
  EXPECT_EQ(
      Refused(Base({{"messages", json::array({{{"role", "user"}, {"content", "x"}},
                                              {{"role", "assistant"}, {"content", "pre"}}})}})),
      "messages[1]");  // a prefilled reply
  EXPECT_EQ(Refused(Base(user({{"type", "image"}, {"source", json::object()}}))),
            "messages[0].content[0].type");
  EXPECT_EQ(Refused(Base(user({{"type", "document"}}))), "messages[0].content[0].type");
  EXPECT_EQ(Refused(Base(user({{"text", "no type"}}))), "messages[0].content[0].type");
  EXPECT_EQ(Refused(Base(user({{"type", "text"}}))), "messages[0].content[0].text");
  EXPECT_EQ(Refused(Base(user({{"type", "text"}, {"text", "x"}, {"citations", {1}}}))),
            "messages[0].content[0].citations");
  EXPECT_EQ(Refused(Base(user(
                {{"type", "tool_use"}, {"id", "t"}, {"name", "f"}, {"input", json::object()}}))),
            "messages[0].content[0].type");  // a user's
  EXPECT_EQ(Refused(Base(user({{"type", "tool_result"}}))), "messages[0].content[0].tool_use_id");
  EXPECT_EQ(Refused(Base(user({{"type", "tool_result"}, {"tool_use_id", "t"}, {"is_error", 1}}))),
            "messages[0].content[0].is_error");
  EXPECT_EQ(Refused(Base(user({{"type", "tool_result"},
                               {"tool_use_id", "t"},
                               {"content", json::array({{{"type", "image"}}})}}))),
            "messages[0].content[0].content[0].type");
  EXPECT_EQ(
      Refused(Base(assistant({{"type", "tool_use"}, {"id", "t"}, {"name", "f"}, {"input", "{}"}}))),
      "messages[1].content[0].input");
  EXPECT_EQ(
      Refused(Base(assistant({{"type", "tool_use"}, {"name", "f"}, {"input", json::object()}}))),
      "messages[1].content[0].id");
  EXPECT_EQ(Refused(Base(assistant({{"type", "redacted_thinking"}, {"data", "x"}}))),
            "messages[1].content[0].type");
  EXPECT_EQ(Refused(Base(assistant({{"type", "tool_result"}, {"tool_use_id", "t"}}))),
            "messages[1].content[0].type");
  EXPECT_EQ(Refused(Base({{"tools", {{"name", "f"}}}})), "tools");
  EXPECT_EQ(Refused(Base({{"tools", json::array({{{"name", "f"}}})}})), "tools[0].input_schema");
  EXPECT_EQ(
      Refused(Base({{"tools", json::array({{{"name", ""}, {"input_schema", json::object()}}})}})),
      "tools[0].name");
  EXPECT_EQ(
      Refused(Base(
          {{"tools", json::array({{{"type", "web_search_20250305"}, {"name", "web_search"}}})}})),
      "tools[0].type");
  const json tools = json::array({{{"name", "f"}, {"input_schema", json::object()}}});
  EXPECT_EQ(Refused(Base({{"tool_choice", {{"type", "sometimes"}}}})), "tool_choice.type");
  EXPECT_EQ(Refused(Base({{"tool_choice", "auto"}})), "tool_choice");
  EXPECT_EQ(Refused(Base({{"tool_choice", {{"type", "any"}}}})), "tool_choice");  // without tools
  EXPECT_EQ(Refused(Base({{"tools", tools}, {"tool_choice", {{"type", "tool"}, {"name", "g"}}}})),
            "tool_choice.name");
  // Forced calls and one call at most are honoured (serve/tool_constraint.h).
  MessagesRequest forced;
  ASSERT_FALSE(Parse(Base({{"tools", tools}, {"tool_choice", {{"type", "any"}}}}), &forced));
  EXPECT_EQ(forced.tool_choice.mode, AnthropicToolChoice::Mode::kAny);
  ASSERT_FALSE(
      Parse(Base({{"tools", tools},
                  {"tool_choice",
                   {{"type", "tool"}, {"name", "f"}, {"disable_parallel_tool_use", true}}}}),
            &forced));
  EXPECT_EQ(forced.tool_choice.mode, AnthropicToolChoice::Mode::kTool);
  EXPECT_EQ(forced.tool_choice.name, "f");
  EXPECT_TRUE(forced.tool_choice.disable_parallel_tool_use);
  EXPECT_EQ(Refused(Base({{"thinking", {{"type", "enabled"}}}})), "thinking.budget_tokens");
  EXPECT_EQ(Refused(Base({{"thinking", {{"type", "enabled"}, {"budget_tokens", 1000}}},
                          {"max_tokens", 4000}})),
            "thinking.budget_tokens");
  EXPECT_EQ(Refused(Base({{"thinking", {{"type", "enabled"}, {"budget_tokens", 2000}}},
                          {"max_tokens", 2000}})),
            "thinking.budget_tokens");  // not below max_tokens
  EXPECT_EQ(Refused(Base({{"thinking", {{"type", "adaptive"}}}})), "thinking.type");
  EXPECT_EQ(Refused(Base({{"thinking", {{"type", "disabled"}, {"budget_tokens", 2000}}}})),
            "thinking.budget_tokens");
}

TEST(MessagesRequest, BodiesThatAreNotJsonObjectsAreRefused) {
  MessagesRequest r;
  for (const char* body : {"", "{", "[]", "3", "{\"model\": \"\xff\"}"}) {
    const auto e = ParseMessagesRequest(body, false, &r);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->status, 400);
  }
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ASSERT_TRUE(ParseMessagesRequest("{\"messages\": " + deep + "}", false, &r));
}

TEST(MessagesRequest, QuotedClientTextIsCutOnWholeCharacters) {
  std::string e_acute;  // 50 two-byte characters: any cut at an odd byte splits one
  for (int i = 0; i < 50; ++i) e_acute += "\xc3\xa9";
  ojson type = Base();
  type["messages"][0]["content"] = ojson::array({{{"type", "x" + e_acute}}});
  ojson key = Base();
  key["x" + e_acute] = 1;
  for (const ojson& body : {type, key}) {
    const auto e = Parse(body);
    ASSERT_TRUE(e);
    // Strict dumps: they throw on a character cut in two.
    EXPECT_NO_THROW((void)json(e->message).dump()) << e->message;
    EXPECT_NO_THROW((void)json(e->param).dump()) << e->param;
    EXPECT_NO_THROW((void)AnthropicError(*e).dump());
  }
}

TEST(AnthropicErrors, TheTypeFollowsTheStatus) {
  const std::pair<int, const char*> cases[] = {
      {400, "invalid_request_error"}, {401, "authentication_error"}, {404, "not_found_error"},
      {405, "invalid_request_error"}, {413, "request_too_large"},    {500, "api_error"},
      {503, "overloaded_error"}};
  for (const auto& [status, type] : cases) {
    ApiError e = BadRequest("why", "param");
    e.status = status;
    const json j = AnthropicError(e);
    EXPECT_EQ(j, json({{"type", "error"}, {"error", {{"type", type}, {"message", "why"}}}}))
        << status;
    EXPECT_EQ(AnthropicStatus(e), status == 503 ? 529 : status);
  }
}

TEST(AnthropicStopReason, ToolUseThenStopSequenceThenLength) {
  EXPECT_EQ(StopReasonOf(true, "END", true), StopReason::kToolUse);
  EXPECT_EQ(StopReasonOf(false, "END", false), StopReason::kStopSequence);
  EXPECT_EQ(StopReasonOf(false, "", true), StopReason::kMaxTokens);
  EXPECT_EQ(StopReasonOf(false, "", false), StopReason::kEndTurn);
  EXPECT_STREQ(StopReasonName(StopReason::kStopSequence), "stop_sequence");
}

ReplyEvent Ev(Kind k, std::string text = "", int index = -1, std::string name = "",
              std::string id = "") {
  ReplyEvent e;
  e.kind = k;
  e.text = std::move(text);
  e.tool_index = index;
  e.name = std::move(name);
  e.id = std::move(id);
  return e;
}

// The server-sent events of a stream: (event name, data).
std::vector<std::pair<std::string, json>> Events(const std::string& sse) {
  std::vector<std::pair<std::string, json>> out;
  size_t at = 0;
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << sse.substr(at);
    if (end == std::string::npos) break;
    const std::string ev = sse.substr(at, end - at);
    at = end + 2;
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
    out.push_back({ev.substr(7, nl - 7), json::parse(ev.substr(nl + 7))});
    EXPECT_EQ(out.back().first, out.back().second["type"]) << ev;
  }
  return out;
}

// The stream folded back into a message, as the anthropic client's
// accumulator does (message_start's message, blocks started and extended
// by their deltas, input_json parsed at the block's stop, message_delta's
// stop and usage).
json Fold(const std::vector<std::pair<std::string, json>>& events) {
  json m;
  std::string partial;
  for (const auto& [name, d] : events) {
    if (name == "message_start") {
      m = d["message"];
    } else if (name == "content_block_start") {
      EXPECT_EQ(d["index"], m["content"].size());
      m["content"].push_back(d["content_block"]);
    } else if (name == "content_block_delta") {
      json& b = m["content"][d["index"].get<size_t>()];
      const json& delta = d["delta"];
      if (delta["type"] == "text_delta")
        b["text"] = b["text"].get<std::string>() + delta["text"].get<std::string>();
      if (delta["type"] == "thinking_delta")
        b["thinking"] = b["thinking"].get<std::string>() + delta["thinking"].get<std::string>();
      if (delta["type"] == "input_json_delta") partial += delta["partial_json"].get<std::string>();
    } else if (name == "content_block_stop") {
      json& b = m["content"][d["index"].get<size_t>()];
      if (b["type"] == "tool_use") b["input"] = json::parse(std::exchange(partial, ""));
    } else if (name == "message_delta") {
      m["stop_reason"] = d["delta"]["stop_reason"];
      m["stop_sequence"] = d["delta"]["stop_sequence"];
      m["usage"]["output_tokens"] = d["usage"]["output_tokens"];
    }
  }
  return m;
}

TEST(MessageWriter, TextThinkingAndToolCallsWholeAndStreamed) {
  MessageWriter w("msg_1", "m", 12);
  std::string sse = w.Start();
  for (const ReplyEvent& e :
       {Ev(Kind::kReasoning, "Let me "), Ev(Kind::kReasoning, "think."), Ev(Kind::kText, ""),
        Ev(Kind::kText, "Sure"), Ev(Kind::kText, ", calling."),
        Ev(Kind::kToolCallStart, "", 0, "weather", "call_abc"),
        Ev(Kind::kToolCallArgs, "{\"city\": "), Ev(Kind::kToolCallArgs, "\"Paris\"}"),
        Ev(Kind::kToolCallEnd, "", 0), Ev(Kind::kToolCallStart, "", 1, "time", "call_def"),
        Ev(Kind::kToolCallArgs, "{}"), Ev(Kind::kToolCallEnd, "", 1)})
    sse += w.Take(e);
  sse += w.Finish(StopReasonOf(w.called_tool(), "", false), "", 9);
  const json want = {
      {"id", "msg_1"},
      {"type", "message"},
      {"role", "assistant"},
      {"model", "m"},
      {"content",
       json::array({{{"type", "thinking"}, {"thinking", "Let me think."}, {"signature", ""}},
                    {{"type", "text"}, {"text", "Sure, calling."}},
                    {{"type", "tool_use"},
                     {"id", "toolu_abc"},
                     {"name", "weather"},
                     {"input", {{"city", "Paris"}}}},
                    {{"type", "tool_use"},
                     {"id", "toolu_def"},
                     {"name", "time"},
                     {"input", json::object()}}})},
      {"stop_reason", "tool_use"},
      {"stop_sequence", nullptr},
      {"usage", {{"input_tokens", 12}, {"output_tokens", 9}}}};
  EXPECT_EQ(w.message(), want);
  const auto events = Events(sse);
  std::vector<std::string> names;
  for (const auto& [name, data] : events) names.push_back(name);
  const std::vector<std::string> want_names = {"message_start",       "ping",
                                               "content_block_start", "content_block_delta",
                                               "content_block_delta", "content_block_stop",
                                               "content_block_start", "content_block_delta",
                                               "content_block_delta", "content_block_stop",
                                               "content_block_start", "content_block_delta",
                                               "content_block_delta", "content_block_stop",
                                               "content_block_start", "content_block_delta",
                                               "content_block_stop",  "message_delta",
                                               "message_stop"};
  EXPECT_EQ(names, want_names);
  EXPECT_EQ(events[0].second["message"]["content"], json::array());
  EXPECT_EQ(events[0].second["message"]["usage"]["input_tokens"], 12);
  EXPECT_EQ(events[11].second["delta"],
            json({{"type", "input_json_delta"}, {"partial_json", "{\"city\": "}}));
  EXPECT_EQ(events[10].second["content_block"], json({{"type", "tool_use"},
                                                      {"id", "toolu_abc"},
                                                      {"name", "weather"},
                                                      {"input", json::object()}}));
  EXPECT_EQ(Fold(events), want);
}

TEST(MessageWriter, AStopSequenceIsNamedAndAnEmptyReplyHasNoBlocks) {
  MessageWriter w("msg_2", "m", 3);
  std::string sse = w.Start();
  sse += w.Take(Ev(Kind::kText, "Hello"));
  sse += w.Finish(StopReasonOf(w.called_tool(), "END", false), "END", 4);
  EXPECT_EQ(w.message()["stop_reason"], "stop_sequence");
  EXPECT_EQ(w.message()["stop_sequence"], "END");
  EXPECT_EQ(Fold(Events(sse)), w.message());
  const std::string last = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
  EXPECT_EQ(sse.substr(sse.size() - last.size()), last);

  MessageWriter empty("msg_3", "m", 3);
  const std::string none = empty.Start() + empty.Finish(StopReason::kMaxTokens, "", 5);
  EXPECT_EQ(empty.message()["content"], json::array());
  EXPECT_EQ(empty.message()["stop_reason"], "max_tokens");
  EXPECT_EQ(Events(none).size(), 4u);  // message_start, ping, message_delta, message_stop
}

// tests/fixtures/agent_apis/anthropic.json: the same reply's events and
// message, each checked by the anthropic client's own types and the stream
// folded by its accumulator (tools/agent_apis/make_fixtures.py).
TEST(MessageWriter, TheStreamAndMessageTheAnthropicClientChecked) {
  const json fixture = json::parse(
      waste::testing::ReadText(std::string(WASTE_FIXTURES) + "/agent_apis/anthropic.json"));
  MessageWriter w("msg_fixture", "demo", 12);
  std::string sse = w.Start();
  for (const ReplyEvent& e :
       {Ev(Kind::kReasoning, "Let me "), Ev(Kind::kReasoning, "think."), Ev(Kind::kText, "Sure"),
        Ev(Kind::kText, ", calling."), Ev(Kind::kToolCallStart, "", 0, "weather", "call_abc"),
        Ev(Kind::kToolCallArgs, "{\"city\": "), Ev(Kind::kToolCallArgs, "\"Paris\"}"),
        Ev(Kind::kToolCallEnd, "", 0), Ev(Kind::kToolCallStart, "", 1, "time", "call_def"),
        Ev(Kind::kToolCallArgs, "{}"), Ev(Kind::kToolCallEnd, "", 1)})
    sse += w.Take(e);
  sse += w.Finish(StopReasonOf(w.called_tool(), "", false), "", 9);
  json events = json::array();
  for (const auto& [name, data] : Events(sse)) events.push_back({name, data});
  EXPECT_EQ(events, fixture["events"]);
  EXPECT_EQ(w.message(), fixture["whole"]);
}

}  // namespace
}  // namespace waste::serve
