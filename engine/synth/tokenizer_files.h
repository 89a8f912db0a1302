// The small tokenizer a synthetic container carries: a tiktoken rank file
// (the 256 bytes, then merges that build common English words), the Kimi
// special tokens and Kimi's chat markup, or K3's (XTML's markers and the
// media tokens, its XTML chat.json).
#pragma once

#include <string>

namespace waste {

struct TokenizerFiles {
  std::string tokenizer_model;  // "base64(token) rank" per line
  std::string specials_json;    // [{"id": ..., "text": ...}]
  std::string chat_json;
  int bos_id = -1;
  int eos_id = -1;
  std::string error;  // non-empty when the vocabulary is too small
};

// Special tokens sit at Kimi's real ids when the vocabulary reaches them
// (163584 and up), and right after the merges otherwise. `xtml`: K3's.
TokenizerFiles MakeTokenizerFiles(int vocab_size, bool xtml = false);

}  // namespace waste
