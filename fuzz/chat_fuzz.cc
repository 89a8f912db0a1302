// Fuzz target: a container's chat.json (engine/format/chat.cc, ParseChat),
// which waste chat and waste serve render every conversation with. Any bytes
// give a format or an error naming the key; a format that passed writes
// itself back as JSON that parses to the same format.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/format/chat.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto chat = waste::ParseChat(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!chat.ok()) return 0;
  const auto dump = [](const waste::ChatFormat& f) {
    return f.ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  const std::string text = dump(*chat);
  auto again = waste::ParseChat(text);
  if (!again.ok() || dump(*again) != text) std::abort();
  return 0;
}
