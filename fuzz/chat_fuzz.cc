// Fuzz target: a container's chat.json (engine/format/container.cc,
// ParseChat), which `waste chat` wraps every turn with. Any bytes give a
// template or an error naming the role; a template that passed gives any
// role's prefix and suffix without a throw.
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/format/container.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto chat = waste::ParseChat(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!chat.ok()) return 0;
  for (const char* role : {"system", "user", "assistant", "open", ""})
    (void)waste::ChatAround(*chat, role);
  (void)waste::ChatOpen(*chat);
  return 0;
}
