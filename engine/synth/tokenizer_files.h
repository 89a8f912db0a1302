// The small tokenizer a synthetic container carries: a tiktoken rank file
// (the 256 bytes, then merges that build common English words), the special
// tokens of one family's chat markup (its role, thinking and tool-call
// markers, each a special as the released tokenizer has it, so the markup
// tokenizes as the real model's does) and that family's chat.json.
#pragma once

#include <string>
#include <string_view>

#include "engine/format/model_config.h"

namespace waste {

struct TokenizerFiles {
  std::string tokenizer_model;  // "base64(token) rank" per line
  std::string specials_json;    // [{"id": ..., "text": ...}]
  std::string chat_json;
  int bos_id = -1;  // -1: the family has none (GLM-4.5)
  int eos_id = -1;
  std::string error;  // non-empty when the vocabulary is too small or the family unknown
};

// The chat family (a ChatFormat kFamily* name) a synthetic model of `arch`
// speaks: Kimi-Linear Kimi K2's, DeepSeek-V3 DeepSeek-V3.1's, Qwen3-MoE and
// Qwen3-Next Qwen3's (hybrid, thinking off), GLM-4.5 GLM-4.5's, GPT-OSS
// harmony, Kimi K3 XTML.
const char* SynthChatFamily(Arch arch);

// The tokenizer for `family` (SynthChatFamily's names). Kimi K2's and K3's
// specials sit at Kimi's real ids when the vocabulary reaches them (163584
// and up); every family's sit right after the merges otherwise.
TokenizerFiles MakeTokenizerFiles(int vocab_size, std::string_view family);

}  // namespace waste
