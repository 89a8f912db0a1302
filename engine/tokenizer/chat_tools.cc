#include "engine/tokenizer/chat_tools.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace waste::chat_tools {

namespace {

using nlohmann::ordered_json;

bool PySpaceAt(std::string_view s, size_t i, size_t* len) {
  static const char* const kSpaces[] = {
      "\t",           "\n",           "\x0B",         "\x0C",         "\r",
      "\x1C",         "\x1D",         "\x1E",         "\x1F",         " ",
      "\xC2\x85",     "\xC2\xA0",     "\xE1\x9A\x80", "\xE2\x80\x80", "\xE2\x80\x81",
      "\xE2\x80\x82", "\xE2\x80\x83", "\xE2\x80\x84", "\xE2\x80\x85", "\xE2\x80\x86",
      "\xE2\x80\x87", "\xE2\x80\x88", "\xE2\x80\x89", "\xE2\x80\x8A", "\xE2\x80\xA8",
      "\xE2\x80\xA9", "\xE2\x80\xAF", "\xE2\x81\x9F", "\xE3\x80\x80"};
  for (const char* sp : kSpaces) {
    const std::string_view v(sp);
    if (s.substr(i, v.size()) == v) {
      *len = v.size();
      return true;
    }
  }
  return false;
}

// Python's str.strip("\n"), lstrip("\n").
std::string_view StripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}
std::string_view LstripNewlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}

bool EndsWith(std::string_view s, std::string_view end) {
  return s.size() >= end.size() && s.substr(s.size() - end.size()) == end;
}

std::string At(size_t i) {
  return "messages[" + std::to_string(i) + "]";
}

bool Is(std::span<const ChatMessage> m, size_t i, const char* role) {
  return i < m.size() && m[i].role == role;
}

// --------------------------------------------------------------- Qwen3

constexpr std::string_view kQwenToolsHead =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kQwenToolsTail =
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
    "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";

Result<std::vector<ChatPiece>> Qwen3(const ChatFormat& chat, std::span<const ChatMessage> msgs,
                                     const ChatRenderOptions& o) {
  if (!chat.last_reply)
    return Status::Error(
        "tools, tool calls, tool results and reasoning are rendered for "
        "Qwen3's hybrid template only, not this one (Instruct-2507's)");
  Pieces p;
  const bool system0 = Is(msgs, 0, "system");
  if (!o.tools.empty()) {
    p.Markup(chat.system.prefix);
    if (system0) p.Content(msgs[0].content), p.Markup("\n\n");
    p.Markup(kQwenToolsHead);
    for (const ChatTool& t : o.tools) p.Markup("\n"), p.Content(PyJsonDumps(ToolJson(t)));
    p.Markup(kQwenToolsTail);
    p.Markup(chat.system.suffix);
  } else if (system0) {
    p.Markup(chat.system.prefix), p.Content(msgs[0].content), p.Markup(chat.system.suffix);
  }
  // The last user query: the last user message that is not tool responses
  // written as a user message; none: the last message.
  size_t last_query = msgs.size() - 1;
  for (size_t i = msgs.size(); i-- > 0;) {
    const std::string& c = msgs[i].content;
    if (msgs[i].role == "user" &&
        !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      p.Markup(m.role == "user" ? chat.user.prefix : chat.system.prefix);
      p.Content(m.content);
      p.Markup(m.role == "user" ? chat.user.suffix : chat.system.suffix);
    } else if (m.role == "assistant") {
      p.Markup(chat.assistant.prefix);
      if (i > last_query && (i + 1 == msgs.size() || !m.reasoning.empty())) {
        p.Markup("<think>\n"), p.Content(StripNewlines(m.reasoning)), p.Markup("\n</think>\n\n");
        p.Content(LstripNewlines(m.content));
      } else {
        p.Content(m.content);
      }
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        if (k > 0 || !m.content.empty()) p.Markup("\n");
        p.Markup("<tool_call>\n{\"name\": \""), p.Content(m.tool_calls[k].name);
        p.Markup("\", \"arguments\": "), p.Content(m.tool_calls[k].arguments);
        p.Markup("}\n</tool_call>");
      }
      p.Markup(chat.assistant.suffix);
    } else if (m.role == "tool") {
      if (!Is(msgs, i - 1, "tool")) p.Markup("<|im_start|>user");
      p.Markup("\n<tool_response>\n"), p.Content(m.content), p.Markup("\n</tool_response>");
      if (!Is(msgs, i + 1, "tool")) p.Markup("<|im_end|>\n");
    }
  }
  if (o.add_generation_prompt) p.Markup(chat.open);
  return p.Take();
}

// ------------------------------------------------------------- GLM-4.5

constexpr std::string_view kGlmToolsHead =
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user "
    "query.\n\nYou are provided with function signatures within <tools></tools> XML "
    "tags:\n<tools>\n";
constexpr std::string_view kGlmToolsTail =
    "</tools>\n\nFor each function call, output the function name and arguments within the "
    "following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n"
    "<arg_value>{arg-value-1}</arg_value>\n<arg_key>{arg-key-2}</arg_key>\n"
    "<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>";

Result<std::vector<ChatPiece>> Glm45(const ChatFormat& chat, std::span<const ChatMessage> msgs,
                                     const ChatRenderOptions& o) {
  Pieces p;
  p.Markup(chat.bos);
  if (!o.tools.empty()) {
    p.Markup(kGlmToolsHead);
    for (const ChatTool& t : o.tools) p.Content(PyJsonDumps(ToolJson(t))), p.Markup("\n");
    p.Markup(kGlmToolsTail);
  }
  std::optional<size_t> last_user;
  for (size_t i = 0; i < msgs.size(); ++i)
    if (msgs[i].role == "user") last_user = i;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "user") {
      p.Markup(chat.user.prefix), p.Content(m.content);
      // The template appends /nothink (thinking off) unless the text ends with it.
      if (!EndsWith(m.content, chat.user.suffix)) p.Markup(chat.user.suffix);
    } else if (m.role == "system") {
      p.Markup(chat.system.prefix), p.Content(m.content), p.Markup(chat.system.suffix);
    } else if (m.role == "assistant") {
      p.Markup("<|assistant|>");
      if ((!last_user || i > *last_user) && !m.reasoning.empty())
        p.Markup("\n<think>"), p.Content(PyStrip(m.reasoning)), p.Markup("</think>");
      else
        p.Markup("\n<think></think>");
      if (const std::string text = PyStrip(m.content); !text.empty())
        p.Markup("\n"), p.Content(text);
      for (size_t k = 0; k < m.tool_calls.size(); ++k) {
        const ChatToolCall& call = m.tool_calls[k];
        const std::string where = At(i) + ".tool_calls[" + std::to_string(k) + "]";
        // The template walks the arguments' keys: they must be an object.
        ordered_json args = ordered_json::object();
        if (!call.arguments.empty()) {
          args = ordered_json::parse(call.arguments, nullptr, false);
          if (args.is_discarded() || !args.is_object())
            return Status::Error(where +
                                 ".function.arguments: not a JSON object, which GLM's template "
                                 "writes key by key");
        }
        p.Markup("\n<tool_call>"), p.Content(call.name);
        for (const auto& [key, value] : args.items()) {
          p.Markup("\n<arg_key>"), p.Content(key), p.Markup("</arg_key>\n<arg_value>");
          p.Content(value.is_string() ? value.get<std::string>() : PyJsonDumps(value));
          p.Markup("</arg_value>");
        }
        p.Markup("\n</tool_call>");
      }
    } else if (m.role == "tool") {
      if (!Is(msgs, i - 1, "tool")) p.Markup("<|observation|>");
      p.Markup("\n<tool_response>\n"), p.Content(m.content), p.Markup("\n</tool_response>");
    }
  }
  if (o.add_generation_prompt) p.Markup(chat.open);
  return p.Take();
}

// -------------------------------------------------------- DeepSeek-V3.1

// The model card's tool description ("ToolCall"), as vLLM's
// tool_chat_template_deepseekv31.jinja writes it after the system prompt.
constexpr std::string_view kDsToolsHead = "\n\n## Tools\nYou have access to the following tools:\n";
constexpr std::string_view kDsToolsTail =
    "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments"
    "<｜tool▁call▁end｜>{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\nWhere:\n\n"
    "- `tool_call_name` must be an exact match to one of the available tools\n"
    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters "
    "Schema\n"
    "- For multiple tool calls, chain them directly without separators or spaces\n";

Result<std::vector<ChatPiece>> DeepseekV31(const ChatFormat& chat,
                                           std::span<const ChatMessage> msgs,
                                           const ChatRenderOptions& o) {
  const std::string& eos = chat.assistant.suffix;
  Pieces p;
  p.Markup(chat.bos);
  bool first_system = true;
  for (const ChatMessage& m : msgs)
    if (m.role == "system") {
      if (!first_system) p.Markup("\n\n");
      p.Content(m.content);
      first_system = false;
    }
  if (!o.tools.empty()) {
    // Each tool's name, description and parameters (tojson), after the
    // system prompt, whether or not there is one.
    p.Markup(kDsToolsHead);
    for (const ChatTool& t : o.tools) {
      p.Markup("\n### "), p.Content(t.name), p.Markup("\nDescription: "), p.Content(t.description);
      p.Markup("\n\nParameters: "), p.Content(PyJsonDumps(t.parameters)), p.Markup("\n");
    }
    p.Markup(kDsToolsTail);
  }
  bool last_user = false, after_tool = false;
  for (const ChatMessage& m : msgs) {
    if (m.role == "user") {
      p.Markup(chat.user.prefix), p.Content(m.content);
      last_user = true, after_tool = false;
    } else if (m.role == "assistant") {
      // Its reply's opening only right after a user turn (chat.assistant's
      // prefix: history replies always with </think>).
      if (last_user) p.Markup(chat.assistant.prefix);
      last_user = false;
      p.Content(m.content);
      if (!m.tool_calls.empty()) {
        p.Markup("<｜tool▁calls▁begin｜>");
        for (const ChatToolCall& call : m.tool_calls) {
          p.Markup("<｜tool▁call▁begin｜>"), p.Content(call.name), p.Markup("<｜tool▁sep｜>");
          p.Content(call.arguments), p.Markup("<｜tool▁call▁end｜>");
        }
        p.Markup("<｜tool▁calls▁end｜>");
      }
      p.Markup(eos);
      after_tool = false;
    } else if (m.role == "tool") {
      p.Markup("<｜tool▁output▁begin｜>"), p.Content(m.content), p.Markup("<｜tool▁output▁end｜>");
      last_user = false, after_tool = true;
    }
  }
  // After tool results the template opens no reply: the model writes on.
  if (o.add_generation_prompt && last_user && !after_tool) p.Markup(chat.open);
  return p.Take();
}

// --------------------------------------------------------------- Kimi K2

Result<std::vector<ChatPiece>> KimiK2(const ChatFormat& chat, std::span<const ChatMessage> msgs,
                                      const ChatRenderOptions& o) {
  // The released template (Kimi-Linear's) renders an assistant's text and
  // drops its tool_calls: so does this, or an agent's next turn could not be
  // rendered at all; the tool results that follow carry what the call got.
  Pieces p;
  if (!o.tools.empty()) {
    ordered_json all = ordered_json::array();
    for (const ChatTool& t : o.tools) all.push_back(ToolJson(t));
    p.Markup("<|im_system|>tool_declare<|im_middle|>"), p.Content(PyJsonDumps(all));
    p.Markup("<|im_end|>");
  }
  p.Markup(chat.bos);
  if (!msgs.empty() && msgs[0].role != "system")
    p.Markup(chat.system.prefix), p.Markup(chat.default_system), p.Markup(chat.system.suffix);
  const ChatRole tool{"<|im_system|>tool<|im_middle|>", "<|im_end|>"};
  for (const ChatMessage& m : msgs) {
    const ChatRole& role = m.role == "system"      ? chat.system
                           : m.role == "user"      ? chat.user
                           : m.role == "assistant" ? chat.assistant
                                                   : tool;
    p.Markup(role.prefix), p.Content(m.content), p.Markup(role.suffix);
  }
  if (o.add_generation_prompt) p.Markup(chat.open);
  return p.Take();
}

// ------------------------------------------------------------- harmony

// Python's truth of a JSON value as the template tests it.
bool Truthy(const ordered_json* v) {
  if (!v || v->is_null()) return false;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number()) return v->get<double>() != 0;
  return !v->empty();  // string, array, object
}

const ordered_json* Field(const ordered_json& spec, const char* key) {
  if (!spec.is_object()) return nullptr;
  const auto it = spec.find(key);
  return it == spec.end() ? nullptr : &*it;
}

bool IsType(const ordered_json& spec, const char* type) {
  const ordered_json* t = Field(spec, "type");
  return t && t->is_string() && t->get_ref<const std::string&>() == type;
}

size_t CodePoints(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Jinja's str() of a value the template joins or concatenates: strings
// bare, integers as Python prints them; anything else refused.
Result<std::string> PyStr(const ordered_json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();
  return Status::Error(where + ": only strings and integers are rendered here");
}

bool Required(const ordered_json& spec, const std::string& name) {
  const ordered_json* req = Field(spec, "required");
  if (!req || !req->is_array()) return false;
  for (const ordered_json& r : *req)
    if (r.is_string() && r.get_ref<const std::string&>() == name) return true;
  return false;
}

// The template's render_typescript_type: a parameter's JSON Schema as a
// TypeScript-like type. What it renders with whitespace of its own making
// (oneOf) is refused.
Result<std::string> TsType(const ordered_json& spec, const std::string& where) {
  const ordered_json* type = Field(spec, "type");
  const auto nullable = [&] { return Truthy(Field(spec, "nullable")) ? " | null" : ""; };
  if (IsType(spec, "array")) {
    const ordered_json* items = Field(spec, "items");
    if (!Truthy(items)) return "any[]" + std::string(nullable());
    std::string out;
    if (IsType(*items, "string")) {
      out = "string[]";
    } else if (IsType(*items, "number") || IsType(*items, "integer")) {
      out = "number[]";
    } else if (IsType(*items, "boolean")) {
      out = "boolean[]";
    } else {
      auto inner = TsType(*items, where + ".items");
      if (!inner.ok()) return inner;
      out = *inner == "object | object" || CodePoints(*inner) > 50 ? "any[]" : *inner + "[]";
    }
    return out + nullable();
  }
  if (type && type->is_array() && !type->empty()) {
    std::string out;
    for (size_t i = 0; i < type->size(); ++i) {
      auto one = PyStr((*type)[i], where + ".type");
      if (!one.ok()) return one;
      out += (i ? " | " : "") + *one;
    }
    return out;
  }
  if (Truthy(Field(spec, "oneOf")))
    return Status::Error(where + ".oneOf: not rendered for GPT-OSS's harmony template");
  if (IsType(spec, "string")) {
    const ordered_json* values = Field(spec, "enum");
    if (!Truthy(values)) return "string" + std::string(nullable());
    if (!values->is_array()) return Status::Error(where + ".enum: not a list");
    std::string out = "\"";
    for (size_t i = 0; i < values->size(); ++i) {
      auto one = PyStr((*values)[i], where + ".enum");
      if (!one.ok()) return one;
      out += (i ? "\" | \"" : "") + *one;
    }
    return out + "\"";
  }
  if (IsType(spec, "number") || IsType(spec, "integer")) return std::string("number");
  if (IsType(spec, "boolean")) return std::string("boolean");
  if (IsType(spec, "object")) {
    const ordered_json* props = Field(spec, "properties");
    if (!Truthy(props)) return std::string("object");
    if (!props->is_object()) return Status::Error(where + ".properties: not an object");
    std::string out = "{\n";
    size_t i = 0;
    for (const auto& [name, sub] : props->items()) {
      auto inner = TsType(sub, where + ".properties." + name);
      if (!inner.ok()) return inner;
      // The template's own line break and indent before a nested type.
      out += name + (Required(spec, name) ? "" : "?") + ": \n                " + *inner;
      if (++i < props->size()) out += ", ";
    }
    return out + "}";
  }
  return std::string("any");
}

// The template's render_tool_namespace("functions", tools).
Result<std::string> ToolNamespace(std::span<const ChatTool> tools) {
  std::string out = "## functions\n\nnamespace functions {\n\n";
  for (size_t t = 0; t < tools.size(); ++t) {
    const ChatTool& tool = tools[t];
    const std::string where = "tools[" + std::to_string(t) + "].function.parameters";
    out += "// " + tool.description + "\n" + "type " + tool.name + " = ";
    const ordered_json* props = Field(tool.parameters, "properties");
    if (!Truthy(props)) {
      out += "() => any;\n\n";
      continue;
    }
    if (!props->is_object()) return Status::Error(where + ".properties: not an object");
    out += "(_: {\n";
    for (const auto& [name, spec] : props->items()) {
      const std::string at = where + ".properties." + name;
      if (const ordered_json* d = Field(spec, "description"); Truthy(d)) {
        if (!d->is_string()) return Status::Error(at + ".description: not a string");
        out += "// " + d->get<std::string>() + "\n";
      }
      auto type = TsType(spec, at);
      if (!type.ok()) return type;
      out += name + (Required(tool.parameters, name) ? "" : "?") + ": " + *type;
      if (const ordered_json* d = Field(spec, "default")) {
        if (!Truthy(Field(spec, "enum"))) {
          out += ", // default: " + PyJsonDumps(*d);
        } else if (d->is_string()) {
          out += ", // default: " + d->get<std::string>();
        } else {
          return Status::Error(at +
                               ".default: the template joins an enum's default as text; "
                               "not a string");
        }
      }
      out += ",\n";
    }
    out += "}) => any;\n\n";
  }
  return out + "} // namespace functions";
}

Result<std::vector<ChatPiece>> Harmony(const ChatFormat& chat, std::span<const ChatMessage> msgs,
                                       const ChatRenderOptions& o) {
  Pieces p;
  std::string_view bos = chat.bos;
  static constexpr std::string_view kEnd = "<|end|>";
  if (!o.tools.empty() && EndsWith(bos, kEnd)) {
    // The system message names the channel of calls when tools are offered.
    bos.remove_suffix(kEnd.size());
    p.Markup(bos);
    p.Markup("\nCalls to these tools must go to the commentary channel: 'functions'.");
    p.Markup(kEnd);
  } else {
    p.Markup(bos);
  }
  const bool developer = !msgs.empty() && msgs[0].role == "system";
  if ((developer && !msgs[0].content.empty()) || !o.tools.empty()) {
    p.Markup("<|start|>developer<|message|>");
    if (developer && !msgs[0].content.empty())
      p.Markup("# Instructions\n\n"), p.Content(msgs[0].content), p.Markup("\n\n");
    if (!o.tools.empty()) {
      auto ns = ToolNamespace(o.tools);
      if (!ns.ok()) return ns.status();
      p.Markup("# Tools\n\n"), p.Content(*ns);
    }
    p.Markup(kEnd);
  }
  std::optional<std::string> last_call;  // the function the next tool result answers
  for (size_t i = developer ? 1 : 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "user") {
      p.Markup(chat.user.prefix), p.Content(m.content), p.Markup(chat.user.suffix);
    } else if (m.role == "assistant" && !m.tool_calls.empty()) {
      if (m.tool_calls.size() > 1)
        return Status::Error(At(i) +
                             ".tool_calls: GPT-OSS's harmony template renders one call "
                             "per assistant message");
      if (!m.content.empty() && !m.reasoning.empty())
        return Status::Error(At(i) +
                             ": GPT-OSS's harmony template takes content or "
                             "reasoning_content beside a tool call, not both");
      // The call's analysis is kept only until a later final reply.
      bool final_later = false;
      for (size_t k = i + 1; k < msgs.size(); ++k)
        final_later = final_later || (msgs[k].role == "assistant" && msgs[k].tool_calls.empty());
      const std::string& analysis = m.content.empty() ? m.reasoning : m.content;
      if (!analysis.empty() && !final_later)
        p.Markup("<|start|>assistant<|channel|>analysis<|message|>"), p.Content(analysis),
            p.Markup(kEnd);
      const ChatToolCall& call = m.tool_calls[0];
      // The template prints arguments|tojson: of the parsed object, as a
      // serving stack hands it over.
      const auto args = ordered_json::parse(call.arguments, nullptr, false);
      if (args.is_discarded())
        return Status::Error(At(i) + ".tool_calls[0].function.arguments: not JSON");
      p.Markup("<|start|>assistant to="), p.Content("functions." + call.name);
      p.Markup("<|channel|>commentary json<|message|>"), p.Content(PyJsonDumps(args));
      p.Markup("<|call|>");
      last_call = call.name;
    } else if (m.role == "assistant") {
      const bool last = i + 1 == msgs.size() && !o.add_generation_prompt;
      if (last && !m.reasoning.empty())
        p.Markup("<|start|>assistant<|channel|>analysis<|message|>"), p.Content(m.reasoning),
            p.Markup(kEnd);
      const ChatRole& role = last && chat.last_reply ? *chat.last_reply : chat.assistant;
      p.Markup(role.prefix), p.Content(m.content), p.Markup(role.suffix);
      if (!last) last_call.reset();
    } else if (m.role == "tool") {
      if (!last_call)
        return Status::Error(At(i) +
                             ": a tool result with no assistant tool call before it, "
                             "which GPT-OSS's harmony template needs for its name");
      p.Markup("<|start|>"), p.Content("functions." + *last_call);
      p.Markup(" to=assistant<|channel|>commentary<|message|>");
      p.Content(PyJsonDumps(ordered_json(m.content))), p.Markup(kEnd);
    }
  }
  if (o.add_generation_prompt) p.Markup(chat.open);
  return p.Take();
}

// -------------------------------------------------------------- Kimi K3

// XTML's elements as encoding_k3.py writes them, segment for segment: the
// four tokens as markup, the tag name and each attribute's pieces (" key",
// "=\"", the escaped value, "\"") as text of their own.
class Xtml {
 public:
  explicit Xtml(Pieces* p) : p_(p) {}
  void Open(std::string_view tag,
            std::initializer_list<std::pair<std::string_view, std::string>> attrs = {}) {
    p_->Markup(kXtmlOpen), p_->Content(tag);
    for (const auto& [key, value] : attrs) {
      p_->Content(" " + std::string(key)), p_->Content("=\"");
      p_->Content(XtmlEscape(value)), p_->Content("\"");
    }
    p_->Markup(kXtmlSep);
  }
  void Close(std::string_view tag) {
    p_->Markup(kXtmlClose), p_->Content(tag), p_->Markup(kXtmlSep);
  }
  // A message element with its text and the end of the message.
  void Message(std::initializer_list<std::pair<std::string_view, std::string>> attrs,
               std::string_view text) {
    Open("message", attrs), p_->Content(text), Close("message"), p_->Markup(kXtmlEndOfMessage);
  }

 private:
  Pieces* p_;
};

// An argument element's type: what the JSON value is.
const char* XtmlType(const ordered_json& v) {
  return v.is_boolean()  ? "boolean"
         : v.is_null()   ? "null"
         : v.is_number() ? "number"
         : v.is_string() ? "string"
         : v.is_object() ? "object"
                         : "array";
}

Result<std::vector<ChatPiece>> KimiK3(const ChatFormat& chat, std::span<const ChatMessage> msgs,
                                      const ChatRenderOptions& o) {
  // Thinking on: the reply opens in the think channel, before the response.
  const bool thinking = !chat.open.ends_with(chat.reply_after);
  Pieces p;
  Xtml x(&p);
  if (!o.tools.empty()) {
    // encoding_k3.py sorts every key of the declarations and writes them compact.
    nlohmann::json all = nlohmann::json::array();
    for (const ChatTool& t : o.tools) all.push_back(nlohmann::json::parse(ToolJson(t).dump()));
    x.Message({{"role", "system"}, {"type", "tool-declare"}},
              "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" +
                  all.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n```");
  }
  const std::vector<ChatToolCall>* calls = nullptr;  // of the last assistant message
  size_t results = 0;  // tool results since it (their index attribute counts on)
  for (size_t i = 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "user" || m.role == "system") {
      x.Message({{"role", m.role}}, m.content);
    } else if (m.role == "assistant") {
      calls = &m.tool_calls;
      results = 0;
      x.Open("message", {{"role", "assistant"}});
      if (thinking) {
        x.Open("think");
        if (!PyStrip(m.reasoning).empty()) p.Content(m.reasoning);
        x.Close("think");
      }
      x.Open("response"), p.Content(m.content), x.Close("response");
      if (!m.tool_calls.empty()) {
        x.Open("tools");
        for (size_t k = 0; k < m.tool_calls.size(); ++k) {
          const ChatToolCall& call = m.tool_calls[k];
          x.Open("call", {{"tool", call.name}, {"index", std::to_string(k + 1)}});
          if (!PyStrip(call.arguments).empty()) {
            const auto args = ordered_json::parse(call.arguments, nullptr, false);
            if (args.is_discarded()) {
              // What does not parse is shown back as written.
              x.Open("json", {{"type", "object"}}), p.Content(call.arguments), x.Close("json");
            } else if (!args.is_object()) {
              return Status::Error(At(i) + ".tool_calls[" + std::to_string(k) +
                                   "].function.arguments: Kimi K3's format takes a JSON object");
            } else {
              for (const auto& [key, value] : args.items()) {
                x.Open("argument", {{"key", key}, {"type", XtmlType(value)}});
                p.Content(value.is_string() ? value.get<std::string>() : PyJsonDumps(value));
                x.Close("argument");
              }
            }
          }
          x.Close("call");
        }
        x.Close("tools");
      }
      x.Close("message"), p.Markup(kXtmlEndOfMessage);
    } else if (m.role == "tool") {
      // The run of results from here, put in the order of the calls.
      size_t end = i;
      while (end < msgs.size() && msgs[end].role == "tool") ++end;
      std::vector<std::pair<size_t, const ChatMessage*>> run;  // (call position, result)
      bool matched = calls != nullptr;
      for (size_t k = i; k < end && matched; ++k) {
        size_t at = 0;
        while (at < calls->size() && (*calls)[at].id != msgs[k].tool_call_id) ++at;
        matched = at < calls->size();
        run.push_back({at, &msgs[k]});
      }
      if (!matched) {
        run.clear();
        for (size_t k = i; k < end; ++k) run.push_back({k - i, &msgs[k]});
      }
      std::stable_sort(run.begin(), run.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = 0; k < run.size(); ++k) {
        std::string function = run[k].second->name;
        if (matched) function = (*calls)[run[k].first].name;
        ++results;
        if (function.empty() && calls && results <= calls->size())
          function = (*calls)[results - 1].name;
        if (function.empty())
          return Status::Error(At(i + k) +
                               ": a tool result whose call Kimi K3's format "
                               "cannot name (no matching tool_call_id)");
        x.Message({{"role", "tool"}, {"tool", function}, {"index", std::to_string(results)}},
                  run[k].second->content);
      }
      i = end - 1;
    }
  }
  if (o.add_generation_prompt) {
    x.Open("message", {{"role", "assistant"}});
    x.Open(thinking ? "think" : "response");
  }
  return p.Take();
}

}  // namespace

ordered_json ToolJson(const ChatTool& t) {
  ordered_json fn = ordered_json::object();
  fn["name"] = t.name;
  if (!t.description.empty()) fn["description"] = t.description;
  fn["parameters"] = t.parameters;
  ordered_json j = ordered_json::object();
  j["type"] = "function";
  j["function"] = std::move(fn);
  return j;
}

std::string PyStrip(std::string_view s) {
  size_t begin = 0, len = 0;
  while (begin < s.size() && PySpaceAt(s, begin, &len)) begin += len;
  size_t end = s.size();
  for (bool again = true; again && end > begin;) {
    again = false;
    for (size_t back = 1; back <= 3 && back <= end - begin; ++back)
      if (PySpaceAt(s, end - back, &len) && len == back) {
        end -= back;
        again = true;
        break;
      }
  }
  return std::string(s.substr(begin, end - begin));
}

std::string XtmlEscape(std::string_view v) {
  std::string out;
  for (const char c : v) out += c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return out;
}

std::string PyJsonDumps(const ordered_json& v) {
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, value] : v.items()) {
      if (!first) out += ", ";
      out += PyJsonDumps(ordered_json(key)) + ": " + PyJsonDumps(value);
      first = false;
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + PyJsonDumps(v[i]);
    return out + "]";
  }
  return v.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

bool NeedsFamily(const ChatFormat& chat, std::span<const ChatMessage> messages,
                 const ChatRenderOptions& options) {
  // Qwen3.5's template strips every message's text: always its layout.
  if (!options.tools.empty() || chat.family == kFamilyQwen35) return true;
  const bool renders_reasoning = chat.family == kFamilyQwen3 || chat.family == kFamilyGlm45 ||
                                 chat.family == kFamilyHarmony || chat.family == kFamilyXtml;
  for (const ChatMessage& m : messages)
    if (!m.tool_calls.empty() || m.role == "tool" || (renders_reasoning && !m.reasoning.empty()))
      return true;
  return false;
}

Result<std::vector<ChatPiece>> FamilyPieces(const ChatFormat& chat,
                                            std::span<const ChatMessage> messages,
                                            const ChatRenderOptions& options) {
  if (chat.family == kFamilyQwen35) return Qwen35Pieces(chat, messages, options);
  if (options.continuation)
    return Status::Error(
        "a continuation with tools, tool calls, tool results or reasoning is "
        "not rendered");
  if (chat.family == kFamilyQwen3) return Qwen3(chat, messages, options);
  if (chat.family == kFamilyGlm45) return Glm45(chat, messages, options);
  if (chat.family == kFamilyDeepseekV31) return DeepseekV31(chat, messages, options);
  if (chat.family == kFamilyKimiK2) return KimiK2(chat, messages, options);
  if (chat.family == kFamilyHarmony) return Harmony(chat, messages, options);
  if (chat.family == kFamilyXtml) return KimiK3(chat, messages, options);
  // Why the rest do not render them, said with the refusal.
  const std::string why =
      chat.family == kFamilyDeepseekV3
          ? "DeepSeek-V3's released template ignores tools and writes tool calls malformed (a "
            "single call left unclosed, calls beside text dropped)"
          : "this model's chat template (" +
                (chat.family.empty() ? std::string("unnamed") : chat.family) +
                ") has no tool syntax waste renders";
  if (!options.tools.empty()) return Status::Error("tools: " + why);
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].tool_calls.empty()) return Status::Error(At(i) + ".tool_calls: " + why);
    if (messages[i].role == "tool") return Status::Error(At(i) + ": a tool result: " + why);
    if (!messages[i].reasoning.empty()) return Status::Error(At(i) + ".reasoning_content: " + why);
  }
  return Status::Error("nothing for the family to render");  // NeedsFamily was false
}

}  // namespace waste::chat_tools
