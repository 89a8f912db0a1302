// A request body's fields read and checked, for the parsers of Anthropic's
// Messages and OpenAI's Responses (serve/anthropic.h, serve/responses.h):
// the body kept in the client's key order (ordered_json, as tool schemas and
// call arguments must be), each field's type and range checked, and every
// refusal an ApiError naming the field (its `param`).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "serve/openai.h"

namespace waste::serve::fields {

using ojson = nlohmann::ordered_json;

// An error returned at once: `WASTE_FIELD_TRY(ReadInt(...));`.
#define WASTE_FIELD_TRY(expr)                              \
  do {                                                     \
    if (auto waste_field_e = (expr)) return waste_field_e; \
  } while (0)

const char* TypeName(const ojson& v);
// At most the first `n` bytes of `s`, cut on a whole UTF-8 character: what
// an error message quotes of the client's text (a character cut in two
// would make the answer's JSON invalid).
std::string Clip(std::string_view s, size_t n);
ApiError WrongType(const std::string& param, const char* expected, const ojson& got);
ApiError OutOfRange(const std::string& param, const std::string& range, const ojson& got);
ApiError Missing(const std::string& param);
// What waste does not do, refused by name.
ApiError Unsupported(const std::string& param, const std::string& what);

// The body as a JSON object (nested no deeper than ParseJson allows).
std::optional<ApiError> ParseBody(std::string_view body, ojson* out);
// A field of `obj` outside `known`, refused by name (as OpenAI and Anthropic
// refuse them): a parameter waste does not know is never silently dropped.
std::optional<ApiError> OnlyKnown(const ojson& obj, const std::string& where,
                                  std::initializer_list<std::string_view> known);

// A present, non-null field, or nullptr.
const ojson* Field(const ojson& obj, const char* key);
// `where`: the field's name in errors (empty: key).
std::optional<ApiError> ReadBool(const ojson& obj, const char* key, bool* out,
                                 const std::string& where = "");
std::optional<ApiError> ReadString(const ojson& obj, const char* key, const std::string& where,
                                   std::string* out);
// An integer in [lo, hi] (3.0 counts as 3).
std::optional<ApiError> ReadInt(const ojson& obj, const char* key, int64_t lo, int64_t hi,
                                int64_t* out, const std::string& where = "");
// A number in [lo, hi], or (lo, hi] when lo_open.
std::optional<ApiError> ReadNumber(const ojson& obj, const char* key, double lo, bool lo_open,
                                   double hi, double* out);

// A function tool's `parameters` under OpenAI's strict mode: every object
// says additionalProperties false and lists every property in required
// (engine/grammar's strict option checks it; the arguments are held to the
// schema either way). A schema that breaks the rules is refused as OpenAI
// refuses it, naming `param`.
std::optional<ApiError> CheckStrictParameters(const std::string& function, const ojson& parameters,
                                              const std::string& param);

}  // namespace waste::serve::fields
