#include "serve/openai.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/format/container.h"
#include "engine/tokenizer/utf8.h"
#include "serve/json_fields.h"

namespace waste::serve {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "null";
  }
}

ApiError WrongType(const std::string& param, const char* expected, const json& got) {
  return BadRequest("Invalid type for '" + param + "': expected " + expected + ", but got " +
                        TypeName(got) + " instead.",
                    param, "invalid_type");
}

ApiError OutOfRange(const std::string& param, const std::string& range, const json& got) {
  return BadRequest("Invalid '" + param + "': expected a value " + range + ", but got " +
                        got.dump().substr(0, 40) + " instead.",
                    param, "invalid_value");
}

ApiError Unsupported(const std::string& param, const std::string& what) {
  return BadRequest("'" + param + "': " + what + " is not supported by waste serve.", param,
                    "unsupported_value");
}

// A present, non-null field, or nullptr.
const json* Field(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::optional<ApiError> ReadBool(const json& obj, const char* key, bool* out) {
  const json* v = Field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return WrongType(key, "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> ReadInt(const json& obj, const char* key, int64_t lo, int64_t hi,
                                int64_t* out) {
  const json* v = Field(obj, key);
  if (!v) return std::nullopt;
  // 3.0 is an integer to OpenAI's clients too.
  const bool whole = v->is_number_float() && std::isfinite(v->get<double>()) &&
                     std::trunc(v->get<double>()) == v->get<double>() &&
                     std::fabs(v->get<double>()) < 9e15;
  if (!v->is_number_integer() && !whole) return WrongType(key, "an integer", *v);
  const bool above = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX};
  const int64_t x = whole ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>();
  if (above || x < lo || x > hi)
    return OutOfRange(key, "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", *v);
  *out = x;
  return std::nullopt;
}

// lo_open: the range excludes lo.
std::optional<ApiError> ReadNumber(const json& obj, const char* key, double lo, bool lo_open,
                                   double hi, double* out) {
  const json* v = Field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return WrongType(key, "a number", *v);
  const double x = v->get<double>();
  if (!(lo_open ? x > lo : x >= lo) || !(x <= hi)) {
    char range[64];
    std::snprintf(range, sizeof range, "in %s%g, %g]", lo_open ? "(" : "[", lo, hi);
    return OutOfRange(key, range, *v);
  }
  *out = x;
  return std::nullopt;
}

#define WASTE_API_TRY(expr)                            \
  do {                                                 \
    if (auto waste_api_e = (expr)) return waste_api_e; \
  } while (0)

std::optional<ApiError> ParseBody(std::string_view body, json* out) {
  // JSON is UTF-8 (RFC 8259); said here by offset, as the parser's message
  // would quote the bytes themselves.
  if (const size_t valid = tokenizer::ValidUtf8Prefix(body); valid < body.size())
    return BadRequest("The body of your request is not valid UTF-8: the bytes at offset " +
                          std::to_string(valid) + " are not a UTF-8 character.",
                      "", "invalid_utf8");
  auto doc = ParseJson(body, "body");
  if (!doc.ok())
    return BadRequest("We could not parse the JSON body of your request: " + doc.status().message(),
                      "", "invalid_json");
  if (!doc->is_object())
    return BadRequest("The body of your request must be a JSON object.", "", "invalid_json");
  *out = std::move(*doc);
  return std::nullopt;
}

// What waste serve does not honour yet is refused by name, never ignored: a
// client that asked for tools or JSON and got plain text would take it for
// what it asked. Their empty or default forms pass.
std::optional<ApiError> RefuseUnhonoured(const json& b, bool chat) {
  const auto named = [](const json& v, std::initializer_list<const char*> ok) {
    if (!v.is_string()) return false;
    for (const char* o : ok)
      if (v == o) return true;
    return false;
  };
  // A chat request's tools are parsed (ParseTools) and held to the chat
  // format's call markup apart (serve/tool_constraint.h); the legacy
  // functions never.
  for (const char* list : {"tools", "functions"})
    if (const json* t = Field(b, list);
        t && !(t->is_array() && t->empty()) && (!chat || list == std::string_view("functions")))
      return Unsupported(list, "tool calling");
  if (const json* c = Field(b, "tool_choice"); !chat && c && !named(*c, {"none", "auto"}))
    return Unsupported("tool_choice", "tool calling");
  if (const json* c = Field(b, "function_call"); c && !named(*c, {"none", "auto"}))
    return Unsupported("function_call", "tool calling");
  return std::nullopt;
}

// OpenAI's limits: at most 300 entries, each a token id as a string (here
// in canonical decimal, so that two keys never name one id) and a number in
// [-100, 100].
std::optional<ApiError> ReadLogitBias(const json& b, Sampling* s) {
  const json* bias = Field(b, "logit_bias");
  if (!bias) return std::nullopt;
  if (!bias->is_object()) return WrongType("logit_bias", "an object", *bias);
  constexpr size_t kMaxEntries = 300;
  if (bias->size() > kMaxEntries)
    return OutOfRange("logit_bias", "of at most " + std::to_string(kMaxEntries) + " entries",
                      json(bias->size()));
  for (const auto& [key, value] : bias->items()) {
    const bool digits =
        !key.empty() && key.size() <= 10 && (key == "0" || key[0] != '0') &&
        std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    if (!digits || std::stoll(key) > kMaxInt)
      return BadRequest("Invalid key in 'logit_bias': '" + key.substr(0, 40) +
                            "' is not a token id (a non-negative integer as a string).",
                        "logit_bias", "invalid_value");
    if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100))
      return BadRequest("Invalid value in 'logit_bias' for key '" + key +
                            "': expected a number in [-100, 100], but got " +
                            value.dump().substr(0, 40) + " instead.",
                        "logit_bias", "invalid_value");
    s->logit_bias.emplace_back(static_cast<int32_t>(std::stoll(key)), value.get<float>());
  }
  std::sort(s->logit_bias.begin(), s->logit_bias.end());
  return std::nullopt;
}

// What both endpoints share; `chat` decides what "logprobs" means.
std::optional<ApiError> ParseCommon(const json& b, bool chat, std::string* model, Sampling* s) {
  if (const json* m = Field(b, "model")) {
    if (!m->is_string()) return WrongType("model", "a string", *m);
    *model = m->get<std::string>();
  }
  WASTE_API_TRY(ReadInt(b, "n", 1, 128, &s->n));
  WASTE_API_TRY(RefuseUnhonoured(b, chat));
  WASTE_API_TRY(ReadNumber(b, "presence_penalty", -2, false, 2, &s->presence_penalty));
  WASTE_API_TRY(ReadNumber(b, "frequency_penalty", -2, false, 2, &s->frequency_penalty));
  WASTE_API_TRY(ReadLogitBias(b, s));
  int64_t max = 0;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!Field(b, key)) continue;
    WASTE_API_TRY(ReadInt(b, key, 1, kMaxInt, &max));
    s->max_tokens = max;  // max_completion_tokens, read second, wins
  }
  WASTE_API_TRY(ReadNumber(b, "temperature", 0, false, 2, &s->temperature));
  WASTE_API_TRY(ReadNumber(b, "top_p", 0, true, 1, &s->top_p));
  WASTE_API_TRY(ReadInt(b, "top_k", 0, kMaxInt, &s->top_k));
  int64_t seed = 0;
  if (Field(b, "seed")) {
    WASTE_API_TRY(ReadInt(b, "seed", INT64_MIN, INT64_MAX, &seed));
    s->seed = static_cast<uint64_t>(seed);
  }
  if (const json* stop = Field(b, "stop")) {
    std::vector<const json*> items;
    if (stop->is_string()) {
      items.push_back(stop);
    } else if (stop->is_array()) {
      if (stop->size() > 4) return OutOfRange("stop", "of at most 4 strings", json(stop->size()));
      for (const json& e : *stop) items.push_back(&e);
    } else {
      return WrongType("stop", "a string or an array of strings", *stop);
    }
    for (const json* e : items) {
      if (!e->is_string()) return WrongType("stop", "a string or an array of strings", *e);
      if (!e->get_ref<const std::string&>().empty()) s->stop.push_back(e->get<std::string>());
    }
  }
  WASTE_API_TRY(ReadBool(b, "stream", &s->stream));
  WASTE_API_TRY(ReadBool(b, "ignore_eos", &s->ignore_eos));
  if (const json* so = Field(b, "stream_options")) {
    if (!so->is_object()) return WrongType("stream_options", "an object", *so);
    if (!s->stream)
      return BadRequest("The 'stream_options' parameter is only allowed when 'stream' is true.",
                        "stream_options", "invalid_value");
    if (const json* iu = Field(*so, "include_usage")) {
      if (!iu->is_boolean()) return WrongType("stream_options.include_usage", "a boolean", *iu);
      s->include_usage = iu->get<bool>();
    }
  }
  if (chat) {
    WASTE_API_TRY(ReadBool(b, "logprobs", &s->logprobs));
    WASTE_API_TRY(ReadInt(b, "top_logprobs", 0, 20, &s->top_logprobs));
    if (Field(b, "top_logprobs") && !s->logprobs)
      return BadRequest("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs",
                        "invalid_value");
  } else if (Field(b, "logprobs")) {
    WASTE_API_TRY(ReadInt(b, "logprobs", 0, 20, &s->top_logprobs));
    s->logprobs = true;
  }
  return std::nullopt;
}

// response_format: text (null), json_object, or json_schema {name, schema, strict}.
std::optional<ApiError> ParseResponseFormat(const json& b,
                                            std::shared_ptr<const grammar::JsonGrammar>* out) {
  const json* f = Field(b, "response_format");
  if (!f) return std::nullopt;
  if (!f->is_object()) return WrongType("response_format", "an object", *f);
  const json* type = Field(*f, "type");
  if (!type)
    return BadRequest("Missing required parameter: 'response_format.type'.", "response_format.type",
                      "missing_required_parameter");
  if (!type->is_string()) return WrongType("response_format.type", "a string", *type);
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") {
    *out = grammar::AnyJsonObject();
    return std::nullopt;
  }
  if (*type != "json_schema")
    return BadRequest(
        "Invalid value for 'response_format.type': expected one of 'text', "
        "'json_object', 'json_schema', but got '" +
            type->get<std::string>().substr(0, 40) + "'.",
        "response_format.type", "invalid_value");
  const json* js = Field(*f, "json_schema");
  if (!js)
    return BadRequest("Missing required parameter: 'response_format.json_schema'.",
                      "response_format.json_schema", "missing_required_parameter");
  if (!js->is_object()) return WrongType("response_format.json_schema", "an object", *js);
  const json* name = Field(*js, "name");
  if (!name)
    return BadRequest("Missing required parameter: 'response_format.json_schema.name'.",
                      "response_format.json_schema.name", "missing_required_parameter");
  if (!name->is_string()) return WrongType("response_format.json_schema.name", "a string", *name);
  grammar::SchemaOptions options;
  if (const json* strict = Field(*js, "strict")) {
    if (!strict->is_boolean())
      return WrongType("response_format.json_schema.strict", "a boolean", *strict);
    options.strict = strict->get<bool>();
  }
  const json* schema = Field(*js, "schema");
  if (!schema) {  // OpenAI's default: any JSON object
    *out = grammar::AnyJsonObject();
    return std::nullopt;
  }
  if (!schema->is_object())
    return WrongType("response_format.json_schema.schema", "an object", *schema);
  auto g = grammar::CompileJsonSchema(*schema, options);
  if (!g.ok())
    return BadRequest("Invalid schema for response_format '" +
                          name->get<std::string>().substr(0, 64) + "': " + g.status().message() +
                          ".",
                      "response_format.json_schema.schema", "invalid_value");
  *out = *g;
  return std::nullopt;
}

std::optional<ApiError> ParseContent(const json& c, const std::string& where, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return WrongType(where, "a string or an array of content parts", c);
  // The parts' texts joined with nothing, as Kimi's template joins them.
  out->clear();
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const json& part = c[i];
    if (!part.is_object()) return WrongType(w, "an object", part);
    const json* type = Field(part, "type");
    if (!type || !type->is_string())
      return WrongType(w + ".type", "a string", type ? *type : json());
    if (*type != "text")
      return Unsupported(w + ".type", "'" + type->get<std::string>().substr(0, 40) + "'");
    const json* text = Field(part, "text");
    if (!text || !text->is_string())
      return WrongType(w + ".text", "a string", text ? *text : json());
    out->append(text->get_ref<const std::string&>());
  }
  return std::nullopt;
}

ApiError Missing(const std::string& param) {
  return BadRequest("Missing required parameter: '" + param + "'.", param,
                    "missing_required_parameter");
}

ApiError Invalid(const std::string& param, const std::string& why) {
  return BadRequest("Invalid '" + param + "': " + why, param, "invalid_value");
}

// A required string field of `obj`.
std::optional<ApiError> ReadString(const json& obj, const char* key, const std::string& where,
                                   std::string* out) {
  const json* v = Field(obj, key);
  if (!v) return Missing(where + "." + key);
  if (!v->is_string()) return WrongType(where + "." + key, "a string", *v);
  *out = v->get<std::string>();
  return std::nullopt;
}

// OpenAI's pattern for a function's name: ^[a-zA-Z0-9_-]{1,64}$.
bool FunctionName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// tools[i].function.parameters of the body parsed keeping its keys' order
// (the templates print a schema in the client's order); `params`, the same
// value in sorted order, where that body does not hold it so (keys given
// twice).
nlohmann::ordered_json OrderedParameters(const nlohmann::ordered_json& body, size_t i,
                                         const json& params) {
  const nlohmann::ordered_json* v = &body;
  for (const char* key : {"tools", "", "function", "parameters"}) {
    if (*key == '\0' ? !v->is_array() || v->size() <= i : !v->is_object() || !v->contains(key))
      return nlohmann::ordered_json::parse(params.dump());
    v = *key == '\0' ? &(*v)[i] : &(*v)[key];
  }
  return v->is_object() ? *v : nlohmann::ordered_json::parse(params.dump());
}

// `tools`, `tool_choice`, `parallel_tool_calls`.
std::optional<ApiError> ParseTools(const json& b, std::string_view body, ChatRequest* out) {
  if (const json* tools = Field(b, "tools")) {
    if (!tools->is_array()) return WrongType("tools", "an array", *tools);
    const auto ordered = nlohmann::ordered_json::parse(body, nullptr, false);
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string w = "tools[" + std::to_string(i) + "]";
      const json& t = (*tools)[i];
      if (!t.is_object()) return WrongType(w, "an object", t);
      std::string type;
      WASTE_API_TRY(ReadString(t, "type", w, &type));
      if (type != "function") return Unsupported(w + ".type", "'" + type.substr(0, 40) + "' tools");
      const json* fn = Field(t, "function");
      if (!fn) return Missing(w + ".function");
      if (!fn->is_object()) return WrongType(w + ".function", "an object", *fn);
      ChatTool tool;
      WASTE_API_TRY(ReadString(*fn, "name", w + ".function", &tool.name));
      if (!FunctionName(tool.name))
        return Invalid(w + ".function.name",
                       "string does not match pattern. Expected a string that matches the "
                       "pattern '^[a-zA-Z0-9_-]{1,64}$'.");
      for (const ChatTool& before : out->tools)
        if (before.name == tool.name)
          return Invalid(w + ".function.name", "'" + tool.name + "' is offered twice.");
      if (const json* d = Field(*fn, "description")) {
        if (!d->is_string()) return WrongType(w + ".function.description", "a string", *d);
        tool.description = d->get<std::string>();
      }
      if (const json* params = Field(*fn, "parameters")) {
        if (!params->is_object())
          return WrongType(w + ".function.parameters", "an object", *params);
        tool.parameters = OrderedParameters(ordered, i, *params);
      }
      if (const json* strict = Field(*fn, "strict")) {
        if (!strict->is_boolean()) return WrongType(w + ".function.strict", "a boolean", *strict);
        if (strict->get<bool>())
          WASTE_API_TRY(fields::CheckStrictParameters(tool.name, tool.parameters,
                                                      w + ".function.parameters"));
      }
      out->tools.push_back(std::move(tool));
    }
  }
  using Mode = ToolChoice::Mode;
  if (const json* c = Field(b, "tool_choice")) {
    if (c->is_string()) {
      const std::string v = c->get<std::string>();
      if (v == "none" || v == "auto" || v == "required")
        out->tool_choice.mode = v == "none"   ? Mode::kNone
                                : v == "auto" ? Mode::kAuto
                                              : Mode::kRequired;
      else
        return Invalid("tool_choice",
                       "expected 'none', 'auto', 'required' or an object naming a "
                       "function, but got '" +
                           v.substr(0, 40) + "'.");
    } else if (c->is_object()) {
      std::string type;
      WASTE_API_TRY(ReadString(*c, "type", "tool_choice", &type));
      if (type != "function")
        return Unsupported("tool_choice.type", "'" + type.substr(0, 40) + "'");
      const json* fn = Field(*c, "function");
      if (!fn) return Missing("tool_choice.function");
      if (!fn->is_object()) return WrongType("tool_choice.function", "an object", *fn);
      WASTE_API_TRY(ReadString(*fn, "name", "tool_choice.function", &out->tool_choice.function));
      out->tool_choice.mode = Mode::kFunction;
      bool listed = false;
      for (const ChatTool& t : out->tools) listed = listed || t.name == out->tool_choice.function;
      if (!listed && !out->tools.empty())
        return Invalid("tool_choice.function.name", "'" + out->tool_choice.function.substr(0, 64) +
                                                        "' is not one of the tools.");
    } else {
      return WrongType("tool_choice", "a string or an object", *c);
    }
    if (out->tools.empty() && out->tool_choice.mode != Mode::kNone &&
        out->tool_choice.mode != Mode::kAuto)
      return BadRequest(
          "Invalid value for 'tool_choice': 'tool_choice' is only allowed when "
          "'tools' are specified.",
          "tool_choice", "invalid_value");
  }
  WASTE_API_TRY(ReadBool(b, "parallel_tool_calls", &out->parallel_tool_calls));
  return std::nullopt;
}

// `chat_template_kwargs` (enable_thinking, thinking) and `reasoning_effort`.
std::optional<ApiError> ParseThinking(const json& b, ChatRequest* out) {
  if (const json* kw = Field(b, "chat_template_kwargs")) {
    if (!kw->is_object()) return WrongType("chat_template_kwargs", "an object", *kw);
    for (const auto& [key, value] : kw->items()) {
      const std::string w = "chat_template_kwargs." + key.substr(0, 40);
      if (key != "enable_thinking" && key != "thinking")
        return Unsupported(w, "the template argument '" + key.substr(0, 40) + "'");
      if (!value.is_boolean()) return WrongType(w, "a boolean", value);
      if (out->thinking && *out->thinking != value.get<bool>())
        return Invalid(w, "enable_thinking and thinking disagree.");
      out->thinking = value.get<bool>();
    }
  }
  if (const json* e = Field(b, "reasoning_effort")) {
    if (!e->is_string()) return WrongType("reasoning_effort", "a string", *e);
    const std::string v = e->get<std::string>();
    if (v != "low" && v != "medium" && v != "high")
      return Invalid("reasoning_effort",
                     "expected 'low', 'medium' or 'high', but got '" + v.substr(0, 40) + "'.");
    out->reasoning_effort = v;
  }
  return std::nullopt;
}

// An assistant message's tool_calls: [{id, type: "function", function:
// {name, arguments: a string}}].
std::optional<ApiError> ParseToolCalls(const json& calls, const std::string& where,
                                       std::vector<ChatToolCall>* out) {
  if (!calls.is_array()) return WrongType(where, "an array", calls);
  if (calls.empty()) return Invalid(where, "empty array. Expected an array with minimum length 1.");
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string w = where + "[" + std::to_string(k) + "]";
    const json& c = calls[k];
    if (!c.is_object()) return WrongType(w, "an object", c);
    ChatToolCall call;
    WASTE_API_TRY(ReadString(c, "id", w, &call.id));
    std::string type;
    WASTE_API_TRY(ReadString(c, "type", w, &type));
    if (type != "function") return Unsupported(w + ".type", "'" + type.substr(0, 40) + "' calls");
    const json* fn = Field(c, "function");
    if (!fn) return Missing(w + ".function");
    if (!fn->is_object()) return WrongType(w + ".function", "an object", *fn);
    WASTE_API_TRY(ReadString(*fn, "name", w + ".function", &call.name));
    WASTE_API_TRY(ReadString(*fn, "arguments", w + ".function", &call.arguments));
    out->push_back(std::move(call));
  }
  return std::nullopt;
}

}  // namespace

// ------------------------------------------------------------------ errors

json ApiError::ToJson() const {
  // A message may quote the request (a route, a field cut short): invalid
  // UTF-8 there would make dump() throw, so it is replaced.
  return {{"error",
           {{"message", tokenizer::ReplaceInvalidUtf8(message)},
            {"type", type},
            {"param", param.empty() ? json() : json(tokenizer::ReplaceInvalidUtf8(param))},
            {"code", code.empty() ? json() : json(code)}}}};
}

ApiError BadRequest(std::string message, std::string param, std::string code) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError UnknownModel(const std::string& model) {
  ApiError e = BadRequest("The model '" + model.substr(0, 200) + "' does not exist.", "model",
                          "model_not_found");
  e.status = 404;
  return e;
}

ApiError ContextExceeded(int64_t prompt_tokens, int64_t max_tokens, int64_t context) {
  return BadRequest("This model's maximum context length is " + std::to_string(context) +
                        " tokens. However, you requested " +
                        std::to_string(prompt_tokens + max_tokens) + " tokens (" +
                        std::to_string(prompt_tokens) + " in the messages, " +
                        std::to_string(max_tokens) + " in the completion).",
                    "messages", "context_length_exceeded");
}

ApiError BodyTooLarge(uint64_t limit) {
  ApiError e =
      BadRequest("The request body is larger than the " + std::to_string(limit) + " bytes allowed.",
                 "", "request_too_large");
  e.status = 413;
  return e;
}

ApiError Busy() {
  ApiError e = BadRequest("The server is busy: too many requests are waiting. Retry shortly.");
  e.status = 503;
  e.type = "server_error";
  e.code = "server_busy";
  return e;
}

// ---------------------------------------------------------------- requests

SamplerOptions Sampling::SamplerFor(uint64_t fallback_seed, int choice) const {
  SamplerOptions o;
  o.temperature = static_cast<float>(temperature);
  o.top_k = static_cast<int>(top_k);
  o.top_p = static_cast<float>(top_p);
  o.seed = seed.value_or(fallback_seed);
  // splitmix64's finalizer: the choices' seeds far apart (the sampler's
  // generator steps by a constant, so seed + i would replay choice 0's
  // draws shifted).
  if (seed && choice > 0) {
    uint64_t z = *seed + static_cast<uint64_t>(choice) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    o.seed = z ^ (z >> 31);
  }
  o.logit_bias = logit_bias;
  o.presence_penalty = static_cast<float>(presence_penalty);
  o.frequency_penalty = static_cast<float>(frequency_penalty);
  return o;
}

std::optional<ApiError> ParseChatRequest(std::string_view body, ChatRequest* out) {
  json b;
  WASTE_API_TRY(ParseBody(body, &b));
  *out = {};
  const json* msgs = Field(b, "messages");
  if (!msgs)
    return BadRequest("Missing required parameter: 'messages'.", "messages",
                      "missing_required_parameter");
  if (!msgs->is_array()) return WrongType("messages", "an array", *msgs);
  if (msgs->empty())
    return BadRequest(
        "Invalid 'messages': empty array. Expected an array with at least one "
        "message.",
        "messages", "empty_array");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const std::string w = "messages[" + std::to_string(i) + "]";
    const json& m = (*msgs)[i];
    if (!m.is_object()) return WrongType(w, "an object", m);
    const json* role = Field(m, "role");
    if (!role)
      return BadRequest("Missing required parameter: '" + w + ".role'.", w + ".role",
                        "missing_required_parameter");
    if (!role->is_string()) return WrongType(w + ".role", "a string", *role);
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for it
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      return Unsupported(w + ".role", "the role '" + r.substr(0, 40) + "'");
    ChatMessage msg{r, ""};
    if (r == "assistant") {
      if (Field(m, "function_call")) return Unsupported(w + ".function_call", "function_call");
      if (const json* calls = Field(m, "tool_calls"))
        WASTE_API_TRY(ParseToolCalls(*calls, w + ".tool_calls", &msg.tool_calls));
      if (const json* reasoning = Field(m, "reasoning_content")) {
        if (!reasoning->is_string())
          return WrongType(w + ".reasoning_content", "a string", *reasoning);
        msg.reasoning = reasoning->get<std::string>();
      }
    }
    if (r == "tool") {
      WASTE_API_TRY(ReadString(m, "tool_call_id", w, &msg.tool_call_id));
      // A result answers a call of the assistant message before the results.
      const ChatMessage* caller = nullptr;
      for (size_t k = out->messages.size(); k-- > 0 && !caller;)
        if (out->messages[k].role != "tool") caller = &out->messages[k];
      if (caller)
        for (const ChatToolCall& call : caller->tool_calls)
          if (call.id == msg.tool_call_id) msg.name = call.name;
      if (msg.name.empty())
        return Invalid(w + ".tool_call_id",
                       "'" + msg.tool_call_id.substr(0, 64) +
                           "' is not the id of a tool call of the assistant message before it.");
    }
    const json* content = Field(m, "content");
    if (!content && !(r == "assistant" && !msg.tool_calls.empty())) return Missing(w + ".content");
    if (content) WASTE_API_TRY(ParseContent(*content, w + ".content", &msg.content));
    out->messages.push_back(std::move(msg));
  }
  WASTE_API_TRY(ParseTools(b, body, out));
  WASTE_API_TRY(ParseThinking(b, out));
  WASTE_API_TRY(ParseResponseFormat(b, &out->response_format));
  return ParseCommon(b, true, &out->model, &out->sampling);
}

std::optional<ApiError> ParseCompletionRequest(std::string_view body, CompletionRequest* out) {
  json b;
  WASTE_API_TRY(ParseBody(body, &b));
  *out = {};
  const json* p = Field(b, "prompt");
  if (!p)
    return BadRequest("Missing required parameter: 'prompt'.", "prompt",
                      "missing_required_parameter");
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
  if (p->is_array() && !p->empty() && (*p)[0].is_number_integer())
    return Unsupported("prompt", "a prompt of token ids");
  if (p->is_array() && p->size() != 1 && (p->empty() || (*p)[0].is_string()))
    return Unsupported("prompt", "a list of " + std::to_string(p->size()) + " prompts (only one)");
  if (!p->is_string()) return WrongType("prompt", "a string or an array of one string", *p);
  out->prompt = p->get<std::string>();
  bool echo = false;
  WASTE_API_TRY(ReadBool(b, "echo", &echo));
  if (echo) return Unsupported("echo", "echo = true");
  int64_t best_of = 1;
  WASTE_API_TRY(ReadInt(b, "best_of", 1, 128, &best_of));
  if (best_of != 1)
    return Unsupported("best_of", "best_of = " + std::to_string(best_of) + " (only 1)");
  if (Field(b, "response_format"))
    return Unsupported("response_format", "response_format on /v1/completions");
  if (const json* suffix = Field(b, "suffix")) {
    if (!suffix->is_string()) return WrongType("suffix", "a string", *suffix);
    if (!suffix->get_ref<const std::string&>().empty()) return Unsupported("suffix", "a suffix");
  }
  return ParseCommon(b, false, &out->model, &out->sampling);
}

std::optional<ApiError> CheckLogitBias(const Sampling& s, int64_t vocab) {
  for (const auto& [id, bias] : s.logit_bias)
    if (id >= vocab)
      return BadRequest("Invalid key in 'logit_bias': '" + std::to_string(id) +
                            "' is not a token id of this model (its ids are 0 to " +
                            std::to_string(vocab - 1) + ").",
                        "logit_bias", "invalid_value");
  return std::nullopt;
}

std::vector<int32_t> CompletionPrompt(const ChatFormat* chat, const Tokenizer& tok,
                                      const std::string& prompt) {
  const std::string bos = chat ? chat->bos : std::string();
  const Tokenizer::Part parts[] = {{bos, true}, {prompt, false}};
  return tok.EncodeParts(parts);
}

// ----------------------------------------------------------- logprobs

StepLogprobs LogprobsOf(std::span<const float> logits, int32_t chosen, int top_n) {
  StepLogprobs out;
  const size_t n = logits.size();
  if (n == 0) return out;
  double mx = -std::numeric_limits<double>::infinity();
  for (const float x : logits) mx = std::max(mx, static_cast<double>(x));
  double sum = 0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  const double log_z = mx + std::log(sum);
  const auto lp = [&](size_t i) { return static_cast<double>(logits[i]) - log_z; };
  if (chosen >= 0 && static_cast<size_t>(chosen) < n) out.chosen = {chosen, lp(chosen)};
  const size_t k = std::min(n, static_cast<size_t>(std::max(top_n, 0)));
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(
      idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(),
      [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
  for (size_t i = 0; i < k; ++i) out.top.push_back({idx[i], lp(idx[i])});
  return out;
}

// ------------------------------------------------------------ reply text

size_t CompleteUtf8Prefix(std::string_view s) {
  // The last byte that is not a continuation byte, within a character's reach.
  size_t i = s.size();
  for (size_t back = 0; back < 4 && i > 0; ++back) {
    --i;
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) != 0x80) {
      const size_t need = c < 0xC2 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 1;
      return s.size() - i < need ? i : s.size();
    }
  }
  return s.size();  // only continuation bytes: invalid, nothing to wait for
}

ReplyText::ReplyText(const Tokenizer& tok, std::vector<int32_t> end_of_turn,
                     std::vector<std::string> stops, std::string_view reply_after,
                     std::string_view opening)
    : tok_(tok),
      end_(std::move(end_of_turn)),
      shown_(tok, reply_after, opening),
      stop_(std::move(stops)) {}

std::string ReplyText::Feed(int32_t id) {
  if (done_) return {};
  if (std::find(end_.begin(), end_.end(), id) != end_.end()) {
    std::string out = Flush();
    done_ = true;
    return out;
  }
  if (!shown_.Shown(id)) return {};
  partial_.append(tok_.TokenBytes(id));
  const size_t n = CompleteUtf8Prefix(partial_);
  std::string out =
      stop_.Feed(tokenizer::ReplaceInvalidUtf8(std::string_view(partial_).substr(0, n)));
  partial_.erase(0, n);
  if (stop_.stopped()) {
    done_ = true;
    partial_.clear();
  }
  return out;
}

std::string ReplyText::Flush() {
  if (done_) return {};
  std::string out = stop_.Feed(tokenizer::ReplaceInvalidUtf8(partial_));
  partial_.clear();
  if (stop_.stopped()) {
    done_ = true;
    return out;
  }
  return out + stop_.Flush();
}

// --------------------------------------------------------------- answers

const char* FinishName(Finish f) {
  switch (f) {
    case Finish::kStop:
      return "stop";
    case Finish::kLength:
      return "length";
    case Finish::kToolCalls:
      return "tool_calls";
  }
  return "stop";
}

json Usage::ToJson() const {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {

json Head(const AnswerHead& h, const char* object) {
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

std::string TokenText(const Tokenizer& tok, int32_t id) {
  return tokenizer::ReplaceInvalidUtf8(tok.TokenBytes(id));
}

json TokenBytesJson(const Tokenizer& tok, int32_t id) {
  json bytes = json::array();
  for (const char c : tok.TokenBytes(id)) bytes.push_back(static_cast<unsigned char>(c));
  return bytes;
}

}  // namespace

json ChatLogprobs(const Tokenizer& tok, std::span<const LoggedToken> tokens) {
  json content = json::array();
  for (const LoggedToken& t : tokens) {
    json top = json::array();
    for (const TokenLogprob& c : t.logprobs.top)
      top.push_back({{"token", TokenText(tok, c.id)},
                     {"logprob", c.logprob},
                     {"bytes", TokenBytesJson(tok, c.id)}});
    content.push_back({{"token", TokenText(tok, t.id)},
                       {"logprob", t.logprobs.chosen.logprob},
                       {"bytes", TokenBytesJson(tok, t.id)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json CompletionLogprobs(const Tokenizer& tok, std::span<const LoggedToken> tokens,
                        int64_t offset0) {
  json texts = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  int64_t offset = offset0;
  for (const LoggedToken& t : tokens) {
    texts.push_back(TokenText(tok, t.id));
    lps.push_back(t.logprobs.chosen.logprob);
    json top = json::object();
    for (const TokenLogprob& c : t.logprobs.top) {
      const std::string key = TokenText(tok, c.id);
      if (!top.contains(key)) top[key] = c.logprob;  // two ids may show the same text
    }
    tops.push_back(top);
    offsets.push_back(offset);
    // Code points: every byte that does not continue a character.
    for (const char c : tok.TokenBytes(t.id))
      offset += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }
  return {
      {"tokens", texts}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json ChatChoice(int index, const ChatReply& reply, const json& logprobs, Finish finish) {
  json message = {{"role", "assistant"}};
  message["content"] =
      reply.content.empty() && !reply.tool_calls.empty() ? json() : json(reply.content);
  if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
  if (!reply.tool_calls.empty()) {
    json calls = json::array();
    for (const ChatToolCall& c : reply.tool_calls)
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    message["tool_calls"] = std::move(calls);
  }
  return {{"index", index},
          {"message", std::move(message)},
          {"logprobs", logprobs},
          {"finish_reason", FinishName(finish)}};
}

json TextChoice(int index, const std::string& text, const json& logprobs, Finish finish) {
  return {{"index", index},
          {"text", text},
          {"logprobs", logprobs},
          {"finish_reason", FinishName(finish)}};
}

json ChatCompletion(const AnswerHead& h, json choices, const Usage& usage) {
  json j = Head(h, "chat.completion");
  j["choices"] = std::move(choices);
  j["usage"] = usage.ToJson();
  return j;
}

json TextCompletion(const AnswerHead& h, json choices, const Usage& usage) {
  json j = Head(h, "text_completion");
  j["choices"] = std::move(choices);
  j["usage"] = usage.ToJson();
  return j;
}

namespace {
json ChatChunk(const AnswerHead& h, int choice, json delta, const json& logprobs,
               const json& finish) {
  json j = Head(h, "chat.completion.chunk");
  j["choices"] = json::array({{{"index", choice},
                               {"delta", std::move(delta)},
                               {"logprobs", logprobs},
                               {"finish_reason", finish}}});
  return j;
}
}  // namespace

json ChatRoleChunk(const AnswerHead& h, int choice) {
  return ChatChunk(h, choice, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
}

json ChatContentChunk(const AnswerHead& h, int choice, const std::string& text,
                      const json& logprobs) {
  return ChatChunk(h, choice, {{"content", text}}, logprobs, nullptr);
}

json ChatReasoningChunk(const AnswerHead& h, int choice, const std::string& text,
                        const json& logprobs) {
  return ChatChunk(h, choice, {{"reasoning_content", text}}, logprobs, nullptr);
}

json ChatToolCallChunk(const AnswerHead& h, int choice, int call, const std::string& id,
                       const std::string& name, const json& logprobs) {
  const json c = {{"index", call},
                  {"id", id},
                  {"type", "function"},
                  {"function", {{"name", name}, {"arguments", ""}}}};
  return ChatChunk(h, choice, {{"tool_calls", json::array({c})}}, logprobs, nullptr);
}

json ChatToolArgsChunk(const AnswerHead& h, int choice, int call, const std::string& arguments,
                       const json& logprobs) {
  const json c = {{"index", call}, {"function", {{"arguments", arguments}}}};
  return ChatChunk(h, choice, {{"tool_calls", json::array({c})}}, logprobs, nullptr);
}

json ChatFinishChunk(const AnswerHead& h, int choice, Finish finish) {
  return ChatChunk(h, choice, json::object(), nullptr, FinishName(finish));
}

json TextChunk(const AnswerHead& h, int choice, const std::string& text, const json& logprobs,
               std::optional<Finish> finish) {
  json j = Head(h, "text_completion");
  j["choices"] = json::array({{{"index", choice},
                               {"text", text},
                               {"logprobs", logprobs},
                               {"finish_reason", finish ? json(FinishName(*finish)) : json()}}});
  return j;
}

json UsageChunk(const AnswerHead& h, const char* object, const Usage& usage) {
  json j = Head(h, object);
  j["choices"] = json::array();
  j["usage"] = usage.ToJson();
  return j;
}

std::string SseEvent(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

json ModelList(std::span<const std::string> models, int64_t created) {
  json data = json::array();
  for (const std::string& m : models)
    data.push_back({{"id", m}, {"object", "model"}, {"created", created}, {"owned_by", "waste"}});
  return {{"object", "list"}, {"data", data}};
}

}  // namespace waste::serve
