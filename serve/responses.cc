#include "serve/responses.h"

#include <algorithm>

#include "serve/json_fields.h"

namespace waste::serve {
namespace {

using json = nlohmann::json;
using namespace fields;

std::string At(const std::string& where, size_t i) {
  return where + "[" + std::to_string(i) + "]";
}

std::optional<ApiError> NeedString(const ojson& obj, const char* key, const std::string& w,
                                   std::string* out) {
  if (!Field(obj, key)) return Missing(w + "." + key);
  return ReadString(obj, key, w + "." + key, out);
}

// A message's or an output's content: a string, or text parts of the
// `allowed` types joined with nothing (as chat's content parts are).
std::optional<ApiError> TextOf(const ojson& c, const std::string& w,
                               std::initializer_list<std::string_view> allowed, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return WrongType(w, "a string or an array of content parts", c);
  out->clear();
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string pw = At(w, i);
    const ojson& part = c[i];
    if (!part.is_object()) return WrongType(pw, "an object", part);
    std::string type;
    WASTE_FIELD_TRY(NeedString(part, "type", pw, &type));
    bool ok = false;
    for (const std::string_view a : allowed) ok = ok || type == a;
    if (!ok) return Unsupported(pw + ".type", "a '" + Clip(type, 40) + "' part");
    WASTE_FIELD_TRY(OnlyKnown(part, pw, {"type", "text", "annotations", "logprobs"}));
    if (const ojson* a = Field(part, "annotations"); a && !(a->is_array() && a->empty()))
      return Unsupported(pw + ".annotations", "annotations");
    std::string text;
    WASTE_FIELD_TRY(NeedString(part, "text", pw, &text));
    out->append(text);
  }
  return std::nullopt;
}

// The conversation so far, and the reasoning waiting for its assistant message.
struct Conversation {
  std::vector<ChatMessage>* messages;
  std::string reasoning;
  // The assistant message a function_call joins: the last one, if nothing came after.
  ChatMessage& Assistant() {
    if (messages->empty() || messages->back().role != "assistant" || !reasoning.empty())
      messages->push_back({"assistant", ""});
    messages->back().reasoning += std::exchange(reasoning, {});
    return messages->back();
  }
};

std::optional<ApiError> ParseItem(const ojson& item, const std::string& w, Conversation* c) {
  if (!item.is_object()) return WrongType(w, "an object", item);
  std::string type = "message";
  WASTE_FIELD_TRY(ReadString(item, "type", w + ".type", &type));
  if (type == "message") {
    WASTE_FIELD_TRY(OnlyKnown(item, w, {"type", "role", "content", "id", "status", "phase"}));
    std::string role;
    WASTE_FIELD_TRY(NeedString(item, "role", w, &role));
    if (role == "developer") role = "system";  // OpenAI's newer name for it
    if (role != "user" && role != "assistant" && role != "system")
      return Unsupported(w + ".role", "the role '" + Clip(role, 40) + "'");
    const ojson* content = Field(item, "content");
    if (!content) return Missing(w + ".content");
    std::string text;
    WASTE_FIELD_TRY(TextOf(*content, w + ".content", {"input_text", "output_text"}, &text));
    if (role == "assistant") {
      c->messages->push_back({"assistant", text});
      c->messages->back().reasoning = std::exchange(c->reasoning, {});
    } else {
      c->messages->push_back({role, text});
    }
  } else if (type == "function_call") {
    WASTE_FIELD_TRY(OnlyKnown(item, w, {"type", "call_id", "name", "arguments", "id", "status"}));
    ChatToolCall call;
    WASTE_FIELD_TRY(NeedString(item, "call_id", w, &call.id));
    WASTE_FIELD_TRY(NeedString(item, "name", w, &call.name));
    WASTE_FIELD_TRY(NeedString(item, "arguments", w, &call.arguments));
    c->Assistant().tool_calls.push_back(std::move(call));
  } else if (type == "function_call_output") {
    WASTE_FIELD_TRY(OnlyKnown(item, w, {"type", "call_id", "output", "id", "status"}));
    ChatMessage result{"tool", ""};
    WASTE_FIELD_TRY(NeedString(item, "call_id", w, &result.tool_call_id));
    const ojson* output = Field(item, "output");
    if (!output) return Missing(w + ".output");
    WASTE_FIELD_TRY(TextOf(*output, w + ".output", {"input_text"}, &result.content));
    c->messages->push_back(std::move(result));
  } else if (type == "reasoning") {
    WASTE_FIELD_TRY(
        OnlyKnown(item, w, {"type", "id", "summary", "content", "encrypted_content", "status"}));
    if (Field(item, "encrypted_content"))
      return Unsupported(w + ".encrypted_content", "encrypted reasoning");
    if (const ojson* content = Field(item, "content")) {
      std::string text;
      WASTE_FIELD_TRY(TextOf(*content, w + ".content", {"reasoning_text"}, &text));
      c->reasoning += text;
    }
  } else {
    return Unsupported(w + ".type", "a '" + Clip(type, 40) + "' item");
  }
  return std::nullopt;
}

std::optional<ApiError> ParseTools(const ojson& t, std::vector<ChatTool>* out) {
  if (!t.is_array()) return WrongType("tools", "an array", t);
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string w = At("tools", i);
    const ojson& tool = t[i];
    if (!tool.is_object()) return WrongType(w, "an object", tool);
    std::string type;
    WASTE_FIELD_TRY(NeedString(tool, "type", w, &type));
    if (type != "function")
      return Unsupported(w + ".type", "the tool type '" + Clip(type, 40) + "'");
    WASTE_FIELD_TRY(OnlyKnown(tool, w, {"type", "name", "description", "parameters", "strict"}));
    ChatTool c;
    WASTE_FIELD_TRY(NeedString(tool, "name", w, &c.name));
    WASTE_FIELD_TRY(ReadString(tool, "description", w + ".description", &c.description));
    if (const ojson* p = Field(tool, "parameters")) {
      if (!p->is_object()) return WrongType(w + ".parameters", "an object", *p);
      c.parameters = *p;
    }
    bool strict = false;
    WASTE_FIELD_TRY(ReadBool(tool, "strict", &strict, w + ".strict"));
    if (strict) WASTE_FIELD_TRY(CheckStrictParameters(c.name, c.parameters, w + ".parameters"));
    out->push_back(std::move(c));
  }
  return std::nullopt;
}

// text.format: text, json_object or json_schema {name, schema, strict,
// description} (response_format's, flat), compiled by engine/grammar.
std::optional<ApiError> ParseTextFormat(const ojson& f,
                                        std::shared_ptr<const grammar::JsonGrammar>* out) {
  if (!f.is_object()) return WrongType("text.format", "an object", f);
  std::string type;
  WASTE_FIELD_TRY(NeedString(f, "type", "text.format", &type));
  if (type == "text" || type == "json_object") {
    WASTE_FIELD_TRY(OnlyKnown(f, "text.format", {"type"}));
    if (type == "json_object") *out = grammar::AnyJsonObject();
    return std::nullopt;
  }
  if (type != "json_schema")
    return OutOfRange("text.format.type", "of text, json_object or json_schema", f["type"]);
  WASTE_FIELD_TRY(OnlyKnown(f, "text.format", {"type", "name", "schema", "strict", "description"}));
  std::string name, description;
  WASTE_FIELD_TRY(NeedString(f, "name", "text.format", &name));
  WASTE_FIELD_TRY(ReadString(f, "description", "text.format.description", &description));
  bool strict = false;
  WASTE_FIELD_TRY(ReadBool(f, "strict", &strict, "text.format.strict"));
  const ojson* schema = Field(f, "schema");
  if (!schema) return Missing("text.format.schema");
  if (!schema->is_object()) return WrongType("text.format.schema", "an object", *schema);
  auto g = grammar::CompileJsonSchema(json::parse(schema->dump()), {.strict = strict});
  if (!g.ok())
    return BadRequest("Invalid schema for response_format '" + Clip(name, 64) +
                          "': " + g.status().message() + ".",
                      "text.format.schema", "invalid_value");
  *out = *g;
  return std::nullopt;
}

// tool_choice: none, auto, required or {"type": "function", "name"} of a tool offered.
std::optional<ApiError> ParseToolChoice(const ojson& c, const std::vector<ChatTool>& tools,
                                        ToolChoiceSpec* out) {
  if (c.is_string()) {
    if (c == "none") return out->mode = ToolChoiceMode::kNone, std::nullopt;
    if (c == "auto") return out->mode = ToolChoiceMode::kAuto, std::nullopt;
    if (c != "required") return OutOfRange("tool_choice", "of none, auto or required", c);
    out->mode = ToolChoiceMode::kRequired;
  } else {
    if (!c.is_object()) return WrongType("tool_choice", "a string or an object", c);
    WASTE_FIELD_TRY(OnlyKnown(c, "tool_choice", {"type", "name"}));
    std::string type;
    WASTE_FIELD_TRY(NeedString(c, "type", "tool_choice", &type));
    if (type != "function")
      return Unsupported("tool_choice.type", "the tool choice '" + Clip(type, 40) + "'");
    WASTE_FIELD_TRY(NeedString(c, "name", "tool_choice", &out->function));
    if (std::none_of(tools.begin(), tools.end(),
                     [&](const ChatTool& t) { return t.name == out->function; }))
      return BadRequest("'tool_choice.name': the tool '" + Clip(out->function, 60) +
                            "' is not among the request's tools.",
                        "tool_choice.name", "invalid_value");
    out->mode = ToolChoiceMode::kFunction;
  }
  if (tools.empty())
    return BadRequest("'tool_choice': a tool call cannot be required without tools.", "tool_choice",
                      "invalid_value");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseResponsesRequest(std::string_view body, ResponsesRequest* out) {
  ojson b;
  WASTE_FIELD_TRY(ParseBody(body, &b));
  *out = {};
  WASTE_FIELD_TRY(
      OnlyKnown(b, "",
                {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
                 "max_output_tokens", "temperature", "top_p", "stream", "store",
                 "previous_response_id", "metadata", "user", "text", "truncation"}));
  WASTE_FIELD_TRY(ReadString(b, "model", "model", &out->model));
  Sampling& s = out->sampling;
  if (Field(b, "max_output_tokens")) {
    int64_t max = 0;
    WASTE_FIELD_TRY(ReadInt(b, "max_output_tokens", 1, INT32_MAX, &max));
    s.max_tokens = max;
  }
  WASTE_FIELD_TRY(ReadNumber(b, "temperature", 0, false, 2, &s.temperature));
  WASTE_FIELD_TRY(ReadNumber(b, "top_p", 0, true, 1, &s.top_p));
  WASTE_FIELD_TRY(ReadBool(b, "stream", &s.stream));
  bool store = false, parallel = true;
  WASTE_FIELD_TRY(ReadBool(b, "store", &store));
  if (store) return Unsupported("store", "store = true (waste serve keeps no responses)");
  if (Field(b, "previous_response_id"))
    return Unsupported("previous_response_id",
                       "previous_response_id (waste serve keeps no responses)");
  WASTE_FIELD_TRY(ReadBool(b, "parallel_tool_calls", &parallel));
  out->tool_choice.parallel = parallel;
  std::string user, truncation;
  WASTE_FIELD_TRY(ReadString(b, "user", "user", &user));
  WASTE_FIELD_TRY(ReadString(b, "truncation", "truncation", &truncation));
  if (truncation == "auto") return Unsupported("truncation", "truncation = auto");
  if (!truncation.empty() && truncation != "disabled")
    return OutOfRange("truncation", "of auto or disabled", b["truncation"]);
  if (const ojson* m = Field(b, "metadata"); m && !m->is_object())
    return WrongType("metadata", "an object", *m);
  if (const ojson* t = Field(b, "text")) {
    if (!t->is_object()) return WrongType("text", "an object", *t);
    WASTE_FIELD_TRY(OnlyKnown(*t, "text", {"format"}));
    if (const ojson* f = Field(*t, "format")) WASTE_FIELD_TRY(ParseTextFormat(*f, &out->format));
  }
  std::string instructions;
  WASTE_FIELD_TRY(ReadString(b, "instructions", "instructions", &instructions));
  if (Field(b, "instructions")) out->messages.push_back({"system", instructions});
  const ojson* input = Field(b, "input");
  if (!input) return Missing("input");
  if (input->is_string()) {
    out->messages.push_back({"user", input->get<std::string>()});
  } else if (input->is_array()) {
    if (input->empty()) return BadRequest("Invalid 'input': empty array.", "input", "empty_array");
    Conversation c{&out->messages, {}};
    for (size_t i = 0; i < input->size(); ++i)
      WASTE_FIELD_TRY(ParseItem((*input)[i], At("input", i), &c));
  } else {
    return WrongType("input", "a string or an array of items", *input);
  }
  if (const ojson* t = Field(b, "tools")) WASTE_FIELD_TRY(ParseTools(*t, &out->tools));
  if (const ojson* c = Field(b, "tool_choice"))
    WASTE_FIELD_TRY(ParseToolChoice(*c, out->tools, &out->tool_choice));
  const auto given = [&](const char* key, json fallback) {
    const ojson* v = Field(b, key);
    return v ? json::parse(v->dump()) : fallback;
  };
  out->echo = {{"instructions", given("instructions", nullptr)},
               {"tools", given("tools", json::array())},
               {"tool_choice", given("tool_choice", "auto")},
               {"parallel_tool_calls", parallel},
               {"temperature", s.temperature},
               {"top_p", s.top_p},
               {"max_output_tokens", given("max_output_tokens", nullptr)},
               {"metadata", given("metadata", json::object())},
               {"text", given("text", json{{"format", {{"type", "text"}}}})}};
  return std::nullopt;
}

// ------------------------------------------------------------- answers

ResponseWriter::ResponseWriter(std::string id, std::string model, int64_t created_at, json echo)
    : response_({{"id", std::move(id)},
                 {"object", "response"},
                 {"created_at", created_at},
                 {"status", "in_progress"},
                 {"error", nullptr},
                 {"incomplete_details", nullptr},
                 {"model", std::move(model)},
                 {"output", json::array()},
                 {"usage", nullptr}}) {
  response_.update(echo);
}

std::string ResponseWriter::Event(json j) {
  j["sequence_number"] = sequence_++;
  return "event: " + j["type"].get<std::string>() +
         "\ndata: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string ResponseWriter::Start() {
  // Two statements: each Event takes the next sequence number.
  std::string out = Event({{"type", "response.created"}, {"response", response_}});
  return out + Event({{"type", "response.in_progress"}, {"response", response_}});
}

std::string ResponseWriter::OpenItem(json item) {
  std::string out = CloseItem("completed");
  json& output = response_["output"];
  open_ = static_cast<int>(output.size());
  // "resp_X" -> "msg_X_0", "rs_X_1", "fc_X_2": unique as the response's id is.
  const std::string& id = response_["id"].get_ref<const std::string&>();
  const std::string unique = id.substr(id.find('_') + 1) + "_" + std::to_string(open_);
  const std::string type = item["type"];
  item["id"] = (type == "message" ? "msg_" : type == "reasoning" ? "rs_" : "fc_") + unique;
  output.push_back(item);
  out += Event({{"type", "response.output_item.added"}, {"output_index", open_}, {"item", item}});
  if (type == "function_call") return out;
  const json part =
      type == "message"
          ? json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}
          : json{{"type", "reasoning_text"}, {"text", ""}};
  output.back()["content"].push_back(part);
  return out + Event({{"type", "response.content_part.added"},
                      {"item_id", item["id"]},
                      {"output_index", open_},
                      {"content_index", 0},
                      {"part", part}});
}

std::string ResponseWriter::CloseItem(const char* status) {
  if (open_ < 0) return {};
  const int index = std::exchange(open_, -1);
  json& item = response_["output"][static_cast<size_t>(index)];
  item["status"] = status;
  const json at = {{"item_id", item["id"]}, {"output_index", index}};
  std::string out;
  if (item["type"] == "function_call") {
    json done = at;
    done.update(
        {{"type", "response.function_call_arguments.done"}, {"arguments", item["arguments"]}});
    out += Event(std::move(done));
  } else {
    const json& part = item["content"][0];
    const bool message = item["type"] == "message";
    json text_done = at;
    text_done.update(
        {{"type", message ? "response.output_text.done" : "response.reasoning_text.done"},
         {"content_index", 0},
         {"text", part["text"]}});
    // Text's events carry its logprobs (none: waste takes no top_logprobs here).
    if (message) text_done["logprobs"] = json::array();
    json part_done = at;
    part_done.update(
        {{"type", "response.content_part.done"}, {"content_index", 0}, {"part", part}});
    out += Event(std::move(text_done));
    out += Event(std::move(part_done));
  }
  return out +
         Event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
}

std::string ResponseWriter::Take(const ReplyEvent& e) {
  using Kind = ReplyEvent::Kind;
  const std::string current =
      open_ < 0 ? "" : response_["output"][static_cast<size_t>(open_)]["type"].get<std::string>();
  switch (e.kind) {
    case Kind::kText:
    case Kind::kReasoning: {
      if (e.text.empty()) return {};
      const bool text = e.kind == Kind::kText;
      std::string out;
      if (current != (text ? "message" : "reasoning"))
        out += OpenItem(text ? json{{"type", "message"},
                                    {"status", "in_progress"},
                                    {"role", "assistant"},
                                    {"content", json::array()}}
                             : json{{"type", "reasoning"},
                                    {"status", "in_progress"},
                                    {"summary", json::array()},
                                    {"content", json::array()}});
      json& item = response_["output"][static_cast<size_t>(open_)];
      json& part = item["content"][0];
      part["text"] = part["text"].get<std::string>() + e.text;
      json delta = {{"type", text ? "response.output_text.delta" : "response.reasoning_text.delta"},
                    {"item_id", item["id"]},
                    {"output_index", open_},
                    {"content_index", 0},
                    {"delta", e.text}};
      if (text) delta["logprobs"] = json::array();
      return out + Event(std::move(delta));
    }
    case Kind::kToolCallStart:
      return OpenItem({{"type", "function_call"},
                       {"status", "in_progress"},
                       {"call_id", e.id},
                       {"name", e.name},
                       {"arguments", ""}});
    case Kind::kToolCallArgs: {
      if (current != "function_call" || e.text.empty()) return {};
      json& item = response_["output"][static_cast<size_t>(open_)];
      item["arguments"] = item["arguments"].get<std::string>() + e.text;
      return Event({{"type", "response.function_call_arguments.delta"},
                    {"item_id", item["id"]},
                    {"output_index", open_},
                    {"delta", e.text}});
    }
    case Kind::kToolCallEnd:
      return current == "function_call" ? CloseItem("completed") : std::string();
  }
  return {};
}

std::string ResponseWriter::Finish(bool length, const Usage& usage) {
  std::string out = CloseItem(length ? "incomplete" : "completed");
  response_["status"] = length ? "incomplete" : "completed";
  if (length) response_["incomplete_details"] = {{"reason", "max_output_tokens"}};
  response_["usage"] = {{"input_tokens", usage.prompt_tokens},
                        {"output_tokens", usage.completion_tokens},
                        {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  return out + Event({{"type", length ? "response.incomplete" : "response.completed"},
                      {"response", response_}});
}

std::string ResponseWriter::Error(const ApiError& e) {
  return Event({{"type", "error"},
                {"code", e.code.empty() ? json(nullptr) : json(e.code)},
                {"message", e.message},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)}});
}

}  // namespace waste::serve
