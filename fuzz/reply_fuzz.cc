// Fuzz target: a chat reply's tokens through ReplyParser (serve/reply.h),
// for every family's syntax: the model's output is not to be trusted to be
// well formed. The input's first line names the family (and "thinking",
// "stop" or "constrained" after it: a reply that starts inside a think
// block, a stop string, calls streamed as a ToolCallConstraint's are, the
// demo model's then in the generic JSON format);
// the rest is the reply, each of the specials below as its id, every other
// byte a token of its own (markers and characters split anywhere, invalid
// UTF-8 included). Kimi's tool-call markers are not specials here, so they
// arrive as bytes. Whatever comes, the events are well formed: pieces of
// valid UTF-8, each call started, given arguments that parse as a JSON
// object (constrained: pieces of valid UTF-8) and ended in order, ids of the
// promised shape; nothing after the reply is done.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/format/chat.h"
#include "engine/tokenizer/base64.h"
#include "engine/tokenizer/utf8.h"
#include "fuzz/scratch.h"
#include "serve/reply.h"
#include "serve/tool_constraint.h"

namespace {

using waste::ChatFormat;
using waste::serve::ReplyEvent;

const std::vector<std::string>& Specials() {
  static const std::vector<std::string> s = {"<think>",
                                             "</think>",
                                             "<tool_call>",
                                             "</tool_call>",
                                             "<arg_key>",
                                             "</arg_key>",
                                             "<arg_value>",
                                             "</arg_value>",
                                             "<|im_start|>",
                                             "<|im_end|>",
                                             "<|user|>",
                                             "<|observation|>",
                                             "<|endoftext|>",
                                             "<｜tool▁calls▁begin｜>",
                                             "<｜tool▁calls▁end｜>",
                                             "<｜tool▁call▁begin｜>",
                                             "<｜tool▁call▁end｜>",
                                             "<｜tool▁sep｜>",
                                             "<｜end▁of▁sentence｜>",
                                             "<|start|>",
                                             "<|channel|>",
                                             "<|message|>",
                                             "<|end|>",
                                             "<|return|>",
                                             "<|call|>",
                                             "<|constrain|>",
                                             "<|open|>",
                                             "<|close|>",
                                             "<|sep|>",
                                             "<|end_of_msg|>"};
  return s;
}

// Every byte a rank, the specials after them.
const waste::Tokenizer& Tok() {
  static const waste::Tokenizer tok = [] {
    std::string model, specials = "[";
    for (int b = 0; b < 256; ++b)
      model += waste::tokenizer::Base64Encode(std::string(1, static_cast<char>(b))) + " " +
               std::to_string(b) + "\n";
    for (size_t i = 0; i < Specials().size(); ++i)
      specials += (i ? "," : "") + nlohmann::json{{"id", 256 + i}, {"text", Specials()[i]}}.dump();
    waste::fuzz::WriteScratch("tokenizer.model", model);
    waste::fuzz::WriteScratch("specials.json", specials + "]");
    auto t = waste::Tokenizer::Load(waste::fuzz::ScratchDir());
    if (!t.ok()) std::abort();
    return *t;
  }();
  return tok;
}

ChatFormat Format(std::string_view name) {
  if (name.starts_with("qwen3")) return ChatFormat::Qwen3(true);
  if (name.starts_with("glm")) return ChatFormat::Glm45();
  if (name.starts_with("deepseek-v3.1")) return ChatFormat::DeepseekV31();
  if (name.starts_with("deepseek")) return ChatFormat::Deepseek(true);
  if (name.starts_with("kimi")) return ChatFormat::Kimi();
  if (name.starts_with("harmony")) return ChatFormat::Harmony();
  if (name.starts_with("k3")) return ChatFormat::Xtml(name.find("thinking") != name.npos);
  return ChatFormat::Deepseek(false);  // the demo model's: no syntax
}

// The plan a constrained reply is read with: two tools (a string and a
// number argument), auto; none where the family has no constrained calls.
std::shared_ptr<const waste::serve::ToolCallPlan> Plan(const std::string& family) {
  static const std::vector<waste::ChatTool> tools = {
      {"f", "",
       nlohmann::ordered_json::parse(
           R"({"type": "object", "properties": {"a": {"type": "string"}}})")},
      {"g", "",
       nlohmann::ordered_json::parse(
           R"({"type": "object", "properties": {"n": {"type": "number"}}})")}};
  auto plan = waste::serve::ToolCallPlan::Make(family, tools, waste::serve::ToolChoiceMode::kAuto,
                                               "", true, false, "parameters");
  return plan.ok() ? *plan : nullptr;
}

std::vector<int32_t> Ids(std::string_view reply) {
  std::vector<int32_t> ids;
  while (!reply.empty()) {
    int32_t id = static_cast<unsigned char>(reply[0]);
    size_t len = 1;
    for (size_t i = 0; i < Specials().size(); ++i)
      if (reply.starts_with(Specials()[i]))
        id = static_cast<int32_t>(256 + i), len = Specials()[i].size();
    ids.push_back(id);
    reply.remove_prefix(len);
  }
  return ids;
}

// The events' order and contents, across the whole reply.
struct Checker {
  bool streamed = false;  // arguments in pieces, not each a JSON object
  int calls = 0;
  bool open = false, args = false;
  void Check(const std::vector<ReplyEvent>& events) {
    for (const ReplyEvent& e : events) {
      switch (e.kind) {
        case ReplyEvent::Kind::kText:
        case ReplyEvent::Kind::kReasoning:
          if (open || e.text.empty() || waste::tokenizer::ReplaceInvalidUtf8(e.text) != e.text)
            std::abort();
          break;
        case ReplyEvent::Kind::kToolCallStart:
          if (open || e.tool_index != calls || e.name.empty() || e.id.size() != 29 ||
              !e.id.starts_with("call_"))
            std::abort();
          open = true;
          args = false;
          break;
        case ReplyEvent::Kind::kToolCallArgs: {
          if (!open || e.tool_index != calls || e.text.empty()) std::abort();
          if (streamed && waste::tokenizer::ReplaceInvalidUtf8(e.text) != e.text) std::abort();
          if (!streamed && (args || !nlohmann::json::parse(e.text, nullptr, false).is_object()))
            std::abort();
          args = true;
          break;
        }
        case ReplyEvent::Kind::kToolCallEnd:
          if (!open || (!args && !streamed) || e.tool_index != calls) std::abort();
          open = false;
          ++calls;
          break;
      }
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nl = in.find('\n');
  const std::string_view head = in.substr(0, nl), reply = nl == in.npos ? "" : in.substr(nl + 1);
  const ChatFormat chat = Format(head);
  waste::serve::ReplyOptions o;
  for (const std::string& e : chat.end_of_turn) o.end_of_turn.push_back(*Tok().SpecialId(e));
  if (head.find("stop") != head.npos) o.stops = {"STOP"};
  if (head.find("thinking") != head.npos) o.thinking_open = true;
  if (head.find("constrained") != head.npos) o.tool_plan = Plan(chat.family);
  // The key/value families' calls are read whole even when constrained.
  const bool key_value = chat.family == waste::kFamilyGlm45 || chat.family == waste::kFamilyXtml;
  waste::serve::ReplyParser p(Tok(), chat, o);
  Checker c;
  c.streamed = o.tool_plan && !key_value;
  for (int32_t id : Ids(reply)) {
    const bool was_done = p.done();
    const auto events = p.Feed(id);
    if (was_done && !events.empty()) std::abort();
    c.Check(events);
  }
  c.Check(p.Flush());
  if (c.open) std::abort();
  return 0;
}
