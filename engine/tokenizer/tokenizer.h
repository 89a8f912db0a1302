// The tokenizer of a container: byte-level BPE over a rank file, the
// pre-tokenizer it was trained with, and special tokens for chat markup.
// Two ways of merging and splitting, chosen by the files present:
//
//   <dir>/tokenizer.model    "base64(token bytes) rank" per line; rank = id
//   <dir>/specials.json      [{"id": int, "text": string, and optionally
//                            "lstrip", "rstrip", "single_word",
//                            "normalized": bool}], optional
//   <dir>/merges.txt         optional: "left_id right_id" per line, the BPE
//                            merges in priority order (tokenizers' way);
//                            absent: rank = merge priority (tiktoken's way)
//   <dir>/pretokenizer.json  optional: the pre-tokenizer's steps (Split,
//                            Digits, Punctuation, ByteLevel, as tokenizers
//                            runs them); absent: Kimi's pattern
//   <dir>/normalizer.json    optional: {"type": "NFC"} (Qwen's), content
//                            normalized before it is split
//
// With neither optional file the ids match Python tiktoken's for Kimi's
// encoding (encode_ordinary for content, encode with allowed_special="all"
// for markup); with both, Hugging Face tokenizers' encode of the
// tokenizer.json they were imported from. tests/fixtures/tokenizer holds the
// proof (engine/tokenizer/README.md).
//
// A Tokenizer is immutable after Load, cheap to copy (shared state), and
// safe to use from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace waste {

class Tokenizer {
 public:
  // Loads <dir>/tokenizer.model and, when present, specials.json, merges.txt
  // and pretokenizer.json. All are untrusted: bad base64, a malformed line,
  // a duplicate token or rank, ranks that are not exactly 0..N-1, a missing
  // single-byte token, a file over its size limit, a special id that is a
  // rank whose bytes are not its text or repeats, a merge of ids outside
  // the ranks or that join into no token or repeat, a pre-tokenizer step
  // that is unknown or malformed, are refused with a message naming the
  // file and the line (or entry, or step and field).
  static Result<Tokenizer> Load(const std::string& dir);

  // The same files' contents, already in memory (absent: the file is not
  // there), held to the same checks; errors name the file as Load's do.
  // engine/tokenizer/gguf_tokenizer.h writes them from a GGUF's metadata.
  struct Files {
    std::string tokenizer_model;
    std::optional<std::string> specials_json, merges_txt, pretokenizer_json, normalizer_json;
  };
  static Result<Tokenizer> FromFiles(const Files& files);

  // Content, for whatever a user or a file supplied: plain text. Text that
  // merely looks like a special token ("<|im_end|>", "<｜User｜>") stays
  // ordinary text and never gives a special's id. Invalid UTF-8 is first
  // repaired the way Python's bytes.decode("utf-8", errors="replace") does
  // it (each maximal invalid subsequence becomes U+FFFD), so the ids are
  // tiktoken's encode_ordinary of that string (tokenizers' encode with
  // encode_special_tokens = True, every added token special).
  std::vector<int32_t> Encode(std::string_view text) const;

  // Markup, for a chat template's own text: special-token texts become their
  // ids as tokenizers' encode matches added tokens (leftmost-longest; the
  // specials not "normalized" first, then the normalized ones between them;
  // single_word, lstrip, rstrip honoured); the text between them is encoded
  // as content. Same UTF-8 repair as Encode.
  std::vector<int32_t> EncodeMarkup(std::string_view text) const;

  // A text of markup and content parts, as a chat template renders it.
  // Markup parts: exact special-token texts become their ids; content
  // parts: plain text whatever they hold (a user's "<|im_end|>" stays
  // text). Between two specials, the text of adjacent parts is encoded as
  // one piece, as Hugging Face tokenizers encodes a rendered template (its
  // added tokens split the text first). Same UTF-8 repair as Encode.
  struct Part {
    std::string_view text;
    bool markup = false;
  };
  std::vector<int32_t> EncodeParts(std::span<const Part> parts) const;

  // The bytes of the ids, concatenated: raw bytes, which may end inside a
  // UTF-8 sequence. Special ids give their text; unknown ids give nothing.
  std::string Decode(std::span<const int32_t> ids) const;

  // A token's bytes (a special's text); empty for unknown ids.
  std::string_view TokenBytes(int32_t id) const;

  std::optional<int32_t> SpecialId(std::string_view text) const;
  bool IsSpecial(int32_t id) const;

  // The largest id in use (rank or special).
  int32_t max_id() const;
  // Number of ranks in tokenizer.model (ids 0..n_ranks()-1).
  int32_t n_ranks() const;
  // Number of special tokens.
  int32_t n_specials() const;

 private:
  struct State;
  explicit Tokenizer(std::shared_ptr<const State> s) : s_(std::move(s)) {}
  void EncodeContent(std::string_view valid_utf8, std::vector<int32_t>* out) const;
  void EncodeSplit(std::string_view valid_utf8, std::vector<int32_t>* out) const;
  std::shared_ptr<const State> s_;
};

}  // namespace waste
