// A chat reply's tokens as events (serve/reply.h ReplyParser) for every
// family's syntax, and OpenAI's chat answer written from them
// (serve/openai.h: reasoning_content, tool_calls, finish_reason). Each reply
// is written as the family's model writes it (the markup its released
// template renders for a past reply, tests/fixtures/chat/*.jinja), encoded
// with the family's fixture tokenizer (its markup specials as their ids),
// then fed token by token, and again one byte a token (every marker and
// UTF-8 character split across tokens): the same events either way, the
// text, reasoning and calls as the model meant them, no markup shown.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <regex>

#include <nlohmann/json.hpp>

#include "engine/convert/tokenizer_import.h"
#include "engine/format/chat.h"
#include "engine/tokenizer/chat.h"
#include "engine/tokenizer/chat_generic.h"
#include "serve/answer_format.h"
#include "serve/openai.h"
#include "serve/reply.h"
#include "serve/thinking_budget.h"
#include "serve/tool_constraint.h"
#include "tests/test_util.h"

namespace waste::serve {
namespace {

using nlohmann::json;
using testing::ReadText;
using testing::WriteText;
namespace fs = std::filesystem;
using Kind = ReplyEvent::Kind;

const std::string kFixtures = std::string(WASTE_FIXTURES);

// A fixture tokenizer.json imported as waste convert imports it.
Tokenizer ImportTokenizer(const std::string& dir) {
  const std::string src = testing::ScratchDir("-src"), out = testing::ScratchDir("-tok");
  fs::copy_file(dir + "/tokenizer.json", src + "/tokenizer.json");
  fs::copy_file(dir + "/tokenizer_config.json", src + "/tokenizer_config.json");
  convert::SourceModel model;
  model.shape.vocab = 1 << 20;
  auto t = convert::ImportTokenizer(src, model);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) std::abort();
  WriteText(out + "/tokenizer.model", t->tokenizer_model);
  if (!t->merges_txt.empty()) WriteText(out + "/merges.txt", t->merges_txt);
  if (!t->pretokenizer_json.empty()) WriteText(out + "/pretokenizer.json", t->pretokenizer_json);
  if (!t->normalizer_json.empty()) WriteText(out + "/normalizer.json", t->normalizer_json);
  WriteText(out + "/specials.json", t->specials_json);
  auto tok = Tokenizer::Load(out);
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  if (!tok.ok()) std::abort();
  return *tok;
}

// The Kimi fixture vocabulary with `specials` (a specials.json's entries).
Tokenizer KimiTokenizer(const json& specials) {
  const std::string dir = testing::ScratchDir("-kimi");
  fs::copy_file(kFixtures + "/tokenizer/tokenizer.model", dir + "/tokenizer.model");
  WriteText(dir + "/specials.json", specials.dump());
  auto t = Tokenizer::Load(dir);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) std::abort();
  return *t;
}

// Each family's tokenizer, loaded once (DeepSeek's takes seconds).
const Tokenizer& Tok(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    if (name == "kimi")  // Kimi's tool-call markers are not among its specials: plain text here
      slot = std::make_unique<Tokenizer>(
          KimiTokenizer(json::parse(ReadText(kFixtures + "/tokenizer/specials.json"))));
    else if (name == "k3")
      slot = std::make_unique<Tokenizer>(
          KimiTokenizer(json::parse(ReadText(kFixtures + "/chat/xtml.json"))["specials"]));
    else if (name == "demo")
      slot = std::make_unique<Tokenizer>(ImportTokenizer(std::string(WASTE_MODELS) + "/demo-moe"));
    else
      slot = std::make_unique<Tokenizer>(ImportTokenizer(kFixtures + "/tokenizer/" + name));
  }
  return *slot;
}

struct Case {
  const Tokenizer* tok;
  ChatFormat chat;
  ReplyOptions options;
};

Case Make(const std::string& tok, ChatFormat chat, std::optional<bool> thinking_open = {},
          std::vector<std::string> stops = {}) {
  const Tokenizer& t = Tok(tok);
  ReplyOptions o;
  for (const std::string& e : chat.end_of_turn) o.end_of_turn.push_back(*t.SpecialId(e));
  o.stops = std::move(stops);
  o.thinking_open = thinking_open;
  return {&t, std::move(chat), std::move(o)};
}

// The events of `ids` fed one at a time, then Flush; consecutive pieces of
// the same kind joined (where tokens fall must not change them).
struct Run {
  std::vector<ReplyEvent> events;
  bool done = false;
};
Run Feed(const Case& c, const std::vector<int32_t>& ids) {
  ReplyParser p(*c.tok, c.chat, c.options);
  Run r;
  const auto take = [&](std::vector<ReplyEvent> es) {
    for (ReplyEvent& e : es) {
      const bool piece = e.kind == Kind::kText || e.kind == Kind::kReasoning;
      EXPECT_TRUE(!piece || !e.text.empty());
      if (piece && !r.events.empty() && r.events.back().kind == e.kind)
        r.events.back().text += e.text;
      else
        r.events.push_back(std::move(e));
    }
  };
  for (int32_t id : ids) take(p.Feed(id));
  take(p.Flush());
  r.done = p.done();
  return r;
}

// The reply's markup with its specials as ids and the rest as content
// (EncodeMarkup), or with every content byte a token of its own.
std::vector<int32_t> Tokens(const Tokenizer& tok, const std::string& reply, bool bytewise) {
  const std::vector<int32_t> ids = tok.EncodeMarkup(reply);
  if (!bytewise) return ids;
  std::map<unsigned char, int32_t> byte_id;
  for (int32_t id = 0; id < tok.n_ranks(); ++id)
    if (tok.TokenBytes(id).size() == 1)
      byte_id[static_cast<unsigned char>(tok.TokenBytes(id)[0])] = id;
  std::vector<int32_t> out;
  for (int32_t id : ids) {
    if (tok.IsSpecial(id)) {
      out.push_back(id);
      continue;
    }
    for (const char b : tok.TokenBytes(id))
      out.push_back(byte_id.at(static_cast<unsigned char>(b)));
  }
  return out;
}

// What a reply showed: its text, reasoning and calls (name, arguments).
struct Shown {
  std::string text, reasoning;
  std::vector<std::pair<std::string, json>> calls;
  bool done = false;
};

Shown Gather(const Run& r) {
  Shown s;
  s.done = r.done;
  int open = -1;
  static const std::regex kId("call_[A-Za-z0-9]{24}");
  std::string args;
  for (const ReplyEvent& e : r.events) {
    switch (e.kind) {
      case Kind::kText:
        EXPECT_EQ(open, -1) << "text inside a call";
        s.text += e.text;
        break;
      case Kind::kReasoning:
        EXPECT_EQ(open, -1) << "reasoning inside a call";
        s.reasoning += e.text;
        break;
      case Kind::kToolCallStart:
        EXPECT_EQ(open, -1);
        EXPECT_EQ(e.tool_index, static_cast<int>(s.calls.size()));
        EXPECT_TRUE(std::regex_match(e.id, kId)) << e.id;
        open = e.tool_index;
        s.calls.push_back({e.name, nullptr});
        args.clear();
        break;
      case Kind::kToolCallArgs:
        EXPECT_EQ(e.tool_index, open);
        args += e.text;
        break;
      case Kind::kToolCallEnd: {
        EXPECT_EQ(e.tool_index, open);
        const json a = json::parse(args, nullptr, false);
        EXPECT_FALSE(a.is_discarded()) << args;
        EXPECT_TRUE(a.is_object()) << args;
        s.calls.back().second = a;
        open = -1;
        break;
      }
    }
  }
  EXPECT_EQ(open, -1) << "a call never ended";
  return s;
}

// Fed as the tokenizer encodes it and one byte a token: the same events
// (their ids aside), and what they show.
Shown Parse(const Case& c, const std::string& reply) {
  const std::vector<int32_t> ids = Tokens(*c.tok, reply, false),
                             split = Tokens(*c.tok, reply, true);
  EXPECT_GT(split.size(), ids.size());
  Run whole = Feed(c, ids);
  Run bytes = Feed(c, split);
  EXPECT_EQ(whole.events.size(), bytes.events.size()) << reply;
  for (size_t i = 0; i < std::min(whole.events.size(), bytes.events.size()); ++i) {
    ReplyEvent a = whole.events[i], b = bytes.events[i];
    if (!a.id.empty()) {
      EXPECT_NE(a.id, b.id);  // fresh for every call
    }
    a.id = b.id = "";
    EXPECT_EQ(a, b) << "event " << i << " of " << reply;
  }
  EXPECT_EQ(whole.done, bytes.done);
  return Gather(whole);
}

using Calls = std::vector<std::pair<std::string, json>>;

TEST(Reply, Qwen3ThinkingThenTwoCalls) {
  // Thinking on: the generation prompt opens bare and the model writes its think block.
  const Case c = Make("qwen3", ChatFormat::Qwen3(true), false);
  const Shown s = Parse(c,
                        "<think>\nThe user wants Paris and Lyon.\n</think>\n\nLet me check both.\n"
                        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                        "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
                        "\"arguments\": {\"city\": \"Lyon\", \"unit\": \"°C\"}}\n</tool_call>"
                        "<|im_end|>");
  EXPECT_EQ(s.reasoning, "The user wants Paris and Lyon.");
  EXPECT_EQ(s.text, "Let me check both.");
  EXPECT_EQ(s.calls, (Calls{{"get_weather", {{"city", "Paris"}}},
                            {"get_weather", {{"city", "Lyon"}, {"unit", "°C"}}}}));
  EXPECT_TRUE(s.done);
}

TEST(Reply, Qwen35ThinkingThenXmlCalls) {
  // Thinking on (the template's default): the prompt opens the think block,
  // the model closes it; each call a <function=..> with its <parameter=..>s,
  // as qwen3.6.jinja renders a past call (over Qwen3's tokenizer fixture).
  const ChatFormat qwen = ChatFormat::Qwen35(true);
  EXPECT_TRUE(ThinkingOpen(qwen, qwen.open));
  EXPECT_FALSE(ThinkingOpen(qwen, ChatFormat::Qwen35().open));
  const Case c = Make("qwen3", qwen);
  const Shown s = Parse(c,
                        "The user wants Paris.\n</think>\n\nLet me check.\n\n<tool_call>\n"
                        "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                        "<parameter=days>\n3\n</parameter>\n<parameter=note>\nnot {json\n"
                        "two lines\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
                        "<function=get_time>\n<parameter=opts>\n{\"tz\": \"CET\"}\n</parameter>\n"
                        "</function>\n</tool_call><|im_end|>");
  EXPECT_EQ(s.reasoning, "The user wants Paris.");
  EXPECT_EQ(s.text, "Let me check.");
  EXPECT_EQ(
      s.calls,
      (Calls{{"get_weather", {{"city", "Paris"}, {"days", 3}, {"note", "not {json\ntwo lines"}}},
             {"get_time", {{"opts", {{"tz", "CET"}}}}}}));
  EXPECT_TRUE(s.done);
}

TEST(Reply, Qwen3ThinkingOffIsAllText) {
  // The prompt's empty think block closed it: "<think>" is not in the reply,
  // and text that only looks like the start of a marker stays text.
  const Case c = Make("qwen3", ChatFormat::Qwen3(true));
  EXPECT_FALSE(ThinkingOpen(c.chat, c.chat.open));
  const Shown s = Parse(c, "Use a <thinking> tag, or <tool_ for short.\n<|im_end|>ignored");
  EXPECT_EQ(s.text, "Use a <thinking> tag, or <tool_ for short.\n");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_TRUE(s.calls.empty());
}

TEST(Reply, ThinkingOpenByThePrompt) {
  // Qwen3-Thinking's and DeepSeek-R1's prompts end inside the think block.
  const ChatFormat qwen = ChatFormat::Qwen3(false);
  EXPECT_TRUE(ThinkingOpen(qwen, "<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(ThinkingOpen(qwen, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(ThinkingOpen(ChatFormat::Harmony(), "<think>"));
  EXPECT_TRUE(ThinkingOpen(ChatFormat::Xtml(true), ChatFormat::Xtml(true).open));
  EXPECT_FALSE(ThinkingOpen(ChatFormat::Xtml(false), ChatFormat::Xtml(false).open));
  const Shown s = Parse(Make("qwen3", qwen, true), "Two and two.\n</think>\n\n4<|im_end|>");
  EXPECT_EQ(s.reasoning, "Two and two.");
  EXPECT_EQ(s.text, "4");
  // DeepSeek-R1: the reply starts inside thinking.
  const Case r1 = Make("deepseek", ChatFormat::Deepseek(true), true);
  const Shown d = Parse(r1,
                        "Paris is France's capital.\n</think>\n\nParis.<\xEF\xBD\x9C"
                        "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>");
  EXPECT_EQ(d.reasoning, "Paris is France's capital.");
  EXPECT_EQ(d.text, "Paris.");
  EXPECT_TRUE(d.done);
}

const std::string kDsEos =
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
const std::string kDsCallsBegin = "<｜tool▁calls▁begin｜>", kDsCallsEnd = "<｜tool▁calls▁end｜>",
                  kDsCallBegin = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>",
                  kDsSep = "<｜tool▁sep｜>";

TEST(Reply, DeepseekV3Calls) {
  const Case c = Make("deepseek", ChatFormat::Deepseek(true));
  const Shown s =
      Parse(c, "Checking.\n\n" + kDsCallsBegin + kDsCallBegin + "function" + kDsSep +
                   "get_weather\n```json\n{\"city\": \"Paris\", \"days\": [1, 2]}\n```" +
                   kDsCallEnd + "\n" + kDsCallBegin + "function" + kDsSep +
                   "get_time\n```json\n{}\n```" + kDsCallEnd + kDsCallsEnd + kDsEos);
  EXPECT_EQ(s.text, "Checking.");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.calls, (Calls{{"get_weather", {{"city", "Paris"}, {"days", {1, 2}}}},
                            {"get_time", json::object()}}));
  EXPECT_TRUE(s.done);
}

TEST(Reply, DeepseekV31ThinkingThenACall) {
  // Thinking on: the prompt ends with <think>, the model closes it.
  const Case c = Make("deepseek", ChatFormat::DeepseekV31(), true);
  EXPECT_FALSE(ThinkingOpen(c.chat, c.chat.open));  // the template's default: off
  EXPECT_TRUE(ThinkingOpen(c.chat, "<｜Assistant｜><think>"));
  const Shown s =
      Parse(c, "I should call the tool.</think>" + kDsCallsBegin + kDsCallBegin + "get_weather" +
                   kDsSep + "{\"city\": \"北京\"}" + kDsCallEnd + kDsCallsEnd + kDsEos);
  EXPECT_EQ(s.reasoning, "I should call the tool.");
  EXPECT_EQ(s.text, "");
  EXPECT_EQ(s.calls, (Calls{{"get_weather", {{"city", "北京"}}}}));
}

TEST(Reply, KimiK2CallsInPlainText) {
  // The fixture vocabulary lacks Kimi's tool-call specials: the markers arrive as text.
  const Case c = Make("kimi", ChatFormat::Kimi());
  const Shown s =
      Parse(c,
            "Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
            "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>"
            "<|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>"
            "{\"tz\": \"CET\"}<|tool_call_end|><|tool_calls_section_end|><|im_end|>");
  EXPECT_EQ(s.text, "Sure.");
  EXPECT_EQ(s.calls, (Calls{{"get_weather", {{"city", "Paris"}}}, {"get_time", {{"tz", "CET"}}}}));
  EXPECT_TRUE(s.done);
}

TEST(Reply, Glm45ThinkingAndArguments) {
  // Thinking on: the reply opens bare after <|assistant|>.
  ChatFormat glm = ChatFormat::Glm45();
  const Case c = Make("glm45", glm, false);
  const Shown s =
      Parse(c,
            "\n<think>Need the weather.</think>\nI'll look it up.\n<tool_call>get_weather\n"
            "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
            "<arg_value>3</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{\"hourly\": "
            "true}</arg_value>\n<arg_key>note</arg_key>\n<arg_value>not {json</arg_value>\n"
            "</tool_call><|observation|>");
  EXPECT_EQ(s.reasoning, "Need the weather.");
  EXPECT_EQ(s.text, "I'll look it up.");
  EXPECT_EQ(s.calls, (Calls{{"get_weather",
                             {{"city", "Paris"},
                              {"days", 3},
                              {"opts", {{"hourly", true}}},
                              {"note", "not {json"}}}}));
  // Thinking off (the prompt's empty block): GLM's "\n" before its text is the markup's.
  const Shown off = Parse(Make("glm45", glm), "\nHello.<|user|>");
  EXPECT_EQ(off.text, "Hello.");
}

TEST(Reply, HarmonyChannels) {
  const Case c = Make("gpt-oss", ChatFormat::Harmony());
  const Shown s = Parse(c,
                        "<|channel|>analysis<|message|>The user asks for a capital. Easy.<|end|>"
                        "<|start|>assistant<|channel|>final<|message|>Paris, of course.<|return|>");
  EXPECT_EQ(s.reasoning, "The user asks for a capital. Easy.");
  EXPECT_EQ(s.text, "Paris, of course.");
  EXPECT_TRUE(s.calls.empty());
  EXPECT_TRUE(s.done);
}

TEST(Reply, HarmonyCallEndsTheReply) {
  const Case c = Make("gpt-oss", ChatFormat::Harmony());
  // As the model writes it, the recipient after the channel ...
  const Shown s = Parse(c,
                        "<|channel|>analysis<|message|>Need the weather tool.<|end|>"
                        "<|start|>assistant<|channel|>commentary to=functions.get_weather "
                        "<|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>");
  EXPECT_EQ(s.reasoning, "Need the weather tool.");
  EXPECT_EQ(s.text, "");
  EXPECT_EQ(s.calls, (Calls{{"get_weather", {{"city", "Paris"}}}}));
  EXPECT_TRUE(s.done);
  // ... and as the template renders a past call, the recipient before it.
  const Shown t = Parse(c,
                        "<|channel|>analysis<|message|>Weather.<|end|><|start|>assistant "
                        "to=functions.get_weather<|channel|>commentary json<|message|>"
                        "{\"city\": \"Oslo\"}<|call|>");
  EXPECT_EQ(t.calls, (Calls{{"get_weather", {{"city", "Oslo"}}}}));
}

TEST(Reply, K3ThinkAndResponseElements) {
  const std::string close = "<|close|>response<|sep|><|close|>message<|sep|><|end_of_msg|>";
  const Shown on = Parse(Make("k3", ChatFormat::Xtml(true)),
                         "Rayleigh, short waves<|close|>think<|sep|><|open|>response<|sep|>Blue "
                         "light scatters." +
                             close);
  EXPECT_EQ(on.reasoning, "Rayleigh, short waves");
  EXPECT_EQ(on.text, "Blue light scatters.");
  EXPECT_TRUE(on.done);
  const Shown off = Parse(Make("k3", ChatFormat::Xtml(false)), "The sky scatters blue." + close);
  EXPECT_EQ(off.reasoning, "");
  EXPECT_EQ(off.text, "The sky scatters blue.");
}

TEST(Reply, MalformedCallsAreText) {
  const Case c = Make("qwen3", ChatFormat::Qwen3(true));
  // Bad JSON: the call's markup is the text, as vLLM's and llama.cpp's servers return it.
  const std::string bad = "<tool_call>\n{\"name\": \"f\", \"arguments\": {city: 1}}\n</tool_call>";
  Shown s = Parse(c, "Trying." + bad + "<|im_end|>");
  EXPECT_EQ(s.text, "Trying." + bad);
  EXPECT_TRUE(s.calls.empty());
  // No name.
  s = Parse(c, "<tool_call>\n{\"arguments\": {}}\n</tool_call><|im_end|>");
  EXPECT_EQ(s.text, "<tool_call>\n{\"arguments\": {}}\n</tool_call>");
  // Still open when the reply ends (max_tokens): text too.
  s = Parse(c, "Sure <tool_call>\n{\"name\": \"f\", \"argu");
  EXPECT_EQ(s.text, "Sure <tool_call>\n{\"name\": \"f\", \"argu");
  EXPECT_FALSE(s.done);
  // A good call after a bad one still counts from 0.
  s = Parse(c, bad + "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(s.calls, (Calls{{"g", json::object()}}));
  // DeepSeek-V3 without its fences.
  s = Parse(Make("deepseek", ChatFormat::Deepseek(true)),
            kDsCallsBegin + kDsCallBegin + "function" + kDsSep + "f\n{}" + kDsCallEnd);
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.text, kDsCallBegin + "function" + kDsSep + "f\n{}" + kDsCallEnd);
}

TEST(Reply, StopStringsInReasoningAndText) {
  // A stop string in the thinking ends the reply there.
  Shown s = Parse(Make("qwen3", ChatFormat::Qwen3(true), false, {"STOP"}),
                  "<think>\nabc ST"
                  "OP def</think>answer<|im_end|>");
  EXPECT_EQ(s.reasoning, "abc ");
  EXPECT_EQ(s.text, "");
  EXPECT_TRUE(s.done);
  // A stop string's start held in the reasoning is shown when the block ends.
  s = Parse(Make("qwen3", ChatFormat::Qwen3(true), false, {"STOP"}),
            "<think>\nabc ST</think>Then STOP here<|im_end|>");
  EXPECT_EQ(s.reasoning, "abc ST");
  EXPECT_EQ(s.text, "Then ");
  EXPECT_TRUE(s.done);
  // Not in calls: a call's arguments are whole.
  s = Parse(Make("qwen3", ChatFormat::Qwen3(true), false, {"Paris"}),
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"c\": \"Paris\"}}\n</tool_call>");
  EXPECT_EQ(s.calls, (Calls{{"f", {{"c", "Paris"}}}}));
}

TEST(Reply, PlainFamiliesShowEveryTokenButSpecials) {
  // The demo model's format has no syntax: text as it comes, newlines kept,
  // a special (DeepSeek's tokenizer has <think> as one) dropped.
  ChatFormat demo = ChatFormat::Deepseek(false);
  const Shown s = Parse(Make("deepseek", demo), "\nA <think> is dropped, <b> kept.\n" + kDsEos);
  EXPECT_EQ(s.text, "\nA  is dropped, <b> kept.\n");
  EXPECT_TRUE(s.done);
}

TEST(Reply, UnfinishedUtf8AtTheEndIsReplaced) {
  const Case c = Make("qwen3", ChatFormat::Qwen3(true));
  const Tokenizer& tok = *c.tok;
  std::vector<int32_t> ids = Tokens(tok, "Hi ", false);
  std::vector<int32_t> euro = Tokens(tok, "€", true);
  ASSERT_EQ(euro.size(), 3u);
  for (int32_t id : euro) ASSERT_EQ(tok.TokenBytes(id).size(), 1u);
  ids.push_back(euro[0]);
  ids.push_back(euro[1]);
  const Shown s = Gather(Feed(c, ids));
  EXPECT_EQ(s.text, "Hi \xEF\xBF\xBD");
}

TEST(Reply, ToolCallIdsAreFresh) {
  const std::string a = NewToolCallId(), b = NewToolCallId();
  EXPECT_TRUE(std::regex_match(a, std::regex("call_[A-Za-z0-9]{24}"))) << a;
  EXPECT_NE(a, b);
}

// ------------------------------------------------------------- answers

const AnswerHead kHead{"chatcmpl-1", 1700000000, "m"};

TEST(ChatAnswerJson, WholeWithReasoningAndCalls) {
  ChatReply r;
  r.reasoning = "Think.";
  r.tool_calls = {{"call_a", "get_weather", "{\"city\":\"Paris\"}"}, {"call_b", "get_time", "{}"}};
  const json j = ChatCompletion(kHead, {ChatChoice(0, r, nullptr, Finish::kToolCalls)}, {5, 7});
  const json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  const json& m = choice["message"];
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_TRUE(m["content"].is_null());  // calls and no text
  EXPECT_EQ(m["reasoning_content"], "Think.");
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  EXPECT_EQ(m["tool_calls"][0], json::parse(R"({"id": "call_a", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}})"));
  EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], "{}");
  EXPECT_EQ(j["usage"]["total_tokens"], 12);
}

TEST(ChatAnswerJson, WholeTextOnlyHasNoReasoningOrCalls) {
  const json m = ChatChoice(0, {.content = "Hi"}, nullptr, Finish::kStop)["message"];
  EXPECT_EQ(m, json::parse(R"({"role": "assistant", "content": "Hi"})"));
  // No text and no calls: content "" (not null).
  EXPECT_EQ(ChatChoice(0, {}, nullptr, Finish::kLength)["message"]["content"], "");
  ChatReply both{.content = "Calling.", .tool_calls = {{"call_x", "f", "{}"}}};
  EXPECT_EQ(ChatChoice(0, both, nullptr, Finish::kToolCalls)["message"]["content"], "Calling.");
}

TEST(ChatAnswerJson, StreamedChunks) {
  const json r = ChatReasoningChunk(kHead, 0, "hm", nullptr);
  EXPECT_EQ(r["object"], "chat.completion.chunk");
  EXPECT_EQ(r["choices"][0]["delta"], json({{"reasoning_content", "hm"}}));
  EXPECT_TRUE(r["choices"][0]["finish_reason"].is_null());
  const json start = ChatToolCallChunk(kHead, 0, 1, "call_a", "get_weather", nullptr);
  EXPECT_EQ(start["choices"][0]["delta"], json::parse(R"({"tool_calls": [{"index": 1,
      "id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]})"));
  const json args = ChatToolArgsChunk(kHead, 0, 1, "{\"c", nullptr);
  EXPECT_EQ(args["choices"][0]["delta"],
            json::parse(R"({"tool_calls": [{"index": 1, "function": {"arguments": "{\"c"}}]})"));
  EXPECT_EQ(ChatFinishChunk(kHead, 0, Finish::kToolCalls)["choices"][0]["finish_reason"],
            "tool_calls");
  EXPECT_STREQ(FinishName(Finish::kToolCalls), "tool_calls");
}

// Tool calls held to their tools (serve/tool_constraint.h): a "model" of
// random logits (plus a pull towards chosen tokens) sampled greedily under
// the constraint, its tokens read back by ReplyParser.
const ChatTool kWeather{"get_weather", "",
                        nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
  "city": {"type": "string", "enum": ["Paris", "Lyon"]},
  "days": {"type": "integer", "minimum": 1, "maximum": 7}},
  "required": ["city", "days"], "additionalProperties": false})")};
const ChatTool kTime{"get_time", "", nlohmann::ordered_json::parse(R"({"properties": {
  "tz": {"type": "string", "maxLength": 4}}, "required": ["tz"], "additionalProperties": false})")};

// Optional keys, a value of two types, an array, a free string (for the
// key/value families: raw or JSON, and K3's type attribute).
const ChatTool kMixed{"tag_item", "", nlohmann::ordered_json::parse(R"({"type": "object",
  "properties": {
    "id": {"anyOf": [{"type": "string", "maxLength": 3},
                     {"type": "integer", "minimum": 0, "maximum": 9}]},
    "flag": {"type": "boolean"},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    "note": {"type": "string", "maxLength": 12}},
  "required": ["id"]})")};

int64_t CodePoints(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char b) { return (b & 0xC0) != 0x80; });
}

// The arguments as each tool's schema above wants them (checked by hand,
// not by the engine that made them).
void ExpectValid(const std::string& name, const json& a) {
  ASSERT_TRUE(a.is_object());
  if (name == "tag_item") {
    for (const auto& [key, v] : a.items()) {
      if (key == "id") {
        EXPECT_TRUE((v.is_string() && CodePoints(v) <= 3) ||
                    (v.is_number_integer() && v.get<int>() >= 0 && v.get<int>() <= 9))
            << a;
      } else if (key == "flag") {
        EXPECT_TRUE(v.is_boolean()) << a;
      } else if (key == "tags") {
        ASSERT_TRUE(v.is_array()) << a;
        EXPECT_LE(v.size(), 2u) << a;
        for (const json& t : v) EXPECT_TRUE(t == "a" || t == "b") << a;
      } else {
        EXPECT_EQ(key, "note") << a;  // only declared keys are written
        EXPECT_TRUE(v.is_string() && CodePoints(v) <= 12) << a;
      }
    }
    EXPECT_TRUE(a.contains("id")) << a;
  } else if (name == "get_weather") {
    EXPECT_EQ(a.size(), 2u) << a;
    ASSERT_TRUE(a.contains("city") && a["city"].is_string()) << a;
    EXPECT_TRUE(a["city"] == "Paris" || a["city"] == "Lyon") << a;
    ASSERT_TRUE(a.contains("days") && a["days"].is_number_integer()) << a;
    EXPECT_GE(a["days"].get<int>(), 1);
    EXPECT_LE(a["days"].get<int>(), 7);
  } else {
    EXPECT_EQ(name, "get_time");
    EXPECT_EQ(a.size(), 1u) << a;
    ASSERT_TRUE(a.contains("tz") && a["tz"].is_string()) << a;
    EXPECT_LE(CodePoints(a["tz"]), 4) << a;
  }
}

struct Generated {
  std::vector<int32_t> ids;
  bool finished = false;  // the constraint ended the reply
};

// Up to `steps` tokens under `plan`; `pull` adds to chosen ids' logits at
// step 0. Ends at the first step the constraint is complete after a call
// has closed (as an end-of-turn token would), or when it is finished.
Generated Generate(const Case& c, std::shared_ptr<const ToolCallPlan> plan, uint32_t seed,
                   std::vector<int32_t> prefix = {}, std::map<int32_t, float> pull = {},
                   int steps = 600) {
  auto vocab = std::make_shared<const grammar::VocabIndex>(*c.tok, c.tok->max_id() + 1);
  ToolCallConstraint k(plan, *c.tok, vocab);
  Generated g;
  for (int32_t id : prefix) {
    EXPECT_TRUE(k.Accept(id));
    g.ids.push_back(id);
  }
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> logits(static_cast<size_t>(vocab->vocab()));
  // The call's close (the key/value families' is their arguments').
  const std::string close = plan->pairs.empty() ? plan->Tail() : plan->pairs[0]->call_close;
  for (int step = 0; step < steps && !k.finished(); ++step) {
    if (k.complete() && c.tok->Decode(g.ids).find(close) != std::string::npos) break;
    for (float& l : logits) l = u(rng);
    for (const auto& [id, bonus] : pull) logits[static_cast<size_t>(id)] += bonus;
    EXPECT_GT(k.Mask(logits), 0u);
    const auto best =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_GT(logits[static_cast<size_t>(best)], -1e30f);
    EXPECT_TRUE(k.Accept(best));
    g.ids.push_back(best);
    pull.clear();
  }
  g.finished = k.finished();
  return g;
}

const ChatTool kTwoTools[] = {kWeather, kTime};
const ChatTool kThreeTools[] = {kWeather, kTime, kMixed};

std::shared_ptr<const ToolCallPlan> Plan(std::string_view family, ToolChoiceMode mode,
                                         std::string_view function = "", bool parallel = true,
                                         bool thinking_open = false,
                                         std::span<const ChatTool> tools = kTwoTools) {
  auto p = ToolCallPlan::Make(family, tools, mode, function, parallel, thinking_open, "parameters");
  EXPECT_TRUE(p.ok()) << p.status().message();
  return *p;
}

// The same reply read with its tool plan: the same calls, their
// arguments streamed in pieces (as many as came apart) that join to the
// same JSON.
void ExpectStreamedEqualsWhole(const Case& c, const std::vector<int32_t>& ids,
                               std::shared_ptr<const ToolCallPlan> plan) {
  const Shown whole = Gather(Feed(c, ids));
  Case streamed = c;
  streamed.options.tool_plan = plan;
  const Run run = Feed(streamed, ids);
  const Shown s = Gather(run);
  EXPECT_EQ(s.text, whole.text);
  EXPECT_EQ(s.reasoning, whole.reasoning);
  EXPECT_EQ(s.calls, whole.calls) << c.tok->Decode(ids);
  const auto pieces = std::count_if(run.events.begin(), run.events.end(), [](const ReplyEvent& e) {
    return e.kind == Kind::kToolCallArgs;
  });
  EXPECT_GT(pieces, static_cast<long>(s.calls.size())) << "arguments in one piece";
}

TEST(ToolCallConstraint, Qwen3RequiredWritesValidCalls) {
  const Case c = Make("qwen3", ChatFormat::Qwen3(false), false);
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const auto plan = Plan(kFamilyQwen3, ToolChoiceMode::kRequired);
    const Generated g = Generate(c, plan, seed);
    ExpectStreamedEqualsWhole(c, g.ids, plan);
    const Shown s = Gather(Feed(c, g.ids));
    ASSERT_GE(s.calls.size(), 1u) << c.tok->Decode(g.ids);
    EXPECT_EQ(s.text, "");
    for (const auto& [name, args] : s.calls) ExpectValid(name, args);
  }
}

TEST(ToolCallConstraint, Qwen3NamedFunctionOneCallEndsTheReply) {
  const Case c = Make("qwen3", ChatFormat::Qwen3(false), false);
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const Generated g = Generate(
        c, Plan(kFamilyQwen3, ToolChoiceMode::kFunction, "get_time", /*parallel=*/false), seed);
    EXPECT_TRUE(g.finished);
    const Shown s = Gather(Feed(c, g.ids));
    ASSERT_EQ(s.calls.size(), 1u) << c.tok->Decode(g.ids);
    EXPECT_EQ(s.calls[0].first, "get_time");
    ExpectValid(s.calls[0].first, s.calls[0].second);
  }
}

TEST(ToolCallConstraint, Qwen3AutoHoldsACallTheModelOpens) {
  const Case c = Make("qwen3", ChatFormat::Qwen3(false), false);
  const int32_t open = *c.tok->SpecialId("<tool_call>");
  const Generated g = Generate(c, Plan(kFamilyQwen3, ToolChoiceMode::kAuto), 7,
                               c.tok->EncodeMarkup("Let me look."), {{open, 100.0f}});
  const Shown s = Gather(Feed(c, g.ids));
  EXPECT_EQ(s.text, "Let me look.");
  ASSERT_GE(s.calls.size(), 1u) << c.tok->Decode(g.ids);
  for (const auto& [name, args] : s.calls) ExpectValid(name, args);
}

TEST(ToolCallConstraint, NoneMasksTheOpening) {
  const Case c = Make("qwen3", ChatFormat::Qwen3(false), false);
  auto vocab = std::make_shared<const grammar::VocabIndex>(*c.tok, c.tok->max_id() + 1);
  ToolCallConstraint k(Plan(kFamilyQwen3, ToolChoiceMode::kNone), *c.tok, vocab);
  std::vector<float> logits(static_cast<size_t>(vocab->vocab()), 0.0f);
  k.Mask(logits);
  EXPECT_EQ(logits[static_cast<size_t>(*c.tok->SpecialId("<tool_call>"))], -INFINITY);
  // Nor as plain text: after "<tool_call" no token may write the ">".
  for (int32_t id : c.tok->Encode("text <tool_call")) ASSERT_TRUE(k.Accept(id));
  std::fill(logits.begin(), logits.end(), 0.0f);
  k.Mask(logits);
  for (size_t id = 0; id < logits.size(); ++id)
    if (c.tok->TokenBytes(static_cast<int32_t>(id)).starts_with(">")) {
      EXPECT_EQ(logits[id], -INFINITY) << id;
    }
  EXPECT_TRUE(k.complete());
  EXPECT_FALSE(k.Accept(*c.tok->SpecialId("<tool_call>")));
}

TEST(ToolCallConstraint, ThinkingOpenThinksFirst) {
  const Case c = Make("qwen3", ChatFormat::Qwen3(true), true);
  const auto plan = Plan(kFamilyQwen3, ToolChoiceMode::kRequired, "", true, /*thinking_open=*/true);
  const Generated g = Generate(c, plan, 3, c.tok->EncodeMarkup("Weather, then.\n</think>\n\n"));
  ExpectStreamedEqualsWhole(c, g.ids, plan);
  const Shown s = Gather(Feed(c, g.ids));
  EXPECT_EQ(s.reasoning, "Weather, then.");
  ASSERT_GE(s.calls.size(), 1u) << c.tok->Decode(g.ids);
  for (const auto& [name, args] : s.calls) ExpectValid(name, args);
}

TEST(ToolCallConstraint, KimiRequiredCallsCloseTheSection) {
  const Case c = Make("kimi", ChatFormat::Kimi());
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    const auto plan = Plan(kFamilyKimiK2, ToolChoiceMode::kRequired);
    const Generated g = Generate(c, plan, seed, {}, {}, 2000);
    const std::string text = c.tok->Decode(g.ids);
    ExpectStreamedEqualsWhole(c, g.ids, plan);
    EXPECT_TRUE(g.finished) << text;
    EXPECT_TRUE(text.ends_with("<|tool_calls_section_end|>")) << text;
    const Shown s = Gather(Feed(c, g.ids));
    ASSERT_GE(s.calls.size(), 1u) << text;
    EXPECT_EQ(s.text, "");
    for (const auto& [name, args] : s.calls) ExpectValid(name, args);
  }
}

TEST(ToolCallConstraint, DeepseekCallsWithAndWithoutTheirSection) {
  const Case v31 = Make("deepseek", ChatFormat::DeepseekV31(), false);
  const Case v3 = Make("deepseek", ChatFormat::Deepseek(true), false);
  for (const Case* c : {&v31, &v3}) {
    const std::string family = c->chat.family;
    // Forced: the section, the calls, its end (which ends the reply).
    const auto plan = Plan(family, ToolChoiceMode::kRequired);
    const Generated g = Generate(*c, plan, 5, {}, {}, 2000);
    const std::string text = c->tok->Decode(g.ids);
    EXPECT_TRUE(g.finished) << family << ": " << text;
    ExpectStreamedEqualsWhole(*c, g.ids, plan);
    const Shown s = Gather(Feed(*c, g.ids));
    ASSERT_GE(s.calls.size(), 1u) << family << ": " << text;
    for (const auto& [name, args] : s.calls) ExpectValid(name, args);
    // auto: a call opened without its section is held to the tools too.
    const Generated bare =
        Generate(*c, Plan(family, ToolChoiceMode::kAuto, "", /*parallel=*/false), 6,
                 c->tok->EncodeMarkup("Checking." + std::string(kDsCallBegin)));
    const Shown b = Gather(Feed(*c, bare.ids));
    EXPECT_EQ(b.text, "Checking.");
    ASSERT_EQ(b.calls.size(), 1u) << family << ": " << c->tok->Decode(bare.ids);
    ExpectValid(b.calls[0].first, b.calls[0].second);
  }
  // none: neither opening may be written.
  auto vocab = std::make_shared<const grammar::VocabIndex>(*v31.tok, v31.tok->max_id() + 1);
  ToolCallConstraint none(Plan(kFamilyDeepseekV31, ToolChoiceMode::kNone), *v31.tok, vocab);
  for (std::string_view open : {kDsCallsBegin, kDsCallBegin}) {
    const auto id = v31.tok->SpecialId(open);
    ASSERT_TRUE(id) << open;
    std::vector<float> logits(static_cast<size_t>(vocab->vocab()), 0.0f);
    none.Mask(logits);
    EXPECT_EQ(logits[static_cast<size_t>(*id)], -INFINITY) << open;
  }
}

// Random walks of a key/value family: each step masks the whole
// vocabulary, so fewer under a sanitizer.
#ifdef WASTE_SANITIZE
constexpr uint32_t kWalks = 1;
#else
constexpr uint32_t kWalks = 3;
#endif

// The key/value families (serve/tool_arguments.h): every call a walk of
// random choices writes reads back (with the plan, as the server reads it)
// as a call of one of the tools whose arguments validate, none shown as text.
Shown Read(Case c, const std::vector<int32_t>& ids, std::shared_ptr<const ToolCallPlan> plan) {
  c.options.tool_plan = std::move(plan);
  return Gather(Feed(c, ids));
}

TEST(ToolCallConstraint, Glm45RequiredWritesValidPairs) {
  const Case c = Make("glm45", ChatFormat::Glm45(), false);
  const auto plan = Plan(kFamilyGlm45, ToolChoiceMode::kRequired, "", true, false, kThreeTools);
  for (uint32_t seed = 1; seed <= 2 * kWalks; ++seed) {
    const Generated g = Generate(c, plan, seed);
    const std::string text = c.tok->Decode(g.ids);
    const Shown s = Read(c, g.ids, plan);
    ASSERT_GE(s.calls.size(), 1u) << text;
    EXPECT_EQ(s.text, "") << text;
    for (const auto& [name, args] : s.calls) ExpectValid(name, args);
  }
}

// Qwen3.5's XML pairs, as its template writes a past call: every walk is
// calls whose arguments validate, read back as the model meant them.
TEST(ToolCallConstraint, Qwen35RequiredWritesValidPairs) {
  const Case c = Make("qwen3", ChatFormat::Qwen35(), false);
  const auto plan = Plan(kFamilyQwen35, ToolChoiceMode::kRequired, "", true, false, kThreeTools);
  for (uint32_t seed = 1; seed <= 2 * kWalks; ++seed) {
    const Generated g = Generate(c, plan, seed);
    const std::string text = c.tok->Decode(g.ids);
    // After the gap the template may put before a call (none, "\n", "\n\n").
    const size_t head = text.find_first_not_of('\n');
    EXPECT_LE(head, 2u) << text;
    EXPECT_EQ(text.substr(head).rfind("<tool_call>\n<function=", 0), 0u) << text;
    EXPECT_NE(text.find("</function>\n</tool_call>"), std::string::npos) << text;
    const Shown s = Read(c, g.ids, plan);
    ASSERT_GE(s.calls.size(), 1u) << text;
    EXPECT_EQ(s.text, "") << text;
    for (const auto& [name, args] : s.calls) ExpectValid(name, args);
  }
}

TEST(ToolCallConstraint, Glm45NamedFunctionAfterText) {
  const Case c = Make("glm45", ChatFormat::Glm45(), false);
  // Named, one call: it ends the reply.
  const auto named =
      Plan(kFamilyGlm45, ToolChoiceMode::kFunction, "tag_item", false, false, kThreeTools);
  for (uint32_t seed = 1; seed <= kWalks; ++seed) {
    const Generated g = Generate(c, named, seed);
    EXPECT_TRUE(g.finished);
    const Shown s = Read(c, g.ids, named);
    ASSERT_EQ(s.calls.size(), 1u) << c.tok->Decode(g.ids);
    EXPECT_EQ(s.calls[0].first, "tag_item");
    ExpectValid(s.calls[0].first, s.calls[0].second);
  }
  // auto: a call the model opens after its text is held to the tools.
  const auto any = Plan(kFamilyGlm45, ToolChoiceMode::kAuto, "", true, false, kThreeTools);
  const Generated g = Generate(c, any, 4, c.tok->EncodeMarkup("Let me look.\n"),
                               {{*c.tok->SpecialId("<tool_call>"), 100.0f}});
  const Shown s = Read(c, g.ids, any);
  EXPECT_EQ(s.text, "Let me look.");
  ASSERT_GE(s.calls.size(), 1u) << c.tok->Decode(g.ids);
  for (const auto& [name, args] : s.calls) ExpectValid(name, args);
}

TEST(ToolCallConstraint, Glm45RawValuesAreStringsAndCannotCloseTheCall) {
  const Case c = Make("glm45", ChatFormat::Glm45(), false);
  const auto plan = Plan(kFamilyGlm45, ToolChoiceMode::kRequired, "", true, false, kThreeTools);
  // A string property's value is raw, even when it reads as JSON; the
  // other properties' are JSON.
  const std::string call =
      "\n<tool_call>tag_item\n<arg_key>note</arg_key>\n<arg_value>42</arg_value>\n"
      "<arg_key>id</arg_key>\n<arg_value>7</arg_value>\n</tool_call>";
  const std::vector<int32_t> ids = c.tok->EncodeMarkup(call);
  EXPECT_EQ(Read(c, ids, plan).calls, (Calls{{"tag_item", {{"note", "42"}, {"id", 7}}}}));
  EXPECT_EQ(Read(c, ids, nullptr).calls, (Calls{{"tag_item", {{"note", 42}, {"id", 7}}}}));
  // Inside the raw value, the call's close may not be written as text.
  auto vocab = std::make_shared<const grammar::VocabIndex>(*c.tok, c.tok->max_id() + 1);
  ToolCallConstraint k(plan, *c.tok, vocab);
  for (int32_t id :
       c.tok->EncodeMarkup("<tool_call>tag_item\n<arg_key>id</arg_key>\n<arg_value>1</arg_value>\n"
                           "<arg_key>note</arg_key>\n<arg_value>a"))
    ASSERT_TRUE(k.Accept(id)) << c.tok->TokenBytes(id);
  for (int32_t id : c.tok->Encode("</tool_call")) ASSERT_TRUE(k.Accept(id));
  std::vector<float> logits(static_cast<size_t>(vocab->vocab()), 0.0f);
  EXPECT_GT(k.Mask(logits), 0u);
  for (size_t id = 0; id < logits.size(); ++id)
    if (c.tok->TokenBytes(static_cast<int32_t>(id)).starts_with(">")) {
      EXPECT_EQ(logits[id], -INFINITY) << id;
    }
  EXPECT_EQ(logits[static_cast<size_t>(*c.tok->SpecialId("</tool_call>"))], -INFINITY);
  EXPECT_GT(logits[static_cast<size_t>(*c.tok->SpecialId("</arg_value>"))], -INFINITY);
}

// Tools for reading key/value calls: a free string beside a number, and
// no required key (a call may have no arguments).
const ChatTool kNote{"write_note", "", nlohmann::ordered_json::parse(R"({"type": "object",
  "properties": {"text": {"type": "string"}, "count": {"type": "integer"}},
  "required": ["text"]})")};
const ChatTool kPing{"ping", "", nlohmann::ordered_json::parse(R"({"type": "object",
  "properties": {"host": {"type": "string"}}})")};
const ChatTool kNoteAndPing[] = {kNote, kPing};

// A key/value family's constrained calls streamed: each call's argument
// pieces joined, byte for byte the same whether the reply is fed as it
// encodes or one byte a token, their JSON the calls the plan-less reader
// (the whole call at its end) gives; pieces counts the byte-wise feed's.
struct StreamedCalls {
  std::vector<std::string> args;
  long pieces = 0;
};
StreamedCalls StreamedPairs(Case c, const std::string& reply,
                            std::shared_ptr<const ToolCallPlan> plan) {
  const Shown whole = Read(c, Tokens(*c.tok, reply, false), nullptr);
  c.options.tool_plan = std::move(plan);
  StreamedCalls got[2];
  for (const bool bytewise : {false, true}) {
    const Run run = Feed(c, Tokens(*c.tok, reply, bytewise));
    const Shown s = Gather(run);
    EXPECT_EQ(s.text, whole.text);
    EXPECT_EQ(s.calls, whole.calls) << reply;
    for (const ReplyEvent& e : run.events) {
      if (e.kind == Kind::kToolCallStart) got[bytewise].args.emplace_back();
      if (e.kind != Kind::kToolCallArgs) continue;
      EXPECT_FALSE(e.text.empty());
      got[bytewise].args.back() += e.text;
      ++got[bytewise].pieces;
    }
  }
  EXPECT_EQ(got[0].args, got[1].args) << reply;
  return got[1];
}

// The raw value's quotes, backslash, newline, non-ASCII characters and
// bytes that begin its close ("</arg") escaped as they come; the JSON
// value's white space dropped; a call with no pairs "{}".
TEST(ToolCallConstraint, Glm45ArgumentsStreamAsJsonInPieces) {
  const Case c = Make("glm45", ChatFormat::Glm45(), false);
  const auto plan = Plan(kFamilyGlm45, ToolChoiceMode::kRequired, "", true, false, kNoteAndPing);
  const std::string reply =
      "<tool_call>write_note\n<arg_key>text</arg_key>\n<arg_value>say \"hi\" \\ </arg "
      "caf\xC3\xA9\n\xE6\x97\xA5\xE6\x9C\xAC</arg_value>\n<arg_key>count</arg_key>\n<arg_value> "
      "12 </arg_value>\n</tool_call><tool_call>ping\n</tool_call>";
  const StreamedCalls s = StreamedPairs(c, reply, plan);
  EXPECT_EQ(s.args,
            (std::vector<std::string>{
                "{\"text\":\"say \\\"hi\\\" \\\\ </arg caf\xC3\xA9\\n\xE6\x97\xA5\xE6\x9C\xAC\","
                "\"count\":12}",
                "{}"}));
  EXPECT_GT(s.pieces, 20) << "a value split across tokens comes in pieces";
}

TEST(ToolCallConstraint, K3ArgumentsStreamAsJsonInPieces) {
  const Case c = Make("k3", ChatFormat::Xtml(false), false);
  const auto plan = Plan(kFamilyXtml, ToolChoiceMode::kRequired, "", true, false, kNoteAndPing);
  const std::string reply =
      "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"write_note\" "
      "index=\"1\"<|sep|><|open|>argument key=\"count\" type=\"number\"<|sep|>3<|close|>argument"
      "<|sep|><|open|>argument key=\"text\" type=\"string\"<|sep|> a \"b\"\\\tc <|x \xC3\xA9\n"
      "<|close|>argument<|sep|><|close|>call<|sep|><|open|>call tool=\"ping\" index=\"2\"<|sep|>"
      "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>";
  const StreamedCalls s = StreamedPairs(c, reply, plan);
  EXPECT_EQ(s.args, (std::vector<std::string>{
                        "{\"count\":3,\"text\":\" a \\\"b\\\"\\\\\\tc <|x \xC3\xA9\\n\"}", "{}"}));
  EXPECT_GT(s.pieces, 10) << "a value split across tokens comes in pieces";
}

// max_tokens cuts a call: the calls before it whole, it listed as far as it
// was written (its arguments unfinished), and the parser says so.
TEST(ToolCallConstraint, ACallCutByMaxTokensIsListedUnfinished) {
  const Case glm = Make("glm45", ChatFormat::Glm45(), false);
  const std::string done = "<tool_call>ping\n</tool_call>";
  for (const auto& [reply, cut] : std::vector<std::pair<std::string, std::string>>{
           {done + "<tool_call>write_note\n<arg_key>text</arg_key>\n<arg_value>half a s",
            "{\"text\":\"half a s"},
           {done + "<tool_call>write_note\n<arg_key>count</arg_key>\n<arg_value>12 ",
            "{\"count\":12"},
           // What may begin the value's or the call's close is markup.
           {done + "<tool_call>write_note\n<arg_key>text</arg_key>\n<arg_value>half</arg_va",
            "{\"text\":\"half"},
           {done + "<tool_call>write_note\n<arg_key>count</arg_key>\n<arg_value>1</arg_value>\n"
                   "</tool_c",
            "{\"count\":1"},
           {done, ""}}) {
    ReplyOptions o = glm.options;
    o.tool_plan = Plan(kFamilyGlm45, ToolChoiceMode::kRequired, "", true, false, kNoteAndPing);
    ReplyParser p(*glm.tok, glm.chat, o);
    std::vector<std::string> args;
    std::vector<ReplyEvent> events;
    for (const int32_t id : glm.tok->EncodeMarkup(reply))
      for (ReplyEvent& e : p.Feed(id)) events.push_back(std::move(e));
    for (ReplyEvent& e : p.Flush()) events.push_back(std::move(e));
    for (const ReplyEvent& e : events) {
      if (e.kind == Kind::kToolCallStart) args.emplace_back();
      if (e.kind == Kind::kToolCallArgs) args.back() += e.text;
    }
    EXPECT_EQ(p.cut_in_call(), !cut.empty()) << reply;
    std::vector<std::string> want{"{}"};
    if (!cut.empty()) want.push_back(cut);
    EXPECT_EQ(args, want) << reply;
    EXPECT_EQ(events.back().kind, Kind::kToolCallEnd) << reply;
  }
}

TEST(ToolCallConstraint, K3RequiredCallsCloseTheMessage) {
  const Case c = Make("k3", ChatFormat::Xtml(false), false);
  const auto plan = Plan(kFamilyXtml, ToolChoiceMode::kRequired, "", true, false, kThreeTools);
  for (uint32_t seed = 1; seed <= kWalks; ++seed) {
    const Generated g = Generate(c, plan, seed, {}, {}, 2000);
    const std::string text = c.tok->Decode(g.ids);
    EXPECT_TRUE(g.finished) << text;
    EXPECT_TRUE(text.starts_with("<|close|>response<|sep|><|open|>tools<|sep|>")) << text;
    EXPECT_TRUE(text.ends_with("<|close|>tools<|sep|><|close|>message<|sep|>")) << text;
    const Shown s = Read(c, g.ids, plan);
    ASSERT_GE(s.calls.size(), 1u) << text;
    EXPECT_EQ(s.text, "") << text;
    for (const auto& [name, args] : s.calls) ExpectValid(name, args);
  }
}

TEST(ToolCallConstraint, K3ThinksThenCalls) {
  const Case c = Make("k3", ChatFormat::Xtml(true), true);
  // Thinking on, named and one: the think element, an empty response, the call.
  const auto named = Plan(kFamilyXtml, ToolChoiceMode::kFunction, "tag_item", false,
                          /*thinking_open=*/true, kThreeTools);
  for (uint32_t seed = 1; seed <= kWalks; ++seed) {
    const Generated g =
        Generate(c, named, seed, c.tok->EncodeMarkup("Tag it.<|close|>think<|sep|>"));
    EXPECT_TRUE(g.finished);
    const Shown s = Read(c, g.ids, named);
    EXPECT_EQ(s.reasoning, "Tag it.");
    EXPECT_EQ(s.text, "");
    ASSERT_EQ(s.calls.size(), 1u) << c.tok->Decode(g.ids);
    EXPECT_EQ(s.calls[0].first, "tag_item");
    ExpectValid(s.calls[0].first, s.calls[0].second);
  }
  // auto: once the model opens the tools element after its text, calls of the tools.
  const auto any = Plan(kFamilyXtml, ToolChoiceMode::kAuto, "", true, true, kThreeTools);
  const Generated g =
      Generate(c, any, 5,
               c.tok->EncodeMarkup("Hm.<|close|>think<|sep|><|open|>response<|sep|>Looking."
                                   "<|close|>response<|sep|><|open|>tools<|sep|>"),
               {}, 2000);
  const Shown s = Read(c, g.ids, any);
  EXPECT_EQ(s.text, "Looking.");
  ASSERT_GE(s.calls.size(), 1u) << c.tok->Decode(g.ids);
  for (const auto& [name, args] : s.calls) ExpectValid(name, args);
  // none: the tools element may not be opened.
  auto vocab = std::make_shared<const grammar::VocabIndex>(*c.tok, c.tok->max_id() + 1);
  ToolCallConstraint none(Plan(kFamilyXtml, ToolChoiceMode::kNone, "", true, false), *c.tok, vocab);
  for (int32_t id : c.tok->EncodeMarkup("Hi.<|close|>response<|sep|><|open|>tools"))
    ASSERT_TRUE(none.Accept(id));
  EXPECT_FALSE(none.Accept(*c.tok->SpecialId(kXtmlSep)));
}

// K3's calls as encoding_k3.py renders them (tests/fixtures/chat/xtml.json),
// read back as a reply: the arguments the conversation gave, every type.
TEST(Reply, K3CallsAsTheReleaseRendersThem) {
  const json cases = json::parse(ReadText(kFixtures + "/chat/xtml.json"))["cases"];
  const Case c = Make("k3", ChatFormat::Xtml(false));
  int read = 0;
  for (const json& k : cases) {
    const std::string name = k["name"];
    const bool broken = name == "tool_call_broken_json";
    if (name != "tool_call_all_types" && name != "tool_calls_parallel" &&
        name != "tool_call_empty_args" && !broken)
      continue;
    std::string prompt;
    for (const json& seg : k["segments"]) prompt += seg[0].get<std::string>();
    const size_t from = prompt.find("<|close|>response<|sep|><|open|>tools<|sep|>");
    const size_t to = prompt.find("<|end_of_msg|>", from);
    ASSERT_NE(to, std::string::npos) << name;
    const Shown s = Parse(c, "Calling." + prompt.substr(from, to + 14 - from));
    ++read;
    if (broken) {  // arguments that are not JSON: the call is shown as text
      EXPECT_TRUE(s.calls.empty()) << name;
      EXPECT_EQ(s.text,
                "Calling.<|open|>call tool=\"f\" index=\"1\"<|sep|><|open|>json "
                "type=\"object\"<|sep|>{\"city\": Paris<|close|>json<|sep|><|close|>call"
                "<|sep|>");
      continue;
    }
    EXPECT_EQ(s.text, "Calling.") << name;
    const json& calls = k["messages"][1]["tool_calls"];
    ASSERT_EQ(s.calls.size(), calls.size()) << name;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].first, calls[i]["function"]["name"]) << name;
      const std::string args = calls[i]["function"]["arguments"];
      EXPECT_EQ(s.calls[i].second, args.empty() ? json::object() : json::parse(args)) << name;
    }
  }
  EXPECT_EQ(read, 4);
}

// DeepSeek-V3.1 as the server drives it: the tools offered in the prompt
// (the model card's section), a call forced, and the next prompt (the call,
// its result) continuing the first one token for token.
TEST(ToolCallConstraint, DeepseekV31ToolsOfferedACallForcedAndItsResult) {
  const Case c = Make("deepseek", ChatFormat::DeepseekV31(), false);
  const ChatTool tools[] = {kWeather, kTime};
  std::vector<ChatMessage> msgs = {{"user", "Weather in Paris?"}};
  auto prompt = RenderChat(c.chat, *c.tok, msgs, {.add_generation_prompt = true, .tools = tools});
  ASSERT_TRUE(prompt.ok()) << prompt.status().message();
  const std::string text = c.tok->Decode(*prompt);
  EXPECT_NE(text.find("\n\n## Tools\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\n### get_time\nDescription: \n\nParameters: {\"properties\""),
            std::string::npos)
      << text;
  EXPECT_TRUE(text.ends_with("<｜User｜>Weather in Paris?<｜Assistant｜></think>")) << text;
  const Generated g = Generate(
      c, Plan(kFamilyDeepseekV31, ToolChoiceMode::kFunction, "get_weather", /*parallel=*/false), 9,
      {}, {}, 2000);
  EXPECT_TRUE(g.finished) << c.tok->Decode(g.ids);
  const Shown s = Gather(Feed(c, g.ids));
  ASSERT_EQ(s.calls.size(), 1u) << c.tok->Decode(g.ids);
  EXPECT_EQ(s.calls[0].first, "get_weather");
  ExpectValid(s.calls[0].first, s.calls[0].second);
  ChatMessage call{"assistant", ""};
  call.tool_calls = {{"call_1", s.calls[0].first, s.calls[0].second.dump()}};
  msgs.push_back(call);
  msgs.push_back({"tool", "{\"sky\": \"clear\"}"});
  msgs.push_back({"assistant", "Clear."});
  msgs.push_back({"user", "Thanks"});
  auto next = RenderChat(c.chat, *c.tok, msgs, {.add_generation_prompt = true, .tools = tools});
  ASSERT_TRUE(next.ok()) << next.status().message();
  ASSERT_GT(next->size(), prompt->size());
  EXPECT_TRUE(std::equal(prompt->begin(), prompt->end(), next->begin()));
  EXPECT_TRUE(c.tok->Decode(*next).ends_with(
      "<｜Assistant｜></"
      "think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>" +
      s.calls[0].second.dump() +
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜><｜tool▁output▁begin｜>{\"sky\":"
      " "
      "\"clear\"}<｜tool▁output▁end｜>Clear.<｜end▁of▁sentence｜><｜User｜>Thanks<｜Assistant｜></"
      "think>"));
}

TEST(ToolCallConstraint, PlanRefusesByName) {
  // Keys the key/value markup cannot hold.
  ChatTool odd = kTime;
  odd.parameters["properties"]["a</arg_key>"] = {{"type", "string"}};
  const ChatTool odd_key[] = {odd};
  auto glm = ToolCallPlan::Make(kFamilyGlm45, odd_key, ToolChoiceMode::kAuto, "", true, false,
                                "parameters");
  ASSERT_FALSE(glm.ok());
  EXPECT_TRUE(glm.status().message().starts_with("tools[0].parameters: property 'a</arg_key>'"))
      << glm.status().message();
  // Qwen3.5's parsers read a key up to ">".
  ChatTool angled = kTime;
  angled.parameters["properties"]["a>b"] = {{"type", "string"}};
  const ChatTool angled_key[] = {angled};
  auto qwen = ToolCallPlan::Make(kFamilyQwen35, angled_key, ToolChoiceMode::kAuto, "", true, false,
                                 "parameters");
  ASSERT_FALSE(qwen.ok());
  EXPECT_TRUE(qwen.status().message().starts_with(
      "tools[0].parameters: property 'a>b': a key holding > cannot be written in qwen3.5's"))
      << qwen.status().message();
  // A schema that is not one object with properties.
  ChatTool either = kTime;
  either.parameters =
      nlohmann::ordered_json::parse(R"({"type": "object", "enum": [{"a": 1}, {"b": 2}]})");
  const ChatTool eithers[] = {either};
  auto k3 = ToolCallPlan::Make(kFamilyXtml, eithers, ToolChoiceMode::kAuto, "", true, false,
                               "parameters");
  ASSERT_FALSE(k3.ok());
  EXPECT_TRUE(
      k3.status().message().starts_with("tools[0].parameters: k3-xtml's arguments are "
                                        "key/value pairs"))
      << k3.status().message();
  ChatTool bad = kWeather;
  bad.parameters["properties"]["city"]["pattern"] = "^[A-Z]";
  const ChatTool with_pattern[] = {kTime, bad};
  auto p = ToolCallPlan::Make(kFamilyQwen3, with_pattern, ToolChoiceMode::kAuto, "", true, false,
                              "parameters");
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(p.status().message().starts_with("tools[1].parameters: ")) << p.status().message();
  EXPECT_NE(p.status().message().find("pattern"), std::string::npos);
  ChatTool array = kTime;
  array.parameters = nlohmann::ordered_json::parse(R"({"type": "array"})");
  const ChatTool arrays[] = {array};
  EXPECT_FALSE(
      ToolCallPlan::Make(kFamilyQwen3, arrays, ToolChoiceMode::kAuto, "", true, false, "parameters")
          .ok());
}

// Harmony (the gpt-oss fixture tokenizer: its released specials): a forced
// call follows the analysis message, or opens the reply; the parsed call is
// the one the reply's bytes spell.
TEST(ToolCallConstraint, HarmonyRequiredCallAfterItsAnalysis) {
  const Case c = Make("gpt-oss", ChatFormat::Harmony());
  // The model's analysis message first, or the call's channel at once.
  const std::string openings[] = {"<|channel|>analysis<|message|>Need the weather.<|end|>",
                                  "<|channel|>commentary"};
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    const auto plan = Plan(kFamilyHarmony, ToolChoiceMode::kRequired);
    const Generated g = Generate(c, plan, seed, c.tok->EncodeMarkup(openings[seed - 1]), {}, 2000);
    const std::string text = c.tok->Decode(g.ids);
    EXPECT_TRUE(g.finished) << text;
    EXPECT_TRUE(text.ends_with("<|call|>")) << text;
    ExpectStreamedEqualsWhole(c, g.ids, plan);
    const Shown s = Gather(Feed(c, g.ids));
    ASSERT_EQ(s.calls.size(), 1u) << text;
    ExpectValid(s.calls[0].first, s.calls[0].second);
    // The call as its bytes spell it: the recipient after to=functions., the body.
    const size_t to = text.rfind("to=functions."), body = text.rfind("<|message|>");
    ASSERT_NE(to, std::string::npos) << text;
    EXPECT_EQ(s.calls[0].first, text.substr(to + 13, text.find(' ', to) - to - 13)) << text;
    EXPECT_EQ(s.calls[0].second, json::parse(text.substr(body + 11, text.size() - body - 19)));
    if (seed == 1) {
      EXPECT_EQ(s.reasoning, "Need the weather.");
      EXPECT_NE(text.find("<|end|><|start|>assistant<|channel|>commentary to=functions."),
                std::string::npos)
          << text;
    }
  }
}

TEST(ToolCallConstraint, HarmonyForcedReplyCannotEndInItsAnalysis) {
  const Case c = Make("gpt-oss", ChatFormat::Harmony());
  auto vocab = std::make_shared<const grammar::VocabIndex>(*c.tok, c.tok->max_id() + 1);
  ToolCallConstraint k(Plan(kFamilyHarmony, ToolChoiceMode::kFunction, "get_time"), *c.tok, vocab);
  for (int32_t id : c.tok->EncodeMarkup("<|channel|>analysis<|message|>Hm."))
    ASSERT_TRUE(k.Accept(id));
  EXPECT_FALSE(k.complete());
  std::vector<float> logits(static_cast<size_t>(vocab->vocab()), 0.0f);
  k.Mask(logits);
  for (const char* end : {"<|return|>", "<|call|>"})
    EXPECT_EQ(logits[static_cast<size_t>(*c.tok->SpecialId(end))], -INFINITY) << end;
  EXPECT_EQ(logits[static_cast<size_t>(*c.tok->SpecialId("<|end|>"))], 0.0f);
  EXPECT_FALSE(k.Accept(*c.tok->SpecialId("<|return|>")));
}

TEST(ToolCallConstraint, HarmonyAutoHoldsCallsInEitherHeaderForm) {
  const Case c = Make("gpt-oss", ChatFormat::Harmony());
  const auto plan = Plan(kFamilyHarmony, ToolChoiceMode::kAuto);
  EXPECT_FALSE(plan->parallel);  // <|call|> ends the turn
  // As the model writes it (OpenAI's docs), and as the template renders a
  // past call: the rest of the header, the arguments and <|call|> held.
  for (const std::string& opening :
       {std::string("<|channel|>analysis<|message|>Weather.<|end|><|start|>assistant"
                    "<|channel|>commentary to="),
        std::string(" to=")}) {
    const Generated g = Generate(c, plan, 4, c.tok->EncodeMarkup(opening), {}, 2000);
    const std::string text = c.tok->Decode(g.ids);
    EXPECT_TRUE(g.finished) << text;
    const Shown s = Gather(Feed(c, g.ids));
    ASSERT_EQ(s.calls.size(), 1u) << text;
    ExpectValid(s.calls[0].first, s.calls[0].second);
  }
  // A final answer is free.
  const Generated f =
      Generate(c, plan, 5, c.tok->EncodeMarkup("<|channel|>final<|message|>Hi"), {}, 20);
  EXPECT_FALSE(f.finished);
  // none: the call's header may not be written.
  auto vocab = std::make_shared<const grammar::VocabIndex>(*c.tok, c.tok->max_id() + 1);
  ToolCallConstraint none(Plan(kFamilyHarmony, ToolChoiceMode::kNone), *c.tok, vocab);
  bool refused = false;
  for (int32_t id : c.tok->EncodeMarkup("<|channel|>commentary to=functions.get_time"))
    if (!none.Accept(id)) {
      refused = true;
      break;
    }
  EXPECT_TRUE(refused);
}

// The generic format (the demo model's tokenizer): the whole reply one JSON
// object; what ReplyParser reads of it is what the object says (parsed here
// by nlohmann, apart from the reader).
Case GenericCase() {
  Case c = Make("demo", ChatFormat::Deepseek(false));
  c.options.tool_plan = Plan(kFamilyDemo, ToolChoiceMode::kAuto);
  return c;
}

// max_tokens cuts the generic format's reply: inside a call's name or
// arguments is inside a call (listed once its name was read); after a
// call's arguments is not.
TEST(ToolCallConstraint, GenericCallCutByMaxTokens) {
  const Case c = GenericCase();
  const std::string first = R"({"tool_calls": [{"name": "get_time", "arguments": {"tz": "CET"})";
  for (const auto& [reply, cut, listed] : std::vector<std::tuple<std::string, bool, int>>{
           {first + R"(}, {"name": "get_weather", "arguments": {"city": "Pa)", true, 2},
           {first + R"(}, {"name": "get_wea)", true, 1},
           {first, false, 1}}) {
    ReplyParser p(*c.tok, c.chat, c.options);
    std::vector<ReplyEvent> events;
    for (const int32_t id : c.tok->Encode(reply))
      for (ReplyEvent& e : p.Feed(id)) events.push_back(std::move(e));
    for (ReplyEvent& e : p.Flush()) events.push_back(std::move(e));
    EXPECT_EQ(p.cut_in_call(), cut) << reply;
    EXPECT_EQ(std::count_if(events.begin(), events.end(),
                            [](const ReplyEvent& e) { return e.kind == Kind::kToolCallStart; }),
              listed)
        << reply;
  }
}

// A response string with escapes no constraint held: a `\u` without four
// hex digits is U+FFFD for the two bytes, and the characters after it stay
// whole (the fuzzer's find: the bad escape swallowed half of one).
TEST(ToolCallConstraint, GenericResponseBadEscapeKeepsCharactersWhole) {
  const Case c = GenericCase();
  const std::string reply = "{\"response\": \"a \\u00e9 \\u\u00e9\u00e9\u00e9 \\ud800x \\q\"}";
  const Shown s = Gather(Feed(c, c.tok->Encode(reply)));
  EXPECT_EQ(s.text, "a \u00e9 \ufffd\u00e9\u00e9\u00e9 \ufffdx q");
  EXPECT_TRUE(s.calls.empty());
}

// A call with an empty name (a special token's bytes are not the name's)
// is not the format's: the reply is text from there on, and no call starts.
TEST(ToolCallConstraint, GenericEmptyNameIsNoCall) {
  const Case c = GenericCase();
  const Shown s =
      Gather(Feed(c, c.tok->Encode(R"({"tool_calls": [{"name": "", "arguments": {}}]})")));
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.text, R"("", "arguments": {}}]})");
}

TEST(ToolCallConstraint, GenericRequiredWritesTheCallsObject) {
  const Case c = GenericCase();
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const bool named = seed > 2;
    const Generated g =
        Generate(c,
                 named ? Plan(kFamilyDemo, ToolChoiceMode::kFunction, "get_weather", false)
                       : Plan(kFamilyDemo, ToolChoiceMode::kRequired),
                 seed, {}, {}, 2000);
    const std::string text = c.tok->Decode(g.ids);
    EXPECT_TRUE(g.finished) << text;
    const json whole = json::parse(text, nullptr, false);
    ASSERT_FALSE(whole.is_discarded()) << text;
    ASSERT_EQ(whole.size(), 1u) << text;
    const json& calls = whole["tool_calls"];
    const Shown s = Gather(Feed(c, g.ids));
    EXPECT_EQ(s.text, "");
    ASSERT_EQ(s.calls.size(), calls.size()) << text;
    ASSERT_GE(s.calls.size(), 1u);
    if (named) {
      EXPECT_EQ(s.calls.size(), 1u);
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].first, calls[i]["name"]);
      EXPECT_EQ(s.calls[i].second, calls[i]["arguments"]);
      ExpectValid(s.calls[i].first, s.calls[i].second);
      if (named) {
        EXPECT_EQ(s.calls[i].first, "get_weather");
      }
    }
  }
}

// Up to `steps` tokens of random logits under `k` after `prefix`, the
// end of turn never chosen;
// stops once `k` is finished, or complete after `until` shows in the reply.
std::vector<int32_t> Wander(const Case& c, grammar::TokenConstraint& k, uint32_t seed,
                            const std::vector<int32_t>& prefix, int steps,
                            const std::string& until) {
  std::vector<int32_t> ids = prefix;
  for (int32_t id : prefix) EXPECT_TRUE(k.Accept(id));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> logits(static_cast<size_t>(c.tok->max_id()) + 1);
  for (int step = 0; step < steps && !k.finished(); ++step) {
    if (k.complete() && !until.empty() && c.tok->Decode(ids).find(until) != std::string::npos)
      break;
    for (float& l : logits) l = u(rng);
    for (int32_t e : c.options.end_of_turn) logits[static_cast<size_t>(e)] = -INFINITY;
    EXPECT_GT(k.Mask(logits), 0u) << c.tok->Decode(ids);
    const auto best =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_TRUE(k.Accept(best)) << c.tok->Decode(ids);
    ids.push_back(best);
  }
  return ids;
}

// Anthropic's thinking.budget_tokens: a random model left alone thinks on;
// held to a budget, its reasoning is that many tokens, then the family's
// close (spelled here as its template writes it, not taken from the
// code), then the answer.
TEST(ThinkingBudget, ReasoningStopsAtTheBudgetThenTheAnswerFollows) {
  struct Family {
    Case c;
    std::vector<int32_t> prefix;  // the reply's markup before its reasoning
    std::string close;
  };
  const Case harmony = Make("gpt-oss", ChatFormat::Harmony());
  const Family families[] = {
      {Make("qwen3", ChatFormat::Qwen3(true), true), {}, "</think>"},
      {harmony, harmony.tok->EncodeMarkup("<|channel|>analysis<|message|>"),
       "<|end|><|start|>assistant<|channel|>final<|message|>"},
      {Make("k3", ChatFormat::Xtml(true)), {}, "<|close|>think<|sep|><|open|>response<|sep|>"},
  };
  constexpr int kBudget = 7;
  for (const Family& f : families) {
    const std::string family = f.c.chat.family;
    const bool open = f.c.options.thinking_open.value_or(ThinkingOpen(f.c.chat, f.c.chat.open));
    // Unheld, the same model is still thinking after three budgets.
    ThinkingBudget free(nullptr, *f.c.tok, f.c.chat, open, 1 << 30);
    const auto unheld = Wander(f.c, free, 1, f.prefix, 3 * kBudget, "");
    EXPECT_EQ(Gather(Feed(f.c, unheld)).text, "") << family;
    EXPECT_GE(free.reasoning_tokens(), 3 * kBudget) << family;

    ThinkingBudget k(nullptr, *f.c.tok, f.c.chat, open, kBudget);
    const auto ids = Wander(f.c, k, 1, f.prefix, 60, "");
    ASSERT_GT(ids.size(), f.prefix.size() + kBudget) << family;
    // The first kBudget tokens are the reasoning; the close follows them.
    std::string after;
    for (size_t n = f.prefix.size() + kBudget; n < ids.size(); ++n)
      after += f.c.tok->TokenBytes(ids[n]);
    EXPECT_TRUE(after.starts_with(f.close)) << family << ": " << after;
    EXPECT_EQ(k.reasoning_tokens(), kBudget) << family;
    const Shown s = Gather(Feed(f.c, ids));
    EXPECT_NE(s.reasoning, "") << family;
    EXPECT_NE(s.text, "") << family << ": " << f.c.tok->Decode(ids);  // the answer went on
  }
}

// With tool_choice required, the calls come once the budget closed the
// reasoning, held to their tools.
TEST(ThinkingBudget, ThenTheForcedCalls) {
  const Case c = Make("qwen3", ChatFormat::Qwen3(true), true);
  auto vocab = std::make_shared<const grammar::VocabIndex>(*c.tok, c.tok->max_id() + 1);
  const auto plan = Plan(kFamilyQwen3, ToolChoiceMode::kRequired, "", false, true);
  ThinkingBudget k(std::make_unique<ToolCallConstraint>(plan, *c.tok, vocab), *c.tok, c.chat, true,
                   5);
  const auto ids = Wander(c, k, 2, {}, 600, std::string(kQwenCallClose));
  EXPECT_EQ(k.reasoning_tokens(), 5);
  const Shown s = Gather(Feed(c, ids));
  EXPECT_NE(s.reasoning, "");
  EXPECT_EQ(s.text, "");
  ASSERT_EQ(s.calls.size(), 1u) << c.tok->Decode(ids);
  ExpectValid(s.calls[0].first, s.calls[0].second);
}

// response_format on the answer: a random model's reply under AnswerFormat
// within `max_tokens`, as the scheduler samples it (the end of turn taken
// once the constraint is complete); `pull` adds to ids' logits at step 0.
struct Answered {
  std::vector<int32_t> ids;
  bool ended = false;
};
Answered AnswerUnder(const Case& c, std::shared_ptr<const ToolCallPlan> plan, uint32_t seed,
                     int max_tokens, std::map<int32_t, float> pull = {}) {
  static const auto schema = *grammar::CompileJsonSchema(json::parse(
      R"({"type":"object","properties":{"city":{"enum":["Paris","Lyon"]},
          "n":{"type":"integer","minimum":1,"maximum":9},"note":{"type":"string"}},
          "required":["city","n"],"additionalProperties":false})"));
  auto vocab = std::make_shared<const grammar::VocabIndex>(*c.tok, c.tok->max_id() + 1);
  auto calls = plan ? std::make_unique<ToolCallConstraint>(plan, *c.tok, vocab) : nullptr;
  AnswerFormat k(schema, vocab, std::move(calls), plan, *c.tok, c.chat, c.options.end_of_turn,
                 c.options.thinking_open.value_or(ThinkingOpen(c.chat, c.chat.open)), max_tokens);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> logits(static_cast<size_t>(vocab->vocab()));
  Answered a;
  for (int step = 0; step < max_tokens && !a.ended; ++step) {
    if (k.complete()) {
      a.ended = true;  // the end of turn
      break;
    }
    for (float& l : logits) l = u(rng);
    for (const auto& [id, bonus] : pull) logits[static_cast<size_t>(id)] += bonus;
    pull.clear();
    EXPECT_GT(k.Mask(logits), 0u) << c.tok->Decode(a.ids);
    const auto best =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    EXPECT_TRUE(k.Accept(best)) << c.tok->Decode(a.ids);
    a.ids.push_back(best);
    a.ended = k.finished();
  }
  return a;
}

void ExpectAnswerValid(const std::string& what, const std::string& text) {
  ASSERT_TRUE(json::accept(text)) << what << ": " << text;
  const json v = json::parse(text);
  EXPECT_TRUE(v["city"] == "Paris" || v["city"] == "Lyon") << what << ": " << text;
  EXPECT_TRUE(v["n"].is_number_integer() && v["n"] >= 1 && v["n"] <= 9) << what << ": " << text;
  EXPECT_TRUE(v.size() == 2 || (v.size() == 3 && v["note"].is_string())) << what << ": " << text;
}

// The reasoning free (a random model never ends it: the close is forced
// when the tokens run short), then the answer held to the schema, ended in
// time: Qwen3's and DeepSeek V3.1's think blocks, K3's think element,
// harmony's analysis channel (its header forced) and final one.
TEST(AnswerFormat, ReasoningThenTheAnswerHeldToTheSchema) {
  const Case cases[] = {
      Make("qwen3", ChatFormat::Qwen3(true), true),
      Make("deepseek", ChatFormat::DeepseekV31(), true),
      Make("k3", ChatFormat::Xtml(true)),
      Make("gpt-oss", ChatFormat::Harmony()),
  };
  for (const Case& c : cases) {
    for (uint32_t seed = 1; seed <= 1; ++seed) {
      const Answered a = AnswerUnder(c, nullptr, seed, 160);
      const std::string what = c.chat.family + " seed " + std::to_string(seed);
      EXPECT_TRUE(a.ended) << what << ": " << c.tok->Decode(a.ids);
      const Shown s = Gather(Feed(c, a.ids));
      EXPECT_TRUE(s.calls.empty()) << what;
      ExpectAnswerValid(what, s.text);
      if (c.chat.family != kFamilyHarmony) {
        EXPECT_NE(s.reasoning, "") << what << ": " << c.tok->Decode(a.ids);
      }
    }
  }
}

TEST(ToolCallConstraint, GenericAutoAnswersOrCalls) {
  const Case c = GenericCase();
  const auto plan = Plan(kFamilyDemo, ToolChoiceMode::kAuto);
  // A text reply: the response's string, unescaped, streamed as text. After
  // 30 random tokens the string's end is pulled for (a random walk seldom
  // closes it).
  auto vocab = std::make_shared<const grammar::VocabIndex>(*c.tok, c.tok->max_id() + 1);
  ToolCallConstraint k(plan, *c.tok, vocab);
  std::vector<int32_t> ids = c.tok->EncodeMarkup("{\"response\": ");
  for (int32_t id : ids) ASSERT_TRUE(k.Accept(id));
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> logits(static_cast<size_t>(vocab->vocab()));
  const std::vector<int32_t> ends = c.tok->Encode("\"}");
  for (int step = 0; step < 200 && !k.finished(); ++step) {
    for (float& l : logits) l = u(rng);
    if (step >= 30)
      for (int32_t e : ends) logits[static_cast<size_t>(e)] += 10;
    ASSERT_GT(k.Mask(logits), 0u);
    const auto best =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_TRUE(k.Accept(best));
    ids.push_back(best);
  }
  EXPECT_TRUE(k.finished());
  const std::string text = c.tok->Decode(ids);
  const json whole = json::parse(text, nullptr, false);
  ASSERT_FALSE(whole.is_discarded()) << text;
  const Shown s = Gather(Feed(c, ids));
  EXPECT_EQ(s.text, whole["response"].get<std::string>()) << text;
  EXPECT_FALSE(s.text.empty());
  EXPECT_TRUE(s.calls.empty());
  // Or calls, from the same start.
  const Generated calls = Generate(c, plan, 3, c.tok->EncodeMarkup("{\"tool_calls\": ["), {}, 2000);
  const Shown t = Gather(Feed(c, calls.ids));
  ASSERT_GE(t.calls.size(), 1u) << c.tok->Decode(calls.ids);
  for (const auto& [name, args] : t.calls) ExpectValid(name, args);
  // Nothing else may open the reply.
  ToolCallConstraint fresh(plan, *c.tok, vocab);
  EXPECT_FALSE(fresh.Accept(c.tok->Encode("Hello")[0]));
  // A past call is rendered into the prompt as the constraint writes one.
  ChatMessage past{"assistant", ""};
  past.tool_calls = {{"call_1", "get_weather", "{\"city\": \"Paris\", \"days\": 2}"}};
  auto rendered = chat_generic::Messages(std::span(&past, 1), {});
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(rendered->at(0).content,
            plan->Head(0, 0) + "{\"city\": \"Paris\", \"days\": 2}" + plan->Tail() + plan->End());
  // tool_choice none holds nothing: no plan.
  const ChatTool tools[] = {kWeather};
  auto none = ToolCallPlan::Make(kFamilyDemo, tools, ToolChoiceMode::kNone, "", true, false, "p");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

// Written whole and fed one byte a token: escapes, surrogate pairs and the
// markup split anywhere read the same (the arguments in other pieces).
Shown ParseGeneric(const Case& c, const std::string& reply) {
  const Shown whole = Gather(Feed(c, Tokens(*c.tok, reply, false)));
  const Shown bytes = Gather(Feed(c, Tokens(*c.tok, reply, true)));
  EXPECT_EQ(whole.text, bytes.text) << reply;
  EXPECT_EQ(whole.calls, bytes.calls) << reply;
  return whole;
}

TEST(Reply, GenericFormatReadAsItArrives) {
  const Case c = GenericCase();
  const Shown r =
      ParseGeneric(c, "{\"response\": \"Line\\n \\\"q\\\" \\u00e9 \\ud83d\\ude00 \\\\ end\"}");
  EXPECT_EQ(r.text, "Line\n \"q\" \xC3\xA9 \xF0\x9F\x98\x80 \\ end");
  EXPECT_TRUE(r.calls.empty());
  const Shown s =
      ParseGeneric(c,
                   "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                   "\"Pa}]\\\"ris\", \"days\": [1, {\"a\": 2}]}}, {\"name\": \"get_time\", "
                   "\"arguments\": {}}]}");
  EXPECT_EQ(s.text, "");
  EXPECT_EQ(s.calls, (Calls{{"get_weather", {{"city", "Pa}]\"ris"}, {"days", {1, {{"a", 2}}}}}},
                            {"get_time", json::object()}}));
  // Not the format (no constraint held it): text as written.
  const Shown t = ParseGeneric(c, "Plain {\"response\": 1}");
  EXPECT_EQ(t.text, "Plain {\"response\": 1}");
  // Without a tool plan the demo format is plain text.
  const Shown plain = Parse(Make("demo", ChatFormat::Deepseek(false)), "{\"response\": \"x\"}");
  EXPECT_EQ(plain.text, "{\"response\": \"x\"}");
}

// With tools (tool_choice auto), the reply is the answer held to the
// schema or calls held to the tools, whichever it begins with.
TEST(AnswerFormat, BesideToolsTheAnswerOrTheCalls) {
  const Case c = Make("qwen3", ChatFormat::Qwen3(false), false);
  const auto plan = Plan(kFamilyQwen3, ToolChoiceMode::kAuto, "", /*parallel=*/false);
  const Answered text = AnswerUnder(c, plan, 3, 80);
  EXPECT_TRUE(text.ended);
  const Shown t = Gather(Feed(c, text.ids));
  EXPECT_TRUE(t.calls.empty());
  ExpectAnswerValid("text", t.text);
  const int32_t open = *c.tok->SpecialId("<tool_call>");
  const Answered call = AnswerUnder(c, plan, 3, 300, {{open, 100.0f}});
  EXPECT_TRUE(call.ended) << c.tok->Decode(call.ids);
  const Shown k = Gather(Feed(c, call.ids));
  EXPECT_EQ(k.text, "");
  ASSERT_EQ(k.calls.size(), 1u) << c.tok->Decode(call.ids);
  ExpectValid(k.calls[0].first, k.calls[0].second);
}

}  // namespace
}  // namespace waste::serve
