// Fuzz target: the safetensors reader of `waste convert` (engine/convert/
// safetensors.cc), which maps a checkpoint's files: the input is one such
// file (u64 header size, JSON header, data). Any bytes must give the
// tensors, each inside the file, or an error naming the file and the
// tensor. The input is also parsed as a header alone, over a pretended
// 1 MiB of data, so the fuzzer reaches the entries without the framing.
#include <cstdint>
#include <string_view>

#include "engine/convert/safetensors.h"
#include "fuzz/scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace waste::convert;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string path = waste::fuzz::WriteScratch("model.safetensors", bytes);
  if (auto f = SafetensorsFile::Open(path, "model.safetensors"); f.ok()) {
    volatile uint8_t sum = 0;
    for (const auto& [name, t] : (*f)->tensors()) {
      const auto b = (*f)->Bytes(t);
      if (t.offset + t.bytes > (*f)->size()) __builtin_trap();  // Open promised the file holds it
      if (!b.empty()) sum = sum + b.front() + b.back();
    }
  }
  const uint64_t data_start = 8 + size;
  (void)ParseSafetensorsHeader(bytes, data_start, data_start + (1 << 20), "header");
  return 0;
}
