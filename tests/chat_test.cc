// Conversations as their models were trained on them: waste convert's
// chat.json (engine/convert/tokenizer_import.cc) for each family's
// checkpoint files, rendered by RenderChat (engine/tokenizer/chat.h), gives
// the ids of transformers' apply_chat_template with the family's released
// template, token for token, on every committed case (tests/fixtures/chat/,
// tools/chat/make_fixtures.py): the demo model, DeepSeek-V3, DeepSeek-V3.1
// and Kimi K2 / Kimi-Linear; and their agent cases (tools offered, tool calls,
// tool results, reasoning, thinking switched on and off, harmony's reasoning
// effort) where the family renders them. Also: chat.json's checks, the roles
// refused, what a family cannot render refused by name, Python's json.dumps,
// a chat's next turn as a continuation, the end-of-turn ids of a container.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/convert/tokenizer_import.h"
#include "engine/format/chat.h"
#include "engine/format/container.h"
#include "engine/synth/synth.h"
#include "engine/tokenizer/chat.h"
#include "engine/tokenizer/chat_tools.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kFixtures = std::string(WASTE_FIXTURES);
// The released templates of the families whose tokenizer is a fixture of its own.
// Qwen3.5's over Qwen3's tokenizer fixture (the specials its template writes).
const std::map<std::string, std::string> kTemplates = {{"qwen3", "qwen3.jinja"},
                                                       {"qwen3.5", "qwen3.6.jinja"},
                                                       {"glm45", "glm-4.6.jinja"},
                                                       {"gpt-oss", "gpt-oss.jinja"}};

std::string ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, std::string_view text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
}

// A checkpoint's tokenizer files for `family` (with the family's released
// chat template in tokenizer_config.json, the demo model's own), imported
// as waste convert imports them into `out`; the chat.json it wrote.
ChatFormat ImportFamily(const std::string& family, const std::string& out) {
  const std::string src = out + "/checkpoint";
  fs::create_directories(src);
  convert::SourceModel model;
  model.shape.vocab = 1 << 20;
  if (family == "demo") {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(std::string(WASTE_MODELS) + "/demo-moe/" + f, src + "/" + f);
  } else if (kTemplates.count(family)) {
    const std::string dir = kFixtures + "/tokenizer/" + (family == "qwen3.5" ? "qwen3" : family);
    fs::copy_file(dir + "/tokenizer.json", src + "/tokenizer.json");
    json cfg = json::parse(ReadText(dir + "/tokenizer_config.json"));
    cfg["chat_template"] = ReadText(kFixtures + "/chat/" + kTemplates.at(family));
    WriteText(src + "/tokenizer_config.json", cfg.dump());
  } else if (family.rfind("deepseek", 0) == 0) {
    fs::copy_file(kFixtures + "/tokenizer/deepseek/tokenizer.json", src + "/tokenizer.json");
    json cfg = json::parse(ReadText(kFixtures + "/tokenizer/deepseek/tokenizer_config.json"));
    cfg["chat_template"] =
        ReadText(kFixtures + "/chat/" + (family == "deepseek" ? "deepseek-v3" : family) + ".jinja");
    WriteText(src + "/tokenizer_config.json", cfg.dump());
  } else {
    model.family = convert::Family::kKimiLinear;
    fs::copy_file(kFixtures + "/tokenizer/tokenizer.model", src + "/tiktoken.model");
    json decoder = json::object();
    for (const json& s : json::parse(ReadText(kFixtures + "/tokenizer/specials.json")))
      decoder[std::to_string(s["id"].get<int>())] = {{"content", s["text"]}};
    const json cfg = {{"added_tokens_decoder", decoder},
                      {"chat_template", ReadText(kFixtures + "/chat/kimi-k2.jinja")}};
    WriteText(src + "/tokenizer_config.json", cfg.dump());
  }
  auto t = convert::ImportTokenizer(src, model);
  EXPECT_TRUE(t.ok()) << t.status().message();
  if (!t.ok()) return {};
  EXPECT_EQ(t->note, "") << family;
  WriteText(out + "/tokenizer.model", t->tokenizer_model);
  if (!t->merges_txt.empty()) WriteText(out + "/merges.txt", t->merges_txt);
  if (!t->pretokenizer_json.empty()) WriteText(out + "/pretokenizer.json", t->pretokenizer_json);
  if (!t->normalizer_json.empty()) WriteText(out + "/normalizer.json", t->normalizer_json);
  WriteText(out + "/specials.json", t->specials_json);
  auto chat = ParseChat(t->chat_json);
  EXPECT_TRUE(chat.ok()) << chat.status().message();
  return chat.ok() ? *chat : ChatFormat{};
}

// Each family imported once for the whole suite (DeepSeek's tokenizer.json
// takes seconds to import).
struct Imported {
  ChatFormat chat;
  Tokenizer tok;
};
const Imported& Family_(const std::string& family) {
  static std::map<std::string, std::unique_ptr<Imported>> cache;
  auto& slot = cache[family];
  if (!slot) {
    const std::string dir = waste::testing::ScratchDir("-" + family);
    ChatFormat chat = ImportFamily(family, dir);
    auto tok = Tokenizer::Load(dir);
    EXPECT_TRUE(tok.ok()) << tok.status().message();
    if (!tok.ok()) std::abort();
    slot = std::make_unique<Imported>(Imported{std::move(chat), std::move(*tok)});
  }
  return *slot;
}

std::vector<ChatMessage> Messages(const json& j) {
  std::vector<ChatMessage> out;
  for (const json& m : j) out.push_back({m["role"], m["content"]});
  return out;
}

// A chat's next turn, rendered alone as a continuation, extends the ids of
// the conversation so far: the whole conversation's ids are the first
// turn's, then the reply as the template writes it, then the next turn's.
void ExpectNextTurnContinues(const ChatFormat& chat, const Tokenizer& tok) {
  const std::vector<ChatMessage> all = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};
  auto whole = RenderChat(chat, tok, all);
  auto first = RenderChat(chat, tok, std::span(all).first(2));
  // The reply as the model writes it (GLM's own "\n" before its text).
  auto reply = tok.EncodeParts(
      std::vector<Tokenizer::Part>{{chat.assistant_text_stripped ? "\nHello." : "Hello.", false},
                                   {chat.assistant.suffix, true}});
  auto next = RenderChat(chat, tok, std::span(all).subspan(3), {.continuation = true});
  ASSERT_TRUE(whole.ok() && first.ok() && next.ok());
  std::vector<int32_t> joined = *first;
  joined.insert(joined.end(), reply.begin(), reply.end());
  joined.insert(joined.end(), next->begin(), next->end());
  EXPECT_EQ(joined, *whole);
}

// One test a family: DeepSeek's tokenizer.json takes seconds to import, and
// each test is a process of its own.
class Family : public ::testing::TestWithParam<const char*> {};

TEST_P(Family, ApplyChatTemplatesIdsAndTheNextTurn) {
  const std::string family = GetParam();
  const ChatFormat& chat = Family_(family).chat;
  const Tokenizer* tok = &Family_(family).tok;
  const json fx = json::parse(ReadText(kFixtures + "/chat/chat.json"))["families"][family];
  ASSERT_GE(fx["cases"].size(), 10u);
  int special_cases = 0;
  for (const json& c : fx["cases"]) {
    const std::string name = c["name"];
    const std::vector<ChatMessage> msgs = Messages(c["messages"]);
    auto ids = RenderChat(chat, *tok, msgs,
                          {.add_generation_prompt = c["add_generation_prompt"],
                           .date = fx.value("date", std::string())});
    if (c.contains("refused")) {
      // What the template raises on (Qwen3.5's: a system message not first).
      ASSERT_FALSE(ids.ok()) << family << " " << name;
      EXPECT_NE(ids.status().message().find("system message only first"), std::string::npos)
          << ids.status().message();
      continue;
    }
    ASSERT_TRUE(ids.ok()) << name << ": " << ids.status().message();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << family << " " << name;
    EXPECT_EQ(tok->Decode(*ids), c["text"].get<std::string>()) << family << " " << name;
    if (c["content_has_special_text"]) {
      ++special_cases;
      // The markup-reading encode would have made the user's text a special.
      EXPECT_NE(*ids, tok->EncodeMarkup(c["text"].get<std::string>())) << name;
    }
  }
  EXPECT_EQ(special_cases, 1);
  // The converter read the template: DeepSeek-V3's released one puts every
  // system message first, the demo model's keeps each in place; Kimi's has a
  // default system prompt and no BOS.
  EXPECT_EQ(chat.system_first, family.rfind("deepseek", 0) == 0);
  // Thinking off: DeepSeek-V3.1's template default, waste's for Qwen3 and GLM.
  EXPECT_EQ(chat.open.find("</think>") != std::string::npos,
            family == "deepseek-v3.1" || family.starts_with("qwen3") || family == "glm45");
  EXPECT_EQ(chat.default_system, family == "kimi" ? "You are a helpful assistant" : "");
  EXPECT_EQ(chat.bos.empty(), family == "kimi" || family.starts_with("qwen3"));
  EXPECT_EQ(chat.end_of_turn.size(), family == "glm45" ? 3u : family == "gpt-oss" ? 2u : 1u);
  if (family.starts_with("qwen3") || family == "gpt-oss") {
    // The template writes an earlier reply otherwise than the model wrote it
    // (Qwen3 and 3.5 drop the empty think block, harmony ends it with <|end|> where
    // the model wrote <|return|>), so a chat's next turn continues what the
    // model wrote instead: Qwen3's the "\n" after <|im_end|>, then the turn.
    const std::vector<ChatMessage> next = {{"user", "Bye"}};
    auto cont = RenderChat(chat, *tok, next, {.continuation = true});
    auto fresh = RenderChat(chat, *tok, next, {.date = "2026-01-15"});
    ASSERT_TRUE(cont.ok() && fresh.ok());
    const std::string text = tok->Decode(*cont);
    EXPECT_EQ(text, family != "gpt-oss"
                        ? "\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
                          "<think>\n\n</think>\n\n"
                        : "<|start|>user<|message|>Bye<|end|><|start|>assistant");
    EXPECT_NE(*cont, *fresh);
  } else {
    ExpectNextTurnContinues(chat, *tok);
  }
}

// A fixture message in OpenAI's shape: content (null: empty), reasoning_content,
// tool_calls [{id, function: {name, arguments}}], tool_call_id.
ChatMessage AgentMessage(const json& m) {
  ChatMessage out{m["role"], m["content"].is_string() ? m["content"].get<std::string>() : ""};
  out.reasoning = m.value("reasoning_content", std::string());
  for (const json& c : m.value("tool_calls", json::array()))
    out.tool_calls.push_back(
        {c["id"], c["function"]["name"], c["function"]["arguments"].get<std::string>()});
  out.tool_call_id = m.value("tool_call_id", std::string());
  return out;
}

// The fixture's tools, read in the client's key order (ordered_json keeps it).
std::vector<ChatTool> FixtureTools() {
  const auto doc = nlohmann::ordered_json::parse(ReadText(kFixtures + "/chat/chat.json"));
  std::vector<ChatTool> tools;
  for (const auto& t : doc["tools"]) {
    const auto& f = t["function"];
    tools.push_back({f["name"], f["description"], f["parameters"]});
  }
  return tools;
}

// Tools, tool calls and results, reasoning, thinking on and off, harmony's
// reasoning effort: every agent case of the family, token for token.
TEST_P(Family, AgentCasesAsTheTemplateRendersThem) {
  const std::string family = GetParam();
  const json doc = json::parse(ReadText(kFixtures + "/chat/chat.json"));
  const json& fx = doc["families"][family];
  const std::vector<ChatTool> tools = FixtureTools();
  const Imported& f = Family_(family);
  const size_t expected =
      family.starts_with("qwen3") || family == "glm45" || family == "deepseek-v3.1" ? 19
      : family == "gpt-oss" || family == "kimi"                                     ? 11
                                                                                    : 0;
  ASSERT_EQ(fx["agent_cases"].size(), expected);
  for (const json& c : fx["agent_cases"]) {
    const std::string name = c["name"];
    std::vector<ChatMessage> msgs;
    for (const json& m : c["messages"]) msgs.push_back(AgentMessage(m));
    ChatRenderOptions o{.add_generation_prompt = c["add_generation_prompt"],
                        .date = fx.value("date", std::string())};
    if (c["tools"]) o.tools = tools;
    if (!c["thinking"].is_null()) o.thinking = c["thinking"].get<bool>();
    if (!c["reasoning_effort"].is_null()) o.reasoning_effort = c["reasoning_effort"];
    auto ids = RenderChat(f.chat, f.tok, msgs, o);
    ASSERT_TRUE(ids.ok()) << name << ": " << ids.status().message();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << family << " " << name;
    EXPECT_EQ(f.tok.Decode(*ids), c["text"].get<std::string>()) << family << " " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Released, Family,
                         ::testing::Values("demo", "deepseek", "deepseek-v3.1", "kimi", "qwen3",
                                           "qwen3.5", "glm45", "gpt-oss"),
                         [](const auto& p) {
                           std::string name = p.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

// A harmony reply as the model writes it: its analysis channel, then the
// final one. Only the final channel's text is the reply.
TEST(ChatJson, HarmonyReplyIsTheFinalChannel) {
  const Imported& oss = Family_("gpt-oss");
  const std::vector<int32_t> reply = oss.tok.EncodeMarkup(
      "<|channel|>analysis<|message|>The user asks for a capital. Easy.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Paris, of course.");
  ReplyFilter filter(oss.tok, oss.chat.reply_after);
  std::vector<int32_t> shown;
  for (int32_t id : reply)
    if (filter.Shown(id)) shown.push_back(id);
  EXPECT_EQ(oss.tok.Decode(shown), "Paris, of course.");
  // The reply ends at <|return|> (or <|call|>), not at the analysis' <|end|>.
  EXPECT_EQ(oss.chat.end_of_turn, (std::vector<std::string>{"<|return|>", "<|call|>"}));
  // Another family's filter shows every token but the specials.
  const Imported& qwen = Family_("qwen3");
  ReplyFilter plain(qwen.tok, qwen.chat.reply_after);
  std::vector<int32_t> kept;
  for (int32_t id : qwen.tok.EncodeMarkup("<think>\n\n</think>\n\nHi"))
    if (plain.Shown(id)) kept.push_back(id);
  EXPECT_EQ(qwen.tok.Decode(kept), "\n\n\n\nHi");
}

// Qwen3's chat.json follows the checkpoint's template: the hybrid layout
// with the enable_thinking switch, plain ChatML without think blocks
// (Instruct-2507), and a note for <think> without the switch.
TEST(ChatJson, Qwen3LayoutFollowsTheTemplate) {
  const std::string src = waste::testing::ScratchDir() + "/qwen";
  fs::create_directories(src);
  fs::copy_file(kFixtures + "/tokenizer/qwen3/tokenizer.json", src + "/tokenizer.json");
  convert::SourceModel model;
  model.shape.vocab = 1 << 20;
  const auto import_with = [&](const std::string& tmpl, std::string* note) {
    json cfg = json::parse(ReadText(kFixtures + "/tokenizer/qwen3/tokenizer_config.json"));
    cfg["chat_template"] = tmpl;
    WriteText(src + "/tokenizer_config.json", cfg.dump());
    auto t = convert::ImportTokenizer(src, model);
    EXPECT_TRUE(t.ok());
    *note = t.ok() ? t->note : "";
    auto chat = ParseChat(t.ok() ? t->chat_json : "");
    EXPECT_TRUE(chat.ok());
    return chat.ok() ? *chat : ChatFormat{};
  };
  std::string note;
  const ChatFormat hybrid = import_with(ReadText(kFixtures + "/chat/qwen3.jinja"), &note);
  EXPECT_EQ(hybrid.ToJson(), ChatFormat::Qwen3(true).ToJson());
  EXPECT_EQ(note, "");
  const ChatFormat plain = import_with(
      "{% for m in messages %}{{'<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n'}}"
      "{% endfor %}",
      &note);
  EXPECT_EQ(plain.ToJson(), ChatFormat::Qwen3(false).ToJson());
  EXPECT_EQ(plain.open, "<|im_start|>assistant\n");
  EXPECT_FALSE(plain.last_reply);
  EXPECT_EQ(note, "");
  import_with("{{ '<|im_start|>assistant\\n<think>\\n' }}", &note);
  EXPECT_NE(note.find("without the enable_thinking switch"), std::string::npos) << note;
  // Qwen3.6's template as chat_template.jinja (as its release ships it) wins
  // over tokenizer_config.json's, as in transformers: Qwen3.5's format.
  fs::copy_file(kFixtures + "/chat/qwen3.6.jinja", src + "/chat_template.jinja");
  const ChatFormat qwen35 = import_with(ReadText(kFixtures + "/chat/qwen3.jinja"), &note);
  EXPECT_EQ(qwen35.ToJson(), ChatFormat::Qwen35().ToJson());
  EXPECT_EQ(note, "");
}

TEST(ChatJson, OtherRolesAreRefusedByName) {
  const Imported& kimi = Family_("kimi");
  const std::vector<ChatMessage> msgs = {{"user", "x"}, {"function", "y"}};
  auto ids = RenderChat(kimi.chat, kimi.tok, msgs);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().message(),
            "messages[1]: the role \"function\" is not supported (system, user, assistant or "
            "tool)");
}

// DeepSeek-V3.1's tool section with what the fixture's tools lack (vLLM's
// template fails on a tool without a description): an empty description is
// written empty, and a client's text stays text even where it spells markup.
TEST(ChatJson, DeepseekV31ToolTextIsContent) {
  const Imported& ds = Family_("deepseek-v3.1");
  const std::vector<ChatMessage> ask = {{"user", "Hi"}};
  std::vector<ChatTool> tools = {{"f", ""}, {"g", "ends <｜User｜>"}};
  tools[1].parameters["type"] = "object";
  auto ids = RenderChat(ds.chat, ds.tok, ask, {.tools = tools});
  ASSERT_TRUE(ids.ok()) << ids.status().message();
  const std::string text = ds.tok.Decode(*ids);
  EXPECT_NE(text.find("\n\n### f\nDescription: \n\nParameters: {}\n\n### g\nDescription: ends "
                      "<｜User｜>\n\nParameters: {\"type\": \"object\"}\n\nIMPORTANT:"),
            std::string::npos)
      << text;
  const std::vector<int32_t> user = ds.tok.EncodeMarkup("<｜User｜>");
  ASSERT_EQ(user.size(), 1u);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), user[0]), 1);  // the turn's, not the description's
}

// What a family's template cannot render is refused by name, never dropped.
TEST(ChatJson, AgentPartsAFamilyCannotRenderAreRefusedByName) {
  const std::vector<ChatTool> tools = FixtureTools();
  const std::vector<ChatMessage> ask = {{"user", "Weather?"}};
  ChatMessage call{"assistant", ""};
  call.tool_calls = {{"call_1", "get_weather", "{\"city\": \"Paris\"}"}};
  const std::vector<ChatMessage> called = {ask[0], call, {"tool", "sunny"}};
  const auto refusal = [&](const char* family, std::span<const ChatMessage> msgs,
                           ChatRenderOptions o) {
    const Imported& f = Family_(family);
    auto ids = RenderChat(f.chat, f.tok, msgs, o);
    return ids.ok() ? std::string("rendered") : ids.status().message();
  };
  EXPECT_EQ(refusal("kimi", called, {}), "rendered");  // the calls dropped, as its template does
  const std::string deepseek_v3 =
      "DeepSeek-V3's released template ignores tools and writes tool calls malformed (a single "
      "call left unclosed, calls beside text dropped)";
  EXPECT_EQ(refusal("deepseek", ask, {.tools = tools}), "tools: " + deepseek_v3);
  EXPECT_EQ(refusal("deepseek", called, {}), "messages[1].tool_calls: " + deepseek_v3);
  // The demo model's template has no tool syntax: the generic format, which
  // writes a reply as text or as calls.
  ChatMessage both = call;
  both.content = "Let me see.";
  EXPECT_EQ(refusal("demo", std::vector<ChatMessage>{ask[0], both}, {}),
            "messages[1]: the generic tool format writes a reply as text or as tool calls, not "
            "both");
  ChatMessage listed = call;
  listed.tool_calls[0].arguments = "[1]";
  EXPECT_EQ(refusal("demo", std::vector<ChatMessage>{ask[0], listed}, {}),
            "messages[1].tool_calls[0].function.arguments: not a JSON object");
  // Harmony's template renders a message's first call only, and names a
  // result by the call before it.
  ChatMessage two = call;
  two.tool_calls.push_back(call.tool_calls[0]);
  EXPECT_EQ(refusal("gpt-oss", std::vector<ChatMessage>{ask[0], two}, {.date = "2026-01-15"}),
            "messages[1].tool_calls: GPT-OSS's harmony template renders one call per assistant "
            "message");
  EXPECT_EQ(refusal("gpt-oss", std::vector<ChatMessage>{ask[0], {"tool", "sunny"}},
                    {.date = "2026-01-15"}),
            "messages[1]: a tool result with no assistant tool call before it, which GPT-OSS's "
            "harmony template needs for its name");
  std::vector<ChatTool> one_of = tools;
  one_of[0].parameters["properties"]["units"] = {{"oneOf", {{{"type", "string"}}}}};
  EXPECT_EQ(refusal("gpt-oss", ask, {.date = "2026-01-15", .tools = one_of}),
            "tools[0].function.parameters.properties.units.oneOf: not rendered for GPT-OSS's "
            "harmony template");
  EXPECT_EQ(refusal("qwen3", called, {.continuation = true}),
            "a continuation with tools, tool calls, tool results or reasoning is not rendered");
  // GLM's template writes the arguments key by key.
  ChatMessage bad = call;
  bad.tool_calls[0].arguments = "[1, 2]";
  EXPECT_EQ(refusal("glm45", std::vector<ChatMessage>{ask[0], bad}, {}),
            "messages[1].tool_calls[0].function.arguments: not a JSON object, which GLM's "
            "template writes key by key");
  // Thinking where the template has no switch; effort outside harmony.
  EXPECT_EQ(refusal("kimi", ask, {.thinking = true}),
            "thinking: this model's chat template (kimi-k2) cannot switch thinking on");
  EXPECT_EQ(refusal("gpt-oss", ask, {.date = "2026-01-15", .thinking = false}),
            "thinking: GPT-OSS always reasons (its analysis channel) and cannot be switched "
            "off; lower reasoning_effort instead");
  EXPECT_EQ(refusal("gpt-oss", ask, {.date = "2026-01-15", .reasoning_effort = "extreme"}),
            "reasoning_effort: must be low, medium or high");
  EXPECT_EQ(refusal("qwen3", ask, {.reasoning_effort = "low"}),
            "reasoning_effort: this model's chat format (qwen3) has no reasoning effort; only "
            "GPT-OSS's harmony has");
  // Off for a model that never thinks is what it does.
  const Imported& kimi = Family_("kimi");
  EXPECT_EQ(*RenderChat(kimi.chat, kimi.tok, ask, {.thinking = false}),
            *RenderChat(kimi.chat, kimi.tok, ask));
}

// A template with no tool syntax (the demo model's) takes the generic
// format (engine/tokenizer/chat_generic.h): the tools described after the
// system text, a past call as the JSON object the model writes, a result as
// a user message; without a system message the tools' text is one.
TEST(ChatJson, GenericToolFormatWhereTheTemplateHasNoToolSyntax) {
  const Imported& demo = Family_("demo");
  const std::vector<ChatTool> tools = {
      {"get_time", "The time.",
       nlohmann::ordered_json::parse(
           R"({"type": "object", "properties": {"tz": {"type": "string"}}})")}};
  ChatMessage call{"assistant", ""};
  call.tool_calls = {{"call_1", "get_time", "{\"tz\":\"CET\"}"}};
  ChatMessage result{"tool", "12:00"};
  result.tool_call_id = "call_1";
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Time?"}, call, result};
  const auto text = [&](std::span<const ChatMessage> m, std::span<const ChatTool> t) {
    auto pieces = ChatPieces(demo.chat, m, {.tools = t});
    EXPECT_TRUE(pieces.ok()) << pieces.status().message();
    std::string all;
    for (const ChatPiece& p : pieces.ok() ? *pieces : std::vector<ChatPiece>{}) all += p.text;
    return all;
  };
  const std::string bos = "<｜begin▁of▁sentence｜>";
  const std::string described =
      "# Tools\n\nYou may call these tools; each line is a tool's name, description and the JSON "
      "Schema of its arguments:\n{\"name\": \"get_time\", \"description\": \"The time.\", "
      "\"parameters\": {\"type\": \"object\", \"properties\": {\"tz\": {\"type\": \"string\"}}}}"
      "\n\nReply with one JSON object: {\"tool_calls\": [{\"name\": \"<tool name>\", "
      "\"arguments\": {<its arguments>}}]} to call tools, or {\"response\": \"<your reply>\"} to "
      "answer.";
  const std::string turns =
      "<｜User｜>Time?<｜Assistant｜>{\"tool_calls\": [{\"name\": \"get_time\", \"arguments\": "
      "{\"tz\": \"CET\"}}]}<｜end▁of▁sentence｜><｜User｜>{\"tool_result\": {\"name\": "
      "\"get_time\", \"content\": \"12:00\"}}<｜Assistant｜>";
  EXPECT_EQ(text(msgs, tools), bos + "Be brief.\n\n" + described + turns);
  EXPECT_EQ(text(std::span(msgs).subspan(1), tools), bos + described + turns);
  // tool_choice none (the server renders no tools): the calls and results still.
  EXPECT_EQ(text(msgs, {}), bos + "Be brief." + turns);
  // The ids are the pieces' (markup as specials, the rest as text).
  auto ids = RenderChat(demo.chat, demo.tok, msgs, {.tools = tools});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(demo.tok.Decode(*ids), bos + "Be brief.\n\n" + described + turns);
}

// The templates' tojson: Python's json.dumps(ensure_ascii=False), its
// separators, the keys in their order.
TEST(ChatJson, PyJsonDumpsAsPython) {
  const auto dumps = [](std::string_view text) {
    return chat_tools::PyJsonDumps(nlohmann::ordered_json::parse(text));
  };
  EXPECT_EQ(dumps(R"({"z":1,"a":[true,null,{"k":"v"}],"e":{},"l":[]})"),
            R"({"z": 1, "a": [true, null, {"k": "v"}], "e": {}, "l": []})");
  EXPECT_EQ(dumps(R"("Zürich \"q\" \\ \n\t\u0001 \u007f /")"), R"("Zürich \"q\" \\ \n\t\u0001 )"
                                                               "\x7f"
                                                               R"( /")");
  EXPECT_EQ(dumps("[1.0, 250.5, -2, 1e-05, 1e+16, 0.1]"), "[1.0, 250.5, -2, 1e-05, 1e+16, 0.1]");
}

TEST(ChatJson, RoundTripsAndRefusesBadFields) {
  const json good = ChatFormat::Deepseek(true).ToJson();
  auto back = ParseChat(good.dump());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->ToJson(), good);
  const auto refused = [&](json doc) {
    auto r = ParseChat(doc.dump());
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  // An older converter's chat.json (no version) reads as it rendered then.
  json old = {{"system", {"a", "b"}}, {"assistant", {"c", "<|im_end|>"}}, {"open", "e"}};
  auto legacy = ParseChat(old.dump());
  ASSERT_TRUE(legacy.ok()) << legacy.status().message();
  EXPECT_EQ(legacy->system.prefix, "a");
  EXPECT_EQ(legacy->user.prefix, "");
  EXPECT_EQ(legacy->open, "e");
  EXPECT_EQ(legacy->bos, "");
  EXPECT_EQ(legacy->default_system, "");
  EXPECT_EQ(legacy->end_of_turn, std::vector<std::string>{"<|im_end|>"});
  old["open"] = 5;
  EXPECT_NE(refused(old).find("open"), std::string::npos) << refused(old);
  json j = good;
  j["version"] = 3;
  EXPECT_EQ(refused(j), "chat.json: version 3 is not the 2 this waste reads");
  j = good;
  j["version"] = "2";
  EXPECT_EQ(refused(j), "chat.json: version is not an integer");
  j = good;
  j.erase("assistant");
  EXPECT_EQ(refused(j), "chat.json: \"assistant\" is missing");
  j = good;
  j["user"] = {"only one"};
  EXPECT_EQ(refused(j), "chat.json: \"user\" must be [prefix, suffix]");
  j = good;
  j["system_first"] = 1;
  EXPECT_EQ(refused(j), "chat.json: system_first is not true or false");
  j = good;
  j["default_system"] = json::array();
  EXPECT_EQ(refused(j), "chat.json: default_system is not a string");
  for (const json& bad : {json("x"), json::array({""}), json::array({1}),
                          json(std::vector<std::string>(17, "<|im_end|>"))}) {
    j = good;
    j["end_of_turn"] = bad;
    EXPECT_NE(refused(j).find("chat.json: \"end_of_turn\""), std::string::npos) << bad;
  }
  // The later keys round-trip, and are checked like the others.
  for (const ChatFormat& f :
       {ChatFormat::Qwen3(true), ChatFormat::Glm45(), ChatFormat::Harmony()}) {
    auto again = ParseChat(f.ToJson().dump());
    ASSERT_TRUE(again.ok()) << again.status().message();
    EXPECT_EQ(again->ToJson(), f.ToJson());
  }
  j = ChatFormat::Harmony().ToJson();
  j["leading_system_only"] = "yes";
  EXPECT_EQ(refused(j), "chat.json: leading_system_only is not true or false");
  j = ChatFormat::Harmony().ToJson();
  j["last_reply"] = {"x"};
  EXPECT_EQ(refused(j), "chat.json: \"last_reply\" must be [prefix, suffix]");
  j = ChatFormat::Harmony().ToJson();
  j["reply_after"] = 3;
  EXPECT_EQ(refused(j), "chat.json: reply_after is not a string");
  j = good;
  j["family"] = "llama-3";
  EXPECT_EQ(refused(j), "chat.json: \"family\" \"llama-3\" is not one this waste knows");
  j = good;
  j["family"] = 7;
  EXPECT_EQ(refused(j), "chat.json: family is not a string");
  j = good;
  j.erase("family");  // written before the key: read, the family unknown
  auto unnamed = ParseChat(j.dump());
  ASSERT_TRUE(unnamed.ok()) << unnamed.status().message();
  EXPECT_EQ(unnamed->family, "");
  EXPECT_EQ(back->family, kFamilyDeepseekV3);
  // No end of its own (an older chat.json whose assistant had no suffix):
  // accepted, and it writes itself back the same.
  j = good;
  j["end_of_turn"] = json::array();
  auto none = ParseChat(j.dump());
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->end_of_turn.empty());
  EXPECT_EQ(none->ToJson(), j);
}

// A synthetic container's chat.json is Kimi's: a reply ends at <|im_end|>,
// which is also its eos_token, named once.
TEST(ChatJson, EndOfTurnIdsOfAContainer) {
  const std::string dir = waste::testing::ScratchDir();
  auto spec = SynthPreset("tiny-kimi");
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(WriteSynthetic(*spec, dir, true, 1, nullptr).ok());
  auto ct = Container::Open(dir);
  ASSERT_TRUE(ct.ok()) << ct.status().message();
  auto tok = Tokenizer::Load(dir);
  ASSERT_TRUE(tok.ok());
  auto ends = EndOfTurnIds(*ct, *tok);
  ASSERT_TRUE(ends.ok()) << ends.status().message();
  EXPECT_EQ(*ends, std::vector<int32_t>{*tok->SpecialId("<|im_end|>")});
  EXPECT_EQ(ct->config().eos_tokens, std::vector<int>{*tok->SpecialId("<|im_end|>")});
  // eos_token_id as a list: each id ends a reply, beside end_of_turn's.
  auto listed = EndOfTurnIds(ct->chat(), {9, 4, 9}, *tok);
  ASSERT_TRUE(listed.ok()) << listed.status().message();
  std::vector<int32_t> want = {4, 9, *tok->SpecialId("<|im_end|>")};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(*listed, want);
}

}  // namespace
}  // namespace waste
