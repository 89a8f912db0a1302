// Fuzz target: the GGUF reader (engine/gguf/gguf.h) and the scalar
// dequantization (engine/kernels/gguf_dequant.h): the input is one GGUF
// file. Any bytes must give tensors that Open promised are inside the file
// in whole blocks of a known type, or an error; every tensor of a type
// read is then dequantized (up to 1 MiB of it). Its tokenizer metadata
// (engine/tokenizer/gguf_tokenizer.h) gives a tokenizer whose ids are the
// file's, or an error; then a chat format, or an error. The model it maps
// to (engine/gguf/gguf_model.h), or an error: every slice inside its file.
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/gguf/gguf.h"
#include "engine/gguf/gguf_model.h"
#include "engine/kernels/gguf_dequant.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "fuzz/scratch.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace waste;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string path = fuzz::WriteScratch("model.gguf", bytes);
  auto g = gguf::Gguf::Open(path);
  if (!g.ok()) return 0;
  for (const gguf::TensorInfo& t : g->tensors) {
    const gguf::TypeInfo* type = gguf::FindType(t.type);
    if (!type || t.offset + t.bytes > size || t.dims[0] % type->block_size != 0)
      __builtin_trap();  // Open promised these
    if (t.bytes > (1u << 20) || !kernels::GgufDequantizes(t.type)) continue;
    auto values = kernels::GgufDequantizeTensor(*g, t);
    if (!values.ok() || values->size() != t.elements()) __builtin_trap();
  }
  if (auto m = gguf::MapModel(*g); m.ok()) {
    for (int L = 0; L < m->config.n_layers; ++L) {
      if (!m->config.is_moe_layer(L)) continue;
      for (int e : {0, m->config.n_experts - 1})
        for (int k = 0; k < 3; ++k) {
          const gguf::ExpertSlice s = m->Slice(L, e, k);
          if (s.offset + s.bytes > g->files[s.file].file_size) __builtin_trap();
        }
    }
  }
  auto vocab = GgufTokenizer(*g);
  if (!vocab.ok()) return 0;
  if (vocab->tokenizer.max_id() >= vocab->n_tokens) __builtin_trap();
  (void)vocab->tokenizer.EncodeMarkup(bytes.substr(0, 256));
  (void)GgufChatFormat(*g, vocab->tokenizer);
  return 0;
}
