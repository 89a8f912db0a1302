// Fuzz target: the tokenizer's files (engine/tokenizer/tokenizer.cc), read
// from a container: tokenizer.model ("base64 rank" lines) and specials.json.
// The input is tokenizer.model, optionally followed by a line
// "--- specials.json ---" and that file, and by "--- text ---" and text to
// encode (scratch.h, Sections). Any bytes must load or give an error naming
// the file and the line; a tokenizer that loads encodes any text to ids it
// has, and ASCII text decodes back to its bytes.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/tokenizer/tokenizer.h"
#include "fuzz/scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fz = waste::fuzz;
  const auto parts = fz::Sections(std::string_view(reinterpret_cast<const char*>(data), size));
  fz::WriteScratch("tokenizer.model", parts.at(""));
  const auto specials = parts.find("specials.json");
  const std::string specials_path = fz::ScratchDir() + "/specials.json";
  std::filesystem::remove(specials_path);
  if (specials != parts.end()) fz::WriteScratch("specials.json", specials->second);
  auto tok = waste::Tokenizer::Load(fz::ScratchDir());
  if (!tok.ok()) return 0;
  const auto text = parts.find("text");
  const std::string_view sample = text != parts.end() ? text->second : "Hello, world! 123 <|im_end|>";
  for (const bool markup : {false, true}) {
    const auto ids = markup ? tok->EncodeMarkup(sample) : tok->Encode(sample);
    for (int32_t id : ids)
      if (id < 0 || id > tok->max_id()) __builtin_trap();
    // ASCII content round-trips byte for byte (every byte is a token).
    const bool ascii = std::all_of(sample.begin(), sample.end(),
                                   [](char c) { return static_cast<unsigned char>(c) < 0x80; });
    if (!markup && ascii && tok->Decode(ids) != sample) __builtin_trap();
  }
  return 0;
}
