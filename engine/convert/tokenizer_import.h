// The tokenizer of a checkpoint, in the container's terms: tokenizer.model
// (tiktoken ranks), specials.json and chat.json (engine/tokenizer/README.md).
//
//   tiktoken.model (Kimi K2, Kimi-Linear, Kimi K3)  copied; specials from
//       tokenizer_config.json's added_tokens_decoder
//       (no pretokenizer.json or merges.txt: Kimi's pattern, rank = priority)
//   tokenizer.json with a byte-level BPE model (DeepSeek-V3, the demo model)
//       tokenizer.model: each token's bytes (GPT-2's byte-to-character map
//       undone; an added token inside the vocabulary is its text) at rank =
//       its id, which must run 0..N-1; merges.txt: model.merges as id
//       pairs, in their order; pretokenizer.json: the pre-tokenizer's steps
//       (Sequences flattened); normalizer.json: {"type": "NFC"} when the
//       normalizer is NFC (Qwen's); every added token, special or not, becomes a
//       special, with its lstrip, rstrip, single_word and normalized flags.
//       Ids are then tokenizers' own (engine/tokenizer/README.md).
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
  std::string normalizer_json;    // empty: none (else NFC, Qwen's)
  std::string specials_json;      // empty: none
  std::string chat_json;        // empty: none
  std::string source;           // which file it came from, for the summary
  std::string note;             // why something is missing, for the summary
};

// An added token of tokenizer.json (or tokenizer_config.json) and the
// flags that change how tokenizers matches it in text.
struct AddedToken {
  int64_t id = 0;
  std::string text;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false;
};

// specials.json for `added`: the first of each text, 1-256 bytes, with an id
// below `vocab`; each flag written only when true. Empty when none is kept.
std::string SpecialsJson(const std::vector<AddedToken>& added, int64_t vocab);

// The container's files from a tokenizer.json document. A tokenizer the
// engine cannot run as written gives `note` and nothing else; a malformed
// document (a flag of added_tokens that is not true or false among it) is
// an error.
struct TokenizerJsonParts {
  std::string tokenizer_model, merges_txt, pretokenizer_json, normalizer_json;
  std::vector<AddedToken> added;  // every added token, special or not
  std::string note;
};
Result<TokenizerJsonParts> ImportTokenizerJson(const nlohmann::json& tokenizer_json);

// Reads the tokenizer files of `src_dir`. A checkpoint without any gives an
// empty import and a note; files that are present but malformed are an error.
Result<TokenizerImport> ImportTokenizer(const std::string& src_dir, const SourceModel& model);

}  // namespace waste::convert
