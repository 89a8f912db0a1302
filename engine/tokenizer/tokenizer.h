// The tokenizer the Kimi models ship: tiktoken's byte-level BPE over a rank
// file, Kimi's pre-tokenization pattern, and special tokens for chat markup.
// Ids match Python tiktoken's (encode_ordinary for content, encode with
// allowed_special="all" for markup); tests/fixtures/tokenizer holds the proof.
//
//   <dir>/tokenizer.model   "base64(token bytes) rank" per line; rank = id
//   <dir>/specials.json     [{"id": int, "text": string}], optional
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
  // Loads <dir>/tokenizer.model and, when present, <dir>/specials.json. Both
  // are untrusted: bad base64, a malformed line, a duplicate token or rank,
  // ranks that are not exactly 0..N-1, a missing single-byte token, a file
  // over its size limit, a special id that is also a rank or repeats, are
  // refused with a message naming the file and the line (or entry).
  static Result<Tokenizer> Load(const std::string& dir);

  // Content: plain text. Text that merely looks like a special token
  // ("<|im_end|>") stays ordinary text. Invalid UTF-8 is first repaired the
  // way Python's bytes.decode("utf-8", errors="replace") does it (each
  // maximal invalid subsequence becomes U+FFFD), so the ids are tiktoken's
  // encode_ordinary of that string.
  std::vector<int32_t> Encode(std::string_view text) const;

  // Markup: exact special-token texts become their ids (at each position the
  // longest special that matches); the text between them is encoded as
  // content. Same UTF-8 repair as Encode.
  std::vector<int32_t> EncodeMarkup(std::string_view text) const;

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
  std::shared_ptr<const State> s_;
};

}  // namespace waste
