// A JSON Schema (a documented subset) compiled into the nodes JsonMatcher
// walks: which JSON texts are acceptable values, decided byte by byte.
//
// Supported keywords: type (object, array, string, number, integer, boolean,
// null, or a list of them), properties, required, additionalProperties
// (false, true, or a schema), enum, const, anyOf, items, minItems, maxItems,
// minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, as in draft
// 2020-12), minLength, maxLength, $ref to "#/$defs/NAME" or
// "#/definitions/NAME", $defs / definitions, and the annotations title,
// description, default, examples, $schema, $id, $comment (no effect). Any
// other keyword (pattern, format, oneOf, allOf, not, if, patternProperties,
// ...) is refused with a message naming it and where it is
// ("unsupported keyword 'pattern' at #/properties/name"), never ignored.
//
// strict (OpenAI's structured outputs): every object must say
// additionalProperties false and list every property in required; a schema
// that does not is refused, as OpenAI refuses it.
//
// What the matcher produces (JsonMatcher holds the details): objects'
// properties in any order, each at most once, extra keys only where
// additionalProperties allows them (and then without escapes, so that an
// extra key can never spell a declared one); enum and const values as their
// compact JSON text; integers without fraction or exponent; bounded numbers
// without exponent. A schema with no finite instance (minimum above
// maximum, a required property that can never end) is refused: the matcher
// must never reach a state with no way out.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace waste::grammar {

struct SchemaNode {
  enum class Kind : uint8_t { kAnyOf, kObject, kArray, kString, kNumber, kLiterals };
  Kind kind = Kind::kAnyOf;
  // kAnyOf: the alternatives (type lists and "any value" are anyOf too).
  std::vector<int> alternatives;
  // kObject: properties in schema order, which are required, and the node
  // extra keys' values must match (-1: no extra keys).
  struct Property {
    std::string key;  // the key's JSON text without its quotes (escaped as nlohmann dumps it)
    int node = -1;
    bool required = false;
  };
  std::vector<Property> properties;  // at most 64
  int additional = -1;
  // kArray: each item's node; the count's bounds.
  int items = -1;
  uint64_t min_items = 0, max_items = UINT64_MAX;
  // kString: code points.
  uint64_t min_length = 0, max_length = UINT64_MAX;
  // kNumber: integer or not; bounds (none: +-infinity), exclusive or not.
  bool integer = false;
  double minimum = -1.0 / 0.0, maximum = 1.0 / 0.0;
  bool exclusive_minimum = false, exclusive_maximum = false;
  bool bounded() const { return minimum > -1.0 / 0.0 || maximum < 1.0 / 0.0; }
  // kLiterals: the accepted texts (compact JSON), at most 64.
  std::vector<std::string> literals;
  // The bytes of its shortest instance (exact but for a number whose bounds
  // leave out 0: an estimate); for JsonMatcher::Closing to choose among
  // alternatives.
  uint64_t shortest = 0;
};

// The compiled form: nodes by index, root first. Immutable; share it.
struct JsonGrammar {
  std::vector<SchemaNode> nodes;
  int root = 0;
};

struct SchemaOptions {
  bool strict = false;  // OpenAI's strict rules (above)
};

// `schema` is untrusted (a request's): every error names the keyword and
// its place as a JSON pointer ("#/properties/a/items").
Result<std::shared_ptr<const JsonGrammar>> CompileJsonSchema(const nlohmann::json& schema,
                                                             const SchemaOptions& options = {});

// response_format json_object: any JSON object.
std::shared_ptr<const JsonGrammar> AnyJsonObject();

}  // namespace waste::grammar
