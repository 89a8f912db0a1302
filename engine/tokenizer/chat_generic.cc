#include "engine/tokenizer/chat_generic.h"

#include <string>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/chat_tools.h"

namespace waste::chat_generic {

namespace {

using nlohmann::ordered_json;

std::string ToolsText(std::span<const ChatTool> tools) {
  std::string out(kToolsIntro);
  for (size_t i = 0; i < tools.size(); ++i) {
    ordered_json t = ordered_json::object();
    t["name"] = tools[i].name;
    if (!tools[i].description.empty()) t["description"] = tools[i].description;
    t["parameters"] = tools[i].parameters;
    out += (i ? "\n" : "") + chat_tools::PyJsonDumps(t);
  }
  return out + std::string(kToolsRule);
}

}  // namespace

bool Applies(const ChatFormat& chat) {
  return chat.family == kFamilyDemo;
}

Result<std::vector<ChatMessage>> Messages(std::span<const ChatMessage> messages,
                                          std::span<const ChatTool> tools) {
  std::vector<ChatMessage> out;
  size_t from = 0;
  if (!tools.empty()) {
    if (!messages.empty() && messages[0].role == "system") {
      out.push_back({"system", messages[0].content + "\n\n" + ToolsText(tools)});
      from = 1;
    } else {
      out.push_back({"system", ToolsText(tools)});
    }
  }
  const std::vector<ChatToolCall>* calls = nullptr;  // of the last assistant message
  for (size_t i = from; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      if (!m.content.empty())
        return Status::Error(at +
                             ": the generic tool format writes a reply as text or as tool "
                             "calls, not both");
      std::string text(kCallsOpen);
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const ChatToolCall& c = m.tool_calls[k];
        const auto args = ordered_json::parse(c.arguments, nullptr, false);
        if (args.is_discarded() || !args.is_object())
          return Status::Error(at + ".tool_calls[" + std::to_string(k) +
                               "].function.arguments: not a JSON object");
        if (k > 0) text += kCallsBetween;
        text += std::string(kCallName) + chat_tools::PyJsonDumps(c.name) + std::string(kCallArgs) +
                chat_tools::PyJsonDumps(args) + std::string(kCallClose);
      }
      out.push_back({"assistant", text + std::string(kCallsClose)});
    } else if (m.role == "tool") {
      std::string name = m.name;
      if (calls)
        for (const ChatToolCall& c : *calls)
          if (!m.tool_call_id.empty() && c.id == m.tool_call_id) name = c.name;
      ordered_json result = ordered_json::object();
      if (!name.empty()) result["name"] = name;
      result["content"] = m.content;
      ordered_json wrapped = ordered_json::object();
      wrapped["tool_result"] = std::move(result);
      out.push_back({"user", chat_tools::PyJsonDumps(wrapped)});
    } else {
      out.push_back({m.role, m.content});
    }
    if (m.role == "assistant") calls = &m.tool_calls;
  }
  return out;
}

}  // namespace waste::chat_generic
