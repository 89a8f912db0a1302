// The tokenizer and the chat format of a GGUF file, from its metadata, as
// llama.cpp's convert_hf_to_gguf.py writes them (docs/FORMAT.md "GGUF
// files" has the keys):
//
//   tokenizer.ggml.model       "gpt2" (byte-level BPE); anything else refused by name
//   tokenizer.ggml.pre         the family's split: qwen2 (Qwen3, Qwen3-MoE, Qwen3-Next),
//                              deepseek-v3, glm4 (GLM-4.5), gpt-4o (GPT-OSS's o200k),
//                              kimi-k2; another name refused by name
//   tokenizer.ggml.tokens      every id's string: GPT-2's byte-level alphabet for
//                              normal tokens, the text itself for the others
//   tokenizer.ggml.token_type  per id: 1 normal, 3 control, 4 user-defined (both
//                              matched in markup as specials), 5 unused (a padding
//                              id: no token); 2 and 6 (SentencePiece's) refused
//   tokenizer.ggml.merges      "a b" per merge, in priority order (kimi-k2: optional,
//                              not used: its ids are tiktoken's ranks, merged by rank)
//   tokenizer.ggml.{bos,eos,eot,padding}_token_id, add_bos_token, add_eos_token
//   tokenizer.chat_template    the Jinja template, recognised per family
//
// The tokenizer is the released one's (the oracle is `tokenizers` and
// tiktoken on tests/fixtures/gguf/tokenizer/): each pre name stands for its
// family's released pre-tokenizer steps and normalizer (Qwen's NFC
// included, which llama.cpp does not run), so the ids are those of the
// tokenizer.json the GGUF was converted from.
//
// Every value is untrusted: a missing key, a wrong type, arrays whose lengths
// disagree, a token outside the byte-level alphabet or repeated, an id out of
// range, a merge that does not parse or names no token: an error naming the
// key (and the index).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "engine/format/chat.h"
#include "engine/gguf/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace waste {

struct GgufVocab {
  Tokenizer tokenizer;
  std::string pre;       // tokenizer.ggml.pre
  int32_t n_tokens = 0;  // tokenizer.ggml.tokens' length (unused ids included)
  struct Ids {
    std::optional<int32_t> bos, eos, eot, pad;  // the *_token_id keys, when present
    bool add_bos = false, add_eos = false;      // add_bos_token, add_eos_token
  } ids;
};

// The tokenizer of `g`'s metadata.
Result<GgufVocab> GgufTokenizer(const gguf::Gguf& g);

// The pre names GgufTokenizer reads, comma-separated, for messages.
std::string GgufPreNames();

// The chat format of `g`'s tokenizer.chat_template, recognised by each
// family's stable markers (Kimi K2's <|im_system|>, harmony's <|channel|>,
// GLM's [gMASK], Qwen3's <|im_start|> with or without the enable_thinking
// switch, DeepSeek's <｜Assistant｜>, V3.1's by its thinking markup), built by
// that family's preset (engine/format/chat.h). `family`, when not empty, is a
// ChatFormat family name chosen by the user instead (the remedy the
// error names). Each end-of-turn text must be a special of `vocab`. No
// template, or one no family's markers match: an error saying so and how to
// choose a family.
Result<ChatFormat> GgufChatFormat(const gguf::Gguf& g, const Tokenizer& vocab,
                                  std::string_view family = {});

// The family names GgufChatFormat's `family` takes, comma-separated.
std::string GgufChatFamilies();

// The preset of a family GgufChatFamilies names (the user's --chat-format,
// for a GGUF or a container), each end-of-turn text a special of `vocab`.
// Another name: an error listing the known ones.
Result<ChatFormat> ChatFormatOfFamily(std::string_view family, const Tokenizer& vocab);

}  // namespace waste
