// Qwen3.5's and 3.6's released template (tests/fixtures/chat/qwen3.6.jinja),
// laid out as pieces: checked token for token against transformers'
// apply_chat_template in tests/chat_test.cc.
#include <optional>
#include <string>

#include "engine/tokenizer/chat_tools.h"

namespace waste::chat_tools {

namespace {

using nlohmann::ordered_json;

constexpr std::string_view kToolsHead =
    "# Tools\n\nYou have access to the following functions:\n\n<tools>";
constexpr std::string_view kToolsTail =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\n"
    "value_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second "
    "parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner "
    "<function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your "
    "function call in natural language BEFORE the function call, but NOT after\n- If there is "
    "no function call available, answer the question like normal with your current knowledge "
    "and do not tell the user about function calls\n</IMPORTANT>";

std::string At(size_t i) {
  return "messages[" + std::to_string(i) + "]";
}

// Python's str.rstrip("\n"), lstrip("\n").
std::string_view RstripNewlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}
std::string_view LstripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}

// An assistant's reasoning and text as the template splits them: its
// reasoning_content, or else what a text holding </think> has before it
// (after any <think>), the text then what follows the last </think>.
void SplitThinking(const ChatMessage& m, std::string* reasoning, std::string* text) {
  *text = PyStrip(m.content);
  *reasoning = m.reasoning;
  if (m.reasoning.empty()) {
    static constexpr std::string_view kClose = "</think>";
    if (const size_t close = text->find(kClose); close != std::string::npos) {
      std::string_view before = RstripNewlines(std::string_view(*text).substr(0, close));
      if (const size_t open = before.rfind("<think>"); open != std::string_view::npos)
        before = before.substr(open + 7);
      *reasoning = LstripNewlines(before);
      *text = std::string(LstripNewlines(std::string_view(*text).substr(text->rfind(kClose) + 8)));
    }
  }
  *reasoning = PyStrip(*reasoning);
}

}  // namespace

Result<std::vector<ChatPiece>> Qwen35Pieces(const ChatFormat& chat,
                                            std::span<const ChatMessage> msgs,
                                            const ChatRenderOptions& o) {
  const auto is = [&](size_t i, const char* role) {
    return i < msgs.size() && msgs[i].role == role;
  };
  Pieces p;
  // A continuation follows the <|im_end|> the model wrote: its "\n" first.
  if (o.continuation) p.Markup("\n");
  const bool system0 = !o.continuation && is(0, "system");
  if (!o.continuation && !o.tools.empty()) {
    p.Markup(chat.system.prefix), p.Markup(kToolsHead);
    for (const ChatTool& t : o.tools) p.Markup("\n"), p.Content(PyJsonDumps(ToolJson(t)));
    p.Markup(kToolsTail);
    if (system0 && !PyStrip(msgs[0].content).empty())
      p.Markup("\n\n"), p.Content(PyStrip(msgs[0].content));
    p.Markup(chat.system.suffix);
  } else if (system0) {
    p.Markup(chat.system.prefix), p.Content(PyStrip(msgs[0].content));
    p.Markup(chat.system.suffix);
  }
  // The last user query: the last user message that is not tool responses
  // written as a user message. The template raises without one.
  std::optional<size_t> last_query;
  for (size_t i = msgs.size(); i-- > 0 && !last_query;) {
    const std::string c = PyStrip(msgs[i].content);
    if (msgs[i].role == "user" &&
        !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>")))
      last_query = i;
  }
  if (!last_query && !o.continuation)
    return Status::Error(
        "messages: Qwen3.5's chat template needs a user message that is not tool responses");
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "system") {
      if (i > 0 || o.continuation)
        return Status::Error(At(i) + ": Qwen3.5's chat template takes a system message only first");
    } else if (m.role == "user") {
      p.Markup(chat.user.prefix), p.Content(PyStrip(m.content)), p.Markup(chat.user.suffix);
    } else if (m.role == "assistant") {
      std::string reasoning, text;
      SplitThinking(m, &reasoning, &text);
      p.Markup(chat.assistant.prefix);
      if (last_query && i > *last_query)
        p.Markup("<think>\n"), p.Content(reasoning), p.Markup("\n</think>\n\n");
      p.Content(text);
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const ChatToolCall& call = m.tool_calls[k];
        // The template walks the arguments' keys: they must be an object.
        ordered_json args = ordered_json::object();
        if (!call.arguments.empty()) {
          args = ordered_json::parse(call.arguments, nullptr, false);
          if (args.is_discarded() || !args.is_object())
            return Status::Error(At(i) + ".tool_calls[" + std::to_string(k) +
                                 "].function.arguments: not a JSON object, which Qwen3.5's "
                                 "template writes parameter by parameter");
        }
        // The first call follows a text after a blank line, the others a newline.
        const char* before = k > 0 ? "\n" : PyStrip(text).empty() ? "" : "\n\n";
        p.Markup(before), p.Markup("<tool_call>\n<function=");
        p.Content(call.name), p.Markup(">\n");
        for (const auto& [key, value] : args.items()) {
          p.Markup("<parameter="), p.Content(key), p.Markup(">\n");
          p.Content(value.is_string() ? value.get<std::string>() : PyJsonDumps(value));
          p.Markup("\n</parameter>\n");
        }
        p.Markup("</function>\n</tool_call>");
      }
      p.Markup(chat.assistant.suffix);
    } else if (m.role == "tool") {
      if (i > 0 && !is(i - 1, "tool")) p.Markup("<|im_start|>user");
      p.Markup("\n<tool_response>\n"), p.Content(PyStrip(m.content)),
          p.Markup("\n</tool_response>");
      if (!is(i + 1, "tool")) p.Markup("<|im_end|>\n");
    }
  }
  if (o.add_generation_prompt) p.Markup(chat.open);
  return p.Take();
}

}  // namespace waste::chat_tools
