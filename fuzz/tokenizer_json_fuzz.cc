// Fuzz target: `waste convert`'s import of a checkpoint's tokenizer
// (engine/convert/tokenizer_import.cc): tokenizer.json (a byte-level BPE
// vocabulary and added tokens), or tiktoken.model with tokenizer_config.json.
// The input is tokenizer.json; or, when it has a line
// "--- tokenizer_config.json ---", a tiktoken.model (what precedes the line)
// and that file (scratch.h, Sections). Any bytes give an import or an error
// naming the file and the field; what is imported then loads as the
// container's tokenizer, or is refused by it with a message.
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/convert/tokenizer_import.h"
#include "engine/format/container.h"
#include "engine/tokenizer/tokenizer.h"
#include "fuzz/scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fz = waste::fuzz;
  namespace fs = std::filesystem;
  const std::string dir = fz::ScratchDir() + "/checkpoint";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto parts = fz::Sections(std::string_view(reinterpret_cast<const char*>(data), size));
  const auto config = parts.find("tokenizer_config.json");
  if (config != parts.end()) {
    fz::WriteScratch("checkpoint/tiktoken.model", parts.at(""));
    fz::WriteScratch("checkpoint/tokenizer_config.json", config->second);
  } else {
    fz::WriteScratch("checkpoint/tokenizer.json", parts.at(""));
  }
  waste::convert::SourceModel model;
  model.shape.vocab = 1024;
  auto t = waste::convert::ImportTokenizer(dir, model);
  if (!t.ok() || t->tokenizer_model.empty()) return 0;
  // What a container would then hold.
  const std::string out = fz::ScratchDir() + "/container";
  fs::remove_all(out);
  fs::create_directories(out);
  fz::WriteScratch("container/tokenizer.model", t->tokenizer_model);
  if (!t->specials_json.empty()) fz::WriteScratch("container/specials.json", t->specials_json);
  if (auto tok = waste::Tokenizer::Load(out); tok.ok()) (void)tok->Encode("Hello, world!");
  if (!t->chat_json.empty() && !waste::ParseChat(t->chat_json).ok()) __builtin_trap();
  return 0;
}
