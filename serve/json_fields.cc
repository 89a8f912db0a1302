#include "serve/json_fields.h"

#include <cmath>
#include <cstdio>

#include "engine/format/container.h"
#include "engine/grammar/json_schema.h"

namespace waste::serve::fields {

const char* TypeName(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::string:
      return "a string";
    case ojson::value_t::boolean:
      return "a boolean";
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned:
      return "an integer";
    case ojson::value_t::number_float:
      return "a number";
    case ojson::value_t::array:
      return "an array";
    case ojson::value_t::object:
      return "an object";
    default:
      return "null";
  }
}

std::string Clip(std::string_view s, size_t n) {
  const std::string_view head = s.substr(0, n);
  return std::string(head.substr(0, CompleteUtf8Prefix(head)));
}

ApiError WrongType(const std::string& param, const char* expected, const ojson& got) {
  return BadRequest("Invalid type for '" + param + "': expected " + expected + ", but got " +
                        TypeName(got) + " instead.",
                    param, "invalid_type");
}

ApiError OutOfRange(const std::string& param, const std::string& range, const ojson& got) {
  return BadRequest("Invalid '" + param + "': expected a value " + range + ", but got " +
                        Clip(got.dump(-1, ' ', false, ojson::error_handler_t::replace), 40) +
                        " instead.",
                    param, "invalid_value");
}

ApiError Missing(const std::string& param) {
  return BadRequest("Missing required parameter: '" + param + "'.", param,
                    "missing_required_parameter");
}

ApiError Unsupported(const std::string& param, const std::string& what) {
  return BadRequest("'" + param + "': " + what + " is not supported by waste serve.", param,
                    "unsupported_value");
}

std::optional<ApiError> CheckStrictParameters(const std::string& function, const ojson& parameters,
                                              const std::string& param) {
  const auto g =
      grammar::CompileJsonSchema(nlohmann::json::parse(parameters.dump()), {.strict = true});
  if (g.ok()) return std::nullopt;
  return BadRequest("Invalid schema for function '" + Clip(function, 64) +
                        "' (strict mode): " + g.status().message() + ".",
                    param, "invalid_function_parameters");
}

std::optional<ApiError> ParseBody(std::string_view body, ojson* out) {
  // ParseJson bounds the nesting (a deep body must not exhaust the stack)
  // and words the error; the ordered copy keeps the client's key order.
  auto doc = ParseJson(body, "body");
  if (!doc.ok())
    return BadRequest("We could not parse the JSON body of your request: " + doc.status().message(),
                      "", "invalid_json");
  if (!doc->is_object())
    return BadRequest("The body of your request must be a JSON object.", "", "invalid_json");
  *out = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded())
    return BadRequest("We could not parse the JSON body of your request.", "", "invalid_json");
  return std::nullopt;
}

std::optional<ApiError> OnlyKnown(const ojson& obj, const std::string& where,
                                  std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : obj.items()) {
    bool ok = false;
    for (const std::string_view k : known) ok = ok || key == k;
    if (!ok) {
      const std::string param = where.empty() ? Clip(key, 60) : where + "." + Clip(key, 60);
      return BadRequest("Unknown parameter: '" + param + "'.", param, "unknown_parameter");
    }
  }
  return std::nullopt;
}

const ojson* Field(const ojson& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::optional<ApiError> ReadBool(const ojson& obj, const char* key, bool* out,
                                 const std::string& where) {
  const ojson* v = Field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return WrongType(where.empty() ? key : where, "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> ReadString(const ojson& obj, const char* key, const std::string& where,
                                   std::string* out) {
  const ojson* v = Field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) return WrongType(where, "a string", *v);
  *out = v->get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> ReadInt(const ojson& obj, const char* key, int64_t lo, int64_t hi,
                                int64_t* out, const std::string& where) {
  const ojson* v = Field(obj, key);
  if (!v) return std::nullopt;
  const std::string name = where.empty() ? key : where;
  const bool whole = v->is_number_float() && std::isfinite(v->get<double>()) &&
                     std::trunc(v->get<double>()) == v->get<double>() &&
                     std::fabs(v->get<double>()) < 9e15;
  if (!v->is_number_integer() && !whole) return WrongType(name, "an integer", *v);
  const bool above = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{INT64_MAX};
  const int64_t x = whole ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>();
  if (above || x < lo || x > hi)
    return OutOfRange(name, "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", *v);
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> ReadNumber(const ojson& obj, const char* key, double lo, bool lo_open,
                                   double hi, double* out) {
  const ojson* v = Field(obj, key);
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

}  // namespace waste::serve::fields
