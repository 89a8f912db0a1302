#include "serve/anthropic.h"

#include "engine/tokenizer/utf8.h"
#include "serve/json_fields.h"

namespace waste::serve {
namespace {

using json = nlohmann::json;
using namespace fields;

std::string At(const std::string& where, size_t i) {
  return where + "[" + std::to_string(i) + "]";
}

// A block's "type", checked to be a string.
std::optional<ApiError> BlockType(const ojson& block, const std::string& w, std::string* type) {
  if (!block.is_object()) return WrongType(w, "an object", block);
  const ojson* t = Field(block, "type");
  if (!t) return Missing(w + ".type");
  if (!t->is_string()) return WrongType(w + ".type", "a string", *t);
  *type = t->get<std::string>();
  return std::nullopt;
}

// A required string field.
std::optional<ApiError> NeedString(const ojson& obj, const char* key, const std::string& w,
                                   std::string* out) {
  if (!Field(obj, key)) return Missing(w + "." + key);
  return ReadString(obj, key, w + "." + key, out);
}

// Text: a string, or text blocks joined with nothing (as OpenAI's content
// parts are, serve/openai.cc). `what` names the content in refusals.
std::optional<ApiError> TextOf(const ojson& c, const std::string& w, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return WrongType(w, "a string or an array of text blocks", c);
  out->clear();
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string bw = At(w, i);
    std::string type;
    WASTE_FIELD_TRY(BlockType(c[i], bw, &type));
    if (type != "text") return Unsupported(bw + ".type", "a '" + Clip(type, 40) + "' block");
    WASTE_FIELD_TRY(OnlyKnown(c[i], bw, {"type", "text", "cache_control"}));
    std::string text;
    WASTE_FIELD_TRY(NeedString(c[i], "text", bw, &text));
    out->append(text);
  }
  return std::nullopt;
}

// One message of `messages`, appended to `out` as one or more ChatMessages.
std::optional<ApiError> ParseMessage(const ojson& m, const std::string& w,
                                     std::vector<ChatMessage>* out) {
  if (!m.is_object()) return WrongType(w, "an object", m);
  WASTE_FIELD_TRY(OnlyKnown(m, w, {"role", "content"}));
  std::string role;
  WASTE_FIELD_TRY(NeedString(m, "role", w, &role));
  if (role != "user" && role != "assistant")
    return Unsupported(w + ".role", "the role '" + Clip(role, 40) + "' (user or assistant)");
  const ojson* content = Field(m, "content");
  if (!content) return Missing(w + ".content");
  if (content->is_string()) {
    out->push_back({role, content->get<std::string>()});
    return std::nullopt;
  }
  if (!content->is_array()) return WrongType(w + ".content", "a string or an array", *content);
  ChatMessage msg{role, ""};
  bool pending = false;  // msg holds a user's text not yet pushed
  for (size_t i = 0; i < content->size(); ++i) {
    const std::string bw = At(w + ".content", i);
    const ojson& b = (*content)[i];
    std::string type;
    WASTE_FIELD_TRY(BlockType(b, bw, &type));
    const bool assistant = role == "assistant";
    if (type == "text") {
      WASTE_FIELD_TRY(OnlyKnown(b, bw, {"type", "text", "cache_control", "citations"}));
      if (const ojson* cit = Field(b, "citations"); cit && !(cit->is_array() && cit->empty()))
        return Unsupported(bw + ".citations", "citations");
      std::string text;
      WASTE_FIELD_TRY(NeedString(b, "text", bw, &text));
      msg.content += text;
      pending = true;
    } else if (type == "thinking" && assistant) {
      WASTE_FIELD_TRY(OnlyKnown(b, bw, {"type", "thinking", "signature", "cache_control"}));
      std::string thinking, signature;
      WASTE_FIELD_TRY(NeedString(b, "thinking", bw, &thinking));
      WASTE_FIELD_TRY(ReadString(b, "signature", bw + ".signature", &signature));
      msg.reasoning += thinking;
    } else if (type == "tool_use" && assistant) {
      WASTE_FIELD_TRY(OnlyKnown(b, bw, {"type", "id", "name", "input", "cache_control"}));
      ChatToolCall call;
      WASTE_FIELD_TRY(NeedString(b, "id", bw, &call.id));
      WASTE_FIELD_TRY(NeedString(b, "name", bw, &call.name));
      const ojson* input = Field(b, "input");
      if (!input) return Missing(bw + ".input");
      if (!input->is_object()) return WrongType(bw + ".input", "an object", *input);
      call.arguments = input->dump(-1, ' ', false, ojson::error_handler_t::replace);
      msg.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result" && !assistant) {
      WASTE_FIELD_TRY(
          OnlyKnown(b, bw, {"type", "tool_use_id", "content", "is_error", "cache_control"}));
      if (pending) out->push_back(std::exchange(msg, ChatMessage{role, ""}));
      pending = false;
      ChatMessage result{"tool", ""};
      WASTE_FIELD_TRY(NeedString(b, "tool_use_id", bw, &result.tool_call_id));
      if (const ojson* c = Field(b, "content"))
        WASTE_FIELD_TRY(TextOf(*c, bw + ".content", &result.content));
      bool is_error = false;
      WASTE_FIELD_TRY(ReadBool(b, "is_error", &is_error, bw + ".is_error"));
      // No template has a place for the flag: the model reads it as text.
      if (is_error) result.content = "Error: " + result.content;
      out->push_back(std::move(result));
    } else if (type == "tool_use" || type == "thinking" || type == "tool_result") {
      return Unsupported(bw + ".type", "a '" + type + "' block in a " + role + " message");
    } else {
      return Unsupported(bw + ".type", "a '" + Clip(type, 40) + "' block");
    }
  }
  if (role == "assistant" || pending) out->push_back(std::move(msg));
  return std::nullopt;
}

std::optional<ApiError> ParseTools(const ojson& t, std::vector<ChatTool>* out) {
  if (!t.is_array()) return WrongType("tools", "an array", t);
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string w = At("tools", i);
    const ojson& tool = t[i];
    if (!tool.is_object()) return WrongType(w, "an object", tool);
    std::string type = "custom";
    WASTE_FIELD_TRY(ReadString(tool, "type", w + ".type", &type));
    if (type != "custom")
      return Unsupported(w + ".type", "the server tool '" + Clip(type, 40) + "'");
    WASTE_FIELD_TRY(
        OnlyKnown(tool, w, {"type", "name", "description", "input_schema", "cache_control"}));
    ChatTool c;
    WASTE_FIELD_TRY(NeedString(tool, "name", w, &c.name));
    if (c.name.empty()) return OutOfRange(w + ".name", "of at least 1 character", tool["name"]);
    WASTE_FIELD_TRY(ReadString(tool, "description", w + ".description", &c.description));
    const ojson* schema = Field(tool, "input_schema");
    if (!schema) return Missing(w + ".input_schema");
    if (!schema->is_object()) return WrongType(w + ".input_schema", "an object", *schema);
    c.parameters = *schema;
    out->push_back(std::move(c));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseToolChoice(const ojson& c, const std::vector<ChatTool>& tools,
                                        AnthropicToolChoice* out) {
  std::string type;
  WASTE_FIELD_TRY(BlockType(c, "tool_choice", &type));
  WASTE_FIELD_TRY(OnlyKnown(c, "tool_choice", {"type", "name", "disable_parallel_tool_use"}));
  using Mode = AnthropicToolChoice::Mode;
  if (type == "auto")
    out->mode = Mode::kAuto;
  else if (type == "any")
    out->mode = Mode::kAny;
  else if (type == "none")
    out->mode = Mode::kNone;
  else if (type == "tool")
    out->mode = Mode::kTool;
  else
    return OutOfRange("tool_choice.type", "of auto, any, tool or none", c["type"]);
  if (out->mode == Mode::kTool) {
    WASTE_FIELD_TRY(NeedString(c, "name", "tool_choice", &out->name));
    bool offered = false;
    for (const ChatTool& t : tools) offered = offered || t.name == out->name;
    if (!offered)
      return BadRequest("'tool_choice.name': the tool '" + Clip(out->name, 60) +
                            "' is not among the request's tools.",
                        "tool_choice.name", "invalid_value");
  }
  WASTE_FIELD_TRY(ReadBool(c, "disable_parallel_tool_use", &out->disable_parallel_tool_use,
                           "tool_choice.disable_parallel_tool_use"));
  if ((out->mode == Mode::kAny || out->mode == Mode::kTool) && tools.empty())
    return BadRequest("'tool_choice': a tool call cannot be required without tools.", "tool_choice",
                      "invalid_value");
  return std::nullopt;
}

std::optional<ApiError> ParseThinking(const ojson& t, bool count_tokens, MessagesRequest* out) {
  std::string type;
  WASTE_FIELD_TRY(BlockType(t, "thinking", &type));
  if (type == "disabled") {
    WASTE_FIELD_TRY(OnlyKnown(t, "thinking", {"type"}));
    out->thinking = false;
    return std::nullopt;
  }
  if (type != "enabled") return OutOfRange("thinking.type", "of enabled or disabled", t["type"]);
  WASTE_FIELD_TRY(OnlyKnown(t, "thinking", {"type", "budget_tokens"}));
  if (!Field(t, "budget_tokens")) return Missing("thinking.budget_tokens");
  // Anthropic's bounds: at least 1024, below max_tokens.
  const int64_t below = count_tokens ? INT32_MAX : out->sampling.max_tokens.value_or(1025) - 1;
  WASTE_FIELD_TRY(ReadInt(t, "budget_tokens", 1024, INT32_MAX, &out->thinking_budget,
                          "thinking.budget_tokens"));
  if (out->thinking_budget > below)
    return OutOfRange("thinking.budget_tokens", "below max_tokens", t["budget_tokens"]);
  out->thinking = true;
  return std::nullopt;
}

}  // namespace

// ------------------------------------------------------------------ errors

json AnthropicError(const ApiError& e) {
  const char* type = e.status == 401   ? "authentication_error"
                     : e.status == 403 ? "permission_error"
                     : e.status == 404 ? "not_found_error"
                     : e.status == 413 ? "request_too_large"
                     : e.status == 429 ? "rate_limit_error"
                     : e.status == 503 ? "overloaded_error"
                     : e.status >= 500 ? "api_error"
                                       : "invalid_request_error";
  return {{"type", "error"},
          {"error", {{"type", type}, {"message", tokenizer::ReplaceInvalidUtf8(e.message)}}}};
}

int AnthropicStatus(const ApiError& e) {
  return e.status == 503 ? 529 : e.status;
}

// ---------------------------------------------------------------- requests

std::optional<ApiError> ParseMessagesRequest(std::string_view body, bool count_tokens,
                                             MessagesRequest* out) {
  ojson b;
  WASTE_FIELD_TRY(ParseBody(body, &b));
  *out = {};
  if (count_tokens)
    WASTE_FIELD_TRY(OnlyKnown(
        b, "",
        {"model", "messages", "system", "tools", "tool_choice", "thinking", "cache_control"}));
  else
    WASTE_FIELD_TRY(OnlyKnown(b, "",
                              {"model", "max_tokens", "messages", "system", "tools", "tool_choice",
                               "stop_sequences", "temperature", "top_p", "top_k", "stream",
                               "thinking", "metadata", "service_tier", "cache_control"}));
  if (!Field(b, "model")) return Missing("model");
  WASTE_FIELD_TRY(ReadString(b, "model", "model", &out->model));
  // cache_control here and on blocks: a hint only (waste keeps the states of
  // conversations by itself, serve/scheduler.h).
  if (const ojson* cc = Field(b, "cache_control"); cc && !cc->is_object())
    return WrongType("cache_control", "an object", *cc);
  Sampling& s = out->sampling;
  if (!count_tokens) {
    if (!Field(b, "max_tokens")) return Missing("max_tokens");
    int64_t max = 0;
    WASTE_FIELD_TRY(ReadInt(b, "max_tokens", 1, INT32_MAX, &max));
    s.max_tokens = max;
    WASTE_FIELD_TRY(ReadNumber(b, "temperature", 0, false, 1, &s.temperature));
    WASTE_FIELD_TRY(ReadNumber(b, "top_p", 0, true, 1, &s.top_p));
    WASTE_FIELD_TRY(ReadInt(b, "top_k", 0, INT32_MAX, &s.top_k));
    WASTE_FIELD_TRY(ReadBool(b, "stream", &s.stream));
    if (const ojson* stops = Field(b, "stop_sequences")) {
      if (!stops->is_array()) return WrongType("stop_sequences", "an array of strings", *stops);
      for (size_t i = 0; i < stops->size(); ++i) {
        const ojson& e = (*stops)[i];
        if (!e.is_string()) return WrongType(At("stop_sequences", i), "a string", e);
        if (e.get_ref<const std::string&>().empty())
          return OutOfRange(At("stop_sequences", i), "of at least 1 character", e);
        s.stop.push_back(e.get<std::string>());
      }
    }
    if (const ojson* m = Field(b, "metadata"); m && !m->is_object())
      return WrongType("metadata", "an object", *m);
    std::string tier;
    WASTE_FIELD_TRY(ReadString(b, "service_tier", "service_tier", &tier));
    if (!tier.empty() && tier != "auto" && tier != "standard_only")
      return OutOfRange("service_tier", "of auto or standard_only", b["service_tier"]);
  }
  if (const ojson* sys = Field(b, "system")) {
    ChatMessage m{"system", ""};
    WASTE_FIELD_TRY(TextOf(*sys, "system", &m.content));
    out->messages.push_back(std::move(m));
  }
  const ojson* msgs = Field(b, "messages");
  if (!msgs) return Missing("messages");
  if (!msgs->is_array()) return WrongType("messages", "an array", *msgs);
  if (msgs->empty())
    return BadRequest("Invalid 'messages': at least one message is required.", "messages",
                      "empty_array");
  for (size_t i = 0; i < msgs->size(); ++i)
    WASTE_FIELD_TRY(ParseMessage((*msgs)[i], At("messages", i), &out->messages));
  if (out->messages.back().role == "assistant")
    return Unsupported(At("messages", msgs->size() - 1),
                       "a last assistant message (a prefilled reply)");
  if (const ojson* t = Field(b, "tools")) WASTE_FIELD_TRY(ParseTools(*t, &out->tools));
  if (const ojson* c = Field(b, "tool_choice"))
    WASTE_FIELD_TRY(ParseToolChoice(*c, out->tools, &out->tool_choice));
  if (const ojson* t = Field(b, "thinking")) WASTE_FIELD_TRY(ParseThinking(*t, count_tokens, out));
  return std::nullopt;
}

// ------------------------------------------------------------- answers

const char* StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kEndTurn:
      return "end_turn";
    case StopReason::kMaxTokens:
      return "max_tokens";
    case StopReason::kStopSequence:
      return "stop_sequence";
    case StopReason::kToolUse:
      return "tool_use";
  }
  return "end_turn";
}

StopReason StopReasonOf(bool called_tool, const std::string& stop_sequence, bool length) {
  if (called_tool) return StopReason::kToolUse;
  if (!stop_sequence.empty()) return StopReason::kStopSequence;
  return length ? StopReason::kMaxTokens : StopReason::kEndTurn;
}

std::string AnthropicEvent(const json& j) {
  return "event: " + j.value("type", std::string()) +
         "\ndata: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

MessageWriter::MessageWriter(std::string id, std::string model, int64_t input_tokens)
    : message_({{"id", std::move(id)},
                {"type", "message"},
                {"role", "assistant"},
                {"model", std::move(model)},
                {"content", json::array()},
                {"stop_reason", nullptr},
                {"stop_sequence", nullptr},
                {"usage", {{"input_tokens", input_tokens}, {"output_tokens", 0}}}}) {}

std::string MessageWriter::Start() const {
  return AnthropicEvent({{"type", "message_start"}, {"message", message_}}) +
         AnthropicEvent({{"type", "ping"}});
}

std::string MessageWriter::OpenBlock(const json& block) {
  std::string out = CloseBlock();
  message_["content"].push_back(block);
  open_ = static_cast<int>(message_["content"].size()) - 1;
  return out + AnthropicEvent(
                   {{"type", "content_block_start"}, {"index", open_}, {"content_block", block}});
}

std::string MessageWriter::CloseBlock() {
  if (open_ < 0) return {};
  json& block = message_["content"][static_cast<size_t>(open_)];
  if (block["type"] == "tool_use") {
    // The parser's arguments are a JSON object's text; anything else is
    // kept as the string it was, never dropped.
    json input = json::parse(arguments_, nullptr, /*allow_exceptions=*/false);
    block["input"] = input.is_object() ? std::move(input) : json(arguments_);
    arguments_.clear();
  }
  const int index = std::exchange(open_, -1);
  return AnthropicEvent({{"type", "content_block_stop"}, {"index", index}});
}

std::string MessageWriter::Take(const ReplyEvent& e) {
  using Kind = ReplyEvent::Kind;
  const std::string current =
      open_ < 0 ? "" : message_["content"][static_cast<size_t>(open_)]["type"].get<std::string>();
  switch (e.kind) {
    case Kind::kText:
    case Kind::kReasoning: {
      if (e.text.empty()) return {};
      const bool text = e.kind == Kind::kText;
      const char* type = text ? "text" : "thinking";
      std::string out;
      if (current != type)
        out += OpenBlock(text ? json{{"type", "text"}, {"text", ""}}
                              : json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      json& block = message_["content"][static_cast<size_t>(open_)];
      block[type] = block[type].get<std::string>() + e.text;
      return out + AnthropicEvent(
                       {{"type", "content_block_delta"},
                        {"index", open_},
                        {"delta", text ? json{{"type", "text_delta"}, {"text", e.text}}
                                       : json{{"type", "thinking_delta"}, {"thinking", e.text}}}});
    }
    case Kind::kToolCallStart: {
      called_tool_ = true;
      // Anthropic's ids are "toolu_..."; the parser's "call_..." keep their unique part.
      const std::string unique = e.id.rfind("call_", 0) == 0 ? e.id.substr(5) : e.id;
      return OpenBlock({{"type", "tool_use"},
                        {"id", "toolu_" + unique},
                        {"name", e.name},
                        {"input", json::object()}});
    }
    case Kind::kToolCallArgs:
      if (current != "tool_use" || e.text.empty()) return {};
      arguments_ += e.text;
      return AnthropicEvent({{"type", "content_block_delta"},
                             {"index", open_},
                             {"delta", {{"type", "input_json_delta"}, {"partial_json", e.text}}}});
    case Kind::kToolCallEnd:
      return current == "tool_use" ? CloseBlock() : std::string();
  }
  return {};
}

std::string MessageWriter::Finish(StopReason reason, const std::string& stop_sequence,
                                  int64_t output_tokens) {
  std::string out = CloseBlock();
  message_["stop_reason"] = StopReasonName(reason);
  message_["stop_sequence"] =
      reason == StopReason::kStopSequence ? json(stop_sequence) : json(nullptr);
  message_["usage"]["output_tokens"] = output_tokens;
  out += AnthropicEvent(
      {{"type", "message_delta"},
       {"delta",
        {{"stop_reason", message_["stop_reason"]}, {"stop_sequence", message_["stop_sequence"]}}},
       {"usage", message_["usage"]}});
  return out + AnthropicEvent({{"type", "message_stop"}});
}

}  // namespace waste::serve
