// Fuzz target: engine/grammar's schema compiler and matcher, on what a
// request's response_format and a model's reply bring. The input's first
// line is a JSON Schema (its first byte odd: strict), the rest the bytes of
// a reply. Any schema compiles or is refused with a message naming a place
// ("at #"); the matcher, fed the reply byte by byte, may refuse a byte only
// for good (then it is dead), and whenever it says complete the bytes so
// far are JSON that parses; finished implies complete; the closing bytes it
// finds at the end make it complete, and JSON that parses.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/grammar/json_matcher.h"
#include "engine/grammar/json_schema.h"

namespace {

void Match(const std::shared_ptr<const waste::grammar::JsonGrammar>& g, std::string_view reply) {
  waste::grammar::JsonMatcher m(g);
  for (size_t i = 0; i < reply.size(); ++i) {
    if (!m.Advance(static_cast<uint8_t>(reply[i]))) {
      if (!m.dead()) std::abort();
      return;
    }
    if (m.finished() && !m.complete()) std::abort();
    if (m.complete() && !nlohmann::json::accept(reply.substr(0, i + 1))) std::abort();
  }
  // The closing bytes, where the walk finds them, end the value.
  if (const auto close = m.Closing(4096))
    if (!m.Advance(*close) || !m.complete() || !nlohmann::json::accept(std::string(reply) + *close))
      std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t line = in.find('\n');
  const std::string_view schema_text = in.substr(0, line);
  const std::string_view reply = line == std::string_view::npos ? "" : in.substr(line + 1);
  Match(waste::grammar::AnyJsonObject(), reply);
  const nlohmann::json schema = nlohmann::json::parse(schema_text, nullptr, false);
  if (schema.is_discarded()) return 0;
  waste::grammar::SchemaOptions o;
  o.strict = !schema_text.empty() && (static_cast<uint8_t>(schema_text[0]) & 1);
  auto g = waste::grammar::CompileJsonSchema(schema, o);
  if (!g.ok()) {
    if (g.status().message().find(" at #") == std::string::npos &&
        g.status().message().find(" at (") == std::string::npos)
      std::abort();
    return 0;
  }
  Match(*g, reply);
  return 0;
}
