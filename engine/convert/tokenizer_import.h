// The tokenizer of a checkpoint, in the container's terms: tokenizer.model
// (tiktoken ranks), specials.json and chat.json (engine/tokenizer/README.md).
//
//   tiktoken.model (Kimi K2, Kimi-Linear)  copied; specials from
//       tokenizer_config.json's added_tokens_decoder
//   tokenizer.json with a byte-level BPE model (DeepSeek-V3)  each token's
//       bytes (GPT-2's byte-to-character map undone) at rank = its id, which
//       must run 0..N-1; added tokens beyond become specials. The engine
//       merges by rank and splits with Kimi's pattern, so text can tokenize
//       differently from DeepSeek's own tokenizer (ids are the same tokens).
//   chat.json  the family's markup when its special tokens are present.
#pragma once

#include <string>

#include "base/status.h"
#include "engine/convert/source_model.h"

namespace waste::convert {

struct TokenizerImport {
  std::string tokenizer_model;  // empty: none
  std::string specials_json;    // empty: none
  std::string chat_json;        // empty: none
  std::string source;           // which file it came from, for the summary
  std::string note;             // why something is missing, for the summary
};

// Reads the tokenizer files of `src_dir`. A checkpoint without any gives an
// empty import and a note; files that are present but malformed are an error.
Result<TokenizerImport> ImportTokenizer(const std::string& src_dir, const SourceModel& model);

}  // namespace waste::convert
