// The tokenizer of a checkpoint, in the container's terms: tokenizer.model
// (tiktoken ranks), specials.json and chat.json (engine/tokenizer/README.md).
//
//   tiktoken.model (Kimi K2, Kimi-Linear)  copied; specials from
//       tokenizer_config.json's added_tokens_decoder
//       (no pretokenizer.json or merges.txt: Kimi's pattern, rank = priority)
//   tokenizer.json with a byte-level BPE model (DeepSeek-V3, the demo model)
//       tokenizer.model: each token's bytes (GPT-2's byte-to-character map
//       undone; an added token inside the vocabulary is its text) at rank =
//       its id, which must run 0..N-1; merges.txt: model.merges as id
//       pairs, in their order; pretokenizer.json: the pre-tokenizer's steps
//       (Sequences flattened); every added token, special or not, becomes a
//       special. Ids are then tokenizers' own (engine/tokenizer/README.md).
//       A normalizer, pre-tokenizer step or BPE option the engine does not
//       run leaves the tokenizer out, with the reason in the note.
//   chat.json  the family's markup when its special tokens are present.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "engine/convert/source_model.h"

namespace waste::convert {

struct TokenizerImport {
  std::string tokenizer_model;    // empty: none
  std::string merges_txt;         // empty: none (rank = merge priority)
  std::string pretokenizer_json;  // empty: none (Kimi's pattern)
  std::string specials_json;      // empty: none
  std::string chat_json;        // empty: none
  std::string source;           // which file it came from, for the summary
  std::string note;             // why something is missing, for the summary
};

// The container's files from a tokenizer.json document. A tokenizer the
// engine cannot run as written gives `note` and nothing else; a malformed
// document is an error.
struct TokenizerJsonParts {
  std::string tokenizer_model, merges_txt, pretokenizer_json;
  std::vector<std::pair<int64_t, std::string>> added;  // (id, text), every added token
  std::string note;
};
Result<TokenizerJsonParts> ImportTokenizerJson(const nlohmann::json& tokenizer_json);

// Reads the tokenizer files of `src_dir`. A checkpoint without any gives an
// empty import and a note; files that are present but malformed are an error.
Result<TokenizerImport> ImportTokenizer(const std::string& src_dir, const SourceModel& model);

}  // namespace waste::convert
